package suppress_test

import (
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2/ktesting"

	"github.com/tandemkit/tandem/actuate/suppress"
	"github.com/tandemkit/tandem/config/slo"
	"github.com/tandemkit/tandem/metrics/collector"
	"github.com/tandemkit/tandem/resource/cgroup"
	alloc "github.com/tandemkit/tandem/resource/cpuset"
	"github.com/tandemkit/tandem/resource/qos"
	"github.com/tandemkit/tandem/resource/topology"
)

// snap builds a snapshot of a node with cpus CPUs where LS containers use lsMilli, BE containers
// beMilli and the system sysMilli.
func snap(t time.Time, cpus, lsMilli, beMilli, sysMilli int64) *collector.Snapshot {
	s := &collector.Snapshot{
		Time:     t,
		Capacity: collector.Usage{CPUMilli: cpus * 1000, MemoryBytes: 8 << 30},
		System:   collector.Usage{CPUMilli: sysMilli},
		Node:     collector.Usage{CPUMilli: lsMilli + beMilli + sysMilli},
	}
	// Two LS-side containers of different classes, to check every non-BE class counts.
	s.Containers = append(s.Containers,
		collector.ContainerUsage{Target: collector.Target{Namespace: "default", Pod: "web", Container: "app", QoS: qos.LS}, Usage: collector.Usage{CPUMilli: lsMilli / 2}},
		collector.ContainerUsage{Target: collector.Target{Namespace: "default", Pod: "db", Container: "db", QoS: qos.LSR}, Usage: collector.Usage{CPUMilli: lsMilli - lsMilli/2}},
		collector.ContainerUsage{Target: collector.Target{Namespace: "batch", Pod: "job", Container: "work", QoS: qos.BE}, Usage: collector.Usage{CPUMilli: beMilli}},
	)
	return s
}

func allocator(t *testing.T, shape string) *alloc.Allocator {
	t.Helper()
	topo, err := topology.Discover(filepath.Join("..", "..", "resource", "topology", "testdata", shape))
	if err != nil {
		t.Fatal(err)
	}
	a, err := alloc.New(topo, alloc.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestWant(t *testing.T) {
	t.Parallel()
	base := suppress.DefaultConfig()
	tests := []struct {
		name                  string
		threshold, minPercent int64
		reserved              int64
		cpus, ls, be, sys     int64
		want                  int64
	}{
		// 16 CPUs × 65% = 10400 − 4000 LS − 400 system = 6000; BE's own 5000 does not count.
		{name: "shipped threshold", threshold: 65, cpus: 16, ls: 4000, be: 5000, sys: 400, want: 6000},
		{name: "reserved above system use", threshold: 65, reserved: 1000, cpus: 16, ls: 4000, sys: 400, want: 5400},
		{name: "floor of one CPU", threshold: 65, cpus: 16, ls: 15000, sys: 400, want: 1000},
		{name: "cpuSuppressMinPercent floor", threshold: 65, minPercent: 25, cpus: 16, ls: 15000, sys: 400, want: 4000},
		{name: "never above the node", threshold: 100, cpus: 2, want: 2000},
		{name: "2-cpu test node, LS spinning", threshold: 80, cpus: 2, ls: 1000, sys: 100, want: 1000},
		{name: "2-cpu test node, LS idle", threshold: 80, cpus: 2, ls: 10, sys: 100, want: 1490},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := base
			c.CPUSuppressThresholdPercent, c.CPUSuppressMinPercent, c.ReservedMilli = tt.threshold, tt.minPercent, tt.reserved
			if got := c.Want(snap(time.Unix(0, 0), tt.cpus, tt.ls, tt.be, tt.sys)); got != tt.want {
				t.Errorf("Want = %d, want %d", got, tt.want)
			}
		})
	}
}

