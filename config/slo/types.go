package slo

import (
	"encoding/json"
	"path"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/tandemkit/tandem/config/batchwindow"
	"github.com/tandemkit/tandem/resource/qos"
)

// The six ConfigMap keys Tandem reads, spelled as in Koordinator's slo-controller-config.
const (
	ColocationConfigKey        = "colocation-config"
	ResourceThresholdConfigKey = "resource-threshold-config"
	ResourceQOSConfigKey       = "resource-qos-config"
	CPUBurstConfigKey          = "cpu-burst-config"
	SystemConfigKey            = "system-config"
	HostApplicationConfigKey   = "host-application-config"
)

// Tandem's own sections. They live in the same ConfigMap as Koordinator's, written the same way (an
// inline cluster strategy beside nodeConfigs), because an operator then has one object to edit, one
// set of node selectors and merge rules to learn, and one reload path with the same keep-last-good
// behaviour; koord-manager reads only its own keys, so a ConfigMap shared with it keeps working.
const (
	// BatchWindowConfigKey is the clock-driven batch windows (config/batchwindow).
	BatchWindowConfigKey = "batch-window-config"
	// DryRunConfigKey switches actions that change running pods to reporting what they would do.
	DryRunConfigKey = "dry-run-config"
)

// SectionKeys lists the ConfigMap keys Tandem reads, in the order errors and matches are reported.
func SectionKeys() []string {
	return []string{ColocationConfigKey, ResourceThresholdConfigKey, ResourceQOSConfigKey, CPUBurstConfigKey, SystemConfigKey,
		HostApplicationConfigKey, BatchWindowConfigKey, DryRunConfigKey}
}

// Config is the slo-controller-config as written by the operator: for each section read, its strategies
// as checked by Parse. A missing section resolves to Koordinator's defaults. Strategies are kept as the
// operator wrote them (with keys spelled as Tandem's fields), because a node strategy overrides only the
// keys it writes: see ForNode.
type Config struct {
	sections map[string]*section

	// warnings are things an operator should fix that did not stop parsing; see Warnings.
	warnings []string
	// refused are the sections Parse refused; see Refused.
	refused []SectionError
}

// section is one ConfigMap key: its cluster strategy (nil when not written) and node strategies.
type section struct {
	cluster *strategy
	nodes   []strategy
}

