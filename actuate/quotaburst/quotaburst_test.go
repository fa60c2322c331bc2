package quotaburst

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"

	"github.com/tandemkit/tandem/config/knob"
	"github.com/tandemkit/tandem/hooks/policy/cpuburst"
	"github.com/tandemkit/tandem/internal/polltest"
	"github.com/tandemkit/tandem/metrics/collector"
	"github.com/tandemkit/tandem/resource/cgroup"
	"github.com/tandemkit/tandem/resource/qos"
)

func quotaCfg(mod func(*cpuburst.Config)) cpuburst.Config {
	cfg := cpuburst.DefaultConfig() // 300%, threshold 50 (cooling from 45), unbounded period
	cfg.Policy = cpuburst.PolicyCFSQuotaBurstOnly
	if mod != nil {
		mod(&cfg)
	}
	return cfg
}

// Node usage in milli-CPUs of the 2000 the harness's node has: idle below 45%, cooling to 50%, busy from.
const (
	idle    = 200
	cooling = 950
	busy    = 1000
)

var (
	podA = ctrCgroup("p", "a")
	podB = ctrCgroup("p", "b")
	pod  = podParent("p")
)

// growth is the quota of a container with a 20000 µs base after each raise: a fifth more each step, up to
// 300%.
var growth = []int64{24000, 28800, 34560, 41472, 49766, 59719, 60000}

type step struct {
	node      int64
	throttled []string
	// before changes the node or the store before the step.
	before func(h *harness)
	want   map[string]int64
}

// raiseTo is the steps that take container a from its base of 20000 to growth[n-1]: one step to take
// the counters, then n throttled steps on an idle pool.
func raiseTo(n int) []step {
	out := []step{{node: idle, want: map[string]int64{podA: 20000}}}
	for i := 0; i < n; i++ {
		out = append(out, step{node: idle, throttled: []string{"a"}, want: map[string]int64{podA: growth[i]}})
	}
	return out
}

