package floorproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

const maxMsg = 16 << 20

// backend is an in-process CRI server whose answers depend on the request
// metadata, so each case can ask for headers, trailers, errors or big
// messages. The real containerd is exercised by the benchmark itself; this
// test is about the proxy's forwarding alone.
type backend struct {
	runtimeapi.UnimplementedRuntimeServiceServer
}

func first(md metadata.MD, key string) string {
	if v := md.Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (backend) Version(ctx context.Context, req *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	_, hasDeadline := ctx.Deadline()
	if err := grpc.SetHeader(ctx, metadata.Pairs(
		"x-echo", first(md, "x-request-id"),
		"x-has-deadline", fmt.Sprint(hasDeadline),
	)); err != nil {
		return nil, err
	}
	if err := grpc.SetTrailer(ctx, metadata.Pairs("x-trailer", "version-done")); err != nil {
		return nil, err
	}
	return &runtimeapi.VersionResponse{Version: req.GetVersion(), RuntimeName: "fake", RuntimeVersion: "1"}, nil
}

func (backend) ListContainers(ctx context.Context, _ *runtimeapi.ListContainersRequest) (*runtimeapi.ListContainersResponse, error) {
	if err := grpc.SetTrailer(ctx, metadata.Pairs("x-trailer", "list-failed")); err != nil {
		return nil, err
	}
	st, err := status.New(codes.NotFound, "container \"abc\" not found").WithDetails(&errdetails.ErrorInfo{
		Reason: "CONTAINER_GONE", Domain: "tandem.test", Metadata: map[string]string{"id": "abc"},
	})
	if err != nil {
		return nil, err
	}
	return nil, st.Err()
}

// ListPodSandbox answers with a message larger than gRPC's 4 MiB default, to
// show that the proxy's limits are the configured ones on both legs.
func (backend) ListPodSandbox(context.Context, *runtimeapi.ListPodSandboxRequest) (*runtimeapi.ListPodSandboxResponse, error) {
	resp := &runtimeapi.ListPodSandboxResponse{}
	for i := range 600 {
		resp.Items = append(resp.Items, &runtimeapi.PodSandbox{
			Id:     fmt.Sprintf("pod-%04d", i),
			Labels: map[string]string{"blob": strings.Repeat("x", 10<<10)},
		})
	}
	return resp, nil
}

func (backend) GetContainerEvents(_ *runtimeapi.GetEventsRequest, stream grpc.ServerStreamingServer[runtimeapi.ContainerEventResponse]) error {
	md, _ := metadata.FromIncomingContext(stream.Context())
	if err := stream.SendHeader(metadata.Pairs("x-stream", "open")); err != nil {
		return err
	}
	failAfter := first(md, "x-fail-after")
	for i := range 3 {
		if failAfter == fmt.Sprint(i) {
			stream.SetTrailer(metadata.Pairs("x-trailer", "stream-failed"))
			return status.Error(codes.ResourceExhausted, "event queue overflowed")
		}
		if err := stream.Send(&runtimeapi.ContainerEventResponse{
			ContainerId:        fmt.Sprintf("ctr-%d", i),
			ContainerEventType: runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT,
			CreatedAt:          int64(i + 1),
		}); err != nil {
			return err
		}
	}
	stream.SetTrailer(metadata.Pairs("x-trailer", "stream-done"))
	return nil
}

// observed is what a CRI client can see of one call.
type observed struct {
	msgs    []proto.Message
	header  metadata.MD
	trailer metadata.MD
	status  *status.Status
}

// userKeys keeps the metadata the test servers set; transport headers such as
// content-type legitimately differ between a direct and a proxied call.
func userKeys(md metadata.MD) metadata.MD {
	out := metadata.MD{}
	for k, v := range md {
		if strings.HasPrefix(k, "x-") {
			out[k] = v
		}
	}
	return out
}

func equalMD(a, b metadata.MD) bool {
	if len(a) != len(b) {
		return false
	}
	for k, va := range a {
		vb := b[k]
		if strings.Join(va, "\x00") != strings.Join(vb, "\x00") || len(va) != len(vb) {
			return false
		}
	}
	return true
}

func (o observed) diff(want observed) string {
	var d []string
	if len(o.msgs) != len(want.msgs) {
		d = append(d, fmt.Sprintf("%d messages, want %d", len(o.msgs), len(want.msgs)))
	} else {
		for i := range o.msgs {
			if !proto.Equal(o.msgs[i], want.msgs[i]) {
				d = append(d, fmt.Sprintf("message %d differs", i))
			}
		}
	}
	if !equalMD(userKeys(o.header), userKeys(want.header)) {
		d = append(d, fmt.Sprintf("header %v, want %v", userKeys(o.header), userKeys(want.header)))
	}
	if !equalMD(userKeys(o.trailer), userKeys(want.trailer)) {
		d = append(d, fmt.Sprintf("trailer %v, want %v", userKeys(o.trailer), userKeys(want.trailer)))
	}
	if !proto.Equal(o.status.Proto(), want.status.Proto()) {
		d = append(d, fmt.Sprintf("status %v, want %v", o.status.Proto(), want.status.Proto()))
	}
	return strings.Join(d, "; ")
}

type call func(ctx context.Context, c runtimeapi.RuntimeServiceClient) observed

func unary[Resp proto.Message](f func(context.Context, runtimeapi.RuntimeServiceClient, ...grpc.CallOption) (Resp, error)) call {
	return func(ctx context.Context, c runtimeapi.RuntimeServiceClient) observed {
		var o observed
		resp, err := f(ctx, c, grpc.Header(&o.header), grpc.Trailer(&o.trailer))
		o.status = status.Convert(err)
		if err == nil {
			o.msgs = []proto.Message{resp}
		}
		return o
	}
}

func events(ctx context.Context, c runtimeapi.RuntimeServiceClient) observed {
	var o observed
	stream, err := c.GetContainerEvents(ctx, &runtimeapi.GetEventsRequest{})
	if err != nil {
		o.status = status.Convert(err)
		return o
	}
	for {
		msg, err := stream.Recv()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				o.status = status.Convert(err)
			} else {
				o.status = status.New(codes.OK, "")
			}
			break
		}
		o.msgs = append(o.msgs, msg)
	}
	o.header, _ = stream.Header()
	o.trailer = stream.Trailer()
	return o
}

