package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/tandemkit/tandem/frontend"
	"github.com/tandemkit/tandem/hooks"
	"github.com/tandemkit/tandem/store"
)

// Server is the CRI proxy.
type Server struct {
	cfg     Config
	hooks   *hooks.Dispatcher
	refresh <-chan struct{}
	// writer applies what CRI cannot carry: pod-level settings, container files on cgroup v1, RDT classes.
	writer     *frontend.Writer
	codec      *codec
	runtime    *grpc.ClientConn
	image      *grpc.ClientConn
	rt         runtimeapi.RuntimeServiceClient
	store      *store.Store
	checkpoint *store.Checkpoint
	metrics    *metrics
	grpc       *grpc.Server
	inflight   *inflight

	// draining is cancelled when the server starts to stop, ending relayed streams.
	draining context.Context
	drain    context.CancelFunc
	// reconcileNow asks the resync loop for an immediate reconcile (the runtime came back).
	reconcileNow chan struct{}

	intercepted map[string]interceptFn
	unary       map[string]bool

	// ctrLocks serialises what the proxy does to one container.
	ctrLocks frontend.Locks
}

// interceptFn handles one lifecycle call, given its request undecoded; it frees req once decoded, so a
// large request is not held twice while the call goes on. opts carry the header and trailer capture so
// the runtime's metadata reaches the caller.
type interceptFn func(ctx context.Context, req mem.Buffer, opts []grpc.CallOption) (proto.Message, error)

// New connects to the runtime (lazily: it need not be up yet) and returns a server ready to Recover and
// Serve.
func New(cfg Config, deps frontend.Deps) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid configuration: %w", err)
	}
	cfg = cfg.withDefaults()
	c, err := newCodec()
	if err != nil {
		return nil, err
	}
	reg := deps.Registerer
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	m, err := newMetrics(reg, criMethods())
	if err != nil {
		return nil, fmt.Errorf("register metrics: %w", err)
	}
	cp, err := store.NewCheckpoint(cfg.StateDir)
	if err != nil {
		return nil, err
	}
	st := store.New()
	s := &Server{
		cfg:     cfg,
		hooks:   deps.Hooks,
		refresh: deps.Refresh,
		writer: &frontend.Writer{Cgroups: deps.Cgroups, RDT: deps.RDT, Store: st,
			PodErrors: m.podCgroupErrors, ContainerErrors: m.ctrCgroupErrors},
		codec:        c,
		store:        st,
		checkpoint:   cp,
		metrics:      m,
		inflight:     newInflight(cfg.MaxInflightBytes, cfg.MaxMsgSize),
		reconcileNow: make(chan struct{}, 1),
	}

	if s.runtime, err = s.dial(cfg.RuntimeEndpoint); err != nil {
		return nil, err
	}
	s.image = s.runtime
	if cfg.ImageEndpoint != "" && cfg.ImageEndpoint != cfg.RuntimeEndpoint {
		if s.image, err = s.dial(cfg.ImageEndpoint); err != nil {
			_ = s.runtime.Close()
			return nil, err
		}
	}
	s.rt = runtimeapi.NewRuntimeServiceClient(s.runtime)
	s.unary = unaryMethods()
	s.intercepted = s.interceptors()

	s.grpc = grpc.NewServer(
		grpc.ForceServerCodecV2(s.codec),
		grpc.UnknownServiceHandler(s.handle),
		grpc.MaxRecvMsgSize(cfg.MaxMsgSize),
		grpc.MaxSendMsgSize(cfg.MaxMsgSize),
		grpc.StaticStreamWindowSize(requestWindow),
		grpc.StaticConnWindowSize(localWindow),
		// Long-lived workers keep the stacks that a call's handler, hooks and nested gRPC calls grow to;
		// a goroutine per call grows its stack again every time. When all are busy, calls get their own.
		grpc.NumStreamWorkers(uint32(4*runtime.GOMAXPROCS(0))),
	)
	return s, nil
}