// TestWantDoesNotWrap: usage figures beyond int64 arithmetic (a counter glitch, a node far larger than
// any) keep BE at the floor when LS is busy, never hand it the node because a sum wrapped.
func TestWantDoesNotWrap(t *testing.T) {
	t.Parallel()
	c := suppress.DefaultConfig() // 65%
	ls := func(milli ...int64) *collector.Snapshot {
		s := snap(time.Unix(0, 0), 16, 0, 0, 400)
		s.Containers = nil
		for _, m := range milli {
			s.Containers = append(s.Containers, collector.ContainerUsage{Target: collector.Target{QoS: qos.LS}, Usage: collector.Usage{CPUMilli: m}})
		}
		return s
	}
	huge := snap(time.Unix(0, 0), 0, 0, 0, 0)
	huge.Capacity.CPUMilli = math.MaxInt64
	tests := []struct {
		name string
		snap *collector.Snapshot
		want int64
	}{
		{name: "two LS containers whose usage adds up past int64", snap: ls(math.MaxInt64, math.MaxInt64), want: 1000},
		{name: "LS usage at the int64 edge with the system's", snap: ls(math.MaxInt64 - 100), want: 1000},
		{name: "a negative usage glitch counts as none", snap: ls(4000, math.MinInt64), want: 6000},
		{name: "a node of math.MaxInt64 milli-cores", snap: huge, want: 5995191823955604274}, // ⌊(2^63−1) × 65 / 100⌋
	}
	for _, tt := range tests {
		if got := c.Want(tt.snap); got != tt.want {
			t.Errorf("%s: Want = %d, want %d", tt.name, got, tt.want)
		}
	}
}

// FuzzWant: BE is allowed at least the floor and at most the node, and never more when LS uses more.
func FuzzWant(f *testing.F) {
	f.Add(int64(16000), int64(4000), int64(0), int64(400), int64(0), int64(65), int64(0), int64(100))
	f.Add(int64(16000), int64(math.MaxInt64), int64(math.MaxInt64), int64(400), int64(1000), int64(65), int64(25), int64(1))
	f.Add(int64(math.MaxInt64), int64(math.MinInt64), int64(-1), int64(math.MaxInt64), int64(math.MaxInt64), int64(100), int64(100), int64(math.MaxInt64))
	f.Fuzz(func(t *testing.T, capacity, ls1, ls2, sys, reserved, threshold, minPercent, more int64) {
		c := suppress.DefaultConfig()
		c.CPUSuppressThresholdPercent, c.CPUSuppressMinPercent, c.ReservedMilli = threshold, minPercent, reserved
		s := func(ls1 int64) *collector.Snapshot {
			return &collector.Snapshot{
				Capacity: collector.Usage{CPUMilli: capacity}, System: collector.Usage{CPUMilli: sys},
				Containers: []collector.ContainerUsage{
					{Target: collector.Target{QoS: qos.LS}, Usage: collector.Usage{CPUMilli: ls1}},
					{Target: collector.Target{QoS: qos.LSR}, Usage: collector.Usage{CPUMilli: ls2}},
				},
			}
		}
		got := c.Want(s(ls1))
		if got < 1000 || got > max(capacity, 1000) {
			t.Fatalf("Want = %d, outside [1000, %d]", got, max(capacity, 1000))
		}
		if busier := c.Want(s(max(ls1, more))); busier > got {
			t.Fatalf("Want rises from %d to %d as LS usage rises from %d to %d", got, busier, ls1, max(ls1, more))
		}
	})
}

