package slo

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// FieldError is one problem with one key of the configuration. Path is the key path as the operator
// wrote it, starting with the ConfigMap key: resource-qos-config.nodeStrategies[0].beClass.memoryQOS.wmarkRatio.
type FieldError struct {
	Path    string
	Message string
}

func (e *FieldError) Error() string { return e.Path + ": " + e.Message }

// Validate checks every value against the ranges Koordinator documents and enforces, every node profile
// (a name, unique in its section; a non-empty, well-formed nodeSelector, as Koordinator's admission webhook
// requires), and the relations between fields (a lower bound below its upper bound) on the merged view each
// node would see. It returns all problems joined, each a *FieldError naming the key path.
//
// An invalid configuration must not be applied: on reload the caller keeps the configuration it has and
// logs the error, so a typo never turns QoS off on a running node.
func (c *Config) Validate() error {
	if c == nil {
		return nil
	}
	v := &validator{}
	if c.Colocation != nil {
		v.colocationConfig(c.Colocation)
	}
	if c.ResourceThreshold != nil {
		v.thresholdConfig(c.ResourceThreshold)
	}
	if c.ResourceQOS != nil {
		v.qosConfig(c.ResourceQOS)
	}
	if c.CPUBurst != nil {
		v.burstConfig(c.CPUBurst)
	}
	if c.System != nil {
		v.systemConfig(c.System)
	}
	return errors.Join(v.errs...)
}

type validator struct {
	errs []error
}

func (v *validator) fail(path, format string, args ...any) {
	v.errs = append(v.errs, &FieldError{Path: path, Message: fmt.Sprintf(format, args...)})
}

func (v *validator) percent(path string, p *int64) {
	if p != nil && (*p < 0 || *p > 100) {
		v.fail(path, "%d is not a percentage; use 0 to 100", *p)
	}
}

func (v *validator) between(path string, p *int64, lo, hi int64) {
	if p != nil && (*p < lo || *p > hi) {
		v.fail(path, "%d is out of range; use %d to %d", *p, lo, hi)
	}
}

func (v *validator) atLeast(path string, p *int64, lo int64) {
	if p != nil && *p < lo {
		v.fail(path, "%d is too small; use at least %d", *p, lo)
	}
}

func (v *validator) flag(path string, p *int64) { v.between(path, p, 0, 1) }

func (v *validator) oneOf(path, value string, allowed ...string) {
	if value != "" && !slices.Contains(allowed, value) {
		v.fail(path, "%q is not supported; use one of %s", value, strings.Join(allowed, ", "))
	}
}

// below reports lower >= upper on a merged view; prefix locates the strategy whose merge produced it.
func (v *validator) below(prefix, lowerKey string, lower *int64, upperKey string, upper *int64) {
	if lower != nil && upper != nil && *lower >= *upper {
		v.fail(prefix+"."+lowerKey, "%d must be below %s (%d); lower it or raise %s", *lower, upperKey, *upper, upperKey)
	}
}

// strategies checks one section's cluster strategy (when set) and node strategies with check, then the
// node profiles; split takes a node entry apart. It returns the node strategies and their paths, for
// relations.
func strategies[S, N any](v *validator, clusterPath string, cluster *S, section, list string, nodes []N,
	split func(*N) (NodeProfile, *S), check func(prefix string, s *S)) ([]*S, []string) {
	if cluster != nil {
		check(clusterPath, cluster)
	}
	paths := make([]string, 0, len(nodes))
	profiles := make([]NodeProfile, 0, len(nodes))
	out := make([]*S, 0, len(nodes))
	for i := range nodes {
		profile, st := split(&nodes[i])
		path := nodePath(section, list, i)
		paths, profiles, out = append(paths, path), append(profiles, profile), append(out, st)
		check(path, st)
	}
	v.profiles(paths, profiles)
	return out, paths
}

// profiles checks the names and selectors of one section's node strategies.
func (v *validator) profiles(paths []string, profiles []NodeProfile) {
	seen := map[string]string{}
	for i, p := range profiles {
		path := paths[i]
		switch prev, dup := seen[p.Name]; {
		case p.Name == "":
			v.fail(path+".name", "missing; name every node strategy so logs can say which one applied")
		case dup:
			v.fail(path+".name", "%q is also the name of %s; use unique names", p.Name, prev)
		default:
			seen[p.Name] = path
		}
		sel := p.NodeSelector
		if sel == nil || (len(sel.MatchLabels) == 0 && len(sel.MatchExpressions) == 0) {
			v.fail(path+".nodeSelector", "missing or empty; set matchLabels or matchExpressions (an empty selector would match every node)")
			continue
		}
		if _, err := metav1.LabelSelectorAsSelector(sel); err != nil {
			v.fail(path+".nodeSelector", "%v", err)
		}
	}
}

