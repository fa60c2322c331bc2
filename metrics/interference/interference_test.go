package interference

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tandemkit/tandem/metrics/collector"
	"github.com/tandemkit/tandem/resource/qos"
)

// step is one run-queue sample: what BE used over it, the LS container's waits in it (fast under the
// threshold, slow over it), and what the controller must decide.
type step struct {
	be, fast, slow uint64
	decision       string
	ceiling        int64
}

// node feeds the controller as the suppress loop does: one usage snapshot per run-queue sample here,
// 10 s apart, on a 4-CPU node, with one LS container whose cumulative histogram grows by each step.
type node struct {
	t    *testing.T
	c    *Controller
	rq   *collector.RunQueueSample
	at   time.Time
	reg  *prometheus.Registry
	snap collector.Snapshot
}

func newNode(t *testing.T, cfg Config) *node {
	t.Helper()
	n := &node{t: t, at: time.Date(2026, 12, 6, 20, 0, 0, 0, time.UTC), reg: prometheus.NewRegistry()}
	ls := collector.Target{Namespace: "shop", Pod: "web", Container: "app", ContainerID: "ls1", QoS: qos.LS}
	be := collector.Target{Namespace: "batch", Pod: "job", Container: "work", ContainerID: "be1", QoS: qos.BE}
	n.rq = &collector.RunQueueSample{Containers: []collector.RunQueueHistogram{{Target: ls}, {Target: be}}}
	n.snap = collector.Snapshot{Capacity: collector.Usage{CPUMilli: 4000}, Containers: []collector.ContainerUsage{{Target: be}}}
	c, err := New(cfg, func() *collector.RunQueueSample { return n.rq }, n.reg)
	if err != nil {
		t.Fatal(err)
	}
	n.c = c
	return n
}

// sample publishes the next run-queue sample and lets the controller see it.
func (n *node) sample(s step) (int64, Status) {
	next := *n.rq
	next.Containers = append([]collector.RunQueueHistogram(nil), n.rq.Containers...)
	next.Containers[0].Add(100*time.Microsecond, s.fast)
	next.Containers[0].Add(10*time.Millisecond, s.slow)
	// BE's own waits are not LS's: they must never count.
	next.Containers[1].Add(50*time.Millisecond, 1000)
	next.Seq++
	n.at = n.at.Add(10 * time.Second)
	next.Time = n.at
	n.rq = &next
	n.snap.Containers[0].CPUMilli = int64(s.be)
	ceiling, _ := n.c.Limit(context.Background(), &n.snap)
	return ceiling, n.c.Status()
}

