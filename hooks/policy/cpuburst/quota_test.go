package cpuburst

import (
	"testing"
	"time"
)

func TestQuotaBurst(t *testing.T) {
	t.Parallel()
	seed := DefaultConfig() // cfsQuotaBurstPercent 300, sharePoolThresholdPercent 50, unbounded period
	seed.Policy = PolicyAuto
	only := seed
	only.Policy, only.CFSQuotaBurstPercent = PolicyCFSQuotaBurstOnly, 400 // seed 004's anolis node strategy
	bounded := seed
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