// relations runs check on the merged view of the cluster strategy and of each node strategy. A problem the
// cluster view already has is reported once, at the cluster strategy, not again for every node strategy.
func relations[T any](v *validator, defaults, cluster *T, clusterPath string, nodes []*T, nodePaths []string, check func(v *validator, prefix string, s *T)) {
	merged, err := overlay(defaults, cluster)
	if err != nil {
		v.fail(clusterPath, "%v", err)
		return
	}
	clusterV := &validator{}
	check(clusterV, "", merged)
	reported := map[string]bool{}
	for _, e := range clusterV.errs {
		fe := e.(*FieldError)
		reported[fe.Error()] = true
		v.fail(clusterPath+fe.Path, "%s", fe.Message)
	}
	for i, n := range nodes {
		mergedNode, err := overlay(merged, n)
		if err != nil {
			v.fail(nodePaths[i], "%v", err)
			continue
		}
		nodeV := &validator{}
		check(nodeV, "", mergedNode)
		for _, e := range nodeV.errs {
			fe := e.(*FieldError)
			if !reported[fe.Error()] {
				v.fail(nodePaths[i]+fe.Path, "%s", fe.Message)
			}
		}
	}
}

// colocation-config

func (v *validator) colocationConfig(c *ColocationConfig) {
	strategies(v, ColocationConfigKey, &c.ColocationStrategy, ColocationConfigKey, "nodeConfigs", c.NodeConfigs,
		func(n *NodeColocationConfig) (NodeProfile, *ColocationStrategy) {
			return n.NodeProfile, &n.ColocationStrategy
		},
		v.colocationStrategy)
}

func (v *validator) colocationStrategy(prefix string, s *ColocationStrategy) {
	v.atLeast(prefix+".metricAggregateDurationSeconds", s.MetricAggregateDurationSeconds, 1)
	v.atLeast(prefix+".metricReportIntervalSeconds", s.MetricReportIntervalSeconds, 1)
	if s.MetricAggregatePolicy != nil {
		for i, d := range s.MetricAggregatePolicy.Durations {
			if d.Duration <= 0 {
				v.fail(fmt.Sprintf("%s.metricAggregatePolicy.durations[%d]", prefix, i), "%s is not a positive duration; use e.g. 5m", d.Duration)
			}
		}
	}
	if s.MetricMemoryCollectPolicy != nil {
		v.oneOf(prefix+".metricMemoryCollectPolicy", string(*s.MetricMemoryCollectPolicy),
			string(UsageWithHotPageCache), string(UsageWithoutPageCache), string(UsageWithPageCache))
	}
	// Koordinator bounds the reclaim and batch thresholds below only: they are shares of node capacity
	// that an operator may set above 100 to over-commit.
	v.atLeast(prefix+".cpuReclaimThresholdPercent", s.CPUReclaimThresholdPercent, 0)
	v.atLeast(prefix+".memoryReclaimThresholdPercent", s.MemoryReclaimThresholdPercent, 0)
	if s.CPUCalculatePolicy != nil {
		v.oneOf(prefix+".cpuCalculatePolicy", string(*s.CPUCalculatePolicy), string(CalculateByPodUsage), string(CalculateByPodMaxUsageRequest))
	}
	if s.MemoryCalculatePolicy != nil {
		v.oneOf(prefix+".memoryCalculatePolicy", string(*s.MemoryCalculatePolicy),
			string(CalculateByPodUsage), string(CalculateByPodRequest), string(CalculateByPodMaxUsageRequest))
	}
	v.atLeast(prefix+".degradeTimeMinutes", s.DegradeTimeMinutes, 1)
	v.atLeast(prefix+".updateTimeThresholdSeconds", s.UpdateTimeThresholdSeconds, 1)
	if d := s.ResourceDiffThreshold; d != nil && (*d <= 0 || *d > 1) {
		v.fail(prefix+".resourceDiffThreshold", "%v is out of range; use a fraction above 0 and at most 1", *d)
	}
	if s.MidReclaimMode != nil {
		v.oneOf(prefix+".midReclaimMode", *s.MidReclaimMode, MidReclaimModeStatic)
	}
	v.percent(prefix+".midCPUThresholdPercent", s.MidCPUThresholdPercent)
	v.percent(prefix+".midMemoryThresholdPercent", s.MidMemoryThresholdPercent)
	v.percent(prefix+".midUnallocatedPercent", s.MidUnallocatedPercent)
	v.percent(prefix+".midStaticCPUReservedPercent", s.MidStaticCPUReservedPercent)
	v.percent(prefix+".midStaticMemoryReservedPercent", s.MidStaticMemoryReservedPercent)
	v.atLeast(prefix+".batchCPUThresholdPercent", s.BatchCPUThresholdPercent, 0)
	v.atLeast(prefix+".batchMemoryThresholdPercent", s.BatchMemoryThresholdPercent, 0)
}

