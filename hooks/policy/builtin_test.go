package policy

import (
	"testing"

	"github.com/containerd/errdefs"
	"k8s.io/klog/v2/ktesting"

	"github.com/tandemkit/tandem/hooks"
	"github.com/tandemkit/tandem/hooks/policy/qos"
	"github.com/tandemkit/tandem/resource/cgroup"
)

// kernel is a fake set of cgroup files; resource/cgroup probes and writes the real ones.
type kernel map[string]bool

func (k kernel) Supports(f string) bool              { return k[f] }
func (k kernel) Version() int                        { return 1 }
func (k kernel) Write(string, cgroup.Settings) error { return nil }

// TestBuiltinTogether runs the built-in policies through the real dispatcher, as the proxy does, and checks
// that they compose without conflicts for each class.
func TestBuiltinTogether(t *testing.T) {
	t.Parallel()
	_, ctx := ktesting.NewTestContext(t)
	d, err := hooks.NewDispatcher(ctx, Builtin(DefaultConfig(), Deps{Cgroups: kernel{"cpu.idle": true}}), nil)
	if err != nil {
		t.Fatal(err)
	}
	const spec = `{"containers":{"app":{"requests":{"kubernetes.io/batch-cpu":"2k"},"limits":{"kubernetes.io/batch-cpu":"2k","kubernetes.io/batch-memory":"512Mi"}}}}`
	be := &hooks.PodInfo{Name: "nginx-be", Namespace: "default", CgroupParent: "/kubepods/besteffort/pod1",
		Labels: map[string]string{"koordinator.sh/qosClass": "BE"}, Annotations: map[string]string{"node.koordinator.sh/extended-resource-spec": spec}}

	// Sandbox: class recorded, pod cgroup idle and sized to the batch sums.
	adj, err := d.Run(ctx, hooks.PreRunPodSandbox, be, nil)
	if err != nil {
		t.Fatal(err)
	}
	if adj.Annotations[qos.AnnotationClass] != "BE" || adj.PodResources.Unified["cpu.idle"] != "1" || *adj.PodResources.CPUQuota != 200000 {
		t.Fatalf("sandbox adjustment = %+v / %+v", adj, adj.PodResources)
	}
	// What the proxy stores for the pod is what the sandbox became.
	be.Annotations[qos.AnnotationClass] = "BE"

	ctr := &hooks.ContainerInfo{Name: "app", Resources: &hooks.Resources{CPUShares: 2, CPUPeriod: 100000}}
	adj, err = d.Run(ctx, hooks.PreCreateContainer, be, ctr)
	if err != nil {
		t.Fatal(err)
	}
	r := adj.Resources
	if *r.CPUShares != 2048 || *r.CPUQuota != 200000 || *r.MemoryLimitInBytes != 512<<20 || *r.OomScoreAdj != 1000 {
		t.Fatalf("BE container adjustment = %+v", r)
	}

	lse := &hooks.PodInfo{Name: "nginx-lse", Namespace: "default", Labels: map[string]string{"koordinator.sh/qosClass": "LSE"}}
	frac := &hooks.ContainerInfo{Name: "nginx", Resources: &hooks.Resources{CPUShares: 512, CPUQuota: 50000, CPUPeriod: 100000}}
	if _, err := d.Run(ctx, hooks.PreCreateContainer, lse, frac); !errdefs.IsInvalidArgument(err) {
		t.Fatalf("LSE with 500m: %v, want InvalidArgument", err)
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	if err := (Config{Enabled: []string{"qos", "turbo"}}).Validate(); err == nil {
		t.Fatal("unknown policy accepted")
	}
	if got := Builtin(Config{Enabled: []string{"cpuidle"}}, Deps{}); len(got) != 1 || got[0].Name != "cpuidle" {
		t.Fatalf("Builtin(cpuidle only) = %v", got)
	}
}

// TestBuiltinQuotaCeiling checks that Deps.BEQuotaCeiling reaches batchresource through the dispatcher:
// under a one-CPU BE clamp a 2-CPU BE container is created at one CPU, and a refresh once the clamp is
// gone gives it its two back.
func TestBuiltinQuotaCeiling(t *testing.T) {
	t.Parallel()
	_, ctx := ktesting.NewTestContext(t)
	clamped := true
	ceiling := func() (cgroup.CPUMax, bool) { return cgroup.CPUMax{Quota: 100000, Period: 100000}, clamped }
	d, err := hooks.NewDispatcher(ctx, Builtin(DefaultConfig(), Deps{Cgroups: kernel{"cpu.idle": true}, BEQuotaCeiling: ceiling}), nil)
	if err != nil {
		t.Fatal(err)
	}
	const spec = `{"containers":{"app":{"limits":{"kubernetes.io/batch-cpu":"2k"}}}}`
	be := &hooks.PodInfo{Name: "batch", Namespace: "default", CgroupParent: "/kubepods/besteffort/pod1",
		Labels: map[string]string{"koordinator.sh/qosClass": "BE"}, Annotations: map[string]string{"node.koordinator.sh/extended-resource-spec": spec}}
	ctr := &hooks.ContainerInfo{Name: "app", Resources: &hooks.Resources{CPUShares: 2, CPUPeriod: 100000}}
	adj, err := d.Run(ctx, hooks.PreCreateContainer, be, ctr)
	if err != nil {
		t.Fatal(err)
	}
	if got := *adj.Resources.CPUQuota; got != 100000 {
		t.Errorf("quota under the clamp = %d, want 100000", got)
	}
	clamped = false
	adj, err = d.Run(ctx, hooks.PreUpdateContainerResources, be, ctr)
	if err != nil {
		t.Fatal(err)
	}
	if got := *adj.Resources.CPUQuota; got != 200000 {
		t.Errorf("quota after the lift = %d, want 200000", got)
	}
}