// localWindow is the fixed HTTP/2 flow-control window of the proxy's connections, all on local unix
// sockets. grpc-go otherwise sizes windows by bandwidth-delay estimation, which pings the peer after
// every message it receives; on a local socket the delay is microseconds, the window never needs to
// grow, and each ping and its answer are one more write and wake-up on both sides of every call. 4 MiB
// moves kubelet's largest (16 MiB) messages in a few window updates.
const localWindow = 4 << 20

// requestWindow is the flow-control window of each call kubelet makes to the proxy: how much of a request
// the transport takes in before the handler reads it. A lifecycle call waiting for room under
// max-inflight-bytes holds that much; 1 MiB still takes any legitimate request (a pod's annotations are
// at most 256 KiB) in one go.
const requestWindow = 1 << 20

func (s *Server) dial(endpoint string) (*grpc.ClientConn, error) {
	path, err := socketPath(endpoint)
	if err != nil {
		return nil, err
	}
	conn, err := grpc.NewClient("unix://"+path,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(s.cfg.MaxMsgSize), grpc.MaxCallSendMsgSize(s.cfg.MaxMsgSize)),
		grpc.WithStaticStreamWindowSize(localWindow),
		grpc.WithStaticConnWindowSize(localWindow),
		// A local socket reconnects cheaply; a short maximum backoff keeps the gap after a runtime restart
		// small, and calls in between fail fast with Unavailable instead of waiting.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: 5 * time.Second,
		}),
	)
	if err != nil {
		return nil, fmt.Errorf("runtime endpoint %s: %w", endpoint, err)
	}
	return conn, nil
}

// unaryMethods lists every unary method of the vendored CRI services. Anything else, including methods
// newer than the vendored API, goes through the stream relay, which handles every shape.
func unaryMethods() map[string]bool {
	m := map[string]bool{}
	for _, sd := range []grpc.ServiceDesc{runtimeapi.RuntimeService_ServiceDesc, runtimeapi.ImageService_ServiceDesc} {
		for _, md := range sd.Methods {
			m["/"+sd.ServiceName+"/"+md.MethodName] = true
		}
	}
	return m
}

// criMethods lists every method, unary and streaming, of the vendored CRI services.
func criMethods() []string {
	var out []string
	for _, sd := range []grpc.ServiceDesc{runtimeapi.RuntimeService_ServiceDesc, runtimeapi.ImageService_ServiceDesc} {
		for _, md := range sd.Methods {
			out = append(out, "/"+sd.ServiceName+"/"+md.MethodName)
		}
		for _, st := range sd.Streams {
			out = append(out, "/"+sd.ServiceName+"/"+st.StreamName)
		}
	}
	return out
}

// Store is the proxy's pod and container store.
func (s *Server) Store() *store.Store { return s.store }

func (s *Server) connFor(method string) *grpc.ClientConn {
	if strings.HasPrefix(method, "/runtime.v1.ImageService/") {
		return s.image
	}
	return s.runtime
}

// handle serves every call that reaches the server. A panic becomes an Internal error for that call: the
// proxy must not take every other kubelet call down with it.
func (s *Server) handle(_ any, stream grpc.ServerStream) (err error) {
	start := time.Now()
	defer func() {
		if r := recover(); r != nil {
			klog.FromContext(s.draining).Error(nil, "Panic while serving a call", "panic", r, "stack", string(debug.Stack()))
			err = status.Errorf(codes.Internal, "tandem-proxy: internal error: %v", r)
		}
	}()
	method, ok := grpc.MethodFromServerStream(stream)
	if !ok {
		return status.Error(codes.Internal, "tandem-proxy: call without a method name")
	}
	switch {
	case s.intercepted[method] != nil:
		err = s.serveIntercepted(stream, method, s.intercepted[method])
	case s.unary[method]:
		err = s.relayUnary(stream, s.connFor(method), method)
	default:
		err = s.relayStream(stream, s.connFor(method), method)
	}
	s.metrics.observe(method, err, time.Since(start))
	return err
}