func TestStep(t *testing.T) {
	t.Parallel()
	ls := func(id string, quota int64) ctrSpec { return ctrSpec{id: id, class: qos.LS, quota: quota} }
	one := podSpec{id: "p", quota: 20000, ctrs: []ctrSpec{ls("a", 20000)}}
	tests := []struct {
		name  string
		cfg   cpuburst.Config
		pods  []podSpec
		steps []step
	}{
		{
			name: "throttled on an idle pool grows to 300%, the pod by as much",
			cfg:  quotaCfg(nil), pods: []podSpec{one},
			steps: append(raiseTo(len(growth)),
				step{node: idle, throttled: []string{"a"}, want: map[string]int64{podA: 60000, pod: 60000}}),
		},
		{
			name: "a busy pool puts the quota back at once, the pod too",
			cfg:  quotaCfg(nil), pods: []podSpec{one},
			steps: append(raiseTo(2),
				step{node: busy, throttled: []string{"a"}, want: map[string]int64{podA: 20000, pod: 20000}},
				step{node: busy, throttled: []string{"a"}, want: map[string]int64{podA: 20000, pod: 20000}}),
		},
		{
			name: "a cooling pool holds a raise",
			cfg:  quotaCfg(nil), pods: []podSpec{one},
			steps: append(raiseTo(1),
				step{node: cooling, throttled: []string{"a"}, want: map[string]int64{podA: 24000, pod: 24000}}),
		},
		{
			name: "not throttled holds a raise",
			cfg:  quotaCfg(nil), pods: []podSpec{one},
			steps: append(raiseTo(2),
				step{node: idle, want: map[string]int64{podA: 28800, pod: 28800}}),
		},
		{
			name: "LSE containers, BE containers and containers without a limit are never raised",
			cfg:  quotaCfg(nil),
			pods: []podSpec{
				{id: "e", quota: 100000, ctrs: []ctrSpec{{id: "e", class: qos.LSE, quota: 100000}}},
				{id: "b", quota: 20000, ctrs: []ctrSpec{{id: "b", class: qos.BE, quota: 20000}}},
				{id: "u", quota: -1, ctrs: []ctrSpec{{id: "u", class: qos.LS, quota: -1}}},
			},
			steps: []step{
				{node: idle},
				{node: idle, throttled: []string{"e", "b", "u"}, want: map[string]int64{ctrCgroup("e", "e"): 100000, ctrCgroup("b", "b"): 20000, ctrCgroup("u", "u"): -1}},
			},
		},
		{
			name: "a raise lasts the period; the next needs an unthrottled sample first",
			cfg:  quotaCfg(func(c *cpuburst.Config) { c.CFSQuotaBurstPeriodSeconds = 2 }), pods: []podSpec{one},
			steps: append(raiseTo(2),
				step{node: idle, throttled: []string{"a"}, want: map[string]int64{podA: 20000, pod: 20000}},
				step{node: idle, throttled: []string{"a"}, want: map[string]int64{podA: 20000}},
				step{node: idle, want: map[string]int64{podA: 20000}},
				step{node: idle, throttled: []string{"a"}, want: map[string]int64{podA: 24000, pod: 24000}}),
		},
		{
			name: "a container that is no longer LS goes back to its base",
			cfg:  quotaCfg(nil), pods: []podSpec{one},
			steps: append(raiseTo(2),
				step{node: idle, throttled: []string{"a"}, before: func(h *harness) { h.container("a", func(c *Container) { c.Class = qos.BE }) },
					want: map[string]int64{podA: 20000, pod: 20000}}),
		},
		{
			name:  "policy none puts back a raise an earlier run left",
			cfg:   quotaCfg(func(c *cpuburst.Config) { c.Policy = cpuburst.PolicyNone }),
			pods:  []podSpec{{id: "p", quota: 48000, ctrs: []ctrSpec{{id: "a", class: qos.LS, quota: 20000, cgroupQuota: 48000}}}},
			steps: []step{{node: idle, want: map[string]int64{podA: 20000, pod: 20000}}},
		},
		{
			name: "auto raises as cfsQuotaBurstOnly does; cpuBurstOnly does not",
			cfg:  quotaCfg(func(c *cpuburst.Config) { c.Policy = cpuburst.PolicyAuto }), pods: []podSpec{one},
			steps: append(raiseTo(1),
				step{node: idle, throttled: []string{"a"}, before: func(h *harness) {
					if err := h.l.Reconfigure(quotaCfg(func(c *cpuburst.Config) { c.Policy = cpuburst.PolicyCPUBurstOnly })); err != nil {
						h.t.Fatal(err)
					}
				}, want: map[string]int64{podA: 20000, pod: 20000}}),
		},
		{
			name: "a resize makes the new quota the base",
			cfg:  quotaCfg(nil), pods: []podSpec{one},
			steps: append(raiseTo(2),
				step{node: idle, before: func(h *harness) {
					// As kubelet does: the pod cgroup, the container through the runtime, the store.
					h.set(pod, "cpu.cfs_quota_us", 30000)
					h.set(podA, "cpu.cfs_quota_us", 30000)
					h.container("a", func(c *Container) { c.Quota = 30000 })
				}, want: map[string]int64{podA: 30000, pod: 30000}},
				step{node: idle, throttled: []string{"a"}, want: map[string]int64{podA: 36000, pod: 36000}}),
		},
		{
			name: "the base sent again by the proxy lowers the pod, and growth starts over",
			cfg:  quotaCfg(nil), pods: []podSpec{one},
			steps: append(raiseTo(2),
				step{node: idle, before: func(h *harness) { h.set(podA, "cpu.cfs_quota_us", 20000) }, want: map[string]int64{podA: 20000, pod: 20000}},
				step{node: idle, throttled: []string{"a"}, want: map[string]int64{podA: 24000, pod: 24000}}),
		},
		{
			name: "a burst above the lowered quota is lowered first",
			cfg:  quotaCfg(nil), pods: []podSpec{one},
			steps: append(raiseTo(2),
				step{node: busy, before: func(h *harness) { h.set(podA, "cpu.cfs_burst_us", 25000) }, want: map[string]int64{podA: 20000, pod: 20000}}),
		},
		{
			name: "an unlimited pod is left alone",
			cfg:  quotaCfg(nil), pods: []podSpec{{id: "p", quota: -1, ctrs: []ctrSpec{ls("a", 20000)}}},
			steps: append(raiseTo(2), step{node: busy, want: map[string]int64{podA: 20000, pod: -1}}),
		},
		{
			name: "a pod holds the sum of its containers' raises; a container gone takes its share back",
			cfg:  quotaCfg(nil), pods: []podSpec{{id: "p", quota: 40000, ctrs: []ctrSpec{ls("a", 20000), ls("b", 20000)}}},
			steps: []step{
				{node: idle},
				{node: idle, throttled: []string{"a", "b"}, want: map[string]int64{podA: 24000, podB: 24000, pod: 48000}},
				{node: idle, throttled: []string{"a"}, want: map[string]int64{podA: 28800, podB: 24000, pod: 52800}},
				{node: idle, before: func(h *harness) { h.remove("a") }, want: map[string]int64{podB: 24000, pod: 44000}},
			},
		},
		{
			name: "the percentage in force is the ceiling",
			cfg:  quotaCfg(func(c *cpuburst.Config) { c.CFSQuotaBurstPercent = 130 }), pods: []podSpec{one},
			steps: append(raiseTo(1),
				step{node: idle, throttled: []string{"a"}, want: map[string]int64{podA: 26000, pod: 26000}},
				step{node: idle, throttled: []string{"a"}, want: map[string]int64{podA: 26000, pod: 26000}}),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, tt.cfg, tt.pods...)
			for i, s := range tt.steps {
				if s.before != nil {
					s.before(h)
				}
				h.step(s.node, s.throttled...)
				for rel, want := range s.want {
					if got := h.quota(rel); got != want {
						t.Fatalf("step %d: quota of %s = %d, want %d (writes: %s)", i, rel, got, want, joined(h.w.writes()))
					}
				}
			}
		})
	}
}

