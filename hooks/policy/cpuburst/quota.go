package cpuburst

import (
	"time"

	"github.com/tandemkit/tandem/resource/cgroup"
)

// QuotaInput is what the CFS quota burst decision looks at.
type QuotaInput struct {
	// Base is the quota the container's limit gives (limit × period); 0 or less means no limit.
	Base int64
	// PoolUsagePercent is the shared pool's CPU usage, in percent of its CPUs.
	PoolUsagePercent float64
	// BurstingFor is how long the quota has been above Base; zero when it is not.
	BurstingFor time.Duration
}

// QuotaBurst decides a container's CFS quota under the CFS quota burst: raised to cfsQuotaBurstPercent
// of Base while the shared pool's usage is below sharePoolThresholdPercent, back to Base when the pool is
// at or above it, when a raise has lasted cfsQuotaBurstPeriodSeconds, or when the policy has no quota
// burst. Unlimited containers stay unlimited.
//
// Nothing calls it yet: the pool's usage comes from the node metrics, and the loop that samples it and
// sends UpdateContainerResources belongs with them.
func QuotaBurst(cfg Config, in QuotaInput) int64 {
	if in.Base <= 0 || !cfg.quotaBurst() {
		return in.Base
	}
	if in.PoolUsagePercent >= float64(cfg.SharePoolThresholdPercent) {
		return in.Base
	}
	if cfg.CFSQuotaBurstPeriodSeconds >= 0 && in.BurstingFor >= time.Duration(cfg.CFSQuotaBurstPeriodSeconds)*time.Second {
		return in.Base
	}
	raised := cgroup.Scale(in.Base, cfg.CFSQuotaBurstPercent, 100)
	return min(max(raised, in.Base), maxCFSRuntimeUs)
}
