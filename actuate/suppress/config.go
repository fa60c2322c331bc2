package suppress

import (
	"errors"
	"fmt"
	"time"

	"github.com/tandemkit/tandem/config/slo"
	"github.com/tandemkit/tandem/metrics/collector"
	"github.com/tandemkit/tandem/resource/cgroup"
	"github.com/tandemkit/tandem/resource/qos"
)

// Policy is how BE CPU is suppressed; the values are resource-threshold-config's cpuSuppressPolicy.
type Policy = slo.CPUSuppressPolicy

// The policies.
const (
	PolicyCPUSet   = slo.CPUSuppressByCPUSet
	PolicyCFSQuota = slo.CPUSuppressByCFSQuota
)

// Config is resource-threshold-config's suppress part plus how the loop behaves.
type Config struct {
	// Enable switches suppression on; off lifts any suppression in force.
	Enable bool `json:"enable"`
	// CPUSuppressThresholdPercent is the share of the node's CPU that LS, the system and BE together may
	// use before BE is suppressed.
	CPUSuppressThresholdPercent int64 `json:"cpuSuppressThresholdPercent"`
	// CPUSuppressMinPercent is the share of the node BE keeps however busy LS is (and never less than
	// one CPU).
	CPUSuppressMinPercent int64 `json:"cpuSuppressMinPercent"`
	// CPUSuppressPolicy is "cpuset" or "cfsQuota".
	CPUSuppressPolicy Policy `json:"cpuSuppressPolicy"`
	// ReservedMilli is the CPU the node reserves for the system (kubelet's system-reserved plus
	// kube-reserved); the formula subtracts it when the measured system use is lower.
	ReservedMilli int64 `json:"reservedMilli"`
	// WidenAfterSamples is how many consecutive samples must ask for more before BE widens.
	WidenAfterSamples int `json:"widenAfterSamples"`
	// WidenStepPercent caps one widening step, as a share of the node (at least one CPU).
	WidenStepPercent int64 `json:"widenStepPercent"`
	// BECgroupParent is the BE pods' parent cgroup, for the cfsQuota policy.
	BECgroupParent string `json:"beCgroupParent"`
	// CFSPeriodMicros is the CFS period written with the quota.
	CFSPeriodMicros int64 `json:"cfsPeriodMicros"`
	// Interval is how often the loop looks when no new snapshot wakes it (it also runs on every
	// collector update), so a stalled collector cannot freeze a suppression in place unseen.
	Interval time.Duration `json:"interval"`
	// DryRun decides the BE limit as for real, the limiters' ceilings included, and reports it through
	// Deps.Dry instead of applying it; switched on, it lifts what is in force (dry-run-config's
	// suppress; FromSLO leaves it as base has it).
	DryRun bool `json:"dryRun"`
}

// DefaultConfig is Koordinator's default threshold (65%, cpuset) with suppression off, as in
// Koordinator, and a widening that waits three samples and moves by a tenth of the node.
func DefaultConfig() Config {
	return Config{
		CPUSuppressThresholdPercent: 65,
		CPUSuppressPolicy:           PolicyCPUSet,
		WidenAfterSamples:           3,
		WidenStepPercent:            10,
		BECgroupParent:              "/kubepods/besteffort",
		CFSPeriodMicros:             100000,
		Interval:                    time.Second,
	}
}

// FromSLO returns base with the knobs of resource-threshold-config resolved for this node.
func FromSLO(base Config, r slo.ResourceThresholdSettings) Config {
	out := base
	out.Enable = r.Enable
	out.CPUSuppressThresholdPercent = r.CPUSuppressThresholdPercent
	out.CPUSuppressMinPercent = r.CPUSuppressMinPercent
	if r.CPUSuppressPolicy != "" {
		out.CPUSuppressPolicy = r.CPUSuppressPolicy
	}
	if r.BECFSPeriodMicros > 0 {
		out.CFSPeriodMicros = r.BECFSPeriodMicros
	}
	return out
}

// Validate reports every bad field by its name.
func (c Config) Validate() error {
	var errs []error
	if c.CPUSuppressThresholdPercent < 0 || c.CPUSuppressThresholdPercent > 100 {
		errs = append(errs, fmt.Errorf("cpuSuppressThresholdPercent: %d is not a percentage (0-100)", c.CPUSuppressThresholdPercent))
	}
	if c.CPUSuppressMinPercent < 0 || c.CPUSuppressMinPercent > 100 {
		errs = append(errs, fmt.Errorf("cpuSuppressMinPercent: %d is not a percentage (0-100)", c.CPUSuppressMinPercent))
	}
	if c.CPUSuppressPolicy != PolicyCPUSet && c.CPUSuppressPolicy != PolicyCFSQuota {
		errs = append(errs, fmt.Errorf("cpuSuppressPolicy: %q is not cpuset or cfsQuota", c.CPUSuppressPolicy))
	}
	if c.ReservedMilli < 0 {
		errs = append(errs, fmt.Errorf("reservedMilli: %d is negative", c.ReservedMilli))
	}
	if c.WidenAfterSamples < 1 {
		errs = append(errs, fmt.Errorf("widenAfterSamples: %d, want 1 or more", c.WidenAfterSamples))
	}
	if c.WidenStepPercent < 1 || c.WidenStepPercent > 100 {
		errs = append(errs, fmt.Errorf("widenStepPercent: %d, want 1-100", c.WidenStepPercent))
	}
	if c.CPUSuppressPolicy == PolicyCFSQuota && c.BECgroupParent == "" {
		errs = append(errs, errors.New("beCgroupParent: empty; the cfsQuota policy needs the BE parent cgroup"))
	}
	if c.CFSPeriodMicros < 1000 || c.CFSPeriodMicros > 1000000 {
		errs = append(errs, fmt.Errorf("cfsPeriodMicros: %d, want 1000-1000000", c.CFSPeriodMicros))
	}
	if c.Interval <= 0 {
		errs = append(errs, fmt.Errorf("interval: %v, want more than 0", c.Interval))
	}
	return errors.Join(errs...)
}

// Want is the formula for one snapshot, in milli-cores, floored at the minimum BE keeps and capped at
// the node's capacity. Exported for the benchmark and for tests that check the formula alone. The
// arithmetic saturates and a usage below zero (a counter glitch) counts as none: a sum that wrapped
// would hand BE the whole node while LS is busiest.
func (c Config) Want(snap *collector.Snapshot) int64 {
	capacity := snap.Capacity.CPUMilli
	var hp int64
	for _, ctr := range snap.Containers {
		if ctr.QoS != qos.BE {
			hp = cgroup.Add(hp, max(ctr.CPUMilli, 0))
		}
	}
	used := cgroup.Add(hp, max(snap.System.CPUMilli, c.ReservedMilli, 0))
	want := cgroup.Add(cgroup.Scale(capacity, c.CPUSuppressThresholdPercent, 100), -used)
	floor := max(cgroup.Scale(capacity, c.CPUSuppressMinPercent, 100), 1000)
	return min(max(want, floor), max(capacity, 1000))
}