func TestController(t *testing.T) {
	t.Parallel()
	on := DefaultConfig()
	on.Enable = true
	warm := step{be: 2000, fast: 1000, decision: DecisionQuiet}
	tests := []struct {
		name  string
		cfg   Config
		steps []step
		want  []string // in the last status' LastVerdict or LastHoldReason
	}{
		{
			name: "LS suffers while BE runs: held to half of BE, the hold helps and stays, then rises back",
			cfg:  on,
			steps: []step{warm,
				{be: 2000, fast: 1000, slow: 50, decision: DecisionHold, ceiling: 1000},
				{be: 1000, fast: 1000, slow: 20, decision: DecisionWait, ceiling: 1000},
				{be: 1000, fast: 1000, slow: 5, decision: DecisionConfirm, ceiling: 1000},
				{be: 1000, fast: 1000, slow: 5, decision: DecisionNone, ceiling: 1000},
				{be: 1000, fast: 1000, slow: 5, decision: DecisionRaise, ceiling: 1400},
			},
			want: []string{"BE's doing: LS waited 60 ms per second at the hold, 15 ms with BE held to 1000m"},
		},
		{
			name: "the hold does not help: BE given back and LS waits ignored for a while",
			cfg:  on,
			steps: []step{warm,
				{be: 3000, fast: 1000, slow: 50, decision: DecisionHold, ceiling: 1500},
				{be: 1500, fast: 1000, slow: 50, decision: DecisionWait, ceiling: 1500},
				{be: 1500, fast: 1000, slow: 45, decision: DecisionRelease, ceiling: 0},
				{be: 3000, fast: 1000, slow: 50, decision: DecisionIgnore, ceiling: 0},
			},
			want: []string{"not BE's doing: LS waited 60 ms per second at the hold, 55 ms with BE held to 1500m; BE given back the whole node"},
		},
		{
			name: "one busy sample after the hold does not undo it: the least wait is what BE left",
			cfg:  on,
			steps: []step{warm,
				{be: 3000, fast: 1000, slow: 50, decision: DecisionHold, ceiling: 1500},
				{be: 1500, fast: 1000, slow: 10, decision: DecisionWait, ceiling: 1500},
				// Something else woke on LS's CPUs: 55 ms a second, but 20 in the sample before.
				{be: 1500, fast: 1000, slow: 45, decision: DecisionHold, ceiling: 750},
			},
			want: []string{"BE's doing: LS waited 60 ms per second at the hold, 20 ms with BE held to 1500m"},
		},
		{
			name: "LS suffers with BE idle: nothing to hold",
			cfg:  on,
			steps: []step{warm,
				{be: 50, fast: 1000, slow: 500, decision: DecisionNone, ceiling: 0},
			},
		},
		{
			name: "a hold that helped deepens while LS still suffers, down to the floor",
			cfg:  on,
			steps: []step{warm,
				{be: 4000, fast: 1000, slow: 100, decision: DecisionHold, ceiling: 2000},
				{be: 2000, fast: 1000, slow: 60, decision: DecisionWait, ceiling: 2000},
				// Judged: LS waited 110 ms a second at the hold, 50 now, and 4 % of waits are still slow: held again.
				{be: 2000, fast: 1000, slow: 40, decision: DecisionHold, ceiling: 1000},
				{be: 1000, fast: 1000, slow: 30, decision: DecisionWait, ceiling: 1000},
				{be: 1000, fast: 1000, slow: 20, decision: DecisionHold, ceiling: 500},
				{be: 500, fast: 1000, slow: 15, decision: DecisionWait, ceiling: 500},
				{be: 500, fast: 1000, slow: 12, decision: DecisionHold, ceiling: 400},
				{be: 400, fast: 1000, slow: 10, decision: DecisionWait, ceiling: 400},
				// At the floor (10 % of 4 CPUs): no lower, whatever LS does.
				{be: 400, fast: 1000, slow: 4, decision: DecisionConfirm, ceiling: 400},
				{be: 400, fast: 1000, slow: 20, decision: DecisionNone, ceiling: 400},
			},
		},
		{
			name: "too few waits to judge: no hold however slow they are",
			cfg:  on,
			steps: []step{warm,
				{be: 3000, fast: 10, slow: 80, decision: DecisionQuiet, ceiling: 0},
			},
		},
		{
			name: "p99 under the threshold: 1 % of waits slow is not more than 1 %",
			cfg:  on,
			steps: []step{warm,
				{be: 3000, fast: 990, slow: 10, decision: DecisionNone, ceiling: 0},
				{be: 3000, fast: 989, slow: 11, decision: DecisionHold, ceiling: 1500},
			},
		},
		{
			name: "off: nothing, however LS suffers",
			cfg:  DefaultConfig(),
			steps: []step{{be: 2000, fast: 1000, decision: DecisionNone},
				{be: 3000, fast: 1000, slow: 500, decision: DecisionNone, ceiling: 0},
			},
		},
		{
			name: "a ceiling rises to the node's capacity and goes",
			cfg:  func() Config { c := on; c.RaiseAfterSamples = 1; c.RaiseStepPercent = 25; return c }(),
			steps: []step{warm,
				{be: 4000, fast: 1000, slow: 100, decision: DecisionHold, ceiling: 2000},
				{be: 2000, fast: 1000, slow: 10, decision: DecisionWait, ceiling: 2000},
				// Judged (it helped) and, LS calm, raised a step in the same sample.
				{be: 2000, fast: 1000, slow: 0, decision: DecisionRaise, ceiling: 3000},
				{be: 3000, fast: 1000, slow: 0, decision: DecisionLift, ceiling: 0},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			n := newNode(t, tt.cfg)
			var st Status
			for i, s := range tt.steps {
				var ceiling int64
				ceiling, st = n.sample(s)
				if st.Decision != s.decision || ceiling != s.ceiling {
					t.Fatalf("sample %d (BE %dm, LS %d fast %d slow): decided %q with ceiling %dm, want %q with %dm; status %+v",
						i, s.be, s.fast, s.slow, st.Decision, ceiling, s.decision, s.ceiling, st)
				}
				if m, limited := n.c.Ceiling(); m != s.ceiling || limited != (s.ceiling > 0) {
					t.Errorf("sample %d: Ceiling() = %d, %v; Limit returned %d", i, m, limited, s.ceiling)
				}
			}
			for _, w := range tt.want {
				if !strings.Contains(st.LastVerdict+"\n"+st.LastHoldReason, w) {
					t.Errorf("status says %q / %q, want it to say %q", st.LastVerdict, st.LastHoldReason, w)
				}
			}
		})
	}
}

