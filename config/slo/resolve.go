package slo

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Resolved is the configuration that applies to one node: every section's defaults, overridden by the
// cluster strategy, overridden by the first node strategy whose selector matches the node. Values are plain
// and complete; it shares no memory with the Config, so it can be handed to policies as an immutable value.
type Resolved struct {
	Colocation        ColocationSettings
	ResourceThreshold ResourceThresholdSettings
	ResourceQOS       ResourceQOSSettings
	CPUBurst          CPUBurstSettings
	System            SystemSettings

	// Matches lists, per section in SectionKeys order, the node strategies that matched this node.
	// Sections where none matched are absent.
	Matches []NodeMatch
}

// NodeMatch records which node strategies of one section selected the node. Applied is the first, the
// only one that takes effect (as in Koordinator); Ignored are later matches, which Koordinator's admission
// webhook would have rejected as overlapping and which an operator should hear about.
type NodeMatch struct {
	Section string
	Applied string
	Ignored []string
}

// ColocationSettings is colocation-config resolved for a node.
type ColocationSettings struct {
	Enable                         bool
	MetricAggregateDurationSeconds int64
	MetricReportIntervalSeconds    int64
	MetricAggregateDurations       []time.Duration
	MetricMemoryCollectPolicy      MemoryCollectPolicy
	CPUReclaimThresholdPercent     int64
	CPUCalculatePolicy             CalculatePolicy
	MemoryReclaimThresholdPercent  int64
	MemoryCalculatePolicy          CalculatePolicy
	DegradeTimeMinutes             int64
	UpdateTimeThresholdSeconds     int64
	ResourceDiffThreshold          float64
	// MidReclaimMode is "" unless the operator chose "static".
	MidReclaimMode                 string
	MidCPUThresholdPercent         int64
	MidMemoryThresholdPercent      int64
	MidUnallocatedPercent          int64
	MidStaticCPUReservedPercent    int64
	MidStaticMemoryReservedPercent int64
	// BatchCPUThresholdPercent caps batch CPU at this share of the node. Unset resolves to 100: the batch
	// formula never exceeds the node total, so a 100% cap is the same as none.
	BatchCPUThresholdPercent int64
	// BatchMemoryThresholdPercent is BatchCPUThresholdPercent for memory.
	BatchMemoryThresholdPercent int64
}

// ResourceThresholdSettings is resource-threshold-config resolved for a node.
type ResourceThresholdSettings struct {
	Enable                      bool
	CPUSuppressThresholdPercent int64
	// CPUSuppressMinPercent is the floor BE suppression never goes below; 0 when unset.
	CPUSuppressMinPercent       int64
	CPUSuppressPolicy           CPUSuppressPolicy
	MemoryEvictThresholdPercent int64
	// MemoryEvictLowerPercent defaults to MemoryEvictThresholdPercent - 2.
	MemoryEvictLowerPercent int64
	// CPUEvictBySatisfaction is true only when both satisfaction bounds are set: without them Koordinator
	// does not evict BE pods for low CPU satisfaction, and neither should Tandem.
	CPUEvictBySatisfaction             bool
	CPUEvictBESatisfactionUpperPercent int64
	CPUEvictBESatisfactionLowerPercent int64
	CPUEvictBEUsageThresholdPercent    int64
	// CPUEvictTimeWindowSeconds is 0 when unset: the consumer uses twice its metric collection interval,
	// as koordlet does, since that interval is not part of this configuration.
	CPUEvictTimeWindowSeconds int64
	CPUEvictThresholdPercent  int64
	// CPUEvictLowerPercent defaults to CPUEvictThresholdPercent - 2.
	CPUEvictLowerPercent int64
	CPUEvictPolicy       CPUEvictPolicy
}

// ResourceQOSSettings is resource-qos-config resolved for a node.
type ResourceQOSSettings struct {
	CPUPolicy CPUQOSPolicy
	LSR       ClassSettings
	LS        ClassSettings
	BE        ClassSettings
	System    ClassSettings
}

// ClassSettings is one QoS class's CPU, memory and RDT settings.
type ClassSettings struct {
	CPUQOS     CPUQOSSettings
	MemoryQOS  MemoryQOSSettings
	ResctrlQOS ResctrlQOSSettings
}

// CPUQOSSettings is cpuQOS resolved.
type CPUQOSSettings struct {
	Enable        bool
	GroupIdentity int64
	SchedIdle     int64
	CoreExpeller  bool
	YieldThreads  bool
}