// TestCPUSetHysteresis feeds a sequence of LS loads and checks the BE pool after each sample: it shrinks
// at the first sample that asks, widens only after three samples in a row ask for more, and by at most
// one step (10% of 16 CPUs, 1600m, is one whole CPU) each time.
func TestCPUSetHysteresis(t *testing.T) {
	t.Parallel()
	type sample struct {
		lsMilli     int64
		wantBE      string
		wantChanged bool
	}
	tests := []struct {
		name    string
		shape   string
		lse     int // exclusive CPUs held by an LSE pod before the run
		cfg     func(*suppress.Config)
		samples []sample
	}{
		{
			// 16 × 65% = 10400 − 400 system: LS 2000 → 8000 (8 CPUs); LS 6000 → 4000 (4 CPUs) at once;
			// back to LS 2000 → 8 CPUs wanted, but widening waits 3 samples and steps one CPU.
			name: "16 CPUs, shrink at once, widen in steps", shape: "16cpu-2socket-smt",
			samples: []sample{
				{2000, "4-7,12-15", true},
				{6000, "6-7,14-15", true},
				{2000, "6-7,14-15", false},
				{2000, "6-7,14-15", false},
				{2000, "6-7,14-15,5", true},
				{2000, "6-7,14-15,5", false},
				{9000, "7", true},
				// A dip for one sample, then up again: no widening, and the count starts over.
				{2000, "7", false},
				{9000, "7", false},
				{2000, "7", false},
				{2000, "7", false},
				{2000, "7,15", true},
			},
		},
		{
			// The e2e shape: 2 CPUs, threshold 80%: LS spinning one CPU leaves 500 → 1 CPU; idle → 2 CPUs.
			name: "2 CPUs, e2e thresholds", shape: "2cpu-vm",
			cfg: func(c *suppress.Config) { c.CPUSuppressThresholdPercent = 80; c.WidenAfterSamples = 2 },
			samples: []sample{
				{0, "0-1", false},
				{1000, "1", true},
				{1000, "1", false},
				{0, "1", false},
				{0, "0-1", true},
			},
		},
		{
			// Whatever LS does, BE keeps one CPU and never gets the LSE CPUs (FullPCPUs gives the LSE pod
			// the whole core {0,8}).
			name: "LSE CPUs never, one CPU always", shape: "16cpu-2socket-smt", lse: 2,
			samples: []sample{
				{30000, "7", true},
				{30000, "7", false},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, ctx := ktesting.NewTestContext(t)
			a := allocator(t, tt.shape)
			var lse string
			if tt.lse > 0 {
				got, err := a.Allocate("lse", qos.LSE, tt.lse, alloc.FullPCPUs)
				if err != nil {
					t.Fatal(err)
				}
				lse = got.String()
			}
			cfg := suppress.DefaultConfig()
			cfg.Enable = true
			if tt.cfg != nil {
				tt.cfg(&cfg)
			}
			refreshes := 0
			reg := prometheus.NewRegistry()
			l, err := suppress.New(cfg, suppress.Deps{
				Latest: func() *collector.Snapshot { return nil }, CPUs: a,
				PoolsChanged: func() { refreshes++ }, Registerer: reg,
			})
			if err != nil {
				t.Fatal(err)
			}
			cpus := int64(a.Usable().Size())
			wantRefreshes := 0
			for i, s := range tt.samples {
				d, err := l.Step(ctx, snap(time.Unix(int64(i), 0), cpus, s.lsMilli, 500, 400))
				if err != nil {
					t.Fatal(err)
				}
				be := a.Pools().BE
				want, _ := topology.ParseCPUList(s.wantBE)
				if !be.Equals(want) {
					t.Errorf("sample %d (LS %dm): BE pool %q, want %q", i, s.lsMilli, be.String(), want.String())
				}
				if d.Changed != s.wantChanged {
					t.Errorf("sample %d: changed %v, want %v", i, d.Changed, s.wantChanged)
				}
				if s.wantChanged {
					wantRefreshes++
				}
				if be.Size() < 1 {
					t.Errorf("sample %d: BE pool empty", i)
				}
				if lse != "" {
					l, _ := topology.ParseCPUList(lse)
					if !be.Intersection(l).IsEmpty() {
						t.Errorf("sample %d: BE pool %q overlaps LSE %q", i, be.String(), lse)
					}
				}
				if got := metricValue(t, reg, "tandem_suppress_be_cpus"); got != float64(be.Size()) {
					t.Errorf("sample %d: tandem_suppress_be_cpus = %v, want %d", i, got, be.Size())
				}
				if d.AllowedMilli != int64(be.Size())*1000 || l.AllowedMilli() != d.AllowedMilli {
					t.Errorf("sample %d: allowed %d (loop says %d), want %d", i, d.AllowedMilli, l.AllowedMilli(), be.Size()*1000)
				}
			}
			if refreshes != wantRefreshes {
				t.Errorf("PoolsChanged called %d times, want once per change (%d)", refreshes, wantRefreshes)
			}
		})
	}
}

