package batchresource

import (
	"context"
	"errors"
	"math"
	"strconv"
	"testing"

	"github.com/containerd/errdefs"
	"k8s.io/klog/v2/ktesting"

	"github.com/tandemkit/tandem/hooks"
	"github.com/tandemkit/tandem/hooks/policy/qos"
	"github.com/tandemkit/tandem/resource/batch"
	"github.com/tandemkit/tandem/resource/cgroup"
)

const seedSpec = `{"containers":{"nginx":{"requests":{"kubernetes.io/batch-cpu":"2k","kubernetes.io/batch-memory":"1Gi"},"limits":{"kubernetes.io/batch-cpu":"2k","kubernetes.io/batch-memory":"1Gi"}},"sidecar":{"requests":{"kubernetes.io/batch-cpu":"500"}}}}`

func bePod(ann string) *hooks.PodInfo {
	a := map[string]string{qos.AnnotationClass: "BE"}
	if ann != "" {
		a["node.koordinator.sh/extended-resource-spec"] = ann
	}
	return &hooks.PodInfo{Name: "nginx-be", Namespace: "default", Annotations: a}
}

// specLookup stands in for the pod spec, which podspec.Source reads through the API server and tests
// against a real informer; here only the order of sources matters.
type specLookup struct {
	cs    map[string]batch.Container
	err   error
	calls int
}

func (l *specLookup) BatchResources(context.Context, *hooks.PodInfo) (map[string]batch.Container, bool, error) {
	l.calls++
	return l.cs, l.cs != nil, l.err
}

// fromSpec is the BE container of Koordinator's documented QoS example as the pod spec states it, with
// less memory than the annotation.
func fromSpec() *specLookup {
	return &specLookup{cs: map[string]batch.Container{"nginx": {CPURequestMilli: 1000, CPULimitMilli: 3000, MemoryLimit: 512 << 20}}}
}