// MemoryQOSSettings is memoryQOS resolved.
type MemoryQOSSettings struct {
	Enable               bool
	MinLimitPercent      int64
	LowLimitPercent      int64
	ThrottlingPercent    int64
	WmarkRatio           int64
	WmarkScalePermill    int64
	WmarkMinAdj          int64
	PageCacheLimitEnable int64
	PageCacheLimitSync   int64
	PageCacheLimitSize   int64
	PriorityEnable       int64
	Priority             int64
	OomKillGroup         int64
}

// ResctrlQOSSettings is resctrlQOS resolved.
type ResctrlQOSSettings struct {
	Enable               bool
	CATRangeStartPercent int64
	CATRangeEndPercent   int64
	MBAPercent           int64
}

// CPUBurstSettings is cpu-burst-config resolved for a node.
type CPUBurstSettings struct {
	Policy                     CPUBurstPolicy
	CPUBurstPercent            int64
	CFSQuotaBurstPercent       int64
	CFSQuotaBurstPeriodSeconds int64
	SharePoolThresholdPercent  int64
}

// SystemSettings is system-config resolved for a node. Unlike the other sections its knobs stay pointers:
// nil means "leave the kernel's value alone", which no number can say, and these are node-wide sysctls
// that Tandem must not write unless the operator asked.
type SystemSettings struct {
	MinFreeKbytesFactor       *int64
	WatermarkScaleFactor      *int64
	MemcgReapBackGround       *int64
	PageCacheLimitEnabled     *int64
	SchedGroupIdentityEnabled *int64
	SchedIdleSaverWmark       *int64
	SchedFeatures             map[string]bool
	TotalNetworkBandwidth     resource.Quantity
}

// Class returns the settings for a Koordinator QoS class name (SYSTEM, LSE, LSR, LS, BE; any case).
// LSE uses lsrClass, as koordlet does, since Koordinator has no lseClass. ok is false for other names.
func (q ResourceQOSSettings) Class(qosClass string) (settings ClassSettings, ok bool) {
	switch strings.ToUpper(qosClass) {
	case "LSE", "LSR":
		return q.LSR, true
	case "LS":
		return q.LS, true
	case "BE":
		return q.BE, true
	case "SYSTEM":
		return q.System, true
	}
	return ClassSettings{}, false
}

// ForNode resolves the configuration for a node with the given labels.
//
// Merge semantics, per section, follow Koordinator's slo-controller: start from Koordinator's defaults,
// overlay the cluster strategy, then overlay the first node strategy (in list order) whose nodeSelector
// matches. Overlaying is field by field and recursive: a field the overlay does not set keeps the value
// beneath it (so a node strategy setting only beClass.memoryQOS.wmarkRatio keeps every other class and
// knob), maps merge key by key, and a list that is set replaces the list beneath it (Koordinator merges
// list elements by position there; no list Tandem consumes is affected). Later matching
// strategies are ignored and reported in Resolved.Matches.
//
// A nodeSelector that cannot be converted to a selector is an error naming it; Validate reports the same.
func (c *Config) ForNode(nodeLabels map[string]string) (Resolved, error) {
	if c == nil {
		c = &Config{}
	}
	set := labels.Set(nodeLabels)
	var r Resolved
	var errs []error

	colocation, err := c.resolveColocation(set, &r)
	errs = append(errs, err)
	threshold, err := resolveSection(ResourceThresholdConfigKey, set, &r, defaultResourceThresholdStrategy(),
		c.thresholdCluster(), c.thresholdNodes())
	errs = append(errs, err)
	qos, err := resolveSection(ResourceQOSConfigKey, set, &r, defaultResourceQOSStrategy(), c.qosCluster(), c.qosNodes())
	errs = append(errs, err)
	burst, err := resolveSection(CPUBurstConfigKey, set, &r, defaultCPUBurstStrategy(), c.burstCluster(), c.burstNodes())
	errs = append(errs, err)
	system, err := resolveSection(SystemConfigKey, set, &r, defaultSystemStrategy(), c.systemCluster(), c.systemNodes())
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return Resolved{}, err
	}

	r.Colocation = colocationSettings(colocation)
	r.ResourceThreshold = thresholdSettings(threshold)
	r.ResourceQOS = qosSettings(qos)
	r.CPUBurst = burstSettings(burst)
	r.System = systemSettings(system)
	return r, nil
}

// nodeStrategy is one node strategy of any section: its profile, its overlay and its path for messages.
type nodeStrategy[T any] struct {
	profile  NodeProfile
	strategy *T
	path     string
}

