package cpuburst

import (
	"math"
	"testing"
	"time"

	"github.com/tandemkit/tandem/resource/cgroup"
)

func TestQuotaBurst(t *testing.T) {
	t.Parallel()
	seed := DefaultConfig() // cfsQuotaBurstPercent 300, sharePoolThresholdPercent 50, unbounded period
	seed.Policy = PolicyAuto
	only := seed
	only.Policy, only.CFSQuotaBurstPercent = PolicyCFSQuotaBurstOnly, 400 // an operator's strategy for its Anolis nodes
	bounded := seed
	bounded.CFSQuotaBurstPeriodSeconds = 60
	zero := seed
	zero.CFSQuotaBurstPeriodSeconds = 0
	huge := seed
	huge.CFSQuotaBurstPercent = 2e9 // beyond what Validate takes; QuotaBurst must not wrap on it
	tests := []struct {
		name     string
		cfg      Config
		in       QuotaInput
		want     int64
		wantStep Step
	}{
		{name: "throttled on an idle pool grows by a fifth", cfg: seed, in: QuotaInput{Base: 100000, Current: 100000, Pool: PoolIdle, Throttled: true}, want: 120000, wantStep: StepRaise},
		{name: "growth stops at 300%", cfg: seed, in: QuotaInput{Base: 100000, Current: 280000, Pool: PoolIdle, Throttled: true}, want: 300000, wantStep: StepRaise},
		{name: "at the ceiling it holds", cfg: seed, in: QuotaInput{Base: 100000, Current: 300000, Pool: PoolIdle, Throttled: true}, want: 300000, wantStep: StepHold},
		{name: "anolis strategy grows to 400%", cfg: only, in: QuotaInput{Base: 50000, Current: 190000, Pool: PoolIdle, Throttled: true}, want: 200000, wantStep: StepRaise},
		{name: "not throttled holds a raise", cfg: seed, in: QuotaInput{Base: 100000, Current: 144000, Pool: PoolIdle}, want: 144000, wantStep: StepHold},
		{name: "not throttled at base stays", cfg: seed, in: QuotaInput{Base: 100000, Current: 100000, Pool: PoolIdle}, want: 100000, wantStep: StepHold},
		{name: "cooling pool holds", cfg: seed, in: QuotaInput{Base: 100000, Current: 144000, Pool: PoolCooling, Throttled: true}, want: 144000, wantStep: StepHold},
		{name: "unknown pool holds", cfg: seed, in: QuotaInput{Base: 100000, Current: 144000, Pool: PoolUnknown, Throttled: true}, want: 144000, wantStep: StepHold},
		{name: "busy pool resets", cfg: seed, in: QuotaInput{Base: 100000, Current: 300000, Pool: PoolBusy, Throttled: true}, want: 100000, wantStep: StepPoolBusy},
		{name: "raise within its period grows", cfg: bounded, in: QuotaInput{Base: 100000, Current: 120000, Pool: PoolIdle, Throttled: true, BurstingFor: 59 * time.Second}, want: 144000, wantStep: StepRaise},
		{name: "raise past its period resets", cfg: bounded, in: QuotaInput{Base: 100000, Current: 300000, Pool: PoolIdle, Throttled: true, BurstingFor: time.Minute}, want: 100000, wantStep: StepPeriod},
		{name: "period 0 allows no raise", cfg: zero, in: QuotaInput{Base: 100000, Current: 100000, Pool: PoolIdle, Throttled: true}, want: 100000, wantStep: StepPeriod},
		{name: "unbounded period never resets by time", cfg: seed, in: QuotaInput{Base: 100000, Current: 300000, Pool: PoolIdle, BurstingFor: 24 * time.Hour}, want: 300000, wantStep: StepHold},
		{name: "a lowered percentage clamps a raise", cfg: seed, in: QuotaInput{Base: 100000, Current: 400000, Pool: PoolIdle}, want: 300000, wantStep: StepHold},
		{name: "a quota below the base goes back up to it", cfg: seed, in: QuotaInput{Base: 100000, Current: 50000, Pool: PoolCooling}, want: 100000, wantStep: StepHold},
		{name: "no limit stays unlimited", cfg: seed, in: QuotaInput{Base: -1, Current: -1, Pool: PoolIdle, Throttled: true}, want: -1, wantStep: StepOff},
		{name: "cpuBurstOnly resets", cfg: Config{Policy: PolicyCPUBurstOnly, CFSQuotaBurstPercent: 300, SharePoolThresholdPercent: 50}, in: QuotaInput{Base: 100000, Current: 200000, Pool: PoolIdle, Throttled: true}, want: 100000, wantStep: StepOff},
		{name: "none resets", cfg: DefaultConfig(), in: QuotaInput{Base: 100000, Current: 200000, Pool: PoolIdle, Throttled: true}, want: 100000, wantStep: StepOff},
		{name: "a percentage past int64 arithmetic stops at the kernel's largest quota", cfg: huge, in: QuotaInput{Base: 1e13, Current: cgroup.MaxQuota - 1, Pool: PoolIdle, Throttled: true}, want: cgroup.MaxQuota, wantStep: StepRaise},
		{name: "the kernel's largest quota stays", cfg: seed, in: QuotaInput{Base: cgroup.MaxQuota, Current: cgroup.MaxQuota, Pool: PoolIdle, Throttled: true}, want: cgroup.MaxQuota, wantStep: StepHold},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, step := QuotaBurst(tt.cfg, tt.in)
			if got != tt.want || step != tt.wantStep {
				t.Fatalf("QuotaBurst = %d (%s), want %d (%s)", got, step, tt.want, tt.wantStep)
			}
		})
	}
}