// TestWriteOrder: the pod is raised before its container and lowered after it, and a burst above the
// new quota before the quota (strictWriter would refuse the writes otherwise; this names the order).
func TestWriteOrder(t *testing.T) {
	t.Parallel()
	h := newHarness(t, quotaCfg(nil), podSpec{id: "p", quota: 20000, ctrs: []ctrSpec{{id: "a", class: qos.LS, quota: 20000}}})
	h.step(idle)
	h.step(idle, "a")
	if got, want := h.w.writes(), []string{pod + " quota=24000", podA + " quota=24000"}; !slices.Equal(got, want) {
		t.Fatalf("raise wrote %q, want %q", got, want)
	}
	h.set(podA, "cpu.cfs_burst_us", 24000)
	h.step(busy, "a")
	if got, want := h.w.writes(), []string{podA + " burst=20000", podA + " quota=20000", pod + " quota=20000"}; !slices.Equal(got, want) {
		t.Fatalf("reset wrote %q, want %q", got, want)
	}
	if got := h.metric("tandem_cpu_quota_burst_raises_total", ""); got != 1 {
		t.Errorf("raises_total = %v, want 1", got)
	}
	if got := h.metric("tandem_cpu_quota_burst_resets_total", "poolBusy"); got != 1 {
		t.Errorf("resets_total{reason=poolBusy} = %v, want 1", got)
	}
}