// resolveSection overlays defaults, cluster and the first matching node strategy, and records the match.
func resolveSection[T any](section string, set labels.Set, r *Resolved, defaults, cluster *T, nodes []nodeStrategy[T]) (*T, error) {
	node, match, err := firstMatch(section, set, nodes)
	if err != nil {
		return nil, err
	}
	if match != nil {
		r.Matches = append(r.Matches, *match)
	}
	merged, err := overlay(defaults, cluster, node)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", section, err)
	}
	return merged, nil
}

func firstMatch[T any](section string, set labels.Set, nodes []nodeStrategy[T]) (*T, *NodeMatch, error) {
	var applied *T
	var match *NodeMatch
	var errs []error
	for _, n := range nodes {
		ok, err := selects(n.profile.NodeSelector, set)
		if err != nil {
			errs = append(errs, &FieldError{Path: n.path + ".nodeSelector", Message: err.Error()})
			continue
		}
		if !ok {
			continue
		}
		if match == nil {
			applied, match = n.strategy, &NodeMatch{Section: section, Applied: n.profile.Name}
			continue
		}
		match.Ignored = append(match.Ignored, n.profile.Name)
	}
	return applied, match, errors.Join(errs...)
}

// selects reports whether the selector matches the labels; a nil selector matches nothing.
func selects(sel *metav1.LabelSelector, set labels.Set) (bool, error) {
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return false, err
	}
	return s.Matches(set), nil
}

// overlay returns a fresh T: base with each later non-nil layer written over it. The layers are merged as
// JSON trees (every field is omitempty, so an unset field is an absent key): objects merge key by key,
// anything else that a layer sets replaces what is beneath. Koordinator merges the same way except that
// its decode-onto-a-copy merges list elements by position; Tandem replaces a list as a whole.
func overlay[T any](base *T, layers ...*T) (*T, error) {
	var merged any
	for _, layer := range append([]*T{base}, layers...) {
		if layer == nil {
			continue
		}
		js, err := json.Marshal(layer)
		if err != nil {
			return nil, err
		}
		dec := json.NewDecoder(bytes.NewReader(js))
		dec.UseNumber() // keep int64 values exact
		var tree any
		if err := dec.Decode(&tree); err != nil {
			return nil, err
		}
		merged = mergeTrees(merged, tree)
	}
	out := new(T)
	if merged == nil {
		return out, nil
	}
	js, err := json.Marshal(merged)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(js, out); err != nil {
		return nil, err
	}
	return out, nil
}

func mergeTrees(base, over any) any {
	b, ok := base.(map[string]any)
	o, ok2 := over.(map[string]any)
	if !ok || !ok2 {
		return over
	}
	for k, v := range o {
		b[k] = mergeTrees(b[k], v)
	}
	return b
}

func (c *Config) resolveColocation(set labels.Set, r *Resolved) (*ColocationStrategy, error) {
	defaults := defaultColocationStrategy()
	var cluster *ColocationStrategy
	var nodes []nodeStrategy[ColocationStrategy]
	if c.Colocation != nil {
		cluster = &c.Colocation.ColocationStrategy
		for i := range c.Colocation.NodeConfigs {
			n := &c.Colocation.NodeConfigs[i]
			nodes = append(nodes, nodeStrategy[ColocationStrategy]{n.NodeProfile, &n.ColocationStrategy, nodePath(ColocationConfigKey, "nodeConfigs", i)})
		}
	}
	return resolveSection(ColocationConfigKey, set, r, &defaults, cluster, nodes)
}

func nodePath(section, list string, i int) string { return fmt.Sprintf("%s.%s[%d]", section, list, i) }

func (c *Config) thresholdCluster() *ResourceThresholdStrategy {
	if c.ResourceThreshold == nil {
		return nil
	}
	return c.ResourceThreshold.ClusterStrategy
}

func (c *Config) thresholdNodes() []nodeStrategy[ResourceThresholdStrategy] {
	if c.ResourceThreshold == nil {
		return nil
	}
	var out []nodeStrategy[ResourceThresholdStrategy]
	for i := range c.ResourceThreshold.NodeStrategies {
		n := &c.ResourceThreshold.NodeStrategies[i]
		out = append(out, nodeStrategy[ResourceThresholdStrategy]{n.NodeProfile, &n.ResourceThresholdStrategy, nodePath(ResourceThresholdConfigKey, "nodeStrategies", i)})
	}
	return out
}

func (c *Config) qosCluster() *ResourceQOSStrategy {
	if c.ResourceQOS == nil {
		return nil
	}
	return c.ResourceQOS.ClusterStrategy
}

