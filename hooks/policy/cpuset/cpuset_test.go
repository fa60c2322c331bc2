package cpuset

import (
	"strings"
	"sync/atomic"
	"testing"

	"github.com/containerd/errdefs"
	"k8s.io/klog/v2/ktesting"

	"github.com/tandemkit/tandem/hooks"
	"github.com/tandemkit/tandem/hooks/policy/qos"
	alloc "github.com/tandemkit/tandem/resource/cpuset"
	"github.com/tandemkit/tandem/resource/topology"
	"github.com/tandemkit/tandem/resource/topology/topologytest"
)

// machine16 is the machine of Koordinator's documented QoS example: 16 CPUs, 2 sockets = 2 NUMA nodes,
// SMT. The test machine has 2 CPUs, so the topology is a fake sysfs tree.
func machine16(t *testing.T) *alloc.Allocator {
	t.Helper()
	root := t.TempDir()
	if err := (topologytest.Machine{Sockets: 2, CoresPerDie: 4, ThreadsPerCore: 2}).Write(root); err != nil {
		t.Fatal(err)
	}
	topo, err := topology.Discover(root)
	if err != nil {
		t.Fatal(err)
	}
	a, err := alloc.New(topo, alloc.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// kubelet returns what kubelet sends for a container with these CPU request and limit (milli-cores).
func kubelet(request, limit int64) *hooks.Resources {
	r := &hooks.Resources{CPUShares: max(request*1024/1000, 2), CPUPeriod: 100000}
	if limit > 0 {
		r.CPUQuota = limit * 100
	}
	return r
}

type seedPod struct {
	name, class string
	request     int64
	annotations map[string]string
}

func podOf(p seedPod) (*hooks.PodInfo, *hooks.ContainerInfo) {
	ann := map[string]string{AnnotationResourceSpec: `{"preferredCPUBindPolicy": "SpreadByPCPUs"}`}
	for k, v := range p.annotations {
		ann[k] = v
	}
	pod := &hooks.PodInfo{ID: "sb-" + p.name, UID: "uid-" + p.name, Name: p.name, Namespace: "default",
		Labels: map[string]string{"koordinator.sh/qosClass": p.class}, Annotations: ann}
	limit := p.request
	if p.class == "BE" {
		limit = 0
	}
	return pod, &hooks.ContainerInfo{Name: "nginx", Resources: kubelet(p.request, limit)}
}

// TestSeed000 runs the four nginx Deployments of Koordinator's documented QoS example through the qos and
// cpuset hooks as the proxy does, on its 16-CPU machine, and expects the cpusets users see there under
// Koordinator: LSE 0-1, LSR 2-3, LS 4-15, BE everything but 0-1.
func TestSeed000(t *testing.T) {
	t.Parallel()
	_, ctx := ktesting.NewTestContext(t)
	a := machine16(t)
	var changed atomic.Int32
	d, err := hooks.NewDispatcher(ctx, []hooks.Registration{
		{Name: qos.Name, Order: 100, New: func() (hooks.Hook, error) { return qos.New(qos.Config{}) }},
		{Name: Name, Order: 200, New: func() (hooks.Hook, error) { return New(a, func() { changed.Add(1) }) }},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"nginx-lse": "0-1", "nginx-lsr": "2-3", "nginx-ls": "4-15", "nginx-be": "2-15"}
	for _, p := range []seedPod{{"nginx-lse", "LSE", 2000, nil}, {"nginx-lsr", "LSR", 2000, nil}, {"nginx-ls", "LS", 2000, nil}, {"nginx-be", "BE", 0, nil}} {
		pod, ctr := podOf(p)
		adj, err := d.Run(ctx, hooks.PreCreateContainer, pod, ctr)
		if err != nil {
			t.Fatalf("%s: %v", p.name, err)
		}
		if got := *adj.Resources.CpusetCpus; got != want[p.name] {
			t.Errorf("%s cpuset = %s, want %s", p.name, got, want[p.name])
		}
	}
	if changed.Load() != 2 {
		t.Errorf("pools changed %d times, want 2 (LSE and LSR allocations)", changed.Load())
	}

	// The LSE pod goes: its CPUs return, LS and BE widen on their next update.
	lse, lseCtr := podOf(seedPod{"nginx-lse", "LSE", 2000, nil})
	lseCtr.ID = "ctr-lse"
	if _, err := d.Run(ctx, hooks.PostRemoveContainer, lse, lseCtr); err != nil {
		t.Fatal(err)
	}
	for name, wantSet := range map[string]string{"nginx-ls": "0-1,4-15", "nginx-be": "0-15"} {
		class := map[string]string{"nginx-ls": "LS", "nginx-be": "BE"}[name]
		pod, ctr := podOf(seedPod{name, class, 2000, nil})
		ctr.Annotations = map[string]string{qos.AnnotationClass: class}
		adj, err := d.Run(ctx, hooks.PreUpdateContainerResources, pod, ctr)
		if err != nil {
			t.Fatal(err)
		}
		if got := *adj.Resources.CpusetCpus; got != wantSet {
			t.Errorf("%s after the LSE pod left = %s, want %s", name, got, wantSet)
		}
	}
}

func TestBadInputAllocatesNothing(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		pod     seedPod
		wantErr func(error) bool
		wantMsg string
	}{
		{name: "malformed resource-spec", pod: seedPod{"p", "LSE", 2000, map[string]string{AnnotationResourceSpec: `{"preferredCPUBindPolicy":`}}, wantErr: errdefs.IsInvalidArgument},
		{name: "unknown bind policy", pod: seedPod{"p", "LSR", 2000, map[string]string{AnnotationResourceSpec: `{"preferredCPUBindPolicy":"Sideways"}`}}, wantErr: errdefs.IsInvalidArgument},
		{name: "fractional LSE", pod: seedPod{"p", "LSE", 1500, nil}, wantErr: errdefs.IsInvalidArgument},
		{name: "more CPUs than the machine", pod: seedPod{"p", "LSE", 32000, nil}, wantErr: errdefs.IsResourceExhausted, wantMsg: "want 32"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, ctx := ktesting.NewTestContext(t)
			a := machine16(t)
			h, _ := New(a, nil)
			pod, ctr := podOf(tt.pod)
			_, err := h.PreCreateContainer(ctx, pod, ctr)
			if !tt.wantErr(err) || !strings.Contains(err.Error(), tt.wantMsg) {
				t.Fatalf("err = %v, want a classed error mentioning %q", err, tt.wantMsg)
			}
			if n := len(a.Allocations()); n != 0 {
				t.Fatalf("%d allocations left after a refused container", n)
			}
		})
	}
}

func TestRestartRollbackAndRestore(t *testing.T) {
	t.Parallel()
	_, ctx := ktesting.NewTestContext(t)
	a := machine16(t)
	h, _ := New(a, nil)
	pod, ctr := podOf(seedPod{"db", "LSE", 4000, nil})
	ctr.Annotations = map[string]string{qos.AnnotationClass: "LSE"}

	// The runtime refuses the container: the CPUs go back.
	if _, err := h.PreCreateContainer(ctx, pod, ctr); err != nil {
		t.Fatal(err)
	}
	h.Rollback(ctx, hooks.PreCreateContainer, pod, ctr)
	if len(a.Allocations()) != 0 {
		t.Fatal("rollback kept the allocation")
	}

	// First container runs; it restarts (same pod, same name) and keeps its CPUs; removing the dead one
	// does not free them; removing the live one does.
	adj1, _ := h.PreCreateContainer(ctx, pod, ctr)
	first := *ctr
	first.ID = "c1"
	if _, err := h.PreStartContainer(ctx, pod, &first); err != nil {
		t.Fatal(err)
	}
	adj2, _ := h.PreCreateContainer(ctx, pod, ctr)
	if *adj1.Resources.CpusetCpus != *adj2.Resources.CpusetCpus {
		t.Fatalf("restarted container got %s, want its predecessor's %s", *adj2.Resources.CpusetCpus, *adj1.Resources.CpusetCpus)
	}
	second := *ctr
	second.ID = "c2"
	_, _ = h.PreStartContainer(ctx, pod, &second)
	_ = h.PostRemoveContainer(ctx, pod, &first)
	if _, ok := a.Get(Owner(pod.UID, "nginx")); !ok {
		t.Fatal("removing the dead container freed the running one's CPUs")
	}
	_ = h.PostRemoveContainer(ctx, pod, &second)
	if _, ok := a.Get(Owner(pod.UID, "nginx")); ok {
		t.Fatal("removing the running container kept its CPUs")
	}

	// After a proxy restart, recorded allocations come back exactly, and are not handed out again.
	b := machine16(t)
	rec := []Recorded{{PodUID: "uid-db", Container: "nginx", ContainerID: "c9", Class: "LSE", CPUs: "4-7"}}
	if n := Restore(ctx, b, rec); n != 1 {
		t.Fatalf("restored %d allocations, want 1", n)
	}
	h2, _ := New(b, nil)
	other, otherCtr := podOf(seedPod{"cache", "LSE", 4000, nil})
	adj, err := h2.PreCreateContainer(ctx, other, otherCtr)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := topology.ParseCPUList(*adj.Resources.CpusetCpus)
	restored, _ := topology.ParseCPUList("4-7")
	if !got.Intersection(restored).IsEmpty() {
		t.Fatalf("new LSE container got %s, overlapping the restored 4-7", got)
	}
	if al, ok := b.Get(Owner("uid-db", "nginx")); !ok || al.CPUs.String() != "4-7" {
		t.Fatalf("restored allocation = %+v, %v; want 4-7", al, ok)
	}
}

// TestRebuildKeepsReleased: tandem-proxy rebuilds the hook at every configuration change. A rebuilt hook
// must neither bring back an allocation a removal released (seen on a real node: an LSE allocation
// outlived its pod) nor forget which container uses an allocation.
func TestRebuildKeepsReleased(t *testing.T) {
	t.Parallel()
	_, ctx := ktesting.NewTestContext(t)
	a := machine16(t)
	rec := []Recorded{
		{PodUID: "uid-db", Container: "nginx", ContainerID: "c9", Class: "LSE", CPUs: "4-7"},
		{PodUID: "uid-kv", Container: "kv", ContainerID: "c10", Class: "LSR", CPUs: "8-9"},
	}
	if n := Restore(ctx, a, rec); n != 2 {
		t.Fatalf("restored %d allocations, want 2", n)
	}
	db := &hooks.PodInfo{UID: "uid-db", Namespace: "default", Name: "db"}
	kv := &hooks.PodInfo{UID: "uid-kv", Namespace: "default", Name: "kv"}

	h1, _ := New(a, nil)
	if err := h1.PostRemoveContainer(ctx, db, &hooks.ContainerInfo{ID: "c9", Name: "nginx"}); err != nil {
		t.Fatal(err)
	}
	if _, ok := a.Get(Owner("uid-db", "nginx")); ok {
		t.Fatal("removing the LSE container kept its CPUs")
	}

	h2, _ := New(a, nil) // the configuration changed
	ls, lsCtr := podOf(seedPod{"web", "LS", 1000, nil})
	if _, err := h2.PreUpdateContainerResources(ctx, ls, lsCtr); err != nil {
		t.Fatal(err)
	}
	if al, ok := a.Get(Owner("uid-db", "nginx")); ok {
		t.Fatalf("the rebuilt hook brought back the released allocation %+v", al)
	}
	// The binding made at restore time survives the rebuild: the dead predecessor of the LSR container
	// does not free the CPUs its running successor (c10) uses; c10's removal does.
	_ = h2.PostRemoveContainer(ctx, kv, &hooks.ContainerInfo{ID: "c3", Name: "kv"})
	if _, ok := a.Get(Owner("uid-kv", "kv")); !ok {
		t.Fatal("removing a dead predecessor freed the running LSR container's CPUs")
	}
	_ = h2.PostRemoveContainer(ctx, kv, &hooks.ContainerInfo{ID: "c10", Name: "kv"})
	if _, ok := a.Get(Owner("uid-kv", "kv")); ok {
		t.Fatal("removing the running LSR container kept its CPUs")
	}
}

// TestRestoreRefusesOverlap: a checkpoint that gives two containers the same exclusive CPU restores the
// first and refuses the second, so no CPU is ever held twice.
func TestRestoreRefusesOverlap(t *testing.T) {
	t.Parallel()
	_, ctx := ktesting.NewTestContext(t)
	a := machine16(t)
	rec := []Recorded{
		{PodUID: "u1", Container: "a", ContainerID: "c1", Class: "LSE", CPUs: "2-3"},
		{PodUID: "u2", Container: "b", ContainerID: "c2", Class: "LSR", CPUs: "3-4"},
		{PodUID: "u3", Container: "c", ContainerID: "c3", Class: "LSE", CPUs: "not-a-list"},
	}
	if n := Restore(ctx, a, rec); n != 1 {
		t.Fatalf("restored %d allocations, want 1 (the overlapping and the malformed one refused)", n)
	}
	if got := a.Pools().LSE.String(); got != "2-3" {
		t.Fatalf("LSE pool %q, want 2-3", got)
	}
	if got := a.Pools().LSR.String(); got != "" {
		t.Fatalf("LSR pool %q, want empty: the overlapping allocation was refused", got)
	}
}