// metricValue reads one sample from the registry, as a scrape would; labels are name=value pairs.
func metricValue(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
						found = true
					}
				}
				if !found {
					continue next
				}
			}
			if m.GetGauge() != nil {
				return m.GetGauge().GetValue()
			}
			return m.GetCounter().GetValue()
		}
	}
	t.Fatalf("no %s%v in the registry", name, labels)
	return 0
}

// TestCFSQuota runs the cfsQuota policy against a cgroup v1 tree in a temporary directory and reads
// the BE parent's quota file, as an operator would.
func TestCFSQuota(t *testing.T) {
	t.Parallel()
	_, ctx := ktesting.NewTestContext(t)
	root := t.TempDir()
	be := filepath.Join(root, "cpu", "kubepods", "besteffort")
	if err := os.MkdirAll(be, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"cpu.cfs_quota_us", "cpu.cfs_period_us"} {
		if err := os.WriteFile(filepath.Join(be, f), []byte("-1\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	w, err := cgroup.New(root)
	if err != nil {
		t.Fatal(err)
	}
	cfg := suppress.DefaultConfig()
	cfg.Enable, cfg.CPUSuppressPolicy = true, suppress.PolicyCFSQuota
	reg := prometheus.NewRegistry()
	l, err := suppress.New(cfg, suppress.Deps{Latest: func() *collector.Snapshot { return nil }, Cgroups: w, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	quota := func() string {
		b, err := os.ReadFile(filepath.Join(be, "cpu.cfs_quota_us"))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	// 16 × 65% = 10400 − 4000 − 400 = 6000m → 600000 µs per 100000 µs period.
	steps := []struct {
		ls        int64
		wantQuota string
	}{
		{4000, "600000"},
		{8000, "200000"},
		// Widening waits for three samples, then moves by at most 10% of the node (1600m).
		{4000, "200000"},
		{4000, "200000"},
		{4000, "360000"},
	}
	for i, s := range steps {
		if _, err := l.Step(ctx, snap(time.Unix(int64(i), 0), 16, s.ls, 0, 400)); err != nil {
			t.Fatal(err)
		}
		if got := quota(); got != s.wantQuota {
			t.Errorf("step %d (LS %dm): cpu.cfs_quota_us = %s, want %s", i, s.ls, got, s.wantQuota)
		}
	}
	if got := metricValue(t, reg, "tandem_suppress_be_cpus"); got != 3.6 {
		t.Errorf("tandem_suppress_be_cpus = %v, want 3.6", got)
	}

	// Switched off by a reload: the quota is lifted, once.
	off := cfg
	off.Enable = false
	if err := l.Reconfigure(off); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if _, err := l.Step(ctx, snap(time.Unix(int64(10+i), 0), 16, 4000, 0, 400)); err != nil {
			t.Fatal(err)
		}
		if got := quota(); got != "-1" {
			t.Errorf("after disabling: cpu.cfs_quota_us = %s, want -1", got)
		}
	}
	if got := metricValue(t, reg, "tandem_suppress_changes_total", "policy", "cfsQuota", "direction", "lift"); got != 1 {
		t.Errorf("lifts counted %v, want 1", got)
	}
}

// TestDisableLifts checks that a reload that switches suppression off gives BE its whole pool back, and
// that a refused reload keeps the old configuration.
func TestDisableLifts(t *testing.T) {
	t.Parallel()
	_, ctx := ktesting.NewTestContext(t)
	a := allocator(t, "2cpu-vm")
	refreshes := 0
	on := suppress.DefaultConfig()
	on.Enable, on.CPUSuppressThresholdPercent = true, 80
	l, err := suppress.New(on, suppress.Deps{Latest: func() *collector.Snapshot { return nil }, CPUs: a, PoolsChanged: func() { refreshes++ }})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Step(ctx, snap(time.Unix(1, 0), 2, 1000, 0, 100)); err != nil {
		t.Fatal(err)
	}
	if got := a.Pools().BE.String(); got != "1" {
		t.Fatalf("suppressed BE pool = %q, want 1", got)
	}
	bad := on
	bad.CPUSuppressPolicy = "cpuShares"
	if err := l.Reconfigure(bad); err == nil {
		t.Error("Reconfigure accepted an unknown policy")
	}
	off := on
	off.Enable = false
	if err := l.Reconfigure(off); err != nil {
		t.Fatal(err)
	}
	d, err := l.Step(ctx, snap(time.Unix(2, 0), 2, 1000, 0, 100))
	if err != nil {
		t.Fatal(err)
	}
	if got := a.Pools().BE.String(); got != "0-1" || d.AllowedMilli != 2000 {
		t.Errorf("after disabling: BE pool %q, allowed %d; want 0-1 and 2000", got, d.AllowedMilli)
	}
	if refreshes != 2 {
		t.Errorf("PoolsChanged called %d times, want 2 (shrink, lift)", refreshes)
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		mutate  func(*suppress.Config)
		wantErr string
	}{
		{"defaults", func(*suppress.Config) {}, ""},
		{"threshold over 100", func(c *suppress.Config) { c.CPUSuppressThresholdPercent = 120 }, "cpuSuppressThresholdPercent"},
		{"unknown policy", func(c *suppress.Config) { c.CPUSuppressPolicy = "cpuShares" }, "cpuSuppressPolicy"},
		{"no widen samples", func(c *suppress.Config) { c.WidenAfterSamples = 0 }, "widenAfterSamples"},
		{"cfsQuota without parent", func(c *suppress.Config) { c.CPUSuppressPolicy = suppress.PolicyCFSQuota; c.BECgroupParent = "" }, "beCgroupParent"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := suppress.DefaultConfig()
			tt.mutate(&c)
			err := c.Validate()
			if (err == nil) != (tt.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("Validate() = %v, want an error naming %q", err, tt.wantErr)
			}
		})
	}
}

func TestFromSLO(t *testing.T) {
	t.Parallel()
	r := slo.ResourceThresholdSettings{Enable: true, CPUSuppressThresholdPercent: 65, CPUSuppressPolicy: slo.CPUSuppressByCFSQuota, CPUSuppressMinPercent: 10, BECFSPeriodMicros: 1000000}
	got := suppress.FromSLO(suppress.DefaultConfig(), r)
	if !got.Enable || got.CPUSuppressThresholdPercent != 65 || got.CPUSuppressPolicy != suppress.PolicyCFSQuota || got.CPUSuppressMinPercent != 10 || got.CFSPeriodMicros != 1000000 {
		t.Errorf("FromSLO = %+v", got)
	}
	if err := got.Validate(); err != nil {
		t.Error(err)
	}
}

// TestCFSQuotaOfAHugeNode: the BE quota of a node whose allowance is beyond what the kernel's CFS
// quota expresses is the kernel's largest quota, not a value it refuses or a wrapped one.
func TestCFSQuotaOfAHugeNode(t *testing.T) {
	t.Parallel()
	_, ctx := ktesting.NewTestContext(t)
	for _, cpus := range []int64{1e11, 1e15} {
		b := newBETree(t, "-1")
		l, err := suppress.New(b.config(true), suppress.Deps{Latest: func() *collector.Snapshot { return nil }, Cgroups: b.w})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.Step(ctx, snap(time.Unix(0, 0), cpus, 0, 0, 0)); err != nil {
			t.Fatal(err)
		}
		if got, want := b.quota(t, ""), strconv.FormatInt(cgroup.MaxQuota, 10); got != want {
			t.Errorf("%g CPUs: cpu.cfs_quota_us = %s, want %s", float64(cpus), got, want)
		}
	}
}