// resource-threshold-config

func (v *validator) thresholdConfig(c *ResourceThresholdConfig) {
	clusterPath := ResourceThresholdConfigKey + ".clusterStrategy"
	nodes, paths := strategies(v, clusterPath, c.ClusterStrategy, ResourceThresholdConfigKey, "nodeStrategies", c.NodeStrategies,
		func(n *NodeResourceThresholdStrategy) (NodeProfile, *ResourceThresholdStrategy) {
			return n.NodeProfile, &n.ResourceThresholdStrategy
		}, v.thresholdStrategy)
	relations(v, defaultResourceThresholdStrategy(), c.ClusterStrategy, clusterPath, nodes, paths, thresholdRelations)
}

func (v *validator) thresholdStrategy(prefix string, s *ResourceThresholdStrategy) {
	v.percent(prefix+".cpuSuppressThresholdPercent", s.CPUSuppressThresholdPercent)
	v.percent(prefix+".cpuSuppressMinPercent", s.CPUSuppressMinPercent)
	v.oneOf(prefix+".cpuSuppressPolicy", string(s.CPUSuppressPolicy), string(CPUSuppressByCPUSet), string(CPUSuppressByCFSQuota))
	v.percent(prefix+".memoryEvictThresholdPercent", s.MemoryEvictThresholdPercent)
	v.percent(prefix+".memoryEvictLowerPercent", s.MemoryEvictLowerPercent)
	v.percent(prefix+".cpuEvictBESatisfactionUpperPercent", s.CPUEvictBESatisfactionUpperPercent)
	v.percent(prefix+".cpuEvictBESatisfactionLowerPercent", s.CPUEvictBESatisfactionLowerPercent)
	v.percent(prefix+".cpuEvictBEUsageThresholdPercent", s.CPUEvictBEUsageThresholdPercent)
	v.atLeast(prefix+".cpuEvictTimeWindowSeconds", s.CPUEvictTimeWindowSeconds, 1)
	v.percent(prefix+".cpuEvictThresholdPercent", s.CPUEvictThresholdPercent)
	v.percent(prefix+".cpuEvictLowerPercent", s.CPUEvictLowerPercent)
	v.oneOf(prefix+".cpuEvictPolicy", string(s.CPUEvictPolicy), string(EvictByRealLimit), string(EvictByAllocatable))
}

func thresholdRelations(v *validator, prefix string, s *ResourceThresholdStrategy) {
	v.below(prefix, "memoryEvictLowerPercent", s.MemoryEvictLowerPercent, "memoryEvictThresholdPercent", s.MemoryEvictThresholdPercent)
	v.below(prefix, "cpuEvictLowerPercent", s.CPUEvictLowerPercent, "cpuEvictThresholdPercent", s.CPUEvictThresholdPercent)
	v.below(prefix, "cpuEvictBESatisfactionLowerPercent", s.CPUEvictBESatisfactionLowerPercent,
		"cpuEvictBESatisfactionUpperPercent", s.CPUEvictBESatisfactionUpperPercent)
}

// resource-qos-config

func (v *validator) qosConfig(c *ResourceQOSConfig) {
	clusterPath := ResourceQOSConfigKey + ".clusterStrategy"
	nodes, paths := strategies(v, clusterPath, c.ClusterStrategy, ResourceQOSConfigKey, "nodeStrategies", c.NodeStrategies,
		func(n *NodeResourceQOSStrategy) (NodeProfile, *ResourceQOSStrategy) {
			return n.NodeProfile, &n.ResourceQOSStrategy
		},
		v.qosStrategy)
	relations(v, defaultResourceQOSStrategy(), c.ClusterStrategy, clusterPath, nodes, paths, qosRelations)
}