func (c *Config) qosNodes() []nodeStrategy[ResourceQOSStrategy] {
	if c.ResourceQOS == nil {
		return nil
	}
	var out []nodeStrategy[ResourceQOSStrategy]
	for i := range c.ResourceQOS.NodeStrategies {
		n := &c.ResourceQOS.NodeStrategies[i]
		out = append(out, nodeStrategy[ResourceQOSStrategy]{n.NodeProfile, &n.ResourceQOSStrategy, nodePath(ResourceQOSConfigKey, "nodeStrategies", i)})
	}
	return out
}

func (c *Config) burstCluster() *CPUBurstStrategy {
	if c.CPUBurst == nil {
		return nil
	}
	return c.CPUBurst.ClusterStrategy
}

func (c *Config) burstNodes() []nodeStrategy[CPUBurstStrategy] {
	if c.CPUBurst == nil {
		return nil
	}
	var out []nodeStrategy[CPUBurstStrategy]
	for i := range c.CPUBurst.NodeStrategies {
		n := &c.CPUBurst.NodeStrategies[i]
		out = append(out, nodeStrategy[CPUBurstStrategy]{n.NodeProfile, &n.CPUBurstStrategy, nodePath(CPUBurstConfigKey, "nodeStrategies", i)})
	}
	return out
}

func (c *Config) systemCluster() *SystemStrategy {
	if c.System == nil {
		return nil
	}
	return c.System.ClusterStrategy
}

func (c *Config) systemNodes() []nodeStrategy[SystemStrategy] {
	if c.System == nil {
		return nil
	}
	var out []nodeStrategy[SystemStrategy]
	for i := range c.System.NodeStrategies {
		n := &c.System.NodeStrategies[i]
		out = append(out, nodeStrategy[SystemStrategy]{n.NodeProfile, &n.SystemStrategy, nodePath(SystemConfigKey, "nodeStrategies", i)})
	}
	return out
}

// val dereferences p, or returns the zero value when p is nil (only for fields that have no default).
func val[T any](p *T) T {
	if p == nil {
		var zero T
		return zero
	}
	return *p
}

func valOr[T any](p *T, fallback T) T {
	if p == nil {
		return fallback
	}
	return *p
}

func colocationSettings(s *ColocationStrategy) ColocationSettings {
	var durations []time.Duration
	if s.MetricAggregatePolicy != nil {
		for _, d := range s.MetricAggregatePolicy.Durations {
			durations = append(durations, d.Duration)
		}
	}
	return ColocationSettings{
		Enable:                         val(s.Enable),
		MetricAggregateDurationSeconds: val(s.MetricAggregateDurationSeconds),
		MetricReportIntervalSeconds:    val(s.MetricReportIntervalSeconds),
		MetricAggregateDurations:       durations,
		MetricMemoryCollectPolicy:      val(s.MetricMemoryCollectPolicy),
		CPUReclaimThresholdPercent:     val(s.CPUReclaimThresholdPercent),
		CPUCalculatePolicy:             val(s.CPUCalculatePolicy),
		MemoryReclaimThresholdPercent:  val(s.MemoryReclaimThresholdPercent),
		MemoryCalculatePolicy:          val(s.MemoryCalculatePolicy),
		DegradeTimeMinutes:             val(s.DegradeTimeMinutes),
		UpdateTimeThresholdSeconds:     val(s.UpdateTimeThresholdSeconds),
		ResourceDiffThreshold:          val(s.ResourceDiffThreshold),
		MidReclaimMode:                 val(s.MidReclaimMode),
		MidCPUThresholdPercent:         val(s.MidCPUThresholdPercent),
		MidMemoryThresholdPercent:      val(s.MidMemoryThresholdPercent),
		MidUnallocatedPercent:          val(s.MidUnallocatedPercent),
		MidStaticCPUReservedPercent:    val(s.MidStaticCPUReservedPercent),
		MidStaticMemoryReservedPercent: val(s.MidStaticMemoryReservedPercent),
		BatchCPUThresholdPercent:       valOr(s.BatchCPUThresholdPercent, 100),
		BatchMemoryThresholdPercent:    valOr(s.BatchMemoryThresholdPercent, 100),
	}
}