// strategy is one strategy: the JSON object it decodes from (without name and nodeSelector), its node
// profile (zero for the cluster strategy) and its key path, for messages.
type strategy struct {
	NodeProfile
	path string
	keys map[string]any
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

// Resolved is the configuration that applies to one node: every section's defaults, overlaid by the
// cluster strategy, overlaid by the first node strategy whose selector matches the node. It is decoded
// afresh for every call and shares no memory with the Config, so it can be handed out as a value.
//
// Each section has one type, which is both what a strategy decodes into and what consumers read: a
// strategy's JSON is decoded onto the value beneath it, so a key it does not write keeps that value.
type Resolved struct {
	Colocation        ColocationSettings
	ResourceThreshold ResourceThresholdSettings
	ResourceQOS       ResourceQOSSettings
	CPUBurst          CPUBurstSettings
	System            SystemSettings
	// HostApplications lists the processes outside Kubernetes that get a QoS class's treatment
	// (actuate/hostapp). Unlike the other sections, a matching node config replaces the cluster's list
	// whole, as in Koordinator.
	HostApplications HostApplicationSettings
	// BatchWindows is batch-window-config: when batch may use the node.
	BatchWindows batchwindow.Settings
	// DryRun is dry-run-config: which actions only report what they would do.
	DryRun DryRunSettings

	// Matches lists, per section in SectionKeys order, the node strategies that matched this node.
	// Sections where none matched are absent.
	Matches []NodeMatch
}

// DryRunSettings is dry-run-config, Tandem's: for each action that changes a running pod, true makes
// it do everything but the change (it decides, logs "would", records an Event saying "would", counts in
// tandem_dry_run_actions_total{action}), so that an operator can watch what Tandem would do before
// letting it. All false by default.
type DryRunSettings struct {
	// Suppress: BE CPU suppression (resource-threshold-config, and the steal headroom and LS wait guard
	// that hold it lower) computes its limit but leaves the BE cgroups as they are.
	Suppress bool `json:"suppress"`
	// Evict: BE eviction on memory or CPU satisfaction (resource-threshold-config) chooses its pods but
	// does not evict them.
	Evict bool `json:"evict"`
	// WindowEvict: eviction when a batch window has closed (batch-window-config) chooses its pods but does
	// not evict them. The capacity a window withdraws is still withdrawn: that changes no running pod.
	WindowEvict bool `json:"windowEvict"`
	// CFSQuotaBurst: the cfs-quota burst of LS containers (cpu-burst-config) decides each quota but does not
	// raise or lower it.
	CFSQuotaBurst bool `json:"cfsQuotaBurst"`
}

// NodeMatch records which node strategies of one section selected the node. Applied is the first, the
// only one that takes effect (as in Koordinator); Ignored are later matches, which Koordinator's admission
// webhook would have rejected as overlapping and which an operator should hear about.
type NodeMatch struct {
	Section string
	Applied string
	Ignored []string
}

// NodeProfile names a node strategy and selects the nodes it applies to. Validate rejects a missing or
// empty selector, as Koordinator's admission webhook does: a nil one matches no node and an empty one
// every node, and neither is what an operator means.
type NodeProfile struct {
	Name         string                `json:"name"`
	NodeSelector *metav1.LabelSelector `json:"nodeSelector"`
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

// ColocationSettings is colocation-config: the cluster strategy written inline in the section, beside
// its node overrides (nodeConfigs). It drives batch-resource reclaim (metrics/reclaim) and reporting.
type ColocationSettings struct {
	Enable                         bool                `json:"enable"`
	MetricAggregateDurationSeconds int64               `json:"metricAggregateDurationSeconds"`
	MetricReportIntervalSeconds    int64               `json:"metricReportIntervalSeconds"`
	MetricAggregatePolicy          AggregatePolicy     `json:"metricAggregatePolicy"`
	MetricMemoryCollectPolicy      MemoryCollectPolicy `json:"metricMemoryCollectPolicy"`

	CPUReclaimThresholdPercent    int64           `json:"cpuReclaimThresholdPercent"`
	CPUCalculatePolicy            CalculatePolicy `json:"cpuCalculatePolicy"`
	MemoryReclaimThresholdPercent int64           `json:"memoryReclaimThresholdPercent"`
	MemoryCalculatePolicy         CalculatePolicy `json:"memoryCalculatePolicy"`
	DegradeTimeMinutes            int64           `json:"degradeTimeMinutes"`
	UpdateTimeThresholdSeconds    int64           `json:"updateTimeThresholdSeconds"`
	ResourceDiffThreshold         float64         `json:"resourceDiffThreshold"`

	// MidReclaimMode is "" unless the operator chose "static".
	MidReclaimMode                 string `json:"midReclaimMode"`
	MidCPUThresholdPercent         int64  `json:"midCPUThresholdPercent"`
	MidMemoryThresholdPercent      int64  `json:"midMemoryThresholdPercent"`
	MidUnallocatedPercent          int64  `json:"midUnallocatedPercent"`
	MidStaticCPUReservedPercent    int64  `json:"midStaticCPUReservedPercent"`
	MidStaticMemoryReservedPercent int64  `json:"midStaticMemoryReservedPercent"`

	// BatchCPUThresholdPercent caps batch CPU at this share of the node. It defaults to 100: the batch
	// formula never exceeds the node total, so a 100% cap is the same as none.
	BatchCPUThresholdPercent int64 `json:"batchCPUThresholdPercent"`
	// BatchMemoryThresholdPercent is BatchCPUThresholdPercent for memory.
	BatchMemoryThresholdPercent int64 `json:"batchMemoryThresholdPercent"`

	// Extensions carries third-party fields Koordinator passes through untyped. Tandem accepts and
	// ignores them so that an operator's ConfigMap with extensions still loads.
	Extensions map[string]json.RawMessage `json:"extensions"`
}

// AggregatePolicy lists the windows over which node metrics are aggregated.
type AggregatePolicy struct {
	Durations []metav1.Duration `json:"durations"`
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

// ResourceThresholdSettings is resource-threshold-config's strategy: BE CPU suppression and BE eviction
// (actuate/suppress, actuate/evict).
type ResourceThresholdSettings struct {
	Enable                      bool  `json:"enable"`
	CPUSuppressThresholdPercent int64 `json:"cpuSuppressThresholdPercent"`
	// CPUSuppressMinPercent is the floor BE suppression never goes below; 0 when unset.
	CPUSuppressMinPercent       int64             `json:"cpuSuppressMinPercent"`
	CPUSuppressPolicy           CPUSuppressPolicy `json:"cpuSuppressPolicy"`
	MemoryEvictThresholdPercent int64             `json:"memoryEvictThresholdPercent"`
	// MemoryEvictLowerPercent defaults to MemoryEvictThresholdPercent - 2.
	MemoryEvictLowerPercent int64 `json:"memoryEvictLowerPercent"`
	// CPUEvictBySatisfaction is true only when both satisfaction bounds are set: without them Koordinator
	// does not evict BE pods for low CPU satisfaction, and neither should Tandem. A bound not set is 0.
	CPUEvictBySatisfaction             bool  `json:"-"`
	CPUEvictBESatisfactionUpperPercent int64 `json:"cpuEvictBESatisfactionUpperPercent"`
	CPUEvictBESatisfactionLowerPercent int64 `json:"cpuEvictBESatisfactionLowerPercent"`
	CPUEvictBEUsageThresholdPercent    int64 `json:"cpuEvictBEUsageThresholdPercent"`
	// CPUEvictTimeWindowSeconds is 0 when unset: the consumer uses twice its metric collection interval,
	// as koordlet does, since that interval is not part of this configuration.
	CPUEvictTimeWindowSeconds int64 `json:"cpuEvictTimeWindowSeconds"`
	CPUEvictThresholdPercent  int64 `json:"cpuEvictThresholdPercent"`
	// CPUEvictLowerPercent defaults to CPUEvictThresholdPercent - 2.
	CPUEvictLowerPercent          int64          `json:"cpuEvictLowerPercent"`
	CPUEvictPolicy                CPUEvictPolicy `json:"cpuEvictPolicy"`
	EvictEnabledPriorityThreshold *int32         `json:"evictEnabledPriorityThreshold"`
	// StealHeadroom is Tandem's, not Koordinator's: whether BE is held below the CPU a virtual machine's
	// host really gives (metrics/headroom). "auto" (the default) turns it on where the node is a VM.
	// It runs whatever Enable says: it guards against the host, not against LS load.
	StealHeadroom StealHeadroomMode `json:"stealHeadroom"`
	// StealThresholdPercent is Tandem's: how much steal above its level without BE, in percent of one
	// CPU, holds BE back.
	StealThresholdPercent int64 `json:"stealThresholdPercent"`
	// BECFSPeriodMicros is Tandem's: the CFS period of the quota cfsQuota suppression puts on the BE
	// pods' parent (the steal headroom alone keeps 100 ms), 1000-1000000; 1 s by default. A latency-sensitive
	// thread that wakes beside BE is late about once per period of that quota (bench/wakeup), and at the
	// kernel's 100 ms cfsQuota suppression made LS p99 2.7-3.0x solo where 1 s made it 1.1-1.6x
	// (bench/colocation, docs/colocation.md).
	BECFSPeriodMicros int64 `json:"beCFSPeriodMicros"`
	// LSWaitGuard is Tandem's: whether BE is held back while LS pods wait for a CPU (their run-queue
	// latency, from the eBPF collector) and given back when holding it did not help (metrics/interference).
	// Off by default. Like the steal headroom it runs whatever Enable says.
	LSWaitGuard bool `json:"lsWaitGuard"`
	// LSWaitThresholdMicros is Tandem's: the LS run-queue p99 above which LS suffers, in microseconds
	// (counted from the next power of two); 4000 by default.
	LSWaitThresholdMicros int64 `json:"lsWaitThresholdMicros"`
}

// StealHeadroomMode switches the steal-aware BE headroom.
type StealHeadroomMode string

// Steal headroom modes of resource-threshold-config.stealHeadroom.
const (
	StealHeadroomAuto StealHeadroomMode = "auto"
	StealHeadroomOn   StealHeadroomMode = "on"
	StealHeadroomOff  StealHeadroomMode = "off"
)

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

// ResourceQOSSettings is resource-qos-config's strategy: settings per QoS class. Koordinator has no
// lseClass: LSE pods use lsrClass (see Class).
type ResourceQOSSettings struct {
	Policies   ResourceQOSPolicies `json:"policies"`
	LSR        ClassSettings       `json:"lsrClass"`
	LS         ClassSettings       `json:"lsClass"`
	BE         ClassSettings       `json:"beClass"`
	System     ClassSettings       `json:"systemClass"`
	CgroupRoot ClassSettings       `json:"cgroupRoot"`
}

// ResourceQOSPolicies chooses mechanisms for the whole node.
type ResourceQOSPolicies struct {
	CPUPolicy    CPUQOSPolicy `json:"cpuPolicy"`
	NetQOSPolicy NetQOSPolicy `json:"netQOSPolicy"`
}

// Class returns the settings of a QoS class (its name in any case). LSE uses lsrClass, as in koordlet; ok
// is false for a class the ConfigMap has no settings for.
func (q ResourceQOSSettings) Class(c qos.Class) (settings ClassSettings, ok bool) {
	switch qos.Class(strings.ToUpper(string(c))) {
	case qos.LSE, qos.LSR:
		return q.LSR, true
	case qos.LS:
		return q.LS, true
	case qos.BE:
		return q.BE, true
	case qos.System:
		return q.System, true
	}
	return ClassSettings{}, false
}

// ClassSettings is one QoS class's settings. cpuQOS, memoryQOS and resctrlQOS are applied by the
// policies (hooks/policy); beClass.blkioQOS by the agent on the BE parent (resource/blkio); networkQOS is
// accepted and validated but not applied.
type ClassSettings struct {
	CPUQOS     CPUQOSSettings     `json:"cpuQOS"`
	MemoryQOS  MemoryQOSSettings  `json:"memoryQOS"`
	BlkIOQOS   BlkIOQOSSettings   `json:"blkioQOS"`
	ResctrlQOS ResctrlQOSSettings `json:"resctrlQOS"`
	NetworkQOS NetworkQOSSettings `json:"networkQOS"`
}

// CPUQOSSettings is cpuQOS: group identity (Anolis cpu.bvt_warp_ns) or core scheduling with cpu.idle.
type CPUQOSSettings struct {
	Enable        bool  `json:"enable"`
	GroupIdentity int64 `json:"groupIdentity"`
	SchedIdle     int64 `json:"schedIdle"`
	CoreExpeller  bool  `json:"coreExpeller"`
	// YieldThreads is Tandem's, not Koordinator's: give every thread of the class's pods the
	// scheduling that makes batch work yield at once to any other thread on the node, host daemons
	// included (actuate/yield: SCHED_BATCH with a 20 ms slice; Linux 6.12+, nothing on older kernels).
	// beClass only; on by default there.
	YieldThreads bool `json:"yieldThreads"`
}

// MemoryQOSSettings is memoryQOS: memory.min/low/high percentages and Anolis watermark knobs.
type MemoryQOSSettings struct {
	// Enable switches the class on; a disabled class's cgroups are left as kubelet set them.
	Enable bool `json:"enable"`
	// MinLimitPercent sets memory.min (hard protection from reclaim) to this percentage of the request.
	MinLimitPercent int64 `json:"minLimitPercent"`
	// LowLimitPercent sets memory.low (best-effort protection) to this percentage of the request.
	LowLimitPercent int64 `json:"lowLimitPercent"`
	// ThrottlingPercent sets memory.high (reclaim and throttling above it) to this percentage of the
	// limit, or "max" for a container without one.
	ThrottlingPercent int64 `json:"throttlingPercent"`
	// WmarkRatio sets memory.wmark_ratio (Anolis): the cgroup's memory reclaims in the background once it
	// passes this percentage of its limit, [0, 100]; 0 is the kernel's "no background reclaim".
	WmarkRatio int64 `json:"wmarkRatio"`
	// WmarkScalePermill sets memory.wmark_scale_factor (Anolis): how far below the high watermark one
	// background reclaim goes, in per mille of the limit, [1, 1000]; 0 leaves the kernel's 50.
	WmarkScalePermill int64 `json:"wmarkScalePermill"`
	// WmarkMinAdj sets memory.wmark_min_adj (Anolis): the percentage by which the node's min watermark
	// moves for this cgroup, [-25, 50]; negative lets LS allocate deeper before direct reclaim, positive
	// sends BE into it earlier. 0 is no adjustment.
	WmarkMinAdj int64 `json:"wmarkMinAdj"`
	// PageCacheLimitEnable, PageCacheLimitSync and PageCacheLimitSize are accepted so that an operator's
	// Koordinator ConfigMap loads, and reported as unsupported: Tandem sets no page cache limit.
	PageCacheLimitEnable int64 `json:"pageCacheLimitEnable"`
	PageCacheLimitSync   int64 `json:"pageCacheLimitSync"`
	PageCacheLimitSize   int64 `json:"pageCacheLimitSize"`
	// PriorityEnable sets memory.use_priority_oom (Anolis): 1 makes the OOM killer choose among the
	// cgroup's children by memory.priority.
	PriorityEnable int64 `json:"priorityEnable"`
	// Priority sets memory.priority (Anolis), [0, 12]: the higher, the later the OOM killer picks the
	// cgroup when its parent uses priority OOM. 0 is the kernel's default.
	Priority int64 `json:"priority"`
	// OomKillGroup sets memory.oom.group (cgroup v2, Anolis v1): 1 makes the OOM killer kill every task of
	// the cgroup together, never leaving a pod or container half-killed.
	OomKillGroup int64 `json:"oomKillGroup"`
}

// ResctrlQOSSettings is resctrlQOS: the class's L3 CAT range and MBA percentage.
type ResctrlQOSSettings struct {
	Enable bool `json:"enable"`
	// CatRangeStartPercent and CatRangeEndPercent select the class's share of the L3 cache ways.
	CatRangeStartPercent int64 `json:"catRangeStartPercent"`
	CatRangeEndPercent   int64 `json:"catRangeEndPercent"`
	// MBAPercent caps the class's memory bandwidth, in percent.
	MBAPercent int64 `json:"mbaPercent"`
}

// BlkIOQOSSettings is blkioQOS: block I/O caps and weight per device or volume group; applied for beClass
// only, as koordlet does (resource/blkio).
type BlkIOQOSSettings struct {
	Enable bool          `json:"enable"`
	Blocks []BlockConfig `json:"blocks"`
}

// BlockConfig is one block device or volume group of blkioQOS.
type BlockConfig struct {
	Name      string        `json:"name"`
	BlockType string        `json:"type"`
	IOCfg     BlockIOConfig `json:"ioCfg"`
}

// BlockIOConfig holds one block's throttles and blk-iocost model; nil is unset.
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

// NetworkQOSSettings is networkQOS (accepted so an operator's ConfigMap loads; Tandem does not apply it).
type NetworkQOSSettings struct {
	Enable         bool                `json:"enable"`
	IngressRequest *intstr.IntOrString `json:"ingressRequest"`
	IngressLimit   *intstr.IntOrString `json:"ingressLimit"`
	EgressRequest  *intstr.IntOrString `json:"egressRequest"`
	EgressLimit    *intstr.IntOrString `json:"egressLimit"`
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

// CPUBurstSettings is cpu-burst-config's strategy: cpu.cfs_burst_us and the cfs-quota burst of LS
// containers (hooks/policy/cpuburst).
type CPUBurstSettings struct {
	// Policy: none, cpuBurstOnly, cfsQuotaBurstOnly or auto.
	Policy CPUBurstPolicy `json:"policy"`
	// CPUBurstPercent sets cpu.cfs_burst_us to this percentage of the container's CFS quota. The kernel
	// refuses a burst above the quota (EINVAL), so values above 100 act as 100.
	CPUBurstPercent int64 `json:"cpuBurstPercent"`
	// CFSQuotaBurstPercent is the most the CFS quota may be raised to, in percent of the quota the limit
	// gives (300 = three times the limit).
	CFSQuotaBurstPercent int64 `json:"cfsQuotaBurstPercent"`
	// CFSQuotaBurstPeriodSeconds bounds one raised-quota period; -1 means unbounded.
	CFSQuotaBurstPeriodSeconds int64 `json:"cfsQuotaBurstPeriodSeconds"`
	// SharePoolThresholdPercent: while the shared pool's usage is at or above it, quotas go back to the
	// limit's.
	SharePoolThresholdPercent int64 `json:"sharePoolThresholdPercent"`
}

// SystemSettings is system-config's strategy: node-wide sysctls and Anolis scheduler knobs. Its knobs
// are pointers: nil means "leave the kernel's value alone", which no number can say, and these are
// node-wide settings that Tandem must not write unless the operator asked.
type SystemSettings struct {
	MinFreeKbytesFactor       *int64            `json:"minFreeKbytesFactor"`
	WatermarkScaleFactor      *int64            `json:"watermarkScaleFactor"`
	MemcgReapBackGround       *int64            `json:"memcgReapBackGround"`
	PageCacheLimitEnabled     *int64            `json:"pageCacheLimitEnabled"`
	SchedGroupIdentityEnabled *int64            `json:"schedGroupIdentityEnabled"`
	SchedIdleSaverWmark       *int64            `json:"schedIdleSaverWmark"`
	SchedFeatures             map[string]bool   `json:"schedFeatures"`
	TotalNetworkBandwidth     resource.Quantity `json:"totalNetworkBandwidth"`
}

// HostApplicationSettings is host-application-config: applications written inline, beside the node
// overrides (nodeConfigs), as in colocation-config. A node config that matches replaces the list; one that
// writes no applications leaves the node with none, as in Koordinator.
type HostApplicationSettings struct {
	Applications []HostApplication `json:"applications"`
}

// HostApplication is one process group outside Kubernetes (Koordinator's HostApplicationSpec) whose cgroup
// Tandem treats as a pod of its QoS class: its CPU pool, cpu.idle for BE, and its usage counted as that
// class's by reclaim and suppress.
type HostApplication struct {
	// Name identifies the application in logs and tandemctl config; unique in a list.
	Name string `json:"name"`
	// Priority is Koordinator's priority class (koord-prod, koord-mid, koord-batch, koord-free). Accepted
	// and checked so an operator's ConfigMap loads; the treatment follows QoS alone, as in koordlet.
	Priority string `json:"priority"`
	// QoS is LS or BE. LSE and LSR are refused: their CPUs are exclusive allocations made for a
	// container's whole-CPU request, which a host application does not have (koordlet refuses them too).
	QoS qos.Class `json:"qos"`
	// CgroupPath says where the application's cgroup is; nil means <host-latency-sensitive or
	// host-best-effort>/<name> under the cgroup root, as in Koordinator.
	CgroupPath *HostCgroupPath `json:"cgroupPath"`
	// Strategy is Koordinator's HostApplicationStrategy, which has no fields yet.
	Strategy *HostApplicationStrategy `json:"strategy"`
}

// HostApplicationStrategy is empty in Koordinator; accepted so a ConfigMap that writes {} loads.
type HostApplicationStrategy struct{}

// HostCgroupPath is ${base}/${parentDir}/${relativePath}; base depends on kubelet's cgroup driver.
type HostCgroupPath struct {
	// Base is CgroupRoot (the default), Kubepods, KubepodsBurstable or KubepodsBesteffort.
	Base CgroupBase `json:"base"`
	// ParentDir is the directory under Base. Empty means none: Koordinator uses its class default
	// (host-latency-sensitive/, host-best-effort/) only when cgroupPath itself is left out.
	ParentDir string `json:"parentDir"`
	// RelativePath is the application's directory under ParentDir; required.
	RelativePath string `json:"relativePath"`
}

// CgroupBase names the cgroup a host application's path starts from.
type CgroupBase string

// The bases Koordinator defines.
const (
	CgroupBaseRoot               CgroupBase = "CgroupRoot"
	CgroupBaseKubepods           CgroupBase = "Kubepods"
	CgroupBaseKubepodsBurstable  CgroupBase = "KubepodsBurstable"
	CgroupBaseKubepodsBesteffort CgroupBase = "KubepodsBesteffort"
)

// The parent directories Koordinator gives host applications that write no cgroupPath.
const (
	HostLSParentDir = "host-latency-sensitive"
	HostBEParentDir = "host-best-effort"
)

// Cgroup returns the application's cgroup below its base, cleaned and without a leading slash, and the
// base: what actuate/hostapp maps to a path for the node's cgroup driver.
func (a HostApplication) Cgroup() (CgroupBase, string) {
	if a.CgroupPath == nil {
		dir := HostLSParentDir
		if a.QoS == qos.BE {
			dir = HostBEParentDir
		}
		return CgroupBaseRoot, path.Join(dir, a.Name)
	}
	base := a.CgroupPath.Base
	if base == "" {
		base = CgroupBaseRoot
	}
	return base, strings.TrimPrefix(path.Join("/", a.CgroupPath.ParentDir, a.CgroupPath.RelativePath), "/")
}
