package suppress_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2/ktesting"

	"github.com/tandemkit/tandem/actuate/dryrun"
	"github.com/tandemkit/tandem/actuate/suppress"
	"github.com/tandemkit/tandem/metrics/collector"
	"github.com/tandemkit/tandem/resource/cgroup"
	alloc "github.com/tandemkit/tandem/resource/cpuset"
)

// countingWriter counts the writes that reach the tree.
type countingWriter struct {
	cgroup.Writer
	cgroup.Tree
	writes atomic.Int32
}

func (w *countingWriter) Write(parent string, s cgroup.Settings) error {
	w.writes.Add(1)
	return w.Writer.Write(parent, s)
}

// sink keeps the Events it is given.
type sink struct {
	mu     sync.Mutex
	events []*corev1.Event
}

func (s *sink) CreateEvent(_ context.Context, ev *corev1.Event) (*corev1.Event, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events = append(s.events, ev)
	return ev, nil
}

func (s *sink) take() []*corev1.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.events
	s.events = nil
	return out
}

// fixedLimiter holds BE under milli (0: no ceiling).
type fixedLimiter struct{ milli atomic.Int64 }

func (f *fixedLimiter) Limit(context.Context, *collector.Snapshot) (int64, int64) {
	return f.milli.Load(), 0
}

// loopOn is a suppression loop on its own BE tree and allocator (16 CPUs), recording dry-run Events in
// a sink.
type loopOn struct {
	l       *suppress.Loop
	b       *beTree
	w       *countingWriter
	a       *alloc.Allocator
	lim     *fixedLimiter
	sink    *sink
	reg     *prometheus.Registry
	refresh atomic.Int32
}