// TestCgroupV2 runs a raise and a reset on a cgroup v2 layout: cpu.max holds quota and period together,
// cpu.max.burst the burst.
func TestCgroupV2(t *testing.T) {
	t.Parallel()
	h := newHarnessVersion(t, 2, quotaCfg(nil), podSpec{id: "p", quota: 20000, ctrs: []ctrSpec{{id: "a", class: qos.LS, quota: 20000, burst: 20000}}})
	read := func(rel, file string) string {
		t.Helper()
		v, err := h.w.ReadFile(rel, file)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	h.step(idle)
	h.step(idle, "a")
	if got, pod := read(podA, "cpu.max"), read(pod, "cpu.max"); got != "24000 100000" || pod != "24000 100000" {
		t.Fatalf("after a raise: container cpu.max %q, pod %q; want \"24000 100000\" both", got, pod)
	}
	h.set(podA, "cpu.max.burst", 24000)
	h.step(busy, "a")
	if got, pod, burst := read(podA, "cpu.max"), read(pod, "cpu.max"), read(podA, "cpu.max.burst"); got != "20000 100000" || pod != "20000 100000" || burst != "20000" {
		t.Fatalf("after a reset: container cpu.max %q, pod %q, burst %q; want \"20000 100000\" both and burst 20000", got, pod, burst)
	}
}

// runLoop runs h's loop until the returned stop is called; stop returns Run's error.
func runLoop(t *testing.T, h *harness) (stop func() error) {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- h.l.Run(ctx) }()
	stopped := false
	stop = func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		return <-done
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

// waitQuota waits until rel's quota is want.
func waitQuota(t *testing.T, h *harness, rel string, want int64, within time.Duration) {
	t.Helper()
	polltest.Within(t, within, fmt.Sprintf("the quota of %s to be %d", rel, want), func() bool {
		got, ok := h.tryQuota(rel)
		return ok && got == want
	})
}

// raiseRunning makes snapshots until the running loop has raised container a.
func raiseRunning(t *testing.T, h *harness) {
	t.Helper()
	polltest.Within(t, 5*time.Second, "container a raised", func() bool {
		if q, ok := h.tryQuota(podA); ok && q > 20000 {
			return true
		}
		h.sample(idle, "a")
		return false
	})
	// The gauge is set once the step's writes are done.
	polltest.Within(t, 5*time.Second, "containers_raised to be 1", func() bool {
		return h.metric("tandem_cpu_quota_burst_containers_raised", "") == 1
	})
}

func TestRun(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// undo ends the raise: stopping the loop or reconfiguring it.
		undo       func(t *testing.T, h *harness, stop func() error)
		wantReason string
	}{
		{name: "stop puts every raise back", wantReason: "stop", undo: func(t *testing.T, h *harness, stop func() error) {
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			if err := h.l.Restore(context.Background()); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "a policy without the quota burst puts every raise back at once", wantReason: "off", undo: func(t *testing.T, h *harness, _ func() error) {
			if err := h.l.Reconfigure(quotaCfg(func(c *cpuburst.Config) { c.Policy = cpuburst.PolicyCPUBurstOnly })); err != nil {
				t.Fatal(err)
			}
			// No new snapshot: the reconfiguration alone must do it.
		}},
		{name: "policy none too", wantReason: "off", undo: func(t *testing.T, h *harness, _ func() error) {
			if err := h.l.Reconfigure(quotaCfg(func(c *cpuburst.Config) { c.Policy = cpuburst.PolicyNone })); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "dry run switched on puts every raise back at once", wantReason: "dryRun", undo: func(_ *testing.T, h *harness, _ func() error) {
			h.l.SetDryRun(true)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, quotaCfg(nil), podSpec{id: "p", quota: 20000, ctrs: []ctrSpec{{id: "a", class: qos.LS, quota: 20000}}})
			stop := runLoop(t, h)
			raiseRunning(t, h)
			tt.undo(t, h, stop)
			waitQuota(t, h, podA, 20000, 5*time.Second)
			waitQuota(t, h, pod, 20000, 5*time.Second)
			if got := h.metric("tandem_cpu_quota_burst_resets_total", tt.wantReason); got != 1 {
				t.Errorf("resets_total{reason=%s} = %v, want 1", tt.wantReason, got)
			}
		})
	}
}

func TestReconfigureRefusesAndKeeps(t *testing.T) {
	t.Parallel()
	h := newHarness(t, quotaCfg(nil))
	bad := quotaCfg(func(c *cpuburst.Config) { c.CFSQuotaBurstPercent = 50 })
	if err := h.l.Reconfigure(bad); err == nil || !strings.Contains(err.Error(), "cfsQuotaBurstPercent") {
		t.Fatalf("Reconfigure(cfsQuotaBurstPercent 50) = %v, want an error naming the field", err)
	}
	cfg, refused := h.l.config()
	if cfg.CFSQuotaBurstPercent != 300 || refused == nil {
		t.Fatalf("after a refusal: percent %d, refused %v; want 300 kept and the refusal recorded", cfg.CFSQuotaBurstPercent, refused)
	}
	for _, s := range h.l.Knobs() {
		if s.Key == "cfsQuotaBurstPercent" && s.State != knob.Refused {
			t.Fatalf("cfsQuotaBurstPercent reported %s, want refused", s.State)
		}
	}
}

func TestNewNeedsItsDeps(t *testing.T) {
	t.Parallel()
	latest := func() *collector.Snapshot { return nil }
	ctrs := func() []Container { return nil }
	for name, d := range map[string]Deps{
		"no snapshots":  {Containers: ctrs},
		"no containers": {Latest: latest},
		"no cgroups":    {Latest: latest, Containers: ctrs},
	} {
		if _, err := New(quotaCfg(nil), d); err == nil {
			t.Errorf("%s: New succeeded", name)
		}
	}
}

func TestPoolUsagePercent(t *testing.T) {
	t.Parallel()
	ctr := func(class qos.Class, milli int64) collector.ContainerUsage {
		return collector.ContainerUsage{Target: collector.Target{QoS: class}, Usage: collector.Usage{CPUMilli: milli}}
	}
	tests := []struct {
		name string
		node int64
		ctrs []collector.ContainerUsage
		pool int64
		want float64
	}{
		{name: "LS and the system count", node: 1000, ctrs: []collector.ContainerUsage{ctr(qos.LS, 600)}, pool: 2000, want: 50},
		{name: "LSE, LSR and BE do not", node: 1500, ctrs: []collector.ContainerUsage{ctr(qos.LSE, 500), ctr(qos.LSR, 200), ctr(qos.BE, 300), ctr(qos.LS, 400)}, pool: 1000, want: 50},
		{name: "unknown class counts", node: 500, ctrs: []collector.ContainerUsage{ctr("", 500)}, pool: 1000, want: 50},
		{name: "never below zero", node: 100, ctrs: []collector.ContainerUsage{ctr(qos.BE, 300)}, pool: 1000, want: 0},
		{name: "a pool of no CPUs is full", node: 100, pool: 0, want: 100},
	}
	for _, tt := range tests {
		snap := &collector.Snapshot{Node: collector.Usage{CPUMilli: tt.node}, Containers: tt.ctrs}
		if got := PoolUsagePercent(snap, tt.pool); got != tt.want {
			t.Errorf("%s: PoolUsagePercent = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// prober is a cgroup hierarchy that offers the burst file or not.
type prober struct{ burst bool }

func (p prober) Version() int           { return 1 }
func (p prober) Supports(f string) bool { return p.burst || f != cpuburst.FileV1 }

func TestKnobs(t *testing.T) {
	t.Parallel()
	states := func(s []knob.Status) map[string]knob.State {
		out := map[string]knob.State{}
		for _, k := range s {
			if k.Section != Section {
				t.Fatalf("section %q, want %q", k.Section, Section)
			}
			out[k.Key] = k.State
		}
		return out
	}
	all := func(burst, quota knob.State, policy knob.State) map[string]knob.State {
		return map[string]knob.State{"policy": policy, "cpuBurstPercent": burst, "cfsQuotaBurstPercent": quota,
			"cfsQuotaBurstPeriodSeconds": quota, "sharePoolThresholdPercent": quota}
	}
	pol := func(p cpuburst.Policy) cpuburst.Config { return quotaCfg(func(c *cpuburst.Config) { c.Policy = p }) }
	tests := []struct {
		name    string
		cfg     cpuburst.Config
		cg      cgroup.Prober
		refused error
		want    map[string]knob.State
	}{
		{name: "none", cfg: pol(cpuburst.PolicyNone), cg: prober{true}, want: all(knob.Off, knob.Off, knob.Off)},
		{name: "auto", cfg: pol(cpuburst.PolicyAuto), cg: prober{true}, want: all(knob.Applied, knob.Applied, knob.Applied)},
		{name: "auto without the burst file", cfg: pol(cpuburst.PolicyAuto), cg: prober{false}, want: all(knob.Ignored, knob.Applied, knob.Applied)},
		{name: "cpuBurstOnly", cfg: pol(cpuburst.PolicyCPUBurstOnly), cg: prober{true}, want: all(knob.Applied, knob.Off, knob.Applied)},
		{name: "cfsQuotaBurstOnly (an operator's Anolis nodes)", cfg: pol(cpuburst.PolicyCFSQuotaBurstOnly), cg: prober{false}, want: all(knob.Off, knob.Applied, knob.Applied)},
		{name: "no cgroups", cfg: pol(cpuburst.PolicyAuto), want: all(knob.Ignored, knob.Ignored, knob.Applied)},
		{name: "refused", cfg: pol(cpuburst.PolicyAuto), cg: prober{true}, refused: errors.New("bad"), want: all(knob.Applied, knob.Refused, knob.Applied)},
	}
	for _, tt := range tests {
		got := Knobs(tt.cfg, tt.cg, tt.refused)
		if s := states(got); len(s) != len(tt.want) || !equalStates(s, tt.want) {
			t.Errorf("%s: states %v, want %v", tt.name, s, tt.want)
		}
		for _, k := range got {
			if k.Value == "" || (k.State != knob.Applied && k.Detail == "") {
				t.Errorf("%s: %s has value %q and detail %q; want both", tt.name, k.Key, k.Value, k.Detail)
			}
			if tt.cg != nil && k.Key == "cpuBurstPercent" && k.State == knob.Ignored && !strings.Contains(k.Detail, cpuburst.FileV1) {
				t.Errorf("%s: cpuBurstPercent ignored without naming %s: %q", tt.name, cpuburst.FileV1, k.Detail)
			}
		}
	}
}

func equalStates(a, b map[string]knob.State) bool {
	for k, v := range b {
		if a[k] != v {
			return false
		}
	}
	return true
}
