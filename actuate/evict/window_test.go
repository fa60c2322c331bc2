package evict_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2/ktesting"

	"github.com/tandemkit/tandem/actuate/dryrun"
	"github.com/tandemkit/tandem/actuate/evict"
	"github.com/tandemkit/tandem/config/batchwindow"
	"github.com/tandemkit/tandem/metrics/collector"
	"github.com/tandemkit/tandem/resource/qos"
)

type eventSink struct{ events []*corev1.Event }

func (s *eventSink) CreateEvent(_ context.Context, e *corev1.Event) (*corev1.Event, error) {
	s.events = append(s.events, e)
	return e, nil
}

func TestWindowEvict(t *testing.T) {
	closedAt := time.Date(2026, 12, 8, 7, 0, 0, 0, time.UTC)
	meta := map[string]evict.PodMeta{
		"uid-low":  {Priority: prio(1), CPURequestMilli: 500},
		"uid-big":  {Priority: prio(5), CPURequestMilli: 2000},
		"uid-mid":  {Priority: prio(5), CPURequestMilli: 1000},
		"uid-prod": {Priority: prio(9000), CPURequestMilli: 1000},
	}
	pods := []ctr{{pod: "low", qos: qos.BE}, {pod: "big", qos: qos.BE}, {pod: "mid", qos: qos.BE}, {pod: "prod", qos: qos.LS}}
	cases := []struct {
		name      string
		phase     batchwindow.Phase
		outside   int64
		allowance int64
		known     bool
		refuse    map[string]bool
		dry       bool
		want      []string // evicted, in order
		reported  []string // dry run
	}{
		{name: "open: nothing", phase: batchwindow.PhaseOpen},
		{name: "closing: nothing yet", phase: batchwindow.PhaseClosing},
		{name: "closed, within grace: nothing", phase: batchwindow.PhaseClosed},
		{name: "grace passed, no capacity outside: every batch pod, lowest priority first, never LS", phase: batchwindow.PhaseEvicting,
			want: []string{"low", "big", "mid"}},
		{name: "a PDB refuses one: the others go", phase: batchwindow.PhaseEvicting, refuse: map[string]bool{"big": true},
			want: []string{"low", "mid"}},
		{name: "30% outside: only until the requests fit", phase: batchwindow.PhaseEvicting, outside: 30, allowance: 1200, known: true,
			want: []string{"low", "big"}},
		{name: "outside share but allowance unknown: wait", phase: batchwindow.PhaseEvicting, outside: 30},
		{name: "dry run: reports, evicts nothing", phase: batchwindow.PhaseEvicting, dry: true, reported: []string{"low", "big", "mid"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			rec := &recorder{refuse: tc.refuse}
			sink := &eventSink{}
			dry, err := dryrun.New("node-a", nil)
			if err != nil {
				t.Fatal(err)
			}
			dry.SetSink(sink)
			reg := prometheus.NewRegistry()
			now := closedAt.Add(11 * time.Minute)
			cfg := evict.DefaultWindowConfig()
			cfg.DryRun = tc.dry
			l, err := evict.NewWindowLoop(cfg, evict.WindowDeps{
				Latest:  func() *collector.Snapshot { return nil },
				Pods:    func(uid string) (evict.PodMeta, bool) { m, ok := meta[uid]; return m, ok },
				Evictor: rec, Dry: dry, Now: func() time.Time { return now }, Registerer: reg,
				State: func(time.Time) batchwindow.State {
					return batchwindow.State{Phase: tc.phase, Window: "night", ClosedAt: closedAt, OutsidePercent: tc.outside, Describe: "night 22:00-07:00 every day (UTC)"}
				},
				Allowance: func() (int64, bool) { return tc.allowance, tc.known },
			})
			if err != nil {
				t.Fatal(err)
			}
			snap := snapshot(now, 8, 32, 8, pods...)
			l.Step(ctx, snap)
			if !slices.Equal(rec.evicted, tc.want) {
				t.Errorf("evicted %v, want %v", rec.evicted, tc.want)
			}
			for _, r := range rec.reasons {
				if r != evict.ReasonBatchWindow {
					t.Errorf("reason %q", r)
				}
			}
			var reported []string
			for _, e := range sink.events {
				reported = append(reported, e.InvolvedObject.Name)
				if e.Reason != "WouldEvict" || !strings.Contains(e.Message, "would evict") || !strings.Contains(e.Message, `batch window "night" closed`) {
					t.Errorf("event %s: %q", e.Reason, e.Message)
				}
			}
			if !slices.Equal(reported, tc.reported) {
				t.Errorf("reported %v, want %v", reported, tc.reported)
			}
			// A second step asks nobody handled again; refused pods wait for RetryAfter.
			before := len(rec.evicted) + len(sink.events)
			asked := rec.asked["big"]
			l.Step(ctx, snap)
			if got := len(rec.evicted) + len(sink.events); got != before {
				t.Errorf("second step acted again: %d actions, had %d", got, before)
			}
			if rec.asked["big"] != asked {
				t.Errorf("refused pod asked again within RetryAfter")
			}
			if tc.refuse["big"] {
				now = now.Add(cfg.RetryAfter)
				l.Step(ctx, snap)
				if rec.asked["big"] != asked+1 {
					t.Errorf("refused pod not asked again after RetryAfter: %d", rec.asked["big"])
				}
			}
		})
	}
}

// TestWindowDryRunSwitchedOff: pods a dry run reported are evicted once the switch goes off.
func TestWindowDryRunSwitchedOff(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	rec := &recorder{}
	now := time.Date(2026, 12, 8, 8, 0, 0, 0, time.UTC)
	cfg := evict.DefaultWindowConfig()
	cfg.DryRun = true
	l, err := evict.NewWindowLoop(cfg, evict.WindowDeps{
		Latest: func() *collector.Snapshot { return nil }, Evictor: rec, Now: func() time.Time { return now },
		State: func(time.Time) batchwindow.State {
			return batchwindow.State{Phase: batchwindow.PhaseEvicting, Window: "w"}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	snap := snapshot(now, 8, 32, 8, ctr{pod: "a", qos: qos.BE})
	if got := l.Step(ctx, snap); len(got) != 1 || len(rec.evicted) != 0 {
		t.Fatalf("dry run: reported %v, evicted %v", got, rec.evicted)
	}
	cfg.DryRun = false
	if err := l.Reconfigure(cfg); err != nil {
		t.Fatal(err)
	}
	l.Step(ctx, snap)
	if !slices.Equal(rec.evicted, []string{"a"}) {
		t.Fatalf("after the dry run: evicted %v, want [a]", rec.evicted)
	}
}
