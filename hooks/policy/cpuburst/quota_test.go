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
	only.Policy, only.CFSQuotaBurstPercent = PolicyCFSQuotaBurstOnly, 400 // seed 004's anolis node strategy
	bounded := seed
	huge := seed
	huge.CFSQuotaBurstPercent = 2e9 // beyond what Validate takes; QuotaBurst must not wrap on it
	bounded.CFSQuotaBurstPeriodSeconds = 60
	tests := []struct {
		name string
		cfg  Config
		in   QuotaInput
		want int64
	}{
		{name: "idle pool raises to 300%", cfg: seed, in: QuotaInput{Base: 100000, PoolUsagePercent: 20}, want: 300000},
		{name: "anolis strategy raises to 400%", cfg: only, in: QuotaInput{Base: 50000, PoolUsagePercent: 49.9}, want: 200000},
		{name: "pool at the threshold resets", cfg: seed, in: QuotaInput{Base: 100000, PoolUsagePercent: 50}, want: 100000},
		{name: "busy pool resets", cfg: seed, in: QuotaInput{Base: 100000, PoolUsagePercent: 90}, want: 100000},
		{name: "raise within its period", cfg: bounded, in: QuotaInput{Base: 100000, BurstingFor: 59 * time.Second}, want: 300000},
		{name: "raise past its period resets", cfg: bounded, in: QuotaInput{Base: 100000, BurstingFor: time.Minute}, want: 100000},
		{name: "unbounded period never resets by time", cfg: seed, in: QuotaInput{Base: 100000, BurstingFor: 24 * time.Hour}, want: 300000},
		{name: "no limit stays unlimited", cfg: seed, in: QuotaInput{Base: -1}, want: -1},
		{name: "cpuBurstOnly leaves the quota", cfg: Config{Policy: PolicyCPUBurstOnly, CFSQuotaBurstPercent: 300, SharePoolThresholdPercent: 50}, in: QuotaInput{Base: 100000}, want: 100000},
		{name: "none leaves the quota", cfg: DefaultConfig(), in: QuotaInput{Base: 100000}, want: 100000},
		{name: "a percentage past int64 arithmetic raises to the kernel's largest quota", cfg: huge, in: QuotaInput{Base: 1e13}, want: cgroup.MaxQuota},
		{name: "the kernel's largest quota stays", cfg: seed, in: QuotaInput{Base: cgroup.MaxQuota}, want: cgroup.MaxQuota},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := QuotaBurst(tt.cfg, tt.in); got != tt.want {
				t.Fatalf("QuotaBurst = %d, want %d", got, tt.want)
			}
		})
	}
}

// FuzzQuotaBurst: a raised quota is never below the limit's (nor the kernel's largest quota), never
// beyond what the kernel takes, and never falls as the percentage rises.
func FuzzQuotaBurst(f *testing.F) {
	f.Add(int64(100000), int64(300), int64(400))
	f.Add(int64(1e13), int64(2e9), int64(math.MaxInt64))
	f.Add(int64(cgroup.MaxQuota), int64(100), int64(100000))
	f.Add(int64(math.MaxInt64), int64(math.MaxInt64), int64(math.MaxInt64))
	f.Fuzz(func(t *testing.T, base, p1, p2 int64) {
		cfg := DefaultConfig()
		cfg.Policy = PolicyAuto
		raise := func(p int64) int64 {
			cfg.CFSQuotaBurstPercent = p
			return QuotaBurst(cfg, QuotaInput{Base: base})
		}
		lo, hi := raise(min(p1, p2)), raise(max(p1, p2))
		if base <= 0 {
			if lo != base {
				t.Fatalf("QuotaBurst of no limit (%d) = %d", base, lo)
			}
			return
		}
		if lo < min(base, cgroup.MaxQuota) || lo > cgroup.MaxQuota {
			t.Fatalf("QuotaBurst(%d, %d%%) = %d, outside [%d, %d]", base, min(p1, p2), lo, min(base, cgroup.MaxQuota), int64(cgroup.MaxQuota))
		}
		if hi < lo {
			t.Fatalf("QuotaBurst(%d) falls from %d to %d as the percentage rises", base, lo, hi)
		}
	})
}