func TestPreCreateContainer(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name                  string
		pod                   *hooks.PodInfo
		ctr                   string
		wantShares, wantQuota int64
		wantMemory            int64
		wantNil               bool
		wantErr               func(error) bool
		lookup                *specLookup
		wantLookups           int
	}{
		{name: "the example's BE container: 2 batch CPUs", pod: bePod(seedSpec), ctr: "nginx", wantShares: 2048, wantQuota: 200000, wantMemory: 1 << 30},
		{name: "request only: unlimited quota", pod: bePod(seedSpec), ctr: "sidecar", wantShares: 512, wantQuota: -1},
		{name: "container not in the spec", pod: bePod(seedSpec), ctr: "other", wantNil: true},
		{name: "no annotation: plain BE", pod: bePod(""), ctr: "nginx", wantNil: true},
		{name: "LS pod is not touched", pod: &hooks.PodInfo{Annotations: map[string]string{qos.AnnotationClass: "LS", "node.koordinator.sh/extended-resource-spec": seedSpec}}, ctr: "nginx", wantNil: true},
		{name: "malformed annotation", pod: bePod(`{"containers":`), ctr: "nginx", wantErr: errdefs.IsInvalidArgument},
		{name: "no annotation: the pod spec", pod: bePod(""), ctr: "nginx", lookup: fromSpec(), wantLookups: 1,
			wantShares: 1024, wantQuota: 300000, wantMemory: 512 << 20},
		{name: "annotation first: the pod spec is not read", pod: bePod(seedSpec), ctr: "nginx", lookup: fromSpec(),
			wantShares: 2048, wantQuota: 200000, wantMemory: 1 << 30},
		{name: "malformed annotation is not papered over by the pod spec", pod: bePod(`{"containers":`), ctr: "nginx", lookup: fromSpec(), wantErr: errdefs.IsInvalidArgument},
		{name: "pod spec unknown: plain BE", pod: bePod(""), ctr: "nginx", lookup: &specLookup{}, wantLookups: 1, wantNil: true},
		{name: "container not in the pod spec", pod: bePod(""), ctr: "other", lookup: fromSpec(), wantLookups: 1, wantNil: true},
		{name: "LS pod: the pod spec is not read", pod: &hooks.PodInfo{Annotations: map[string]string{qos.AnnotationClass: "LS"}}, ctr: "nginx", lookup: fromSpec(), wantNil: true},
		{name: "lookup cut short by the caller", pod: bePod(""), ctr: "nginx", lookup: &specLookup{err: context.DeadlineExceeded}, wantLookups: 1,
			wantErr: func(err error) bool { return errors.Is(err, context.DeadlineExceeded) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, ctx := ktesting.NewTestContext(t)
			var lookup BatchLookup
			if tt.lookup != nil {
				lookup = tt.lookup
			}
			b, _ := New(DefaultConfig(), Deps{Lookup: lookup})
			adj, err := b.PreCreateContainer(ctx, tt.pod, &hooks.ContainerInfo{Name: tt.ctr})
			if tt.lookup != nil && tt.lookup.calls != tt.wantLookups {
				t.Errorf("pod spec read %d times, want %d", tt.lookup.calls, tt.wantLookups)
			}
			if tt.wantErr != nil {
				if !tt.wantErr(err) {
					t.Fatalf("err = %v, not of the expected class", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tt.wantNil {
				if adj != nil {
					t.Fatalf("adjustment %+v, want none", adj)
				}
				return
			}
			r := adj.Resources
			if *r.CPUShares != tt.wantShares || *r.CPUQuota != tt.wantQuota || *r.CPUPeriod != 100000 {
				t.Fatalf("shares %d quota %d period %d; want %d %d 100000", *r.CPUShares, *r.CPUQuota, *r.CPUPeriod, tt.wantShares, tt.wantQuota)
			}
			var mem int64
			if r.MemoryLimitInBytes != nil {
				mem = *r.MemoryLimitInBytes
			}
			if mem != tt.wantMemory {
				t.Fatalf("memory limit %d, want %d", mem, tt.wantMemory)
			}
		})
	}
}

func TestPodLevelSums(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name                           string
		pod                            *hooks.PodInfo
		lookup                         BatchLookup
		wantShares, wantQuota, wantMem int64
	}{
		// 2000m + 500m requested; the sidecar has no limit, so the pod has none either.
		{name: "annotation", pod: bePod(seedSpec), wantShares: 2560, wantQuota: -1, wantMem: -1},
		{name: "pod spec", pod: bePod(""), lookup: &specLookup{cs: map[string]batch.Container{
			"a": {CPURequestMilli: 1000, CPULimitMilli: 2000, MemoryLimit: 1 << 30},
			"b": {CPURequestMilli: 500, CPULimitMilli: 500, MemoryLimit: 256 << 20}}},
			wantShares: 1536, wantQuota: 250000, wantMem: 1<<30 + 256<<20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, ctx := ktesting.NewTestContext(t)
			b, _ := New(DefaultConfig(), Deps{Lookup: tt.lookup})
			adj, err := b.PreRunPodSandbox(ctx, tt.pod)
			if err != nil {
				t.Fatal(err)
			}
			r := adj.PodResources
			if *r.CPUShares != tt.wantShares || *r.CPUQuota != tt.wantQuota || *r.MemoryLimitInBytes != tt.wantMem {
				t.Fatalf("pod resources shares %d quota %d memory %d; want %d, %d, %d",
					*r.CPUShares, *r.CPUQuota, *r.MemoryLimitInBytes, tt.wantShares, tt.wantQuota, tt.wantMem)
			}
		})
	}
}