// qosClasses pairs each class key with its field, in the order the ConfigMap documents them.
func qosClasses(s *ResourceQOSStrategy) []struct {
	key string
	q   *ResourceQOS
} {
	return []struct {
		key string
		q   *ResourceQOS
	}{{"lsrClass", s.LSRClass}, {"lsClass", s.LSClass}, {"beClass", s.BEClass}, {"systemClass", s.SystemClass}, {"cgroupRoot", s.CgroupRoot}}
}

func (v *validator) qosStrategy(prefix string, s *ResourceQOSStrategy) {
	if p := s.Policies; p != nil {
		if p.CPUPolicy != nil {
			v.oneOf(prefix+".policies.cpuPolicy", string(*p.CPUPolicy), string(CPUQOSPolicyGroupIdentity), string(CPUQOSPolicyCoreSched))
		}
		if p.NetQOSPolicy != nil {
			v.oneOf(prefix+".policies.netQOSPolicy", string(*p.NetQOSPolicy), string(NetQOSPolicyTC), string(NetQOSPolicyTerwayQoS))
		}
	}
	for _, class := range qosClasses(s) {
		if class.q != nil {
			v.resourceQOS(prefix+"."+class.key, class.q)
		}
	}
}

func (v *validator) resourceQOS(prefix string, q *ResourceQOS) {
	if c := q.CPUQOS; c != nil {
		p := prefix + ".cpuQOS"
		v.between(p+".groupIdentity", c.GroupIdentity, -1, 2)
		v.flag(p+".schedIdle", c.SchedIdle)
		if c.YieldThreads != nil && *c.YieldThreads && !strings.HasSuffix(prefix, ".beClass") {
			v.fail(p+".yieldThreads", "true is for beClass only: it makes the class's threads yield to every other thread on the node; remove it")
		}
	}
	if m := q.MemoryQOS; m != nil {
		p := prefix + ".memoryQOS"
		v.percent(p+".minLimitPercent", m.MinLimitPercent)
		v.percent(p+".lowLimitPercent", m.LowLimitPercent)
		v.percent(p+".throttlingPercent", m.ThrottlingPercent)
		v.percent(p+".wmarkRatio", m.WmarkRatio)
		v.between(p+".wmarkScalePermill", m.WmarkScalePermill, 1, 1000)
		v.between(p+".wmarkMinAdj", m.WmarkMinAdj, -25, 50)
		v.flag(p+".pageCacheLimitEnable", m.PageCacheLimitEnable)
		v.flag(p+".pageCacheLimitSync", m.PageCacheLimitSync)
		v.atLeast(p+".pageCacheLimitSize", m.PageCacheLimitSize, 0)
		v.flag(p+".priorityEnable", m.PriorityEnable)
		v.between(p+".priority", m.Priority, 0, 12)
		v.flag(p+".oomKillGroup", m.OomKillGroup)
	}
	if r := q.ResctrlQOS; r != nil {
		p := prefix + ".resctrlQOS"
		v.percent(p+".catRangeStartPercent", r.CATRangeStartPercent)
		v.percent(p+".catRangeEndPercent", r.CATRangeEndPercent)
		v.percent(p+".mbaPercent", r.MBAPercent)
	}
	if b := q.BlkIOQOS; b != nil {
		for i, blk := range b.Blocks {
			p := fmt.Sprintf("%s.blkioQOS.blocks[%d]", prefix, i)
			v.oneOf(p+".type", blk.BlockType, "device", "volumegroup", "podvolume")
			io := blk.IOCfg
			for _, f := range []struct {
				key string
				n   *int64
				min int64
			}{
				{"readIOPS", io.ReadIOPS, 0}, {"writeIOPS", io.WriteIOPS, 0}, {"readBPS", io.ReadBPS, 0}, {"writeBPS", io.WriteBPS, 0},
				{"readLatency", io.ReadLatency, 0}, {"writeLatency", io.WriteLatency, 0},
				{"modelReadBPS", io.ModelReadBPS, 1}, {"modelWriteBPS", io.ModelWriteBPS, 1},
				{"modelReadSeqIOPS", io.ModelReadSeqIOPS, 1}, {"modelWriteSeqIOPS", io.ModelWriteSeqIOPS, 1},
				{"modelReadRandIOPS", io.ModelReadRandIOPS, 1}, {"modelWriteRandIOPS", io.ModelWriteRandIOPS, 1},
			} {
				v.atLeast(p+".ioCfg."+f.key, f.n, f.min)
			}
			v.between(p+".ioCfg.ioWeightPercent", io.IOWeightPercent, 1, 100)
			v.percent(p+".ioCfg.readLatencyPercent", io.ReadLatencyPercent)
			v.percent(p+".ioCfg.writeLatencyPercent", io.WriteLatencyPercent)
		}
	}
	if n := q.NetworkQOS; n != nil {
		p := prefix + ".networkQOS"
		v.bandwidth(p+".ingressRequest", n.IngressRequest)
		v.bandwidth(p+".ingressLimit", n.IngressLimit)
		v.bandwidth(p+".egressRequest", n.EgressRequest)
		v.bandwidth(p+".egressLimit", n.EgressLimit)
	}
}