func listen(t *testing.T, dir, name string) net.Listener {
	t.Helper()
	lis, err := net.Listen("unix", filepath.Join(dir, name))
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	return lis
}

func dial(t *testing.T, sock string) runtimeapi.RuntimeServiceClient {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+sock,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMsg), grpc.MaxCallSendMsgSize(maxMsg)))
	if err != nil {
		t.Fatalf("dial %s: %v", sock, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return runtimeapi.NewRuntimeServiceClient(conn)
}

// relays are both relay paths in front of one backend, and a client of the backend itself.
type relays struct {
	names   []string
	proxied map[string]runtimeapi.RuntimeServiceClient
	direct  runtimeapi.RuntimeServiceClient
}

// startRelays starts them; the context returned ends when the test's cleanups run.
func startRelays(t *testing.T) (context.Context, relays) {
	// Unix socket paths must stay under 108 bytes; t.TempDir() can be longer.
	dir, err := os.MkdirTemp("", "fp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })

	// Cleanup, not defer: the parallel subtests run after this function returns.
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)

	backendLis := listen(t, dir, "backend.sock")
	srv := grpc.NewServer(grpc.MaxRecvMsgSize(maxMsg), grpc.MaxSendMsgSize(maxMsg))
	runtimeapi.RegisterRuntimeServiceServer(srv, backend{})
	go func() { _ = srv.Serve(backendLis) }()
	t.Cleanup(srv.Stop)

	// Both relay paths must be transparent: the generic frame pump, and the
	// Invoke path that the benchmark uses for the CRI's unary methods.
	proxies := []struct {
		name  string
		unary []string
	}{
		{name: "frame pump only"},
		{name: "unary fast path", unary: UnaryMethods(&runtimeapi.RuntimeService_ServiceDesc)},
	}
	r := relays{proxied: map[string]runtimeapi.RuntimeServiceClient{}}
	for _, px := range proxies {
		p, err := New("unix://"+backendLis.Addr().String(), maxMsg, px.unary...)
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		lis := listen(t, dir, fmt.Sprintf("proxy%d.sock", len(r.proxied)))
		served := make(chan error, 1)
		go func() { served <- p.Serve(ctx, lis) }()
		t.Cleanup(func() {
			cancel()
			if err := <-served; err != nil {
				t.Errorf("Serve: %v", err)
			}
		})
		r.proxied[px.name] = dial(t, lis.Addr().String())
		r.names = append(r.names, px.name)
	}
	r.direct = dial(t, backendLis.Addr().String())
	return ctx, r

}

// transparencyCase is one call made directly and through a relay.
type transparencyCase struct {
	name     string
	ctx      func(context.Context) context.Context
	call     call
	wantCode codes.Code
	wantMsgs int
	// check asserts what the case is about, so that "direct and proxied
	// agree" cannot pass by both being empty.
	check func(o observed) error
}

func transparencyCases() []transparencyCase {
	withMD := func(kv ...string) func(context.Context) context.Context {
		return func(ctx context.Context) context.Context { return metadata.AppendToOutgoingContext(ctx, kv...) }
	}
	return []transparencyCase{
		{
			name: "unary with request metadata, deadline, header and trailer",
			ctx:  withMD("x-request-id", "req-42"),
			call: unary(func(ctx context.Context, c runtimeapi.RuntimeServiceClient, o ...grpc.CallOption) (*runtimeapi.VersionResponse, error) {
				return c.Version(ctx, &runtimeapi.VersionRequest{Version: "v1"}, o...)
			}),
			wantCode: codes.OK,
			wantMsgs: 1,
			check: func(o observed) error {
				if got := first(o.header, "x-echo"); got != "req-42" {
					return fmt.Errorf("backend saw x-request-id %q, want req-42", got)
				}
				if got := first(o.header, "x-has-deadline"); got != "true" {
					return fmt.Errorf("backend saw a deadline: %s, want true", got)
				}
				if got := first(o.trailer, "x-trailer"); got != "version-done" {
					return fmt.Errorf("trailer %q, want version-done", got)
				}
				return nil
			},
		},
		{
			name: "unary error keeps code, message and details",
			call: unary(func(ctx context.Context, c runtimeapi.RuntimeServiceClient, o ...grpc.CallOption) (*runtimeapi.ListContainersResponse, error) {
				return c.ListContainers(ctx, &runtimeapi.ListContainersRequest{}, o...)
			}),
			wantCode: codes.NotFound,
			check: func(o observed) error {
				if len(o.status.Details()) != 1 {
					return fmt.Errorf("%d error details, want 1", len(o.status.Details()))
				}
				if info, ok := o.status.Details()[0].(*errdetails.ErrorInfo); !ok || info.GetReason() != "CONTAINER_GONE" {
					return fmt.Errorf("error detail %v, want ErrorInfo CONTAINER_GONE", o.status.Details()[0])
				}
				return nil
			},
		},
		{
			name: "method the backend does not implement",
			call: unary(func(ctx context.Context, c runtimeapi.RuntimeServiceClient, o ...grpc.CallOption) (*runtimeapi.StatusResponse, error) {
				return c.Status(ctx, &runtimeapi.StatusRequest{}, o...)
			}),
			wantCode: codes.Unimplemented,
		},
		{
			name: "response above the 4 MiB default limit",
			call: unary(func(ctx context.Context, c runtimeapi.RuntimeServiceClient, o ...grpc.CallOption) (*runtimeapi.ListPodSandboxResponse, error) {
				return c.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{}, o...)
			}),
			wantCode: codes.OK,
			wantMsgs: 1,
			check: func(o observed) error {
				if n := proto.Size(o.msgs[0]); n <= 4<<20 {
					return fmt.Errorf("response is %d bytes, the case needs more than 4 MiB", n)
				}
				return nil
			},
		},
		{
			name:     "server stream to the end",
			call:     events,
			wantCode: codes.OK,
			wantMsgs: 3,
			check: func(o observed) error {
				if got := first(o.header, "x-stream"); got != "open" {
					return fmt.Errorf("stream header %q, want open", got)
				}
				if got := first(o.trailer, "x-trailer"); got != "stream-done" {
					return fmt.Errorf("trailer %q, want stream-done", got)
				}
				return nil
			},
		},
		{
			name:     "server stream that fails midway",
			ctx:      withMD("x-fail-after", "2"),
			call:     events,
			wantCode: codes.ResourceExhausted,
			wantMsgs: 2,
			check: func(o observed) error {
				if got := first(o.trailer, "x-trailer"); got != "stream-failed" {
					return fmt.Errorf("trailer %q, want stream-failed", got)
				}
				return nil
			},
		},
	}
}