// TestQuotaCeiling checks the quotas under a BE clamp (cgroup v1 refuses a child above its parent) and
// that they come back whole when the clamp goes: the issue 12 case is a 1500m limit under one CPU.
func TestQuotaCeiling(t *testing.T) {
	t.Parallel()
	const spec = `{"containers":{"work":{"requests":{"kubernetes.io/batch-cpu":"1500"},"limits":{"kubernetes.io/batch-cpu":"1500"}},"side":{"limits":{"kubernetes.io/batch-cpu":"500"}},"free":{"requests":{"kubernetes.io/batch-cpu":"100"}}}}`
	oneCPU := cgroup.CPUMax{Quota: 100000, Period: 100000}
	tests := []struct {
		name      string
		ceiling   *cgroup.CPUMax
		ctr       string
		period    int64 // the container's own period from kubelet; 0 for none
		wantQuota int64
		wantPod   int64
	}{
		{name: "1500m under one CPU", ceiling: &oneCPU, ctr: "work", wantQuota: 100000, wantPod: -1},
		{name: "500m fits under one CPU", ceiling: &oneCPU, ctr: "side", wantQuota: 50000, wantPod: -1},
		{name: "no limit inherits", ceiling: &oneCPU, ctr: "free", wantQuota: -1, wantPod: -1},
		{name: "kubelet's shorter period, same ratio", ceiling: &oneCPU, ctr: "work", period: 50000, wantQuota: 50000, wantPod: -1},
		{name: "no ceiling: the whole limit", ctr: "work", wantQuota: 150000, wantPod: -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, ctx := ktesting.NewTestContext(t)
			ceiling := func() (cgroup.CPUMax, bool) {
				if tt.ceiling == nil {
					return cgroup.CPUMax{}, false
				}
				return *tt.ceiling, true
			}
			b, _ := New(DefaultConfig(), Deps{QuotaCeiling: ceiling})
			ctr := &hooks.ContainerInfo{Name: tt.ctr}
			if tt.period > 0 {
				ctr.Resources = &hooks.Resources{CPUPeriod: tt.period}
			}
			for _, stage := range []hooks.Stage{hooks.PreCreateContainer, hooks.PreUpdateContainerResources} {
				f := b.PreCreateContainer
				if stage == hooks.PreUpdateContainerResources {
					f = b.PreUpdateContainerResources
				}
				adj, err := f(ctx, bePod(spec), ctr)
				if err != nil {
					t.Fatal(err)
				}
				if got := *adj.Resources.CPUQuota; got != tt.wantQuota {
					t.Errorf("%s: quota %d, want %d", stage, got, tt.wantQuota)
				}
				if stage == hooks.PreUpdateContainerResources {
					if adj.PodResources == nil || *adj.PodResources.CPUQuota != tt.wantPod {
						t.Errorf("%s: pod resources %+v, want quota %d", stage, adj.PodResources, tt.wantPod)
					}
				}
			}
		})
	}
	// The pod cgroup: 1500m + 500m = 2000m, capped at one CPU.
	const limited = `{"containers":{"work":{"limits":{"kubernetes.io/batch-cpu":"1500"}},"side":{"limits":{"kubernetes.io/batch-cpu":"500"}}}}`
	_, ctx := ktesting.NewTestContext(t)
	b, _ := New(DefaultConfig(), Deps{QuotaCeiling: func() (cgroup.CPUMax, bool) { return oneCPU, true }})
	adj, err := b.PreRunPodSandbox(ctx, bePod(limited))
	if err != nil {
		t.Fatal(err)
	}
	if got := *adj.PodResources.CPUQuota; got != 100000 {
		t.Errorf("pod quota under one CPU = %d, want 100000", got)
	}
	adj, err = b.PreUpdateContainerResources(ctx, bePod(limited), &hooks.ContainerInfo{Name: "work"})
	if err != nil {
		t.Fatal(err)
	}
	if got := *adj.PodResources.CPUQuota; got != 100000 {
		t.Errorf("pod quota on update under one CPU = %d, want 100000", got)
	}
}