// bandwidth accepts a percentage (an integer) or a quantity such as "50M" (a string).
func (v *validator) bandwidth(path string, b *intstr.IntOrString) {
	if b == nil {
		return
	}
	if b.Type == intstr.Int {
		n := int64(b.IntVal)
		v.percent(path, &n)
		return
	}
	q, err := resource.ParseQuantity(b.StrVal)
	if err != nil {
		v.fail(path, "%q is neither a percentage nor a quantity such as 50M", b.StrVal)
		return
	}
	if q.Sign() < 0 {
		v.fail(path, "%s is negative", b.StrVal)
	}
}

func qosRelations(v *validator, prefix string, s *ResourceQOSStrategy) {
	for _, class := range qosClasses(s) {
		if class.q == nil || class.q.ResctrlQOS == nil {
			continue
		}
		r := class.q.ResctrlQOS
		v.below(prefix+"."+class.key+".resctrlQOS", "catRangeStartPercent", r.CATRangeStartPercent, "catRangeEndPercent", r.CATRangeEndPercent)
	}
}

// cpu-burst-config

func (v *validator) burstConfig(c *CPUBurstConfig) {
	strategies(v, CPUBurstConfigKey+".clusterStrategy", c.ClusterStrategy, CPUBurstConfigKey, "nodeStrategies", c.NodeStrategies,
		func(n *NodeCPUBurstStrategy) (NodeProfile, *CPUBurstStrategy) {
			return n.NodeProfile, &n.CPUBurstStrategy
		},
		v.burstStrategy)
}

func (v *validator) burstStrategy(prefix string, s *CPUBurstStrategy) {
	v.oneOf(prefix+".policy", string(s.Policy), string(CPUBurstNone), string(CPUBurstOnly), string(CFSQuotaBurstOnly), string(CPUBurstAuto))
	v.between(prefix+".cpuBurstPercent", s.CPUBurstPercent, 1, 10000)
	v.atLeast(prefix+".cfsQuotaBurstPercent", s.CFSQuotaBurstPercent, 100)
	v.atLeast(prefix+".cfsQuotaBurstPeriodSeconds", s.CFSQuotaBurstPeriodSeconds, -1)
	v.percent(prefix+".sharePoolThresholdPercent", s.SharePoolThresholdPercent)
}

// system-config

func (v *validator) systemConfig(c *SystemConfig) {
	strategies(v, SystemConfigKey+".clusterStrategy", c.ClusterStrategy, SystemConfigKey, "nodeStrategies", c.NodeStrategies,
		func(n *NodeSystemStrategy) (NodeProfile, *SystemStrategy) { return n.NodeProfile, &n.SystemStrategy },
		v.systemStrategy)
}

func (v *validator) systemStrategy(prefix string, s *SystemStrategy) {
	v.atLeast(prefix+".minFreeKbytesFactor", s.MinFreeKbytesFactor, 1)
	v.between(prefix+".watermarkScaleFactor", s.WatermarkScaleFactor, 1, 400)
	v.flag(prefix+".memcgReapBackGround", s.MemcgReapBackGround)
	v.flag(prefix+".pageCacheLimitEnabled", s.PageCacheLimitEnabled)
	v.flag(prefix+".schedGroupIdentityEnabled", s.SchedGroupIdentityEnabled)
	v.atLeast(prefix+".schedIdleSaverWmark", s.SchedIdleSaverWmark, 0)
	if q := s.TotalNetworkBandwidth; q != nil && q.Sign() < 0 {
		v.fail(prefix+".totalNetworkBandwidth", "%s is negative", q.String())
	}
}
