package slo

import (
	"encoding/json"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// The five ConfigMap keys Tandem reads, spelled as in Koordinator's slo-controller-config.
const (
	ColocationConfigKey        = "colocation-config"
	ResourceThresholdConfigKey = "resource-threshold-config"
	ResourceQOSConfigKey       = "resource-qos-config"
	CPUBurstConfigKey          = "cpu-burst-config"
	SystemConfigKey            = "system-config"
)

// SectionKeys lists the ConfigMap keys Tandem reads, in the order errors and matches are reported.
func SectionKeys() []string {
	return []string{ColocationConfigKey, ResourceThresholdConfigKey, ResourceQOSConfigKey, CPUBurstConfigKey, SystemConfigKey}
}

// Config is the slo-controller-config as written by the operator. A nil section means "not in the ConfigMap",
// which resolves to Koordinator's defaults. Every strategy field is a pointer (or an empty string / nil
// collection) so that "unset" stays distinct from zero and node strategies override field by field.
type Config struct {
	Colocation        *ColocationConfig        `json:"colocation-config,omitempty"`
	ResourceThreshold *ResourceThresholdConfig `json:"resource-threshold-config,omitempty"`
	ResourceQOS       *ResourceQOSConfig       `json:"resource-qos-config,omitempty"`
	CPUBurst          *CPUBurstConfig          `json:"cpu-burst-config,omitempty"`
	System            *SystemConfig            `json:"system-config,omitempty"`

	// warnings are things an operator should fix that did not stop parsing; see Warnings.
	warnings []string
	// refused are the sections Parse refused; see Refused.
	refused []SectionError
}

// SectionError is one top-level key of the ConfigMap that Tandem refused: a section that does not parse
// or validate, or a key that is no section. Err names the key (and the path, line and column within it).
type SectionError struct {
	Key string
	Err error
}

func (e SectionError) Error() string { return e.Err.Error() }

func (e SectionError) Unwrap() error { return e.Err }

// Refused returns the keys Parse refused, in key order. A refused section is unset in the Config (see
// KeepLastGood); callers report each one to the operator (log line, Kubernetes Event naming the key).
func (c *Config) Refused() []SectionError {
	if c == nil {
		return nil
	}
	return append([]SectionError(nil), c.refused...)
}

// Warnings returns what parsing tolerated but the operator should fix (a key matched case-insensitively,
// an empty section, a Koordinator key Tandem does not read). Callers log them once per load.
func (c *Config) Warnings() []string {
	if c == nil {
		return nil
	}
	return append([]string(nil), c.warnings...)
}

// NodeProfile names a node strategy and selects the nodes it applies to. A nil selector matches no node
// and an empty one matches every node (metav1.LabelSelectorAsSelector); Validate rejects both, as
// Koordinator's admission webhook does, because neither is what an operator means.
type NodeProfile struct {
	Name         string                `json:"name,omitempty"`
	NodeSelector *metav1.LabelSelector `json:"nodeSelector,omitempty"`
}

// CalculatePolicy selects how reclaimable (batch) resources are computed.
type CalculatePolicy string

// Calculate policies of colocation-config.
const (
	CalculateByPodUsage           CalculatePolicy = "usage"
	CalculateByPodRequest         CalculatePolicy = "request"
	CalculateByPodMaxUsageRequest CalculatePolicy = "maxUsageRequest"
)

// MemoryCollectPolicy selects how node memory usage is measured.
type MemoryCollectPolicy string

// Memory collect policies of colocation-config.
const (
	UsageWithHotPageCache MemoryCollectPolicy = "usageWithHotPageCache"
	UsageWithoutPageCache MemoryCollectPolicy = "usageWithoutPageCache"
	UsageWithPageCache    MemoryCollectPolicy = "usageWithPageCache"
)

// MidReclaimModeStatic computes mid-tier resources from static reserved percentages.
const MidReclaimModeStatic = "static"

// ColocationConfig is the colocation-config key: the cluster strategy inline, plus per-node overrides.
type ColocationConfig struct {
	ColocationStrategy
	NodeConfigs []NodeColocationConfig `json:"nodeConfigs,omitempty"`
}

// NodeColocationConfig overrides the cluster colocation strategy on the nodes its selector matches.
type NodeColocationConfig struct {
	NodeProfile
	ColocationStrategy
}

// AggregatePolicy lists the windows over which node metrics are aggregated.
type AggregatePolicy struct {
	Durations []metav1.Duration `json:"durations,omitempty"`
}

// ColocationStrategy drives batch-resource reclaim (metrics/reclaim) and metric reporting.
type ColocationStrategy struct {
	Enable                         *bool                `json:"enable,omitempty"`
	MetricAggregateDurationSeconds *int64               `json:"metricAggregateDurationSeconds,omitempty"`
	MetricReportIntervalSeconds    *int64               `json:"metricReportIntervalSeconds,omitempty"`
	MetricAggregatePolicy          *AggregatePolicy     `json:"metricAggregatePolicy,omitempty"`
	MetricMemoryCollectPolicy      *MemoryCollectPolicy `json:"metricMemoryCollectPolicy,omitempty"`

	CPUReclaimThresholdPercent    *int64           `json:"cpuReclaimThresholdPercent,omitempty"`
	CPUCalculatePolicy            *CalculatePolicy `json:"cpuCalculatePolicy,omitempty"`
	MemoryReclaimThresholdPercent *int64           `json:"memoryReclaimThresholdPercent,omitempty"`
	MemoryCalculatePolicy         *CalculatePolicy `json:"memoryCalculatePolicy,omitempty"`
	DegradeTimeMinutes            *int64           `json:"degradeTimeMinutes,omitempty"`
	UpdateTimeThresholdSeconds    *int64           `json:"updateTimeThresholdSeconds,omitempty"`
	ResourceDiffThreshold         *float64         `json:"resourceDiffThreshold,omitempty"`

	MidReclaimMode                 *string `json:"midReclaimMode,omitempty"`
	MidCPUThresholdPercent         *int64  `json:"midCPUThresholdPercent,omitempty"`
	MidMemoryThresholdPercent      *int64  `json:"midMemoryThresholdPercent,omitempty"`
	MidUnallocatedPercent          *int64  `json:"midUnallocatedPercent,omitempty"`
	MidStaticCPUReservedPercent    *int64  `json:"midStaticCPUReservedPercent,omitempty"`
	MidStaticMemoryReservedPercent *int64  `json:"midStaticMemoryReservedPercent,omitempty"`

	BatchCPUThresholdPercent    *int64 `json:"batchCPUThresholdPercent,omitempty"`
	BatchMemoryThresholdPercent *int64 `json:"batchMemoryThresholdPercent,omitempty"`

	// Extensions carries third-party fields Koordinator passes through untyped. Tandem accepts and
	// ignores them so that an operator's ConfigMap with extensions still loads.
	Extensions map[string]json.RawMessage `json:"extensions,omitempty"`
}

// CPUSuppressPolicy selects how BE CPU is suppressed.
type CPUSuppressPolicy string

// CPU suppress policies of resource-threshold-config.
const (
	CPUSuppressByCPUSet   CPUSuppressPolicy = "cpuset"
	CPUSuppressByCFSQuota CPUSuppressPolicy = "cfsQuota"
)

// CPUEvictPolicy selects what the BE CPU satisfaction is measured against.
type CPUEvictPolicy string

// CPU evict policies of resource-threshold-config.
const (
	EvictByRealLimit   CPUEvictPolicy = "evictByRealLimit"
	EvictByAllocatable CPUEvictPolicy = "evictByAllocatable"
)

// ResourceThresholdConfig is the resource-threshold-config key.
type ResourceThresholdConfig struct {
	ClusterStrategy *ResourceThresholdStrategy      `json:"clusterStrategy,omitempty"`
	NodeStrategies  []NodeResourceThresholdStrategy `json:"nodeStrategies,omitempty"`
}

// NodeResourceThresholdStrategy overrides the cluster strategy on the nodes its selector matches.
type NodeResourceThresholdStrategy struct {
	NodeProfile
	ResourceThresholdStrategy
}

// ResourceThresholdStrategy drives BE CPU suppression and BE eviction (metrics/suppress, metrics/evict).
type ResourceThresholdStrategy struct {
	Enable                             *bool             `json:"enable,omitempty"`
	CPUSuppressThresholdPercent        *int64            `json:"cpuSuppressThresholdPercent,omitempty"`
	CPUSuppressMinPercent              *int64            `json:"cpuSuppressMinPercent,omitempty"`
	CPUSuppressPolicy                  CPUSuppressPolicy `json:"cpuSuppressPolicy,omitempty"`
	MemoryEvictThresholdPercent        *int64            `json:"memoryEvictThresholdPercent,omitempty"`
	MemoryEvictLowerPercent            *int64            `json:"memoryEvictLowerPercent,omitempty"`
	CPUEvictBESatisfactionUpperPercent *int64            `json:"cpuEvictBESatisfactionUpperPercent,omitempty"`
	CPUEvictBESatisfactionLowerPercent *int64            `json:"cpuEvictBESatisfactionLowerPercent,omitempty"`
	CPUEvictBEUsageThresholdPercent    *int64            `json:"cpuEvictBEUsageThresholdPercent,omitempty"`
	CPUEvictTimeWindowSeconds          *int64            `json:"cpuEvictTimeWindowSeconds,omitempty"`
	CPUEvictThresholdPercent           *int64            `json:"cpuEvictThresholdPercent,omitempty"`
	CPUEvictLowerPercent               *int64            `json:"cpuEvictLowerPercent,omitempty"`
	CPUEvictPolicy                     CPUEvictPolicy    `json:"cpuEvictPolicy,omitempty"`
	EvictEnabledPriorityThreshold      *int32            `json:"evictEnabledPriorityThreshold,omitempty"`
}

// CPUQOSPolicy selects the kernel mechanism behind cpuQOS.
type CPUQOSPolicy string

// CPU QoS policies of resource-qos-config.policies.
const (
	CPUQOSPolicyGroupIdentity CPUQOSPolicy = "groupIdentity"
	CPUQOSPolicyCoreSched     CPUQOSPolicy = "coreSched"
)

// NetQOSPolicy selects the network QoS implementation (accepted, not used by Tandem).
type NetQOSPolicy string

// Network QoS policies of resource-qos-config.policies.
const (
	NetQOSPolicyTC        NetQOSPolicy = "tc"
	NetQOSPolicyTerwayQoS NetQOSPolicy = "terway-qos"
)

// ResourceQOSConfig is the resource-qos-config key.
type ResourceQOSConfig struct {
	ClusterStrategy *ResourceQOSStrategy      `json:"clusterStrategy,omitempty"`
	NodeStrategies  []NodeResourceQOSStrategy `json:"nodeStrategies,omitempty"`
}

// NodeResourceQOSStrategy overrides the cluster strategy on the nodes its selector matches.
type NodeResourceQOSStrategy struct {
	NodeProfile
	ResourceQOSStrategy
}

// ResourceQOSPolicies chooses mechanisms for the whole node.
type ResourceQOSPolicies struct {
	CPUPolicy    *CPUQOSPolicy `json:"cpuPolicy,omitempty"`
	NetQOSPolicy *NetQOSPolicy `json:"netQOSPolicy,omitempty"`
}

// ResourceQOSStrategy holds per-QoS-class settings. Koordinator has no lseClass: LSE pods use lsrClass.
type ResourceQOSStrategy struct {
	Policies    *ResourceQOSPolicies `json:"policies,omitempty"`
	LSRClass    *ResourceQOS         `json:"lsrClass,omitempty"`
	LSClass     *ResourceQOS         `json:"lsClass,omitempty"`
	BEClass     *ResourceQOS         `json:"beClass,omitempty"`
	SystemClass *ResourceQOS         `json:"systemClass,omitempty"`
	CgroupRoot  *ResourceQOS         `json:"cgroupRoot,omitempty"`
}

// ResourceQOS is one QoS class's settings.
type ResourceQOS struct {
	CPUQOS     *CPUQOSConfig     `json:"cpuQOS,omitempty"`
	MemoryQOS  *MemoryQOSConfig  `json:"memoryQOS,omitempty"`
	BlkIOQOS   *BlkIOQOSConfig   `json:"blkioQOS,omitempty"`
	ResctrlQOS *ResctrlQOSConfig `json:"resctrlQOS,omitempty"`
	NetworkQOS *NetworkQOSConfig `json:"networkQOS,omitempty"`
}

// CPUQOSConfig is cpuQOS: group identity (Anolis cpu.bvt_warp_ns) or core scheduling with cpu.idle.
type CPUQOSConfig struct {
	Enable        *bool  `json:"enable,omitempty"`
	GroupIdentity *int64 `json:"groupIdentity,omitempty"`
	SchedIdle     *int64 `json:"schedIdle,omitempty"`
	CoreExpeller  *bool  `json:"coreExpeller,omitempty"`
	// YieldThreads is Tandem's, not Koordinator's: give every thread of the class's pods the
	// scheduling that makes batch work yield at once to any other thread on the node, host daemons
	// included (metrics/yield: SCHED_BATCH with a 20 ms slice; Linux 6.12+, nothing on older kernels).
	// beClass only; on by default there.
	YieldThreads *bool `json:"yieldThreads,omitempty"`
}

// MemoryQOSConfig is memoryQOS: memory.min/low/high percentages and Anolis watermark knobs.
type MemoryQOSConfig struct {
	Enable               *bool  `json:"enable,omitempty"`
	MinLimitPercent      *int64 `json:"minLimitPercent,omitempty"`
	LowLimitPercent      *int64 `json:"lowLimitPercent,omitempty"`
	ThrottlingPercent    *int64 `json:"throttlingPercent,omitempty"`
	WmarkRatio           *int64 `json:"wmarkRatio,omitempty"`
	WmarkScalePermill    *int64 `json:"wmarkScalePermill,omitempty"`
	WmarkMinAdj          *int64 `json:"wmarkMinAdj,omitempty"`
	PageCacheLimitEnable *int64 `json:"pageCacheLimitEnable,omitempty"`
	PageCacheLimitSync   *int64 `json:"pageCacheLimitSync,omitempty"`
	PageCacheLimitSize   *int64 `json:"pageCacheLimitSize,omitempty"`
	PriorityEnable       *int64 `json:"priorityEnable,omitempty"`
	Priority             *int64 `json:"priority,omitempty"`
	OomKillGroup         *int64 `json:"oomKillGroup,omitempty"`
}

// ResctrlQOSConfig is resctrlQOS: the class's L3 CAT range and MBA percentage.
type ResctrlQOSConfig struct {
	Enable               *bool  `json:"enable,omitempty"`
	CATRangeStartPercent *int64 `json:"catRangeStartPercent,omitempty"`
	CATRangeEndPercent   *int64 `json:"catRangeEndPercent,omitempty"`
	MBAPercent           *int64 `json:"mbaPercent,omitempty"`
}

// BlkIOQOSConfig is blkioQOS (accepted so an operator's ConfigMap loads; Tandem does not apply it).
type BlkIOQOSConfig struct {
	Enable *bool         `json:"enable,omitempty"`
	Blocks []BlockConfig `json:"blocks,omitempty"`
}

// BlockConfig is one block device or volume group of blkioQOS.
type BlockConfig struct {
	Name      string        `json:"name,omitempty"`
	BlockType string        `json:"type,omitempty"`
	IOCfg     BlockIOConfig `json:"ioCfg,omitempty"`
}

// BlockIOConfig holds one block's throttles and blk-iocost model.
type BlockIOConfig struct {
	ReadIOPS            *int64 `json:"readIOPS,omitempty"`
	WriteIOPS           *int64 `json:"writeIOPS,omitempty"`
	ReadBPS             *int64 `json:"readBPS,omitempty"`
	WriteBPS            *int64 `json:"writeBPS,omitempty"`
	IOWeightPercent     *int64 `json:"ioWeightPercent,omitempty"`
	ReadLatency         *int64 `json:"readLatency,omitempty"`
	WriteLatency        *int64 `json:"writeLatency,omitempty"`
	ReadLatencyPercent  *int64 `json:"readLatencyPercent,omitempty"`
	WriteLatencyPercent *int64 `json:"writeLatencyPercent,omitempty"`
	EnableUserModel     *bool  `json:"enableUserModel,omitempty"`
	ModelReadBPS        *int64 `json:"modelReadBPS,omitempty"`
	ModelWriteBPS       *int64 `json:"modelWriteBPS,omitempty"`
	ModelReadSeqIOPS    *int64 `json:"modelReadSeqIOPS,omitempty"`
	ModelWriteSeqIOPS   *int64 `json:"modelWriteSeqIOPS,omitempty"`
	ModelReadRandIOPS   *int64 `json:"modelReadRandIOPS,omitempty"`
	ModelWriteRandIOPS  *int64 `json:"modelWriteRandIOPS,omitempty"`
}

// NetworkQOSConfig is networkQOS (accepted so an operator's ConfigMap loads; Tandem does not apply it).
type NetworkQOSConfig struct {
	Enable         *bool               `json:"enable,omitempty"`
	IngressRequest *intstr.IntOrString `json:"ingressRequest,omitempty"`
	IngressLimit   *intstr.IntOrString `json:"ingressLimit,omitempty"`
	EgressRequest  *intstr.IntOrString `json:"egressRequest,omitempty"`
	EgressLimit    *intstr.IntOrString `json:"egressLimit,omitempty"`
}

// CPUBurstPolicy selects which CPU burst mechanisms run.
type CPUBurstPolicy string

// CPU burst policies of cpu-burst-config.
const (
	CPUBurstNone      CPUBurstPolicy = "none"
	CPUBurstOnly      CPUBurstPolicy = "cpuBurstOnly"
	CFSQuotaBurstOnly CPUBurstPolicy = "cfsQuotaBurstOnly"
	CPUBurstAuto      CPUBurstPolicy = "auto"
)

// CPUBurstConfig is the cpu-burst-config key.
type CPUBurstConfig struct {
	ClusterStrategy *CPUBurstStrategy      `json:"clusterStrategy,omitempty"`
	NodeStrategies  []NodeCPUBurstStrategy `json:"nodeStrategies,omitempty"`
}

// NodeCPUBurstStrategy overrides the cluster strategy on the nodes its selector matches.
type NodeCPUBurstStrategy struct {
	NodeProfile
	CPUBurstStrategy
}

// CPUBurstStrategy drives cpu.cfs_burst_us and the cfs-quota burst of LS containers.
type CPUBurstStrategy struct {
	Policy                     CPUBurstPolicy `json:"policy,omitempty"`
	CPUBurstPercent            *int64         `json:"cpuBurstPercent,omitempty"`
	CFSQuotaBurstPercent       *int64         `json:"cfsQuotaBurstPercent,omitempty"`
	CFSQuotaBurstPeriodSeconds *int64         `json:"cfsQuotaBurstPeriodSeconds,omitempty"`
	SharePoolThresholdPercent  *int64         `json:"sharePoolThresholdPercent,omitempty"`
}

// SystemConfig is the system-config key.
type SystemConfig struct {
	ClusterStrategy *SystemStrategy      `json:"clusterStrategy,omitempty"`
	NodeStrategies  []NodeSystemStrategy `json:"nodeStrategies,omitempty"`
}

// NodeSystemStrategy overrides the cluster strategy on the nodes its selector matches.
type NodeSystemStrategy struct {
	NodeProfile
	SystemStrategy
}

// SystemStrategy holds node-wide kernel settings (sysctls and Anolis scheduler knobs).
type SystemStrategy struct {
	MinFreeKbytesFactor       *int64             `json:"minFreeKbytesFactor,omitempty"`
	WatermarkScaleFactor      *int64             `json:"watermarkScaleFactor,omitempty"`
	MemcgReapBackGround       *int64             `json:"memcgReapBackGround,omitempty"`
	PageCacheLimitEnabled     *int64             `json:"pageCacheLimitEnabled,omitempty"`
	SchedGroupIdentityEnabled *int64             `json:"schedGroupIdentityEnabled,omitempty"`
	SchedIdleSaverWmark       *int64             `json:"schedIdleSaverWmark,omitempty"`
	SchedFeatures             map[string]bool    `json:"schedFeatures,omitempty"`
	TotalNetworkBandwidth     *resource.Quantity `json:"totalNetworkBandwidth,omitempty"`
}