// TestQuantitiesClamped: batch resources far beyond any machine, or below what the kernel takes, give
// the kernel's bounds, as kubelet's conversion would; nothing wraps to few shares or to no limit.
func TestQuantitiesClamped(t *testing.T) {
	t.Parallel()
	const spec = `{"containers":{` +
		`"huge":{"requests":{"kubernetes.io/batch-cpu":"1e16"},"limits":{"kubernetes.io/batch-cpu":"1e14","kubernetes.io/batch-memory":"5e18"}},` +
		`"more":{"requests":{"kubernetes.io/batch-cpu":"1e16"},"limits":{"kubernetes.io/batch-cpu":"1e14","kubernetes.io/batch-memory":"5e18"}},` +
		`"tiny":{"requests":{"kubernetes.io/batch-cpu":"1"},"limits":{"kubernetes.io/batch-cpu":"5","kubernetes.io/batch-memory":"1"}}}}`
	oneCPU := cgroup.CPUMax{Quota: 100000, Period: 100000}
	tests := []struct {
		name                           string
		ctr                            string
		ceiling                        *cgroup.CPUMax
		wantShares, wantQuota, wantMem int64
		wantPodShares, wantPodQuotaUpd int64
	}{
		{name: "batch-cpu 1e16 and a limit of 1e14: the most shares and the largest quota", ctr: "huge",
			wantShares: cgroup.MaxShares, wantQuota: cgroup.MaxQuota, wantMem: 5e18, wantPodQuotaUpd: cgroup.MaxQuota},
		{name: "a limit of 1e14 under a one-CPU clamp is one CPU, not unlimited", ctr: "huge", ceiling: &oneCPU,
			wantShares: cgroup.MaxShares, wantQuota: 100000, wantMem: 5e18, wantPodQuotaUpd: 100000},
		{name: "a limit of 5m is raised to the kernel's 1 ms, as kubelet does", ctr: "tiny",
			wantShares: cgroup.MinShares, wantQuota: cgroup.MinQuota, wantMem: 1, wantPodQuotaUpd: cgroup.MaxQuota},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, ctx := ktesting.NewTestContext(t)
			b, _ := New(DefaultConfig(), Deps{QuotaCeiling: func() (cgroup.CPUMax, bool) {
				if tt.ceiling == nil {
					return cgroup.CPUMax{}, false
				}
				return *tt.ceiling, true
			}})
			for _, stage := range []hooks.Stage{hooks.PreCreateContainer, hooks.PreUpdateContainerResources} {
				f := b.PreCreateContainer
				if stage == hooks.PreUpdateContainerResources {
					f = b.PreUpdateContainerResources
				}
				adj, err := f(ctx, bePod(spec), &hooks.ContainerInfo{Name: tt.ctr})
				if err != nil {
					t.Fatal(err)
				}
				r := adj.Resources
				if *r.CPUShares != tt.wantShares || *r.CPUQuota != tt.wantQuota || *r.MemoryLimitInBytes != tt.wantMem {
					t.Errorf("%s: shares %d quota %d memory %d; want %d, %d, %d", stage, *r.CPUShares, *r.CPUQuota, *r.MemoryLimitInBytes,
						tt.wantShares, tt.wantQuota, tt.wantMem)
				}
				if stage == hooks.PreUpdateContainerResources && *adj.PodResources.CPUQuota != tt.wantPodQuotaUpd {
					t.Errorf("%s: pod quota %d, want %d", stage, *adj.PodResources.CPUQuota, tt.wantPodQuotaUpd)
				}
			}
		})
	}
	// The pod cgroup adds the containers up: 2e16 milli-cores requested, 2e14 limited, 1e19 bytes of memory,
	// each past what int64 arithmetic on the raw values holds.
	_, ctx := ktesting.NewTestContext(t)
	b, _ := New(DefaultConfig(), Deps{})
	adj, err := b.PreRunPodSandbox(ctx, bePod(spec))
	if err != nil {
		t.Fatal(err)
	}
	r := adj.PodResources
	if *r.CPUShares != cgroup.MaxShares || *r.CPUQuota != cgroup.MaxQuota || *r.MemoryLimitInBytes != math.MaxInt64 {
		t.Errorf("pod: shares %d quota %d memory %d; want %d, %d, %d (the largest, not wrapped)", *r.CPUShares, *r.CPUQuota, *r.MemoryLimitInBytes,
			cgroup.MaxShares, cgroup.MaxQuota, int64(math.MaxInt64))
	}
}