func TestPool(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig() // threshold 50: cooling from 45
	for _, tt := range []struct {
		usage float64
		want  PoolState
	}{{0, PoolIdle}, {44.9, PoolIdle}, {45, PoolCooling}, {49.9, PoolCooling}, {50, PoolBusy}, {130, PoolBusy}} {
		if got := cfg.Pool(tt.usage); got != tt.want {
			t.Errorf("Pool(%v) = %s, want %s", tt.usage, got, tt.want)
		}
	}
}

// FuzzQuotaBurst: a decided quota is never below the limit's nor above the ceiling (nor the kernel's
// largest quota), a raise never shrinks the quota, and the ceiling never falls as the percentage rises.
func FuzzQuotaBurst(f *testing.F) {
	f.Add(int64(100000), int64(120000), int64(300), int64(400), true)
	f.Add(int64(1e13), int64(1e13), int64(2e9), int64(math.MaxInt64), true)
	f.Add(int64(cgroup.MaxQuota), int64(-1), int64(100), int64(100000), false)
	f.Add(int64(math.MaxInt64), int64(math.MaxInt64), int64(math.MaxInt64), int64(math.MaxInt64), true)
	f.Fuzz(func(t *testing.T, base, cur, p1, p2 int64, throttled bool) {
		cfg := DefaultConfig()
		cfg.Policy = PolicyAuto
		cfg.CFSQuotaBurstPercent = min(p1, p2)
		got, step := QuotaBurst(cfg, QuotaInput{Base: base, Current: cur, Pool: PoolIdle, Throttled: throttled})
		if base <= 0 {
			if got != base {
				t.Fatalf("QuotaBurst of no limit (%d) = %d", base, got)
			}
			return
		}
		ceiling := cfg.Ceiling(base)
		if got < min(base, cgroup.MaxQuota) || got > ceiling || got > cgroup.MaxQuota {
			t.Fatalf("QuotaBurst(%d, %d, %d%%) = %d, outside [%d, %d]", base, cur, cfg.CFSQuotaBurstPercent, got, base, ceiling)
		}
		if step == StepRaise && got <= min(max(cur, base), ceiling) {
			t.Fatalf("a raise from %d went to %d", cur, got)
		}
		cfg.CFSQuotaBurstPercent = max(p1, p2)
		if hi := cfg.Ceiling(base); hi < ceiling {
			t.Fatalf("Ceiling(%d) falls from %d to %d as the percentage rises", base, ceiling, hi)
		}
	})
}
