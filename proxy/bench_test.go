package proxy

import (
	"fmt"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// BenchmarkRelay measures what the proxy adds to the calls kubelet makes most often, against the same
// calls made directly to the same runtime. The runtime here is the in-process fake, so the figures are the
// proxy's own cost; bench/crilatency measures the same against real containerd.
func BenchmarkRelay(b *testing.B) {
	rt := newFakeRuntime()
	ctx := testCtx(b)
	pod, _ := rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: podConfig("bench", nil)})
	for i := range 100 {
		_, _ = rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: pod.PodSandboxId, Config: ctrConfig(fmt.Sprintf("c%d", i))})
	}
	h := newHarness(b, harnessOpts{rt: rt})
	targets := []struct {
		name string
		c    runtimeapi.RuntimeServiceClient
	}{
		{"direct", runtimeapi.NewRuntimeServiceClient(h.direct)},
		{"tandem", h.rs()},
	}
	for _, tg := range targets {
		b.Run("Version/"+tg.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := tg.c.Version(ctx, &runtimeapi.VersionRequest{}); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("ListContainers100/"+tg.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := tg.c.ListContainers(ctx, &runtimeapi.ListContainersRequest{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
