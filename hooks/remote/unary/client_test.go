package unary

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/h2c"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	"github.com/tandemkit/tandem/hooks/remote/v1alpha1"
)

// echoServer is a real grpc-go RuntimeHookService: PreCreateContainerHook answers the request's pod
// annotations as container annotations, and the pod name picks a behaviour.
type echoServer struct {
	v1alpha1.UnimplementedRuntimeHookServiceServer
	// deadlines receives the deadline each call's context had (zero when none).
	deadlines chan time.Time
	// ended receives the error of a hung call's context when it ends.
	ended chan error
}

func (s *echoServer) PreCreateContainerHook(ctx context.Context, r *v1alpha1.ContainerResourceHookRequest) (*v1alpha1.ContainerResourceHookResponse, error) {
	d, _ := ctx.Deadline()
	select {
	case s.deadlines <- d:
	default:
	}
	switch r.GetPodMeta().GetName() {
	case "fail":
		return nil, status.Error(codes.FailedPrecondition, "no CPU left on node-1: 100% of cpuset 0-3 ✓ taken")
	case "hang":
		<-ctx.Done()
		s.ended <- ctx.Err()
		return nil, ctx.Err()
	}
	return &v1alpha1.ContainerResourceHookResponse{ContainerAnnotations: r.GetPodAnnotations()}, nil
}

// serve starts a grpc-go server on a unix socket at path; it stops with the test, or by the returned func.
func serve(t *testing.T, path string, srv *echoServer) func(graceful bool) {
	t.Helper()
	lis, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	v1alpha1.RegisterRuntimeHookServiceServer(s, srv)
	go func() { _ = s.Serve(lis) }()
	stop := func(graceful bool) {
		if graceful {
			s.GracefulStop()
		} else {
			s.Stop()
		}
	}
	t.Cleanup(func() { stop(false) })
	return stop
}

func newEcho() *echoServer {
	return &echoServer{deadlines: make(chan time.Time, 1), ended: make(chan error, 1)}
}

func setup(t *testing.T) (*echoServer, string, v1alpha1.RuntimeHookServiceClient, *Client) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "hook.sock")
	srv := newEcho()
	serve(t, path, srv)
	c := New(path)
	t.Cleanup(func() { _ = c.Close() })
	return srv, path, v1alpha1.NewRuntimeHookServiceClient(c), c
}

func request(name string, annotations map[string]string) *v1alpha1.ContainerResourceHookRequest {
	return &v1alpha1.ContainerResourceHookRequest{PodMeta: &v1alpha1.PodSandboxMetadata{Name: name}, PodAnnotations: annotations}
}

func TestInvoke(t *testing.T) {
	srv, _, api, _ := setup(t)
	big := map[string]string{"a": strings.Repeat("x", 3<<20), "b": strings.Repeat("y", 100<<10)}
	tests := []struct {
		name string
		req  *v1alpha1.ContainerResourceHookRequest
		// timeout, when set, bounds the call.
		timeout  time.Duration
		wantCode codes.Code
		wantMsg  string
		wantEcho map[string]string
	}{
		{name: "answer", req: request("web", map[string]string{"tandem.io/qos": "LS"}), wantEcho: map[string]string{"tandem.io/qos": "LS"}},
		// Over the server's 64 KiB window and 16 KiB frames both ways: the client waits for window
		// updates while sending and gives window back while reading.
		{name: "request and answer of megabytes", req: request("web", big), wantEcho: big},
		{name: "empty messages", req: &v1alpha1.ContainerResourceHookRequest{}},
		{name: "the server's error status, message as sent", req: request("fail", nil),
			wantCode: codes.FailedPrecondition, wantMsg: "no CPU left on node-1: 100% of cpuset 0-3 ✓ taken"},
		{name: "a hung server costs the timeout", req: request("hang", nil), timeout: 100 * time.Millisecond,
			wantCode: codes.DeadlineExceeded},
		// The connection the hung call broke is replaced.
		{name: "answer after a timeout", req: request("web", map[string]string{"k": "v"}), wantEcho: map[string]string{"k": "v"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			if tt.timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tt.timeout)
				defer cancel()
			}
			start := time.Now()
			resp, err := api.PreCreateContainerHook(ctx, tt.req)
			if tt.timeout > 0 && time.Since(start) > tt.timeout+2*time.Second {
				t.Fatalf("the call took %v with a timeout of %v", time.Since(start), tt.timeout)
			}
			st := status.Convert(err)
			if st.Code() != tt.wantCode {
				t.Fatalf("code %v (%v), want %v", st.Code(), err, tt.wantCode)
			}
			if tt.wantMsg != "" && st.Message() != tt.wantMsg {
				t.Fatalf("message %q, want %q", st.Message(), tt.wantMsg)
			}
			if tt.wantCode == codes.DeadlineExceeded {
				select {
				case <-srv.ended:
				case <-time.After(5 * time.Second):
					t.Fatal("the server's handler was not told that the call ended")
				}
			}
			if err != nil {
				return
			}
			if got := resp.GetContainerAnnotations(); len(got) != len(tt.wantEcho) || fmt.Sprint(got) != fmt.Sprint(tt.wantEcho) {
				t.Fatalf("answer has %d annotations, want %d, or they differ", len(got), len(tt.wantEcho))
			}
		})
	}
}