func TestProxyForwardsTransparently(t *testing.T) {
	relayCtx, r := startRelays(t)
	for _, tt := range transparencyCases() {
		for _, name := range r.names {
			t.Run(name+"/"+tt.name, func(t *testing.T) {
				t.Parallel()
				ctx, cancel := context.WithTimeout(relayCtx, 30*time.Second)
				defer cancel()
				if tt.ctx != nil {
					ctx = tt.ctx(ctx)
				}
				want := tt.call(ctx, r.direct)
				got := tt.call(ctx, r.proxied[name])
				if got.status.Code() != tt.wantCode {
					t.Fatalf("proxied call: code %v (%s), want %v", got.status.Code(), got.status.Message(), tt.wantCode)
				}
				if len(got.msgs) != tt.wantMsgs {
					t.Fatalf("proxied call: %d messages, want %d", len(got.msgs), tt.wantMsgs)
				}
				if d := got.diff(want); d != "" {
					t.Errorf("proxied call differs from the direct one: %s", d)
				}
				if tt.check != nil {
					if err := tt.check(got); err != nil {
						t.Error(err)
					}
				}
			})
		}
	}
}

func TestServeStopsWhenContextEnds(t *testing.T) {
	dir, err := os.MkdirTemp("", "fp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	p, err := New("unix://"+filepath.Join(dir, "nobody.sock"), maxMsg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	lis := listen(t, dir, "proxy.sock")
	served := make(chan error, 1)
	go func() { served <- p.Serve(ctx, lis) }()

	// With no backend, a call must fail with Unavailable rather than hang.
	c := dial(t, lis.Addr().String())
	callCtx, callCancel := context.WithTimeout(ctx, 10*time.Second)
	defer callCancel()
	_, err = c.Version(callCtx, &runtimeapi.VersionRequest{})
	if status.Code(err) != codes.Unavailable {
		t.Errorf("call with the backend down: %v, want Unavailable", err)
	}

	cancel()
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("Serve returned %v after cancel, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after its context was cancelled")
	}
}