func newLoopOn(t *testing.T, cfg func(*beTree) suppress.Config) *loopOn {
	t.Helper()
	o := &loopOn{b: newBETree(t, "-1"), a: allocator(t, "16cpu-2socket-smt"), lim: &fixedLimiter{}, sink: &sink{}, reg: prometheus.NewRegistry()}
	o.w = &countingWriter{Writer: o.b.w, Tree: o.b.w.(cgroup.Tree)}
	rec, err := dryrun.New("node-a", o.reg)
	if err != nil {
		t.Fatal(err)
	}
	rec.SetSink(o.sink)
	o.l, err = suppress.New(cfg(o.b), suppress.Deps{Latest: func() *collector.Snapshot { return nil }, Cgroups: o.w, CPUs: o.a,
		PoolsChanged: func() { o.refresh.Add(1) }, Refresh: func(context.Context) error { o.refresh.Add(1); return nil },
		Limiters: []suppress.Limiter{o.lim}, Registerer: o.reg, Dry: rec})
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// TestDryRun feeds the same loads to a loop that suppresses and one in dry run: the real one writes the
// BE parent's quota (or caps the BE pool), the dry run leaves the cgroup files, the pool and the proxy
// alone, decides the same limit, and records one WouldSuppress Event on the Node per material change of
// its decision, not one per sample.
func TestDryRun(t *testing.T) {
	t.Parallel()
	type sample struct {
		ls int64
		// enable and limit change the configuration and the limiter's ceiling before the sample.
		enable *bool
		limit  int64
		// event is what the sample's Event says, "" for none.
		event string
	}
	off, on := false, true
	tests := []struct {
		name    string
		policy  suppress.Policy
		enable  bool
		samples []sample
	}{
		{
			// 16 × 55% = 8800 − LS − 400 system.
			name: "cfsQuota: start, small moves, a big shrink, widening in steps, disabled", policy: suppress.PolicyCFSQuota, enable: true,
			samples: []sample{
				{ls: 4000, event: "would limit BE pods to 4.4 cores (cfsQuota: /node-a/kubepods/besteffort quota 440000 µs per 100000 µs period): cpuSuppressThresholdPercent 55% of 16.0 cores less 4.0 used by LS pods and 0.4 by the system leaves BE 4.4"},
				{ls: 4000},
				{ls: 4300},
				{ls: 4600}, // 3.8 cores: 0.6 from the 4.4 reported, under a tenth of the node
				{ls: 6000, event: "would limit BE pods to 2.4 cores (cfsQuota: /node-a/kubepods/besteffort quota 240000 µs per 100000 µs period), from 4.4 cores"},
				{ls: 2000},
				{ls: 2000},
				{ls: 2000, event: "would limit BE pods to 4.0 cores (cfsQuota: /node-a/kubepods/besteffort quota 400000 µs per 100000 µs period), from 2.4 cores: cpuSuppressThresholdPercent 55% of 16.0 cores less 2.0 used by LS pods and 0.4 by the system leaves BE 6.4; 6.4 cores wanted; widening waits"},
				{ls: 2000, enable: &off, event: "would lift the BE pods' CPU limit of 4.0 cores (cfsQuota): suppression is disabled"},
				{ls: 2000},
			},
		},
		{
			name: "cpuset: every change of the pool's size", policy: suppress.PolicyCPUSet, enable: true,
			samples: []sample{
				{ls: 4000, event: "would limit BE pods to 5 CPUs (cpuset: the BE pool of 16 CPUs capped)"},
				{ls: 4300},
				{ls: 4700, event: "would limit BE pods to 4 CPUs"},
				{ls: 2000},
				{ls: 2000},
				{ls: 2000, event: "would limit BE pods to 5 CPUs"},
			},
		},
		{
			name: "a limiter alone, suppression disabled", policy: suppress.PolicyCPUSet,
			samples: []sample{
				{ls: 4000},
				{ls: 4000, limit: 3000, event: "would limit BE pods to 3.0 cores (cfsQuota: /node-a/kubepods/besteffort quota 300000 µs per 100000 µs period): the steal headroom or the LS wait guard holds BE under 3.0 cores"},
				{ls: 4000, limit: 2900},
				{ls: 4000, event: "would lift the BE pods' CPU limit of 3.0 cores"},
			},
		},
		{
			name: "switched on later", policy: suppress.PolicyCFSQuota,
			samples: []sample{
				{ls: 4000},
				{ls: 4000, enable: &on, event: "would limit BE pods to 4.4 cores"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, ctx := ktesting.NewTestContext(t)
			enable := tt.enable
			config := func(dry bool) func(b *beTree) suppress.Config {
				return func(b *beTree) suppress.Config {
					c := b.config(enable)
					c.CPUSuppressPolicy, c.DryRun = tt.policy, dry
					return c
				}
			}
			act, dry := newLoopOn(t, config(false)), newLoopOn(t, config(true))
			pool := dry.a.Pools().BE.String()
			for i, s := range tt.samples {
				var ds [2]suppress.Decision
				for j, o := range []*loopOn{act, dry} {
					if s.enable != nil {
						enable = *s.enable
						if err := o.l.Reconfigure(config(j == 1)(o.b)); err != nil {
							t.Fatal(err)
						}
					}
					o.lim.milli.Store(s.limit)
					d, err := o.l.Step(ctx, snap(time.Unix(int64(i), 0), 16, s.ls, 0, 400))
					if err != nil {
						t.Fatal(err)
					}
					ds[j] = d
				}
				// The same decision: what the real loop put in force is what the dry run would have.
				inForce := int64(0)
				switch q := act.b.quota(t, ""); {
				case q != "-1":
					inForce = mustInt(t, q) / 100
				case act.a.BELimit() > 0:
					inForce = int64(act.a.Pools().BE.Size()) * 1000
				}
				if !ds[1].DryRun || ds[0].DryRun || ds[1].WouldMilli != inForce {
					t.Errorf("sample %d: dry run would allow %dm (dry %v), the real loop put %dm in force", i, ds[1].WouldMilli, ds[1].DryRun, inForce)
				}
				if ds[1].AllowedMilli != 16000 || dry.l.AllowedMilli() != 16000 || ds[1].Changed {
					t.Errorf("sample %d: dry run allows BE %dm (changed %v), want the whole node", i, ds[1].AllowedMilli, ds[1].Changed)
				}
				evs := dry.sink.take()
				switch {
				case s.event == "" && len(evs) != 0:
					t.Errorf("sample %d: Event %q, want none", i, evs[0].Message)
				case s.event != "" && len(evs) != 1:
					t.Errorf("sample %d: %d Events, want one saying %q", i, len(evs), s.event)
				case s.event != "":
					if ev := evs[0]; !strings.Contains(ev.Message, s.event) || ev.Reason != "WouldSuppress" || ev.InvolvedObject.Kind != "Node" {
						t.Errorf("sample %d: %s on %s %q, want WouldSuppress on the Node saying %q", i, ev.Reason, ev.InvolvedObject.Kind, ev.Message, s.event)
					}
				}
				if q, c := dry.b.quota(t, ""), dry.b.quota(t, "pod1/ctr"); q != "-1" || c != "150000" {
					t.Errorf("sample %d: dry run left the BE parent at %s, the container at %s; want -1 and 150000", i, q, c)
				}
				if got := dry.a.Pools().BE.String(); got != pool || dry.a.BELimit() != 0 {
					t.Errorf("sample %d: dry run moved the BE pool to %s", i, got)
				}
				if _, ok := dry.l.QuotaCeiling(); ok {
					t.Errorf("sample %d: dry run gives BE containers a quota ceiling", i)
				}
			}
			if act.w.writes.Load() == 0 && act.a.BELimit() == 0 && act.refresh.Load() == 0 {
				t.Error("the real loop changed nothing: the loads test nothing")
			}
			if err := dry.l.Restore(ctx); err != nil {
				t.Fatal(err)
			}
			if n, r := dry.w.writes.Load(), dry.refresh.Load(); n != 0 || r != 0 {
				t.Errorf("dry run wrote %d times and asked the proxy %d times, Restore included", n, r)
			}
			if got := total(t, dry.reg, "tandem_suppress_changes_total"); got != 0 {
				t.Errorf("dry run counted %v limit changes", got)
			}
		})
	}
}

// TestDryRunSwitch: switching dry run on while BE is held back lifts the clamp at once, as disabling
// does, and switching it off applies the decision again from nothing.
func TestDryRunSwitch(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		policy suppress.Policy
		// held reads what holds BE back: the BE parent's quota, or the BE pool's cap.
		held      func(t *testing.T, o *loopOn) string
		want, off string
	}{
		{name: "cfsQuota", policy: suppress.PolicyCFSQuota, held: func(t *testing.T, o *loopOn) string { return o.b.quota(t, "") }, want: "440000", off: "-1"},
		{name: "cpuset", policy: suppress.PolicyCPUSet, held: func(_ *testing.T, o *loopOn) string { return o.a.Pools().BE.String() }, want: "5-7,14-15", off: "0-15"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, ctx := ktesting.NewTestContext(t)
			cfg := func(dry bool) func(*beTree) suppress.Config {
				return func(b *beTree) suppress.Config {
					c := b.config(true)
					c.CPUSuppressPolicy, c.DryRun = tt.policy, dry
					return c
				}
			}
			o := newLoopOn(t, cfg(false))
			step := func(i int64) {
				t.Helper()
				if _, err := o.l.Step(ctx, snap(time.Unix(i, 0), 16, 4000, 0, 400)); err != nil {
					t.Fatal(err)
				}
			}
			step(1)
			if got := tt.held(t, o); got != tt.want {
				t.Fatalf("suppressing: %s, want %s", got, tt.want)
			}
			if err := o.l.Reconfigure(cfg(true)(o.b)); err != nil {
				t.Fatal(err)
			}
			step(2)
			if got := tt.held(t, o); got != tt.off {
				t.Errorf("dry run switched on: %s, want %s (lifted)", got, tt.off)
			}
			if got := metricValue(t, o.reg, "tandem_suppress_changes_total", "direction", "lift"); got != 1 {
				t.Errorf("lifts counted %v, want 1", got)
			}
			if evs := o.sink.take(); len(evs) != 1 || !strings.Contains(evs[0].Message, "would limit BE pods") {
				t.Errorf("Events %d, want the one dry-run decision", len(evs))
			}
			if err := o.l.Reconfigure(cfg(false)(o.b)); err != nil {
				t.Fatal(err)
			}
			step(3)
			if got := tt.held(t, o); got != tt.want {
				t.Errorf("dry run switched off: %s, want %s again", got, tt.want)
			}
		})
	}
}

func mustInt(t *testing.T, s string) int64 {
	t.Helper()
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// total adds up every series of a metric; 0 when it has none.
func total(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}
