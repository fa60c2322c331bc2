package slo

import (
	"math"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tandemkit/tandem/config/batchwindow"
)

// Defaults that are not a field value: Koordinator derives them at the point of use.
const (
	// evictLowerGapPercent is how far below an eviction threshold eviction stops when no lower bound is set.
	evictLowerGapPercent = 2
	// defaultCPUEvictThresholdPercent applies when cpuEvictThresholdPercent is unset.
	defaultCPUEvictThresholdPercent = 65
	// unset stands, in the defaults, for the knobs whose resolved value depends on whether the operator
	// set them (lower bounds derived from their thresholds, the CPU satisfaction pair) until
	// finishResourceThreshold replaces it. Validate skips it: no operator means this number.
	unset = math.MinInt64
)

// DefaultConfig returns a Config with no section: each resolves to Koordinator's defaults. The values follow
// Koordinator's current sloconfig defaults (cpuBurstPercent 100, system-config unset); older Koordinator
// releases defaulted cpuBurstPercent to 1000 and system-config to 100/150/0, which only matters when the key
// is absent.
func DefaultConfig() *Config { return &Config{} }

// defaultResolved is every section's defaults, the bottom layer of ForNode and of Validate's views.
func defaultResolved() Resolved {
	return Resolved{
		Colocation:        defaultColocation(),
		ResourceThreshold: defaultResourceThreshold(),
		ResourceQOS:       defaultResourceQOS(),
		CPUBurst:          defaultCPUBurst(),
		BatchWindows:      batchwindow.Defaults(),
	}
}

// settings returns the field of r that section key resolves into.
func (r *Resolved) settings(key string) any {
	switch key {
	case ColocationConfigKey:
		return &r.Colocation
	case ResourceThresholdConfigKey:
		return &r.ResourceThreshold
	case ResourceQOSConfigKey:
		return &r.ResourceQOS
	case CPUBurstConfigKey:
		return &r.CPUBurst
	case SystemConfigKey:
		return &r.System
	case HostApplicationConfigKey:
		return &r.HostApplications
	case BatchWindowConfigKey:
		return &r.BatchWindows
	case DryRunConfigKey:
		return &r.DryRun
	}
	return nil
}

func defaultColocation() ColocationSettings {
	return ColocationSettings{
		MetricAggregateDurationSeconds: 300,
		MetricReportIntervalSeconds:    60,
		MetricAggregatePolicy: AggregatePolicy{Durations: []metav1.Duration{
			{Duration: 5 * time.Minute}, {Duration: 10 * time.Minute}, {Duration: 30 * time.Minute},
		}},
		MetricMemoryCollectPolicy:     UsageWithoutPageCache,
		CPUReclaimThresholdPercent:    60,
		CPUCalculatePolicy:            CalculateByPodUsage,
		MemoryReclaimThresholdPercent: 65,
		MemoryCalculatePolicy:         CalculateByPodUsage,
		DegradeTimeMinutes:            15,
		UpdateTimeThresholdSeconds:    300,
		ResourceDiffThreshold:         0.1,
		MidCPUThresholdPercent:        100,
		MidMemoryThresholdPercent:     100,
		BatchCPUThresholdPercent:      100,
		BatchMemoryThresholdPercent:   100,
	}
}

func defaultResourceThreshold() ResourceThresholdSettings {
	return ResourceThresholdSettings{
		CPUSuppressThresholdPercent:        65,
		CPUSuppressPolicy:                  CPUSuppressByCPUSet,
		MemoryEvictThresholdPercent:        70,
		MemoryEvictLowerPercent:            unset,
		CPUEvictBESatisfactionUpperPercent: unset,
		CPUEvictBESatisfactionLowerPercent: unset,
		CPUEvictBEUsageThresholdPercent:    90,
		CPUEvictTimeWindowSeconds:          unset,
		CPUEvictThresholdPercent:           unset,
		CPUEvictLowerPercent:               unset,
		CPUEvictPolicy:                     EvictByRealLimit,
		StealHeadroom:                      StealHeadroomAuto,
		StealThresholdPercent:              5,
		BECFSPeriodMicros:                  1000000,
		LSWaitThresholdMicros:              4000,
	}
}

// finishResourceThreshold derives the knobs Koordinator derives from others once every layer is decoded.
func finishResourceThreshold(s *ResourceThresholdSettings) {
	s.CPUEvictBySatisfaction = s.CPUEvictBESatisfactionUpperPercent != unset && s.CPUEvictBESatisfactionLowerPercent != unset
	orDefault(&s.MemoryEvictLowerPercent, s.MemoryEvictThresholdPercent-evictLowerGapPercent)
	orDefault(&s.CPUEvictThresholdPercent, defaultCPUEvictThresholdPercent)
	orDefault(&s.CPUEvictLowerPercent, s.CPUEvictThresholdPercent-evictLowerGapPercent)
	orDefault(&s.CPUEvictTimeWindowSeconds, 0)
	orDefault(&s.CPUEvictBESatisfactionUpperPercent, 0)
	orDefault(&s.CPUEvictBESatisfactionLowerPercent, 0)
}

func orDefault(p *int64, v int64) {
	if *p == unset {
		*p = v
	}
}

func defaultClass(groupIdentity int64, coreExpeller bool, wmarkScalePermill, wmarkMinAdj, catEnd int64) ClassSettings {
	return ClassSettings{
		CPUQOS:     CPUQOSSettings{GroupIdentity: groupIdentity, CoreExpeller: coreExpeller},
		MemoryQOS:  MemoryQOSSettings{WmarkRatio: 95, WmarkScalePermill: wmarkScalePermill, WmarkMinAdj: wmarkMinAdj},
		ResctrlQOS: ResctrlQOSSettings{CatRangeEndPercent: catEnd, MBAPercent: 100},
	}
}

func defaultResourceQOS() ResourceQOSSettings {
	q := ResourceQOSSettings{
		Policies: ResourceQOSPolicies{CPUPolicy: CPUQOSPolicyGroupIdentity, NetQOSPolicy: NetQOSPolicyTC},
		LSR:      defaultClass(2, true, 20, -25, 100),
		LS:       defaultClass(2, true, 20, -25, 100),
		BE:       defaultClass(-1, false, 20, 50, 30),
		// System pods get the "off" values: no async reclaim, no watermark adjustment.
		System: defaultClass(0, false, 50, 0, 100),
	}
	q.System.MemoryQOS.WmarkRatio = 0
	// cgroupRoot is accepted, not applied: it gets systemClass's values so that what an operator writes
	// there is checked against the same ranges.
	q.CgroupRoot = q.System
	// BE.CPUQOS.YieldThreads stays false, as Koordinator has no such key: in two bench/colocation runs it
	// raised LS pods' p99 above plain Kubernetes' at 400 rps (1.31-1.57x solo against 1.05-1.41x), and
	// a default that makes LS worse than plain Kubernetes is none (docs/colocation.md).
	return q
}

func defaultCPUBurst() CPUBurstSettings {
	return CPUBurstSettings{
		Policy:                     CPUBurstNone,
		CPUBurstPercent:            100,
		CFSQuotaBurstPercent:       300,
		CFSQuotaBurstPeriodSeconds: -1,
		SharePoolThresholdPercent:  50,
	}
}