func TestHoldReasonAndMetrics(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.Enable = true
	n := newNode(t, cfg)
	n.sample(step{be: 2000, fast: 1000})
	_, st := n.sample(step{be: 2000, fast: 900, slow: 100})
	want := "100 of 1000 LS waits (10.0%) were 4.096ms or longer (worst shop/web/app) while BE used 2000m: BE held to 1000m"
	if st.LastHoldReason != want {
		t.Errorf("hold reason %q, want %q", st.LastHoldReason, want)
	}
	if st.ThresholdMicros != 4096 || st.Waits != 1000 || st.SlowWaits != 100 || st.SlowPercent() != 10 {
		t.Errorf("status %+v: want the 4096 µs bound and 100 of 1000 waits slow", st)
	}
	if got := testutil.ToFloat64(n.c.holds); got != 1 {
		t.Errorf("tandem_interference_holds_total = %v, want 1", got)
	}
	if got := testutil.ToFloat64(n.c.ceilingGauge); got != 1 {
		t.Errorf("tandem_interference_be_ceiling_cores = %v, want 1", got)
	}
	if got := testutil.ToFloat64(n.c.slowGauge); got != 0.1 {
		t.Errorf("tandem_interference_ls_slow_wait_ratio = %v, want 0.1", got)
	}
}

func TestNoRunQueueSamples(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.Enable = true
	c, err := New(cfg, func() *collector.RunQueueSample { return nil }, nil)
	if err != nil {
		t.Fatal(err)
	}
	snap := &collector.Snapshot{Capacity: collector.Usage{CPUMilli: 2000}}
	if m, _ := c.Limit(context.Background(), snap); m != 0 {
		t.Errorf("ceiling %dm without run-queue samples, want none", m)
	}
	if why := c.Status().Why; !strings.Contains(why, "--run-queue-latency") {
		t.Errorf("status says %q, want it to name --run-queue-latency", why)
	}
}

func TestReconfigureOffDropsTheCeiling(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.Enable = true
	n := newNode(t, cfg)
	n.sample(step{be: 2000, fast: 1000})
	if m, _ := n.sample(step{be: 2000, fast: 900, slow: 100}); m != 1000 {
		t.Fatalf("ceiling %dm after a hold, want 1000m", m)
	}
	off := cfg
	off.Enable = false
	if err := n.c.Reconfigure(off); err != nil {
		t.Fatal(err)
	}
	if m, limited := n.c.Ceiling(); limited {
		t.Errorf("ceiling %dm after switching off, want none", m)
	}
	bad := cfg
	bad.SlowPercent = 0
	if err := n.c.Reconfigure(bad); err == nil || !strings.Contains(err.Error(), "slowPercent") {
		t.Errorf("Reconfigure(slowPercent 0) = %v, want an error naming slowPercent", err)
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	bad := Config{WaitThreshold: 2 * time.Second, SlowPercent: 100, BEActiveMilli: -1, BackoffPercent: 0, VerifySamples: 0,
		VerifyDropPercent: 100, RaiseAfterSamples: 0, RaiseStepPercent: 0, MinPercent: 101, IgnoreFor: -time.Second}
	err := bad.Validate()
	for _, field := range []string{"waitThreshold", "slowPercent", "beActiveMilli", "backoffPercent", "verifySamples",
		"verifyDropPercent", "raiseAfterSamples", "raiseStepPercent", "minPercent", "ignoreFor"} {
		if err == nil || !strings.Contains(err.Error(), field+":") {
			t.Errorf("Validate() = %v, want it to name %s", err, field)
		}
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Errorf("the default config is refused: %v", err)
	}
}
