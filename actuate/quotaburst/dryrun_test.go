package quotaburst

import (
	"fmt"
	"strings"
	"testing"

	"k8s.io/klog/v2/ktesting"

	"github.com/tandemkit/tandem/hooks/policy/cpuburst"
	"github.com/tandemkit/tandem/resource/qos"
)

// TestDryRun runs the same steps on two harnesses, one writing and one in dry run: the dry run writes
// nothing, and reports one WouldBurstQuota Event on the pod at each step where the real run changed the
// container's quota, naming the same change.
func TestDryRun(t *testing.T) {
	t.Parallel()
	one := podSpec{id: "p", quota: 20000, ctrs: []ctrSpec{{id: "a", class: qos.LS, quota: 20000}}}
	tests := []struct {
		name  string
		cfg   cpuburst.Config
		steps []step
		// wantEvent names words every Event of the case has.
		wantEvent string
	}{
		{
			name: "raised to the ceiling, held, back when the pool is busy", cfg: quotaCfg(nil),
			steps: append(raiseTo(len(growth)),
				step{node: idle, throttled: []string{"a"}},
				step{node: cooling, throttled: []string{"a"}},
				step{node: busy, throttled: []string{"a"}},
				step{node: busy}),
		},
		{
			name: "the period ends a raise", cfg: quotaCfg(func(c *cpuburst.Config) { c.CFSQuotaBurstPeriodSeconds = 2 }),
			steps: append(raiseTo(3), step{node: idle}, step{node: idle, throttled: []string{"a"}}),
		},
		{
			name: "a container that is no longer LS goes back", cfg: quotaCfg(nil),
			steps: append(raiseTo(2),
				step{node: idle, throttled: []string{"a"}, before: func(h *harness) { h.container("a", func(c *Container) { c.Class = qos.BE }) }}),
		},
		{
			name: "a throttled container on a busy pool stays", cfg: quotaCfg(nil),
			steps: []step{{node: busy}, {node: busy, throttled: []string{"a"}}, {node: busy, throttled: []string{"a"}}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			act, dry := newHarness(t, tt.cfg, one), newHarness(t, tt.cfg, one)
			if !dry.l.SetDryRun(true) || dry.l.SetDryRun(true) || !dry.l.DryRun() {
				t.Fatal("SetDryRun does not report the switch once")
			}
			changes := 0
			for i, s := range tt.steps {
				was := act.quota(podA)
				for _, h := range []*harness{act, dry} {
					if s.before != nil {
						s.before(h)
					}
					h.step(s.node, s.throttled...)
				}
				now := act.quota(podA)
				if w := dry.w.writes(); len(w) != 0 {
					t.Errorf("step %d: dry run wrote %s", i, joined(w))
				}
				if q, p := dry.quota(podA), dry.quota(pod); q != 20000 || p != 20000 {
					t.Errorf("step %d: dry run left container %d, pod %d; want 20000 each", i, q, p)
				}
				evs := dry.events.take()
				if now == was {
					if len(evs) != 0 {
						t.Errorf("step %d: the real run kept %d, the dry run reported %q", i, now, evs[0].Message)
					}
					continue
				}
				changes++
				want := fmt.Sprintf("from %d to %d µs", was, now)
				if len(evs) != 1 {
					t.Errorf("step %d: %d Events, want one saying %q", i, len(evs), want)
					continue
				}
				ev := evs[0]
				if !strings.Contains(ev.Message, want) || ev.Reason != "WouldBurstQuota" || ev.InvolvedObject.Kind != "Pod" ||
					ev.InvolvedObject.Namespace != "ns" || ev.InvolvedObject.Name != "pod-p" {
					t.Errorf("step %d: %s on %s %s/%s %q, want WouldBurstQuota on pod ns/pod-p saying %q", i, ev.Reason,
						ev.InvolvedObject.Kind, ev.InvolvedObject.Namespace, ev.InvolvedObject.Name, ev.Message, want)
				}
			}
			if changes == 0 && tt.name != "a throttled container on a busy pool stays" {
				t.Error("the real run changed nothing: the steps test nothing")
			}
			if got := dry.metric("tandem_dry_run_actions_total", "cfsQuotaBurst"); got != float64(changes) {
				t.Errorf("tandem_dry_run_actions_total{action=cfsQuotaBurst} = %v, want %d", got, changes)
			}
			if got := dry.metric("tandem_cpu_quota_burst_raises_total", ""); got != 0 {
				t.Errorf("dry run counted %v raises", got)
			}
			_, ctx := ktesting.NewTestContext(t)
			if err := dry.l.Restore(ctx); err != nil {
				t.Fatal(err)
			}
			if w := dry.w.writes(); len(w) != 0 {
				t.Errorf("Restore in dry run wrote %s", joined(w))
			}
		})
	}
}

// TestDryRunSwitch: dry run switched on while a quota is raised puts it back (pod too) at the next step
// (TestRun has it without a step); Restore then has nothing to write; switched off, the real run raises
// again from the base, whatever the dry run decided meanwhile.
func TestDryRunSwitch(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// dryRaises is how many throttled steps run in dry run.
		dryRaises int
	}{
		{name: "one step in dry run", dryRaises: 1},
		{name: "dry run decided up to the ceiling", dryRaises: len(growth) + 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, quotaCfg(nil), podSpec{id: "p", quota: 20000, ctrs: []ctrSpec{{id: "a", class: qos.LS, quota: 20000}}})
			for _, s := range raiseTo(2) {
				h.step(s.node, s.throttled...)
			}
			if q := h.quota(podA); q != growth[1] {
				t.Fatalf("raised to %d, want %d", q, growth[1])
			}
			h.w.writes()
			h.l.SetDryRun(true)
			h.step(idle, "a")
			if q, p := h.quota(podA), h.quota(pod); q != 20000 || p != 20000 {
				t.Errorf("dry run switched on: container %d, pod %d; want 20000 each", q, p)
			}
			if got := h.metric("tandem_cpu_quota_burst_resets_total", "dryRun"); got != 1 {
				t.Errorf("resets{dryRun} = %v, want 1", got)
			}
			// Decided from the base: the first raise again, reported, not written.
			if evs := h.events.take(); len(evs) != 1 || !strings.Contains(evs[0].Message, "from 20000 to 24000 µs") {
				t.Errorf("Events %d, want one raise from the base", len(evs))
			}
			h.w.writes()
			for range tt.dryRaises - 1 {
				h.step(idle, "a")
			}
			_, ctx := ktesting.NewTestContext(t)
			if err := h.l.Restore(ctx); err != nil {
				t.Fatal(err)
			}
			if w := h.w.writes(); len(w) != 0 {
				t.Errorf("dry run and Restore wrote %s", joined(w))
			}
			h.l.SetDryRun(false)
			h.step(idle, "a")
			if q := h.quota(podA); q != 24000 {
				t.Errorf("dry run switched off: %d, want 24000 (raised from the base)", q)
			}
			if evs := h.events.take(); len(evs) != min(tt.dryRaises-1, len(growth)-1) {
				t.Errorf("%d Events, want one per raise decided in dry run after the first", len(evs))
			}
		})
	}
}
