package cpuburst

import (
	"time"

	"github.com/tandemkit/tandem/resource/cgroup"
)

// Koordinator's steps (koordlet's qosmanager cpuburst plugin): a throttled container's quota grows by a
// fifth per step, and between 90% of sharePoolThresholdPercent and the threshold the pool is cooling,
// where nothing grows and nothing resets.
const (
	growNum, growDen = 6, 5
	coolingPercent   = 90
)

// PoolState is the shared pool's state for the CFS quota burst.
type PoolState int

// The pool states, by the pool's CPU usage against sharePoolThresholdPercent.
const (
	// PoolUnknown: no usage yet. Nothing grows, nothing resets for it.
	PoolUnknown PoolState = iota
	// PoolIdle: usage below 90% of the threshold; throttled containers may grow.
	PoolIdle
	// PoolCooling: usage from 90% of the threshold up to it; raised quotas stay, none grows.
	PoolCooling
	// PoolBusy: usage at or above the threshold; every raised quota goes back to its base.
	PoolBusy
)

func (s PoolState) String() string {
	switch s {
	case PoolIdle:
		return "idle"
	case PoolCooling:
		return "cooling"
	case PoolBusy:
		return "busy"
	default:
		return "unknown"
	}
}

// Pool classifies the shared pool's usage, in percent of its CPUs (above 100 when the system's own use,
// which counts, spills over), against sharePoolThresholdPercent.
func (c Config) Pool(usagePercent float64) PoolState {
	th := float64(c.SharePoolThresholdPercent)
	switch {
	case usagePercent >= th:
		return PoolBusy
	case usagePercent >= th*coolingPercent/100:
		return PoolCooling
	default:
		return PoolIdle
	}
}

// QuotaInput is what one step of the CFS quota burst decides a container's quota from.
type QuotaInput struct {
	// Base is the quota the container's limit gives (limit × period, as the runtime was given it); 0 or
	// less means no limit.
	Base int64
	// Current is the quota in the container's cgroup now.
	Current int64
	// Pool is the shared pool's state.
	Pool PoolState
	// Throttled says whether the container was throttled during the last sample.
	Throttled bool
	// BurstingFor is how long the raise in progress has lasted; zero when there is none. A raise whose
	// period ran out counts as lasting until the container runs a sample unthrottled at its base: one
	// burst is bounded, not one write.
	BurstingFor time.Duration
}

// Step is what a QuotaBurst decision did, for logs and metrics.
type Step string

// The steps.
const (
	// StepRaise: throttled on an idle pool, the quota grows by a fifth, up to the ceiling.
	StepRaise Step = "raise"
	// StepHold: the quota stays (kept within [base, ceiling]).
	StepHold Step = "hold"
	// StepOff: the policy has no quota burst, or the container no limit: the base.
	StepOff Step = "off"
	// StepPoolBusy: the pool is at or above the threshold: the base.
	StepPoolBusy Step = "poolBusy"
	// StepPeriod: the raise lasted cfsQuotaBurstPeriodSeconds: the base.
	StepPeriod Step = "period"
)

// Ceiling is the most a container's quota may be raised to: cfsQuotaBurstPercent of base, at most the
// kernel's largest quota. Unlimited stays unlimited.
func (c Config) Ceiling(base int64) int64 {
	if base <= 0 {
		return base
	}
	return min(max(cgroup.Scale(base, c.CFSQuotaBurstPercent, 100), base), maxCFSRuntimeUs)
}

// QuotaBurst decides a container's CFS quota for one step of the CFS quota burst, as Koordinator's koordlet
// does: a container throttled while the shared pool is idle grows by a fifth of its quota per step, up to
// cfsQuotaBurstPercent of its base; while the pool cools (90% of sharePoolThresholdPercent up to it), or
// the container is no longer throttled, the quota stays. It goes back to the base at once when the pool is
// at or above the threshold, when the raise has lasted cfsQuotaBurstPeriodSeconds (-1: unbounded; 0: no
// raise at all), and
// when the policy has no quota burst. Unlimited containers stay unlimited.
//
// Koordinator steps a raised quota down by a fifth per step on a busy pool and bounds a raise with a
// token bucket of usage above the limit; here the reset is immediate (the ConfigMap's own words: burst is
// "stopped and reset to avoid machine overload") and the bound is the raise's duration, as
// cfsQuotaBurstPeriodSeconds describes it ("the maximum period of once cfs quota burst").
func QuotaBurst(cfg Config, in QuotaInput) (int64, Step) {
	if in.Base <= 0 || !cfg.RaisesQuota() {
		return in.Base, StepOff
	}
	if in.Pool == PoolBusy {
		return in.Base, StepPoolBusy
	}
	if cfg.CFSQuotaBurstPeriodSeconds >= 0 && in.BurstingFor >= time.Duration(cfg.CFSQuotaBurstPeriodSeconds)*time.Second {
		return in.Base, StepPeriod
	}
	ceiling := cfg.Ceiling(in.Base)
	cur := min(max(in.Current, in.Base), ceiling)
	if in.Throttled && in.Pool == PoolIdle && cur < ceiling {
		return min(max(cgroup.Scale(cur, growNum, growDen), cur+1), ceiling), StepRaise
	}
	return cur, StepHold
}
