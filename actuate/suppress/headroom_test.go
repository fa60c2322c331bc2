package suppress_test

import (
	"context"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"

	"github.com/tandemkit/tandem/actuate/suppress"
	"github.com/tandemkit/tandem/metrics/collector"
	"github.com/tandemkit/tandem/metrics/headroom"
)

// TestStealHeadroom runs the loop with suppression disabled and the steal headroom on, against a
// cgroup v1 tree on disk: steal while BE runs clamps the BE parent's quota at the headroom's ceiling,
// calm widens it back, and the clamp is lifted once the ceiling is gone, in the kernel's 100 ms period
// whatever beCFSPeriodMicros says (1 s here, its default). With suppression enabled, the lower of the
// formula's answer and the ceiling applies, in beCFSPeriodMicros' period.
func TestStealHeadroom(t *testing.T) {
	t.Parallel()
	stolen := func(s *collector.Snapshot, steal int64) *collector.Snapshot {
		s.Steal.CPUMilli = steal
		return s
	}
	type step struct {
		ls, be, steal int64
		// n repeats the sample; wantQuota is the BE parent's cpu.cfs_quota_us after the last, in the
		// test's period.
		n         int
		wantQuota string
	}
	tests := []struct {
		name     string
		suppress bool
		period   string
		steps    []step
	}{
		{
			name:   "suppression disabled: the headroom alone clamps and lifts",
			period: "100000",
			steps: []step{
				{ls: 300, n: 3, wantQuota: "-1"},
				// 1700m × 3/4 = 1275m.
				{ls: 300, be: 1700, steal: 200, n: 1, wantQuota: "127500"},
				{ls: 300, be: 1275, n: 9, wantQuota: "127500"},
				// The tenth calm sample raises the ceiling by 5% of the node; the widening waits three
				// samples more (suppress's own hysteresis) before it reaches the kernel.
				{ls: 300, be: 1275, n: 3, wantQuota: "137500"},
				// 200 calm samples take the ceiling back to the node's capacity: lifted.
				{ls: 300, be: 1275, n: 300, wantQuota: "-1"},
			},
		},
		{
			name:     "suppression enabled: the lower of formula and ceiling",
			suppress: true,
			period:   "1000000",
			steps: []step{
				// 2 × 55% = 1100m − 300m LS = 800m from the formula, no ceiling yet.
				{ls: 300, n: 3, wantQuota: "1000000"},                     // the formula's floor of one CPU
				{ls: 300, be: 400, steal: 400, n: 1, wantQuota: "300000"}, // 400 × 3/4 = 300m
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, ctx := ktesting.NewTestContext(t)
			b := newBETree(t, "-1")
			hcfg := headroom.DefaultConfig()
			hcfg.Enable = true
			h, err := headroom.New(hcfg, "test", nil)
			if err != nil {
				t.Fatal(err)
			}
			cfg := b.config(tt.suppress)
			cfg.CFSPeriodMicros = 1000000 // beCFSPeriodMicros' default
			l, err := suppress.New(cfg, suppress.Deps{Latest: func() *collector.Snapshot { return nil }, Cgroups: b.w, Limiters: []suppress.Limiter{h}})
			if err != nil {
				t.Fatal(err)
			}
			i := 0
			for _, s := range tt.steps {
				var d suppress.Decision
				for range s.n {
					i++
					if d, err = l.Step(ctx, stolen(snap(time.Unix(int64(i), 0), 2, s.ls, s.be, 0), s.steal)); err != nil {
						t.Fatal(err)
					}
				}
				want := tt.period
				if s.wantQuota == "-1" {
					want = "100000" // lifted: the kernel's period back
				}
				if got := b.quota(t, ""); got != s.wantQuota || b.period(t, "") != want {
					t.Fatalf("after %d×(LS %dm, BE %dm, steal %dm): BE parent quota %s period %s, want %s in %s; decision %+v, headroom %+v",
						s.n, s.ls, s.be, s.steal, got, b.period(t, ""), s.wantQuota, want, d, h.Status())
				}
			}
		})
	}
}

// fixedLimit is a limiter whose ceiling the test sets.
type fixedLimit struct{ milli, period int64 }

func (f *fixedLimit) Limit(context.Context, *collector.Snapshot) (int64, int64) {
	return f.milli, f.period
}

// TestLimiters checks how the loop combines its limiters with suppression disabled: the lowest ceiling
// clamps the BE parent, in the period its limiter asked for, or beCFSPeriodMicros' when it asked for
// none (the LS wait guard: that period is the one measured not to hurt LS); none left lifts the clamp.
func TestLimiters(t *testing.T) {
	t.Parallel()
	_, ctx := ktesting.NewTestContext(t)
	b := newBETree(t, "-1")
	steal := &fixedLimit{period: 100000}
	lswait := &fixedLimit{}
	cfg := b.config(false)
	cfg.CFSPeriodMicros = 1000000
	l, err := suppress.New(cfg, suppress.Deps{Latest: func() *collector.Snapshot { return nil }, Cgroups: b.w, Limiters: []suppress.Limiter{steal, lswait}})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name                  string
		steal, lswait         int64
		wantQuota, wantPeriod string
	}{
		{"none", 0, 0, "-1", "100000"},
		{"the LS wait guard alone: beCFSPeriodMicros' period", 0, 800, "800000", "1000000"},
		{"the steal headroom lower: its 100 ms", 600, 800, "60000", "100000"},
		{"the LS wait guard lower again", 900, 500, "500000", "1000000"},
		// Higher is a widening: suppression's hysteresis holds the level three samples, in the period
		// of the limiter now lowest.
		{"the steal headroom lower, at the same level", 500, 900, "50000", "100000"},
		{"both gone: lifted, the kernel's period back", 0, 0, "-1", "100000"},
	}
	for i, tt := range tests {
		steal.milli, lswait.milli = tt.steal, tt.lswait
		d, err := l.Step(ctx, snap(time.Unix(int64(i), 0), 2, 300, 1500, 0))
		if err != nil {
			t.Fatal(err)
		}
		if q, p := b.quota(t, ""), b.period(t, ""); q != tt.wantQuota || p != tt.wantPeriod {
			t.Errorf("%s: BE parent quota %s period %s, want %s in %s; decision %+v", tt.name, q, p, tt.wantQuota, tt.wantPeriod, d)
		}
	}
}