// FuzzQuantities: whatever batch resources a BE pod's annotation names, the hook asks for cgroup values
// the kernel takes: shares within its range, a quota of -1 (none) or within its range and under the
// clamp in force, and a memory limit that is positive or -1 (none) for the pod.
func FuzzQuantities(f *testing.F) {
	f.Add(int64(2000), int64(2000), int64(1<<30), int64(500), int64(0))
	f.Add(int64(1e16), int64(1e14), int64(5e18), int64(1e16), int64(1e14))
	f.Add(int64(1), int64(5), int64(1), int64(0), int64(9))
	f.Add(int64(math.MaxInt64), int64(math.MaxInt64), int64(math.MaxInt64), int64(math.MaxInt64), int64(math.MaxInt64))
	oneCPU := cgroup.CPUMax{Quota: 100000, Period: 100000}
	f.Fuzz(func(t *testing.T, req, limit, mem, req2, limit2 int64) {
		_, ctx := ktesting.NewTestContext(t)
		q := func(v int64) string { return strconv.Quote(strconv.FormatInt(v, 10)) }
		spec := `{"containers":{"a":{"requests":{"kubernetes.io/batch-cpu":` + q(req) + `},"limits":{"kubernetes.io/batch-cpu":` + q(limit) +
			`,"kubernetes.io/batch-memory":` + q(mem) + `}},"b":{"requests":{"kubernetes.io/batch-cpu":` + q(req2) +
			`},"limits":{"kubernetes.io/batch-cpu":` + q(limit2) + `,"kubernetes.io/batch-memory":` + q(mem) + `}}}}`
		checkQuota := func(what string, v int64, ceiling bool) {
			t.Helper()
			if v != -1 && (v < cgroup.MinQuota || v > cgroup.MaxQuota) {
				t.Fatalf("%s: quota %d, want -1 or within [%d, %d] (spec %s)", what, v, cgroup.MinQuota, cgroup.MaxQuota, spec)
			}
			if ceiling && v != -1 && (cgroup.CPUMax{Quota: v, Period: batch.DefaultPeriod}).Above(oneCPU) {
				t.Fatalf("%s: quota %d above the one-CPU clamp (spec %s)", what, v, spec)
			}
		}
		checkShares := func(what string, v int64) {
			t.Helper()
			if v < cgroup.MinShares || v > cgroup.MaxShares {
				t.Fatalf("%s: shares %d, outside [%d, %d] (spec %s)", what, v, cgroup.MinShares, cgroup.MaxShares, spec)
			}
		}
		for _, ceiling := range []bool{false, true} {
			b, _ := New(DefaultConfig(), Deps{QuotaCeiling: func() (cgroup.CPUMax, bool) { return oneCPU, ceiling }})
			pod, err := b.PreRunPodSandbox(ctx, bePod(spec))
			if err != nil {
				if !errdefs.IsInvalidArgument(err) {
					t.Fatalf("PreRunPodSandbox: %v, want InvalidArgument", err)
				}
				return // a negative quantity
			}
			r := pod.PodResources
			checkShares("pod", *r.CPUShares)
			checkQuota("pod", *r.CPUQuota, ceiling)
			if m := *r.MemoryLimitInBytes; m != -1 && m <= 0 {
				t.Fatalf("pod memory limit %d, want -1 or positive (spec %s)", m, spec)
			}
			adj, err := b.PreCreateContainer(ctx, bePod(spec), &hooks.ContainerInfo{Name: "a"})
			if err != nil {
				t.Fatal(err)
			}
			checkShares("container", *adj.Resources.CPUShares)
			checkQuota("container", *adj.Resources.CPUQuota, ceiling)
			if m := adj.Resources.MemoryLimitInBytes; m != nil && *m <= 0 {
				t.Fatalf("container memory limit %d, want none or positive (spec %s)", *m, spec)
			}
		}
	})
}
