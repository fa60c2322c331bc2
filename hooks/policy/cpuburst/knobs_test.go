package cpuburst_test

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"k8s.io/klog/v2/ktesting"

	"github.com/tandemkit/tandem/hooks"
	"github.com/tandemkit/tandem/hooks/policy/cpuburst"
	"github.com/tandemkit/tandem/hooks/policy/memoryqos"
	"github.com/tandemkit/tandem/hooks/policy/qos"
	"github.com/tandemkit/tandem/hooks/policy/resctrl"
	"github.com/tandemkit/tandem/resource/cgroup"
	"github.com/tandemkit/tandem/resource/resctrl/resctrltest"
)

// knobs registers qos and the three kernel-knob hooks in the orders builtin.go gives them.
func knobs(burst cpuburst.Config, mem memoryqos.Config, rc resctrl.Config, cg cgroup.Writer, resctrlRoot string) []hooks.Registration {
	return []hooks.Registration{
		{Name: qos.Name, Order: 100, New: func() (hooks.Hook, error) { return qos.New(qos.Config{}) }},
		{Name: cpuburst.Name, Order: 500, New: func() (hooks.Hook, error) {
			return cpuburst.New(burst, cg)
		}},
		{Name: memoryqos.Name, Order: 600, New: func() (hooks.Hook, error) {
			return memoryqos.New(mem, memoryqos.Deps{Cgroups: cg})
		}},
		{Name: resctrl.Name, Order: 700, New: func() (hooks.Hook, error) {
			return resctrl.New(rc, resctrl.Deps{Root: resctrlRoot})
		}},
	}
}

// v2Tree is a fake cgroup v2 hierarchy offering the burst and memory QoS files below its root (plain
// files: cgroup files cannot be made outside the kernel's hierarchy).
func v2Tree(t *testing.T) cgroup.Writer {
	t.Helper()
	root := t.TempDir()
	for _, f := range []string{"cgroup.controllers", "kubepods/cpu.max.burst", "kubepods/memory.min", "kubepods/memory.low", "kubepods/memory.high"} {
		p := filepath.Join(root, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	w, err := cgroup.New(root)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// TestSeed004DefaultsSkip: with the values an operator ships in Koordinator's slo-controller-config every
// kernel-knob hook is off, and the dispatcher runs without them: a node adopting Tandem with that
// ConfigMap sees no kernel setting change until the operator switches one on.
func TestSeed004DefaultsSkip(t *testing.T) {
	t.Parallel()
	_, ctx := ktesting.NewTestContext(t)
	d, err := hooks.NewDispatcher(ctx, knobs(cpuburst.DefaultConfig(), memoryqos.DefaultConfig(), resctrl.DefaultConfig(),
		v2Tree(t), resctrltest.Write(t, resctrltest.XeonTwoSocket)), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, h := range d.Hooks() {
		names = append(names, h.Name)
	}
	if !slices.Equal(names, []string{qos.Name}) {
		t.Fatalf("hooks in force = %v, want only qos", names)
	}
}

// TestKnobsTogether runs the hooks through the real dispatcher, after qos, as the proxy does: an LS
// container gets its burst and memory QoS without conflicts, and the LS resctrl group as its RDT class.
func TestKnobsTogether(t *testing.T) {
	t.Parallel()
	_, ctx := ktesting.NewTestContext(t)
	burst := cpuburst.DefaultConfig()
	burst.Policy, burst.CPUBurstPercent = cpuburst.PolicyAuto, 50
	mem := memoryqos.Config{LSClass: memoryqos.ClassConfig{Enable: true, MinLimitPercent: 50, ThrottlingPercent: 80}}
	rc := resctrl.DefaultConfig()
	rc.LSClass.Enable, rc.BEClass.Enable = true, true
	resctrlRoot := resctrltest.Write(t, resctrltest.XeonTwoSocket)
	d, err := hooks.NewDispatcher(ctx, knobs(burst, mem, rc, v2Tree(t), resctrlRoot), nil)
	if err != nil {
		t.Fatal(err)
	}
	pod := &hooks.PodInfo{Name: "web", Namespace: "default", CgroupParent: "/kubepods/burstable/pod1",
		Labels: map[string]string{"koordinator.sh/qosClass": "LS"}}
	ctr := &hooks.ContainerInfo{ID: "c1", Name: "app", Resources: &hooks.Resources{
		CPUPeriod: 100000, CPUQuota: 200000, MemoryLimitInBytes: 2 << 30,
		Unified: map[string]string{"memory.min": "1073741824"}, // kubelet's MemoryQoS: the request
	}}
	adj, err := d.Run(ctx, hooks.PreCreateContainer, pod, ctr)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"cpu.max.burst": "100000", "memory.min": "536870912", "memory.high": "1717986918"}
	for k, v := range want {
		if adj.Resources == nil || adj.Resources.Unified[k] != v {
			t.Fatalf("container adjustment = %+v, want %s = %s", adj.Resources, k, v)
		}
	}
	if adj.Annotations[qos.AnnotationClass] != "LS" || adj.Annotations[memoryqos.AnnotationMemoryRequest] != "1073741824" {
		t.Fatalf("annotations = %v", adj.Annotations)
	}
	if got := adj.Resources.RDTClass; got == nil || *got != resctrl.GroupLS {
		t.Fatalf("RDT class = %v, want %s", got, resctrl.GroupLS)
	}
	// The group the front end moves the container's tasks into exists, with its schemata.
	if b, err := os.ReadFile(filepath.Join(resctrlRoot, resctrl.GroupLS, "schemata")); err != nil || len(b) == 0 {
		t.Fatalf("LS group schemata = %q, %v, want the group made", b, err)
	}
}
