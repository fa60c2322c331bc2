package remote

import (
	"context"
	"path/filepath"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/klog/v2"

	"github.com/tandemkit/tandem/hooks"
	"github.com/tandemkit/tandem/hooks/remote/v1alpha1"
)

// BenchmarkRemoteHook measures one PreCreateContainer through a Client and through the dispatcher with
// one remote hook, against the bare grpc-go round trip to the same server on the same socket: the
// differences are what the hook framework adds (conversion, timeout context, merge, metrics).
// Everything runs in one process here, so thread wake-ups cost CPU time only; bench/hooklatency
// measures the same call across processes.
func BenchmarkRemoteHook(b *testing.B) {
	// Logging off, as in production at -v=0 or 2.
	ctx := klog.NewContext(b.Context(), klog.Background().V(1))
	path := filepath.Join(b.TempDir(), "b.sock")
	srv := &testServer{container: func(context.Context, string, *v1alpha1.ContainerResourceHookRequest) (*v1alpha1.ContainerResourceHookResponse, error) {
		return &v1alpha1.ContainerResourceHookResponse{ContainerResources: &v1alpha1.LinuxContainerResources{CpuShares: 700}}, nil
	}}
	serve(b, path, srv)
	conn, err := NewConn(path)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	pod, ctr := testPod(), testContainer()
	req := containerRequest(pod, ctr)

	b.Run("grpc-go-round-trip", func(b *testing.B) {
		cc, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Fatal(err)
		}
		defer cc.Close()
		api := v1alpha1.NewRuntimeHookServiceClient(cc)
		for b.Loop() {
			if _, err := api.PreCreateContainerHook(ctx, req); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("client-call", func(b *testing.B) {
		c := NewClient("bench", conn)
		for b.Loop() {
			if _, err := c.PreCreateContainer(ctx, pod, ctr); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("dispatcher-one-remote-hook", func(b *testing.B) {
		d, err := hooks.NewDispatcher(ctx, nil, nil)
		if err != nil {
			b.Fatal(err)
		}
		reg := hooks.Registration{Name: "bench", Order: 1000, Stages: []hooks.Stage{hooks.PreCreateContainer},
			New: func() (hooks.Hook, error) { return NewClient("bench", conn), nil }}
		if err := d.SetRemote(ctx, []hooks.Registration{reg}); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if _, err := d.Run(ctx, hooks.PreCreateContainer, pod, ctr); err != nil {
				b.Fatal(err)
			}
		}
	})
}
