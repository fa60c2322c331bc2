// Package floorproxy is the smallest useful gRPC proxy: one UnknownServiceHandler that
// pumps raw frames between the caller and a backend without decoding them, and copies
// metadata, status and trailers across. Methods it is told are unary take a shorter
// path (one Invoke, no goroutine, no client stream), the cheapest way Go's gRPC offers
// to relay them, so that the floor is not raised by a generic pump that a proxy which
// knows its service does not need. The CRI latency benchmark puts it beside
// tandem-proxy so that the cost of the extra gRPC hop itself (which every Go gRPC proxy
// pays) can be told apart from the cost of what tandem-proxy does on top of forwarding.
//
// Its transport is tuned the way the leanest relay over local sockets is: fixed
// HTTP/2 flow-control windows (no bandwidth-estimation pings after every message)
// and long-lived stream workers (no goroutine, and no stack to grow, per call).
// Each of these took 13-15 % off its CPU per relayed call on the project's machine
// (docs/performance.md); without them the floor would flatter any proxy measured
// against it.
//
// It is deliberately not configurable and does nothing else: no interception, no
// metrics, no logging on the call path.
package floorproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// frame is one gRPC message payload, kept as the transport's own buffers so that
// forwarding it copies nothing.
type frame struct {
	data mem.BufferSlice
}

// rawCodec hands frames through untouched. Its name is "proto" so that the
// content-type on both legs stays application/grpc+proto, exactly what the
// caller and the backend would see without the proxy.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	f, ok := v.(*frame)
	if !ok {
		return nil, fmt.Errorf("floorproxy codec cannot marshal %T: only raw frames pass through", v)
	}
	// gRPC frees what Marshal returns once it is written, which releases the
	// reference taken in Unmarshal.
	out := f.data
	f.data = nil
	return out, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	f, ok := v.(*frame)
	if !ok {
		return fmt.Errorf("floorproxy codec cannot unmarshal into %T: only raw frames pass through", v)
	}
	// gRPC frees data when Unmarshal returns; keep our own reference until the
	// frame has been sent on the other leg.
	data.Ref()
	f.data = data
	return nil
}

func (rawCodec) Name() string { return "proto" }

// window is the fixed flow-control window of every connection and stream: large
// enough that a 16 MiB message needs only a few window updates on a local socket.
const window = 4 << 20

// Proxy forwards every gRPC call it receives to one backend.
type Proxy struct {
	backend *grpc.ClientConn
	server  *grpc.Server
	codec   rawCodec
	unary   map[string]bool // full method names
	// anyShape lets one generic stream carry unary, server-, client- and
	// bidirectional-streaming calls alike.
	anyShape grpc.StreamDesc
	// extraWork is CPU time burnt on every call before it is relayed
	// (SetExtraWork).
	extraWork time.Duration
}

// SetExtraWork makes the proxy burn d of CPU on every call before relaying
// it: a floor made slower by a known amount, so that the CRI benchmark can
// check that its verdict catches a proxy that costs more than the floor.
// Call it before Serve.
func (p *Proxy) SetExtraWork(d time.Duration) { p.extraWork = d }

// burn keeps the CPU busy for d, as a proxy doing more work per call would;
// sleeping instead would add latency without competing for the CPU.
func burn(d time.Duration) {
	for start := time.Now(); time.Since(start) < d; {
	}
}

// UnaryMethods lists the full names ("/pkg.Service/Method") of the unary
// methods of the given services, as New expects them.
func UnaryMethods(services ...*grpc.ServiceDesc) []string {
	var out []string
	for _, sd := range services {
		for _, m := range sd.Methods {
			out = append(out, "/"+sd.ServiceName+"/"+m.MethodName)
		}
	}
	return out
}

// New returns a proxy that forwards to backendTarget (a gRPC target such as
// "unix:///run/containerd/containerd.sock") and accepts and sends messages up
// to maxMsgSize bytes on both legs. Calls of unaryMethods (full names) are
// relayed with one Invoke; every other call, known or not, is pumped frame by
// frame. It does not connect until the first call.
func New(backendTarget string, maxMsgSize int, unaryMethods ...string) (*Proxy, error) {
	p := &Proxy{
		unary:    make(map[string]bool, len(unaryMethods)),
		anyShape: grpc.StreamDesc{ServerStreams: true, ClientStreams: true},
	}
	for _, m := range unaryMethods {
		p.unary[m] = true
	}
	conn, err := grpc.NewClient(backendTarget,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(
			grpc.ForceCodecV2(p.codec),
			grpc.MaxCallRecvMsgSize(maxMsgSize),
			grpc.MaxCallSendMsgSize(maxMsgSize),
		),
		grpc.WithStaticStreamWindowSize(window),
		grpc.WithStaticConnWindowSize(window),
	)
	if err != nil {
		return nil, fmt.Errorf("floor proxy backend %q: check the target syntax: %w", backendTarget, err)
	}
	p.backend = conn
	p.server = grpc.NewServer(
		grpc.ForceServerCodecV2(p.codec),
		grpc.UnknownServiceHandler(p.handle),
		grpc.MaxRecvMsgSize(maxMsgSize),
		grpc.MaxSendMsgSize(maxMsgSize),
		grpc.StaticStreamWindowSize(window),
		grpc.StaticConnWindowSize(window),
		grpc.NumStreamWorkers(uint32(4*runtime.GOMAXPROCS(0))),
	)
	return p, nil
}