func (s *Server) serveIntercepted(stream grpc.ServerStream, method string, fn interceptFn) error {
	ctx := stream.Context()
	if err := s.inflight.admit(ctx); err != nil {
		return err
	}
	var in frame
	if err := stream.RecvMsg(&in); err != nil {
		s.inflight.abandon()
		return err
	}
	defer s.inflight.settle(in.data.Len())()
	// One contiguous buffer, from gRPC's pool, for the decoder: the frame arrives in pieces.
	req := in.data.MaterializeToBuffer(mem.DefaultBufferPool())
	in.free()
	logger := klog.FromContext(s.draining).WithValues("rpc", method[strings.LastIndexByte(method, '/')+1:])
	ctx = klog.NewContext(outgoing(ctx), logger)

	var header, trailer metadata.MD
	resp, err := fn(ctx, req, []grpc.CallOption{grpc.Header(&header), grpc.Trailer(&trailer)})
	if len(header) > 0 {
		_ = stream.SetHeader(header)
	}
	stream.SetTrailer(trailer)
	if err != nil {
		err = toStatus(err)
		logger.V(2).Info("Call failed", "code", status.Code(err), "err", err)
		return err
	}
	return stream.SendMsg(resp)
}

// Serve answers CRI calls on lis until ctx is done, then stops gracefully: it stops accepting, ends relayed
// streams, lets in-flight calls finish within ShutdownTimeout and returns nil. The logger in ctx is the
// base of every log line the server writes.
func (s *Server) Serve(ctx context.Context, lis net.Listener) error {
	logger := klog.FromContext(ctx)
	// draining carries the logger for calls; it is cancelled on stop.
	var cancel context.CancelFunc
	s.draining, cancel = context.WithCancel(klog.NewContext(context.Background(), logger))
	s.drain = cancel

	// The proxy's own loops end with Serve, which waits for them: Close must not pull the runtime
	// connection from under a resync or a refresh.
	loopCtx, stopLoops := context.WithCancel(ctx)
	var loops sync.WaitGroup
	defer func() { stopLoops(); loops.Wait() }()
	loops.Go(func() { s.watchRuntime(loopCtx) })
	loops.Go(func() { s.resyncLoop(loopCtx) })
	if s.refresh != nil {
		loops.Go(func() { s.refreshLoop(loopCtx) })
	}

	serveErr := make(chan error, 1)
	go func() { serveErr <- s.grpc.Serve(lis) }()
	logger.Info("Serving CRI", "listen", lis.Addr().String(), "runtimeEndpoint", s.cfg.RuntimeEndpoint)

	select {
	case err := <-serveErr:
		s.drain()
		return fmt.Errorf("serve CRI on %s: %w", lis.Addr(), err)
	case <-ctx.Done():
	}
	logger.Info("Stopping: draining in-flight calls", "timeout", s.cfg.ShutdownTimeout)
	s.drain()
	stopped := make(chan struct{})
	go func() { s.grpc.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(s.cfg.ShutdownTimeout):
		logger.Info("In-flight calls did not finish in time; closing them", "timeout", s.cfg.ShutdownTimeout)
		s.grpc.Stop()
		<-stopped
	}
	// After a stop, Serve returns nil; anything else is worth a line.
	if err := <-serveErr; err != nil {
		logger.Error(err, "CRI server ended with an error while stopping")
	}
	logger.Info("Stopped")
	return nil
}

// Close releases the runtime connections. Call it after Serve returned.
func (s *Server) Close() error {
	errs := []error{s.runtime.Close()}
	if s.image != s.runtime {
		errs = append(errs, s.image.Close())
	}
	return errors.Join(errs...)
}

// Ready reports whether the runtime answers; it is what /readyz shows.
func (s *Server) Ready(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, min(s.cfg.RuntimeTimeout, 2*time.Second))
	defer cancel()
	if _, err := s.rt.Version(ctx, &runtimeapi.VersionRequest{}); err != nil {
		return fmt.Errorf("container runtime %s does not answer: %w", s.cfg.RuntimeEndpoint, err)
	}
	return nil
}