func thresholdSettings(s *ResourceThresholdStrategy) ResourceThresholdSettings {
	memThreshold := val(s.MemoryEvictThresholdPercent)
	cpuThreshold := valOr(s.CPUEvictThresholdPercent, defaultCPUEvictThresholdPercent)
	return ResourceThresholdSettings{
		Enable:                             val(s.Enable),
		CPUSuppressThresholdPercent:        val(s.CPUSuppressThresholdPercent),
		CPUSuppressMinPercent:              val(s.CPUSuppressMinPercent),
		CPUSuppressPolicy:                  s.CPUSuppressPolicy,
		MemoryEvictThresholdPercent:        memThreshold,
		MemoryEvictLowerPercent:            valOr(s.MemoryEvictLowerPercent, memThreshold-evictLowerGapPercent),
		CPUEvictBySatisfaction:             s.CPUEvictBESatisfactionUpperPercent != nil && s.CPUEvictBESatisfactionLowerPercent != nil,
		CPUEvictBESatisfactionUpperPercent: val(s.CPUEvictBESatisfactionUpperPercent),
		CPUEvictBESatisfactionLowerPercent: val(s.CPUEvictBESatisfactionLowerPercent),
		CPUEvictBEUsageThresholdPercent:    valOr(s.CPUEvictBEUsageThresholdPercent, defaultCPUEvictBEUsageThresholdPercent),
		CPUEvictTimeWindowSeconds:          val(s.CPUEvictTimeWindowSeconds),
		CPUEvictThresholdPercent:           cpuThreshold,
		CPUEvictLowerPercent:               valOr(s.CPUEvictLowerPercent, cpuThreshold-evictLowerGapPercent),
		CPUEvictPolicy:                     s.CPUEvictPolicy,
	}
}

func qosSettings(s *ResourceQOSStrategy) ResourceQOSSettings {
	var policy CPUQOSPolicy
	if s.Policies != nil {
		policy = val(s.Policies.CPUPolicy)
	}
	return ResourceQOSSettings{
		CPUPolicy: policy,
		LSR:       classSettings(s.LSRClass),
		LS:        classSettings(s.LSClass),
		BE:        classSettings(s.BEClass),
		System:    classSettings(s.SystemClass),
	}
}

func classSettings(q *ResourceQOS) ClassSettings {
	var out ClassSettings
	if q == nil {
		return out
	}
	if c := q.CPUQOS; c != nil {
		out.CPUQOS = CPUQOSSettings{Enable: val(c.Enable), GroupIdentity: val(c.GroupIdentity), SchedIdle: val(c.SchedIdle), CoreExpeller: val(c.CoreExpeller), YieldThreads: val(c.YieldThreads)}
	}
	if m := q.MemoryQOS; m != nil {
		out.MemoryQOS = MemoryQOSSettings{
			Enable:               val(m.Enable),
			MinLimitPercent:      val(m.MinLimitPercent),
			LowLimitPercent:      val(m.LowLimitPercent),
			ThrottlingPercent:    val(m.ThrottlingPercent),
			WmarkRatio:           val(m.WmarkRatio),
			WmarkScalePermill:    val(m.WmarkScalePermill),
			WmarkMinAdj:          val(m.WmarkMinAdj),
			PageCacheLimitEnable: val(m.PageCacheLimitEnable),
			PageCacheLimitSync:   val(m.PageCacheLimitSync),
			PageCacheLimitSize:   val(m.PageCacheLimitSize),
			PriorityEnable:       val(m.PriorityEnable),
			Priority:             val(m.Priority),
			OomKillGroup:         val(m.OomKillGroup),
		}
	}
	if rc := q.ResctrlQOS; rc != nil {
		out.ResctrlQOS = ResctrlQOSSettings{
			Enable:               val(rc.Enable),
			CATRangeStartPercent: val(rc.CATRangeStartPercent),
			CATRangeEndPercent:   val(rc.CATRangeEndPercent),
			MBAPercent:           val(rc.MBAPercent),
		}
	}
	return out
}

func burstSettings(s *CPUBurstStrategy) CPUBurstSettings {
	return CPUBurstSettings{
		Policy:                     s.Policy,
		CPUBurstPercent:            val(s.CPUBurstPercent),
		CFSQuotaBurstPercent:       val(s.CFSQuotaBurstPercent),
		CFSQuotaBurstPeriodSeconds: val(s.CFSQuotaBurstPeriodSeconds),
		SharePoolThresholdPercent:  val(s.SharePoolThresholdPercent),
	}
}

func systemSettings(s *SystemStrategy) SystemSettings {
	return SystemSettings{
		MinFreeKbytesFactor:       s.MinFreeKbytesFactor,
		WatermarkScaleFactor:      s.WatermarkScaleFactor,
		MemcgReapBackGround:       s.MemcgReapBackGround,
		PageCacheLimitEnabled:     s.PageCacheLimitEnabled,
		SchedGroupIdentityEnabled: s.SchedGroupIdentityEnabled,
		SchedIdleSaverWmark:       s.SchedIdleSaverWmark,
		SchedFeatures:             s.SchedFeatures,
		TotalNetworkBandwidth:     val(s.TotalNetworkBandwidth),
	}
}