// Serve accepts calls on lis until ctx is cancelled, then stops the server
// (cancelling calls in flight) and closes the backend connection.
func (p *Proxy) Serve(ctx context.Context, lis net.Listener) error {
	stopped := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			p.server.Stop()
		case <-stopped:
		}
	}()
	err := p.server.Serve(lis)
	close(stopped)
	if cerr := p.backend.Close(); cerr != nil && err == nil {
		err = cerr
	}
	if err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("floor proxy serve: %w", err)
	}
	return nil
}

// handle forwards one call of any shape.
func (p *Proxy) handle(_ any, in grpc.ServerStream) error {
	if p.extraWork > 0 {
		burn(p.extraWork)
	}
	method, ok := grpc.MethodFromServerStream(in)
	if !ok {
		return status.Error(codes.Internal, "floor proxy: no method name on the incoming stream")
	}
	if p.unary[method] {
		return p.relayUnary(in, method)
	}
	ctx, cancel := context.WithCancel(in.Context())
	defer cancel()
	// Reserved and pseudo headers (":authority", "content-type", "user-agent",
	// "grpc-timeout") are dropped by the client transport; the deadline travels
	// with ctx instead.
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		ctx = metadata.NewOutgoingContext(ctx, md)
	}
	out, err := p.backend.NewStream(ctx, &p.anyShape, method)
	if err != nil {
		return err
	}

	// Caller → backend runs beside the main loop so that streaming requests and
	// responses can interleave. If the caller's side fails (a request over the
	// size limit, say), the backend call is cancelled and that error wins.
	upErr := make(chan error, 1)
	go func() {
		for {
			f := &frame{}
			if err := in.RecvMsg(f); err != nil {
				if errors.Is(err, io.EOF) {
					_ = out.CloseSend() // always nil for client streams
					return
				}
				upErr <- err
				cancel()
				return
			}
			if err := out.SendMsg(f); err != nil {
				// The backend ended the call (io.EOF) or the stream broke;
				// RecvMsg below reports the backend's status either way.
				f.data.Free()
				return
			}
		}
	}()

	// Backend → caller. The first RecvMsg also waits for the response headers.
	headerSent := false
	for {
		f := &frame{}
		err := out.RecvMsg(f)
		if !headerSent {
			if md, herr := out.Header(); herr == nil && len(md) > 0 {
				if err := in.SendHeader(md); err != nil {
					return err
				}
			}
			headerSent = true
		}
		if err != nil {
			in.SetTrailer(out.Trailer())
			if errors.Is(err, io.EOF) {
				return nil
			}
			select {
			case uerr := <-upErr:
				return uerr
			default:
			}
			// A backend status (code, message, details) passes through as is.
			return err
		}
		if err := in.SendMsg(f); err != nil {
			f.data.Free()
			return err
		}
	}
}

// relayUnary forwards one request frame and its one response frame.
func (p *Proxy) relayUnary(in grpc.ServerStream, method string) error {
	req, resp := &frame{}, &frame{}
	if err := in.RecvMsg(req); err != nil {
		return err
	}
	ctx := in.Context()
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		ctx = metadata.NewOutgoingContext(ctx, md)
	}
	var header, trailer metadata.MD
	err := p.backend.Invoke(ctx, method, req, resp, grpc.Header(&header), grpc.Trailer(&trailer))
	if req.data != nil {
		// Invoke failed before the request was written.
		req.data.Free()
	}
	if len(header) > 0 {
		if herr := in.SetHeader(header); herr != nil && err == nil {
			return herr
		}
	}
	in.SetTrailer(trailer)
	if err != nil {
		return err
	}
	if err := in.SendMsg(resp); err != nil {
		resp.data.Free()
		return err
	}
	return nil
}
