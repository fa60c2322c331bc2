package proxy

import (
	"context"
	"fmt"
	"os"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/tandemkit/tandem/hooks"
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

// benchPolicy changes one field of its own, as a real policy does.
type benchPolicy struct {
	name string
	adj  *hooks.Adjustment
}

func (p benchPolicy) Name() string { return p.name }
func (p benchPolicy) PreCreateContainer(context.Context, *hooks.PodInfo, *hooks.ContainerInfo) (*hooks.Adjustment, error) {
	return p.adj, nil
}

func benchPolicies(n int) []hooks.Registration {
	adjs := []*hooks.Adjustment{
		{Resources: &hooks.ResourceAdjustment{CPUShares: hooks.Int64(512)}},
		{Resources: &hooks.ResourceAdjustment{CpusetCpus: hooks.String("0")}},
		{Resources: &hooks.ResourceAdjustment{CPUQuota: hooks.Int64(200000)}},
		{Annotations: map[string]string{"tandem.io/qos": "LS"}},
		{Env: map[string]string{"TANDEM_QOS": "LS"}},
	}
	var regs []hooks.Registration
	for i := range n {
		p := benchPolicy{name: fmt.Sprintf("policy%d", i), adj: adjs[i]}
		regs = append(regs, hooks.Registration{Name: p.name, Order: 100 * (i + 1), New: func() (hooks.Hook, error) { return p, nil }})
	}
	return regs
}

// BenchmarkCreateContainerHooks measures CreateContainer (and the RemoveContainer that keeps the store at a
// steady size) through the proxy with 0, 1 and 5 in-process hooks; the difference to hooks=0 is what the
// hooks add. The runtime is the in-process fake, so the runtime's own time does not drown the difference.
func BenchmarkCreateContainerHooks(b *testing.B) {
	for _, n := range []int{0, 1, 5} {
		b.Run(fmt.Sprintf("hooks=%d", n), func(b *testing.B) {
			// The checkpoint's fsync would drown the hooks' microseconds: keep it on tmpfs where there is one.
			stateDir := ""
			if d, err := os.MkdirTemp("/dev/shm", "tandem-bench-"); err == nil {
				stateDir = d
				b.Cleanup(func() { _ = os.RemoveAll(d) })
			}
			h := newHarness(b, harnessOpts{hooks: benchPolicies(n), stateDir: stateDir})
			ctx := b.Context()
			rs := h.rs()
			pod, err := rs.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: podConfig("bench", nil)})
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				c, err := rs.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: pod.PodSandboxId, Config: ctrConfig("c")})
				if err != nil {
					b.Fatal(err)
				}
				if _, err := rs.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: c.ContainerId}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
