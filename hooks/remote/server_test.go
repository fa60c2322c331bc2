package remote

import (
	"context"
	"net"
	"path/filepath"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/tandemkit/tandem/hooks/remote/v1alpha1"
)

// testServer is a real RuntimeHookService on a unix socket whose answers the test scripts. It records
// every request it received, so tests check what a hook server author would see.
type testServer struct {
	v1alpha1.UnimplementedRuntimeHookServiceServer

	sandbox   func(ctx context.Context, rpc string, req *v1alpha1.PodSandboxHookRequest) (*v1alpha1.PodSandboxHookResponse, error)
	container func(ctx context.Context, rpc string, req *v1alpha1.ContainerResourceHookRequest) (*v1alpha1.ContainerResourceHookResponse, error)

	mu   sync.Mutex
	reqs []proto.Message
	rpcs []string
}

func (s *testServer) record(rpc string, req proto.Message) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rpcs = append(s.rpcs, rpc)
	s.reqs = append(s.reqs, proto.Clone(req))
}

// calls returns the RPCs received so far and their requests.
func (s *testServer) calls() ([]string, []proto.Message) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.rpcs...), append([]proto.Message(nil), s.reqs...)
}

func (s *testServer) onSandbox(ctx context.Context, rpc string, req *v1alpha1.PodSandboxHookRequest) (*v1alpha1.PodSandboxHookResponse, error) {
	s.record(rpc, req)
	if s.sandbox == nil {
		return &v1alpha1.PodSandboxHookResponse{}, nil
	}
	return s.sandbox(ctx, rpc, req)
}

func (s *testServer) onContainer(ctx context.Context, rpc string, req *v1alpha1.ContainerResourceHookRequest) (*v1alpha1.ContainerResourceHookResponse, error) {
	s.record(rpc, req)
	if s.container == nil {
		return &v1alpha1.ContainerResourceHookResponse{}, nil
	}
	return s.container(ctx, rpc, req)
}

func (s *testServer) PreRunPodSandboxHook(ctx context.Context, r *v1alpha1.PodSandboxHookRequest) (*v1alpha1.PodSandboxHookResponse, error) {
	return s.onSandbox(ctx, "PreRunPodSandboxHook", r)
}

func (s *testServer) PostStopPodSandboxHook(ctx context.Context, r *v1alpha1.PodSandboxHookRequest) (*v1alpha1.PodSandboxHookResponse, error) {
	return s.onSandbox(ctx, "PostStopPodSandboxHook", r)
}

func (s *testServer) PreCreateContainerHook(ctx context.Context, r *v1alpha1.ContainerResourceHookRequest) (*v1alpha1.ContainerResourceHookResponse, error) {
	return s.onContainer(ctx, "PreCreateContainerHook", r)
}

func (s *testServer) PreStartContainerHook(ctx context.Context, r *v1alpha1.ContainerResourceHookRequest) (*v1alpha1.ContainerResourceHookResponse, error) {
	return s.onContainer(ctx, "PreStartContainerHook", r)
}

func (s *testServer) PostStartContainerHook(ctx context.Context, r *v1alpha1.ContainerResourceHookRequest) (*v1alpha1.ContainerResourceHookResponse, error) {
	return s.onContainer(ctx, "PostStartContainerHook", r)
}

func (s *testServer) PostStopContainerHook(ctx context.Context, r *v1alpha1.ContainerResourceHookRequest) (*v1alpha1.ContainerResourceHookResponse, error) {
	return s.onContainer(ctx, "PostStopContainerHook", r)
}

func (s *testServer) PreUpdateContainerResourcesHook(ctx context.Context, r *v1alpha1.ContainerResourceHookRequest) (*v1alpha1.ContainerResourceHookResponse, error) {
	return s.onContainer(ctx, "PreUpdateContainerResourcesHook", r)
}

// serve starts s on the socket path, with opts, and returns a function that kills the server: open
// connections are cut, calls in flight fail. The server is also killed when the test ends.
func serve(t testing.TB, path string, s *testServer, opts ...grpc.ServerOption) (kill func()) {
	t.Helper()
	lis, err := net.Listen("unix", path)
	if err != nil {
		t.Fatalf("listen on %s: %v", path, err)
	}
	srv := grpc.NewServer(opts...)
	v1alpha1.RegisterRuntimeHookServiceServer(srv, s)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(lis)
	}()
	var once sync.Once
	kill = func() {
		once.Do(func() {
			srv.Stop()
			<-done
		})
	}
	t.Cleanup(kill)
	return kill
}

// socketPath is a socket path in the test's temporary directory. Unix socket paths are limited to
// 107 bytes; test names are kept short so that t.TempDir stays below that.
func socketPath(t *testing.T, name string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if len(p) > 100 {
		t.Fatalf("socket path %s is too long for a unix socket; shorten the test name", p)
	}
	return p
}
