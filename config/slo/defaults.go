package slo

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Defaults that are not a field value: Koordinator derives them at the point of use.
const (
	// evictLowerGapPercent is how far below an eviction threshold eviction stops when no lower bound is set.
	evictLowerGapPercent = 2
	// defaultCPUEvictBEUsageThresholdPercent applies when cpuEvictBEUsageThresholdPercent is unset.
	defaultCPUEvictBEUsageThresholdPercent = 90
	// defaultCPUEvictThresholdPercent applies when cpuEvictThresholdPercent is unset.
	defaultCPUEvictThresholdPercent = 65
)

// DefaultConfig returns Koordinator's defaults written out as a Config, as if the operator had put every
// default in the ConfigMap: ForNode on it equals ForNode on an empty Config. The values follow Koordinator's
// current sloconfig defaults (cpuBurstPercent 100, system-config unset); older Koordinator releases
// defaulted cpuBurstPercent to 1000 and system-config to 100/150/0, which only matters when the key is absent.
func DefaultConfig() *Config {
	return &Config{
		Colocation:        &ColocationConfig{ColocationStrategy: defaultColocationStrategy()},
		ResourceThreshold: &ResourceThresholdConfig{ClusterStrategy: defaultResourceThresholdStrategy()},
		ResourceQOS:       &ResourceQOSConfig{ClusterStrategy: defaultResourceQOSStrategy()},
		CPUBurst:          &CPUBurstConfig{ClusterStrategy: defaultCPUBurstStrategy()},
		System:            &SystemConfig{ClusterStrategy: defaultSystemStrategy()},
	}
}

func ptr[T any](v T) *T { return &v }

func defaultColocationStrategy() ColocationStrategy {
	return ColocationStrategy{
		Enable:                         ptr(false),
		MetricAggregateDurationSeconds: ptr[int64](300),
		MetricReportIntervalSeconds:    ptr[int64](60),
		MetricAggregatePolicy: &AggregatePolicy{Durations: []metav1.Duration{
			{Duration: 5 * time.Minute}, {Duration: 10 * time.Minute}, {Duration: 30 * time.Minute},
		}},
		MetricMemoryCollectPolicy:      ptr(UsageWithoutPageCache),
		CPUReclaimThresholdPercent:     ptr[int64](60),
		CPUCalculatePolicy:             ptr(CalculateByPodUsage),
		MemoryReclaimThresholdPercent:  ptr[int64](65),
		MemoryCalculatePolicy:          ptr(CalculateByPodUsage),
		DegradeTimeMinutes:             ptr[int64](15),
		UpdateTimeThresholdSeconds:     ptr[int64](300),
		ResourceDiffThreshold:          ptr(0.1),
		MidCPUThresholdPercent:         ptr[int64](100),
		MidMemoryThresholdPercent:      ptr[int64](100),
		MidUnallocatedPercent:          ptr[int64](0),
		MidStaticCPUReservedPercent:    ptr[int64](0),
		MidStaticMemoryReservedPercent: ptr[int64](0),
		// batch thresholds stay unset: no cap beyond what the node has free.
	}
}

func defaultResourceThresholdStrategy() *ResourceThresholdStrategy {
	return &ResourceThresholdStrategy{
		Enable:                      ptr(false),
		CPUSuppressThresholdPercent: ptr[int64](65),
		CPUSuppressPolicy:           CPUSuppressByCPUSet,
		MemoryEvictThresholdPercent: ptr[int64](70),
		CPUEvictPolicy:              EvictByRealLimit,
	}
}

func defaultCPUQOS(groupIdentity int64, coreExpeller bool) *CPUQOSConfig {
	return &CPUQOSConfig{Enable: ptr(false), GroupIdentity: ptr(groupIdentity), SchedIdle: ptr[int64](0), CoreExpeller: ptr(coreExpeller)}
}

func withYieldThreads(c *CPUQOSConfig) *CPUQOSConfig {
	c.YieldThreads = ptr(true)
	return c
}

func defaultMemoryQOS(wmarkRatio, wmarkScalePermill, wmarkMinAdj int64) *MemoryQOSConfig {
	return &MemoryQOSConfig{
		Enable:            ptr(false),
		MinLimitPercent:   ptr[int64](0),
		LowLimitPercent:   ptr[int64](0),
		ThrottlingPercent: ptr[int64](0),
		WmarkRatio:        ptr(wmarkRatio),
		WmarkScalePermill: ptr(wmarkScalePermill),
		WmarkMinAdj:       ptr(wmarkMinAdj),
		PriorityEnable:    ptr[int64](0),
		Priority:          ptr[int64](0),
		OomKillGroup:      ptr[int64](0),
	}
}

func defaultResctrlQOS(catEnd int64) *ResctrlQOSConfig {
	return &ResctrlQOSConfig{Enable: ptr(false), CATRangeStartPercent: ptr[int64](0), CATRangeEndPercent: ptr(catEnd), MBAPercent: ptr[int64](100)}
}

func defaultResourceQOSStrategy() *ResourceQOSStrategy {
	return &ResourceQOSStrategy{
		Policies: &ResourceQOSPolicies{CPUPolicy: ptr(CPUQOSPolicyGroupIdentity), NetQOSPolicy: ptr(NetQOSPolicyTC)},
		LSRClass: &ResourceQOS{
			CPUQOS:     defaultCPUQOS(2, true),
			MemoryQOS:  defaultMemoryQOS(95, 20, -25),
			ResctrlQOS: defaultResctrlQOS(100),
		},
		LSClass: &ResourceQOS{
			CPUQOS:     defaultCPUQOS(2, true),
			MemoryQOS:  defaultMemoryQOS(95, 20, -25),
			ResctrlQOS: defaultResctrlQOS(100),
		},
		BEClass: &ResourceQOS{
			// Tandem's default for BE, which Koordinator does not have: measured in docs/colocation.md.
			CPUQOS:     withYieldThreads(defaultCPUQOS(-1, false)),
			MemoryQOS:  defaultMemoryQOS(95, 20, 50),
			ResctrlQOS: defaultResctrlQOS(30),
		},
		// System pods get the "off" values: no async reclaim, no watermark adjustment.
		SystemClass: &ResourceQOS{
			CPUQOS:     defaultCPUQOS(0, false),
			MemoryQOS:  defaultMemoryQOS(0, 50, 0),
			ResctrlQOS: defaultResctrlQOS(100),
		},
	}
}

func defaultCPUBurstStrategy() *CPUBurstStrategy {
	return &CPUBurstStrategy{
		Policy:                     CPUBurstNone,
		CPUBurstPercent:            ptr[int64](100),
		CFSQuotaBurstPercent:       ptr[int64](300),
		CFSQuotaBurstPeriodSeconds: ptr[int64](-1),
		SharePoolThresholdPercent:  ptr[int64](50),
	}
}

// defaultSystemStrategy sets nothing: Tandem must not change a sysctl the operator did not ask for.
func defaultSystemStrategy() *SystemStrategy {
	return &SystemStrategy{}
}