func TestGRPCTimeoutReachesTheServer(t *testing.T) {
	srv, _, api, _ := setup(t)
	for _, timeout := range []time.Duration{0, 5 * time.Second} {
		ctx := context.Background()
		if timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, timeout)
			defer cancel()
		}
		if _, err := api.PreCreateContainerHook(ctx, request("web", nil)); err != nil {
			t.Fatal(err)
		}
		got := <-srv.deadlines
		if timeout == 0 {
			if !got.IsZero() {
				t.Fatalf("the server saw a deadline %v for a call without one", got)
			}
			continue
		}
		if left := time.Until(got); left > timeout || left < timeout-2*time.Second {
			t.Fatalf("the server's deadline is %v away, want about %v", left, timeout)
		}
	}
}

func TestUnknownMethod(t *testing.T) {
	_, _, _, c := setup(t)
	err := c.Invoke(context.Background(), "/runtime.v1alpha1.RuntimeHookService/NoSuchHook", request("web", nil), &v1alpha1.ContainerResourceHookResponse{})
	if status.Code(err) != codes.Unimplemented {
		t.Fatalf("got %v, want Unimplemented", err)
	}
}

// A server that restarts while the client holds idle connections to it costs no failed call.
func TestServerRestarts(t *testing.T) {
	for _, graceful := range []bool{false, true} {
		t.Run(fmt.Sprintf("graceful=%v", graceful), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "hook.sock")
			stop := serve(t, path, newEcho())
			c := New(path)
			defer c.Close()
			api := v1alpha1.NewRuntimeHookServiceClient(c)
			ctx := context.Background()
			if _, err := api.PreCreateContainerHook(ctx, request("web", nil)); err != nil {
				t.Fatal(err)
			}
			stop(graceful)
			if _, err := api.PreCreateContainerHook(ctx, request("web", nil)); status.Code(err) != codes.Unavailable {
				t.Fatalf("with the server gone: %v, want Unavailable", err)
			}
			serve(t, path, newEcho())
			if _, err := api.PreCreateContainerHook(ctx, request("web", map[string]string{"k": "v"})); err != nil {
				t.Fatalf("after the server came back: %v", err)
			}
		})
	}
}

// The server goes away while the client keeps a connection idle; the next call does not fail.
func TestIdleConnectionToAReplacedServer(t *testing.T) {
	path := filepath.Join(t.TempDir(), "hook.sock")
	stop := serve(t, path, newEcho())
	c := New(path)
	defer c.Close()
	api := v1alpha1.NewRuntimeHookServiceClient(c)
	if _, err := api.PreCreateContainerHook(context.Background(), request("web", nil)); err != nil {
		t.Fatal(err)
	}
	stop(true)
	serve(t, path, newEcho())
	if _, err := api.PreCreateContainerHook(context.Background(), request("web", nil)); err != nil {
		t.Fatalf("the first call after the server was replaced failed: %v", err)
	}
}

// countingListener counts the connections a server accepts.
type countingListener struct {
	net.Listener
	mu sync.Mutex
	n  int
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.mu.Lock()
		l.n++
		l.mu.Unlock()
	}
	return c, err
}

func (l *countingListener) accepted() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n
}

