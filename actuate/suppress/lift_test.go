package suppress_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2/ktesting"

	"github.com/tandemkit/tandem/actuate/suppress"
	"github.com/tandemkit/tandem/internal/polltest"
	"github.com/tandemkit/tandem/metrics/collector"
	"github.com/tandemkit/tandem/resource/cgroup"
)

// beTree is a cgroup v1 tree in a temporary directory with a BE parent under a non-default root (as
// tier 2's kubelets use), one BE pod and one container in it with a batch-cpu limit of 1500m.
type beTree struct {
	root, parent string
	w            cgroup.Writer
}

func newBETree(t *testing.T, parentQuota string) *beTree {
	t.Helper()
	b := &beTree{root: t.TempDir(), parent: "/node-a/kubepods/besteffort"}
	files := map[string]string{
		"":          parentQuota,
		"/pod1":     "-1",
		"/pod1/ctr": "150000",
	}
	for dir, q := range files {
		d := filepath.Join(b.root, "cpu", b.parent, dir)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		for f, v := range map[string]string{"cpu.cfs_quota_us": q, "cpu.cfs_period_us": "100000"} {
			if err := os.WriteFile(filepath.Join(d, f), []byte(v+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	var err error
	if b.w, err = cgroup.New(b.root); err != nil {
		t.Fatal(err)
	}
	return b
}

func (b *beTree) quota(t *testing.T, rel string) string {
	t.Helper()
	v, err := os.ReadFile(filepath.Join(b.root, "cpu", b.parent, rel, "cpu.cfs_quota_us"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(v))
}

func (b *beTree) period(t *testing.T, rel string) string {
	t.Helper()
	v, err := os.ReadFile(filepath.Join(b.root, "cpu", b.parent, rel, "cpu.cfs_period_us"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(v))
}

func (b *beTree) config(enable bool) suppress.Config {
	c := suppress.DefaultConfig()
	c.Enable, c.CPUSuppressPolicy, c.BECgroupParent, c.CPUSuppressThresholdPercent = enable, suppress.PolicyCFSQuota, b.parent, 55
	return c
}

// TestCFSQuotaKeepsChildrenUnder checks the order cgroup v1 needs on a fake tree (the e2e suite checks
// the kernel's own refusal): a shrink caps the container above the new level before the parent, the
// ceiling tells the policy the level, and the lift takes the parent back to -1 and asks for a refresh
// that gives the container its limit back.
func TestCFSQuotaKeepsChildrenUnder(t *testing.T) {
	t.Parallel()
	_, ctx := ktesting.NewTestContext(t)
	b := newBETree(t, "-1")
	var refreshes atomic.Int32
	reg := prometheus.NewRegistry()
	l, err := suppress.New(b.config(true), suppress.Deps{Latest: func() *collector.Snapshot { return nil }, Cgroups: b.w,
		PoolsChanged: func() { refreshes.Add(1) }, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := l.QuotaCeiling(); ok {
		t.Error("a ceiling before any clamp")
	}
	// 2 CPUs × 55% = 1100 − 1000 LS − 100 system = 0 → the floor, one CPU.
	if _, err := l.Step(ctx, snap(time.Unix(1, 0), 2, 1000, 0, 100)); err != nil {
		t.Fatal(err)
	}
	for rel, want := range map[string]string{"": "100000", "pod1": "-1", "pod1/ctr": "100000"} {
		if got := b.quota(t, rel); got != want {
			t.Errorf("after the shrink: %s quota %s, want %s", rel, got, want)
		}
	}
	if c, ok := l.QuotaCeiling(); !ok || c != (cgroup.CPUMax{Quota: 100000, Period: 100000}) {
		t.Errorf("QuotaCeiling = %+v, %v; want 100000/100000", c, ok)
	}
	if got := metricValue(t, reg, "tandem_suppress_be_cgroups_capped_total"); got != 1 {
		t.Errorf("capped cgroups counted %v, want 1", got)
	}
	if err := l.Reconfigure(b.config(false)); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Step(ctx, snap(time.Unix(2, 0), 2, 1000, 0, 100)); err != nil {
		t.Fatal(err)
	}
	if got := b.quota(t, ""); got != "-1" {
		t.Errorf("after disabling: parent quota %s, want -1", got)
	}
	if _, ok := l.QuotaCeiling(); ok {
		t.Error("a ceiling after the lift")
	}
	// One after the direct cap (no Deps.Refresh here), so the proxy's record follows the kernel; one
	// after the lift, so the container gets 1500m back.
	if refreshes.Load() != 2 {
		t.Errorf("refreshes asked %d, want 2", refreshes.Load())
	}
}

// runLoop runs l until the test ends or stop is called, and returns stop, which waits for Run.
func runLoop(t *testing.T, ctx context.Context, l *suppress.Loop) func() {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { _ = l.Run(ctx); close(done) }()
	// Stopped as the agent stops it: Run returns, then Restore lifts.
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			<-done
			if err := l.Restore(context.WithoutCancel(ctx)); err != nil {
				t.Errorf("Restore: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// TestRunLifts checks the three ways suppression is undone without a new sample: a reload that
// switches it off, the loop's stop (SIGTERM), and a stale clamp found at start.
func TestRunLifts(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		startQuota  string
		enable      bool
		act         func(t *testing.T, l *suppress.Loop, b *beTree, stop func())
		wantRefresh bool // a synchronous refresh ran after the lift, before Restore returned
	}{
		{
			name: "disable wakes the loop", startQuota: "-1", enable: true,
			act: func(t *testing.T, l *suppress.Loop, b *beTree, _ func()) {
				if err := l.Reconfigure(b.config(false)); err != nil {
					t.Fatal(err)
				}
			},
		},
		{
			name: "stop lifts and refreshes before Restore returns", startQuota: "-1", enable: true,
			act:         func(_ *testing.T, _ *suppress.Loop, _ *beTree, stop func()) { stop() },
			wantRefresh: true,
		},
		{
			name: "stale clamp at start", startQuota: "100000", enable: false,
			act: func(*testing.T, *suppress.Loop, *beTree, func()) {},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, ctx := ktesting.NewTestContext(t)
			b := newBETree(t, tt.startQuota)
			var samples atomic.Pointer[collector.Snapshot]
			var syncRefreshes, asyncRefreshes atomic.Int32
			var stopping atomic.Bool
			cfg := b.config(tt.enable)
			// An hour: nothing but the loop's own wake-ups can explain a prompt lift.
			cfg.Interval = time.Hour
			updates := make(chan struct{}, 1)
			l, err := suppress.New(cfg, suppress.Deps{Latest: samples.Load, Updates: updates, Cgroups: b.w,
				PoolsChanged: func() { asyncRefreshes.Add(1) },
				Refresh: func(context.Context) error {
					// The shrink refreshes before it writes the parent; the stop after it lifted it.
					if b.quota(t, "") == "-1" && b.quota(t, "pod1/ctr") == "100000" && stopping.Load() {
						syncRefreshes.Add(1)
					}
					return nil
				}})
			if err != nil {
				t.Fatal(err)
			}
			stop := runLoop(t, ctx, l)
			if tt.enable {
				samples.Store(snap(time.Unix(1, 0), 2, 1000, 0, 100))
				updates <- struct{}{}
				polltest.Until(t, "parent clamped", func() bool { return b.quota(t, "") == "100000" && b.quota(t, "pod1/ctr") == "100000" })
			}
			stopping.Store(true)
			tt.act(t, l, b, stop)
			polltest.Until(t, "parent lifted", func() bool { return b.quota(t, "") == "-1" })
			if tt.wantRefresh && syncRefreshes.Load() != 1 {
				t.Errorf("synchronous refreshes after the lift, with the container still capped, %d; want 1", syncRefreshes.Load())
			}
			if !tt.wantRefresh {
				polltest.Until(t, "refresh asked", func() bool { return asyncRefreshes.Load() >= 1 })
			}
		})
	}
}

// TestStaleCPUSet checks that a BE container left on a cpuset narrower than the BE pool by an earlier
// run is found at start and moved back, and that stopping a cpuset suppression widens the pool and
// refreshes synchronously.
func TestStaleCPUSet(t *testing.T) {
	t.Parallel()
	_, ctx := ktesting.NewTestContext(t)
	root := t.TempDir()
	parent := "/node-b/kubepods/besteffort"
	for dir, cpus := range map[string]string{"": "0-1", "/pod1": "0-1", "/pod1/ctr": "1"} {
		d := filepath.Join(root, "cpuset", parent, dir)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "cpuset.cpus"), []byte(cpus+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(root, "cpu"), 0o755); err != nil {
		t.Fatal(err)
	}
	w, err := cgroup.New(root)
	if err != nil {
		t.Fatal(err)
	}
	a := allocator(t, "2cpu-vm")
	var samples atomic.Pointer[collector.Snapshot]
	var asyncRefreshes, syncRefreshes atomic.Int32
	cfg := suppress.DefaultConfig()
	cfg.Enable, cfg.BECgroupParent, cfg.CPUSuppressThresholdPercent, cfg.Interval = true, parent, 55, time.Hour
	updates := make(chan struct{}, 1)
	l, err := suppress.New(cfg, suppress.Deps{Latest: samples.Load, Updates: updates, Cgroups: w, CPUs: a,
		PoolsChanged: func() { asyncRefreshes.Add(1) },
		Refresh:      func(context.Context) error { syncRefreshes.Add(1); return nil }})
	if err != nil {
		t.Fatal(err)
	}
	stop := runLoop(t, ctx, l)
	polltest.Until(t, "stale cpuset found", func() bool { return asyncRefreshes.Load() == 1 })
	samples.Store(snap(time.Unix(1, 0), 2, 1000, 0, 100))
	updates <- struct{}{}
	polltest.Until(t, "BE pool narrowed", func() bool { return a.Pools().BE.String() == "1" })
	stop()
	if got := a.Pools().BE.String(); got != "0-1" {
		t.Errorf("after stop: BE pool %s, want 0-1", got)
	}
	if syncRefreshes.Load() != 1 {
		t.Errorf("synchronous refreshes on stop %d, want 1", syncRefreshes.Load())
	}
}

// TestCFSQuotaV2 checks cgroup v2, which has no child-above-parent rule: no ceiling while clamped, the
// child keeps its quota, and the stop writes "max" back.
func TestCFSQuotaV2(t *testing.T) {
	t.Parallel()
	_, ctx := ktesting.NewTestContext(t)
	root := t.TempDir()
	parent := "/node-a/kubepods/besteffort"
	files := map[string]string{"cgroup.controllers": "cpu", parent + "/cpu.max": "max 100000", parent + "/pod1/ctr/cpu.max": "150000 100000"}
	for f, v := range files {
		p := filepath.Join(root, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	read := func(f string) string {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	w, err := cgroup.New(root)
	if err != nil {
		t.Fatal(err)
	}
	cfg := suppress.DefaultConfig()
	cfg.Enable, cfg.CPUSuppressPolicy, cfg.BECgroupParent, cfg.CPUSuppressThresholdPercent, cfg.Interval = true, suppress.PolicyCFSQuota, parent, 55, time.Hour
	var samples atomic.Pointer[collector.Snapshot]
	updates := make(chan struct{}, 1)
	l, err := suppress.New(cfg, suppress.Deps{Latest: samples.Load, Updates: updates, Cgroups: w})
	if err != nil {
		t.Fatal(err)
	}
	stop := runLoop(t, ctx, l)
	samples.Store(snap(time.Unix(1, 0), 2, 1000, 0, 100))
	updates <- struct{}{}
	polltest.Until(t, "parent clamped", func() bool { return read(parent+"/cpu.max") == "100000 100000" })
	if got := read(parent + "/pod1/ctr/cpu.max"); got != "150000 100000" {
		t.Errorf("child on v2: cpu.max %s, want its own 150000 100000 (v2 needs no cap)", got)
	}
	if c, ok := l.QuotaCeiling(); ok {
		t.Errorf("QuotaCeiling on v2 = %+v, want none", c)
	}
	stop()
	if got := read(parent + "/cpu.max"); got != "max 100000" {
		t.Errorf("after stop: parent cpu.max %s, want max 100000", got)
	}
}

// TestCFSQuotaWrittenAgainAfterAReset: systemd, owning kubepods-besteffort.slice on a node with
// kubelet's systemd driver, writes cpu.max back to "max" when kubelet updates the slice; the next sample
// at the same level finds the clamp gone and writes it again.
func TestCFSQuotaWrittenAgainAfterAReset(t *testing.T) {
	t.Parallel()
	_, ctx := ktesting.NewTestContext(t)
	b := newBETree(t, "-1")
	reg := prometheus.NewRegistry()
	l, err := suppress.New(b.config(true), suppress.Deps{Latest: func() *collector.Snapshot { return nil }, Cgroups: b.w, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	for i, reset := range []bool{false, false, true, false} {
		if reset {
			if err := os.WriteFile(filepath.Join(b.root, "cpu", b.parent, "cpu.cfs_quota_us"), []byte("-1\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		// The same load every sample: the level stays one CPU.
		if _, err := l.Step(ctx, snap(time.Unix(int64(i+1), 0), 2, 1000, 0, 100)); err != nil {
			t.Fatal(err)
		}
		if got := b.quota(t, ""); got != "100000" {
			t.Fatalf("sample %d (reset before it: %v): parent quota %s, want the clamp, 100000", i+1, reset, got)
		}
	}
	if got := metricValue(t, reg, "tandem_suppress_be_quota_rewrites_total"); got != 1 {
		t.Errorf("rewrites counted %v, want 1", got)
	}
}