// A server that pings an idle connection (grpc-go's keepalive) gets its answer with the next call, on
// the same connection: what it sent is read before the connection is reused, not taken for a fault.
func TestIdleConnectionTheServerPinged(t *testing.T) {
	lis, err := net.Listen("unix", filepath.Join(t.TempDir(), "hook.sock"))
	if err != nil {
		t.Fatal(err)
	}
	cl := &countingListener{Listener: lis}
	s := grpc.NewServer(grpc.KeepaliveParams(keepalive.ServerParameters{Time: time.Second, Timeout: 5 * time.Second}))
	v1alpha1.RegisterRuntimeHookServiceServer(s, newEcho())
	go func() { _ = s.Serve(cl) }()
	defer s.Stop()
	c := New(lis.Addr().String())
	// The sweep would close the pinged connection first; this test is about what a call does.
	c.sweepEvery = time.Hour
	defer c.Close()
	api := v1alpha1.NewRuntimeHookServiceClient(c)
	for i := range 3 {
		if _, err := api.PreCreateContainerHook(context.Background(), request("web", nil)); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		// grpc-go pings an idle connection after a second at the earliest.
		time.Sleep(1300 * time.Millisecond)
	}
	if n := cl.accepted(); n != 1 {
		t.Fatalf("the server accepted %d connections; want 1, reused after each ping", n)
	}
}

func TestConcurrentCalls(t *testing.T) {
	_, _, api, c := setup(t)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := range 16 {
		wg.Go(func() {
			for i := range 100 {
				want := fmt.Sprintf("%d-%d", g, i)
				resp, err := api.PreCreateContainerHook(context.Background(), request("web", map[string]string{"call": want}))
				if err != nil {
					errs <- err
					return
				}
				if got := resp.GetContainerAnnotations()["call"]; got != want {
					errs <- fmt.Errorf("call %s got the answer to %s", want, got)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	c.mu.Lock()
	idle, inUse := len(c.idle), len(c.inUse)
	c.mu.Unlock()
	if idle > maxIdle || inUse != 0 {
		t.Fatalf("%d idle and %d busy connections after the calls; want at most %d idle and none busy", idle, inUse, maxIdle)
	}
}

func TestCloseEndsCallsInFlight(t *testing.T) {
	_, _, api, c := setup(t)
	done := make(chan error, 1)
	go func() {
		_, err := api.PreCreateContainerHook(context.Background(), request("hang", nil))
		done <- err
	}()
	time.Sleep(50 * time.Millisecond)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("the call in flight got %v, want Unavailable", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end the call in flight")
	}
	if _, err := api.PreCreateContainerHook(context.Background(), request("web", nil)); status.Code(err) != codes.Unavailable {
		t.Fatalf("a call after Close got %v, want Unavailable", err)
	}
}

func TestNoServer(t *testing.T) {
	c := New(filepath.Join(t.TempDir(), "nobody.sock"))
	defer c.Close()
	start := time.Now()
	_, err := v1alpha1.NewRuntimeHookServiceClient(c).PreCreateContainerHook(context.Background(), request("web", nil))
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "nobody.sock") {
		t.Fatalf("got %v, want Unavailable naming the socket", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("failing took %v; a missing server must fail at once", d)
	}
}

// A server that answers HTTP but not gRPC gets the status the gRPC spec maps its HTTP status to.
func TestNotAGRPCServer(t *testing.T) {
	path := filepath.Join(t.TempDir(), "http.sock")
	lis, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: h2c.NewHandler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "busy", http.StatusServiceUnavailable)
	}), &http2.Server{})}
	go func() { _ = hs.Serve(lis) }()
	defer hs.Close()
	c := New(path)
	defer c.Close()
	_, err = v1alpha1.NewRuntimeHookServiceClient(c).PreCreateContainerHook(context.Background(), request("web", nil))
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "HTTP 503") {
		t.Fatalf("got %v, want Unavailable saying HTTP 503", err)
	}
}

func TestEncodeTimeout(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want string
	}{
		{0, "1n"},
		{-time.Second, "1n"},
		{time.Nanosecond, "1n"},
		{99999999 * time.Nanosecond, "99999999n"},
		{100 * time.Millisecond, "100000u"},
		{2 * time.Second, "2000000u"},
		{2*time.Second + 1, "2000001u"},
		{2 * time.Minute, "120000m"},
		{100 * time.Hour, "360000S"},
		{2000 * time.Hour, "7200000S"},
		{100000000 * time.Second, "1666667M"},
		{time.Duration(1<<63 - 1), "2562048H"},
	}
	for _, tt := range tests {
		if got := encodeTimeout(tt.d); got != tt.want {
			t.Errorf("encodeTimeout(%v) = %q, want %q", tt.d, got, tt.want)
		}
	}
}
