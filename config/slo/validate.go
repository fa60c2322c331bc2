package slo

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/tandemkit/tandem/config/batchwindow"
	"github.com/tandemkit/tandem/resource/qos"
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
// requires), and the relations between fields (a lower bound below its upper bound). Values are checked on
// the merged view each node would see: the cluster strategy over the defaults, and each node strategy over
// that; a problem the cluster view already has is reported once, at the cluster strategy. It returns all
// problems joined, each a *FieldError naming the key path.
//
// An invalid configuration must not be applied: on reload the caller keeps the configuration it has and
// logs the error, so a typo never turns QoS off on a running node.
func (c *Config) Validate() error {
	if c == nil {
		return nil
	}
	v := &validator{}
	for _, key := range SectionKeys() {
		if s := c.sections[key]; s != nil {
			v.section(key, s)
		}
	}
	return errors.Join(v.errs...)
}

type validator struct {
	errs []error
}

func (v *validator) fail(path, format string, args ...any) {
	v.errs = append(v.errs, &FieldError{Path: path, Message: fmt.Sprintf(format, args...)})
}

// section checks the cluster view, then each node's view and the node profiles.
func (v *validator) section(key string, s *section) {
	clusterPath := key + ".clusterStrategy"
	if inline(key) {
		clusterPath = key
	}
	reported := map[string]bool{}
	for _, fe := range view(key, s.cluster) {
		reported[fe.Error()] = true
		v.fail(clusterPath+fe.Path, "%s", fe.Message)
	}
	paths := make([]string, 0, len(s.nodes))
	profiles := make([]NodeProfile, 0, len(s.nodes))
	for i := range s.nodes {
		n := &s.nodes[i]
		for _, fe := range view(key, layers(key, s.cluster, n)...) {
			if !reported[fe.Error()] {
				v.fail(n.path+fe.Path, "%s", fe.Message)
			}
		}
		paths, profiles = append(paths, n.path), append(profiles, n.NodeProfile)
	}
	v.profiles(paths, profiles)
}

// view checks the defaults of section key with the strategies decoded onto them; paths start with ".".
func view(key string, layers ...*strategy) []*FieldError {
	r := defaultResolved()
	if err := overlay(r.settings(key), layers...); err != nil {
		return []*FieldError{{Message: err.Error()}}
	}
	v := &validator{}
	switch s := r.settings(key).(type) {
	case *ColocationSettings:
		v.colocation(s)
	case *ResourceThresholdSettings:
		v.threshold(s)
	case *ResourceQOSSettings:
		v.qos(s)
	case *CPUBurstSettings:
		v.burst(s)
	case *SystemSettings:
		v.system(s)
	case *HostApplicationSettings:
		v.hostApplications(s)
	case *batchwindow.Settings:
		v.batchWindows(s)
	}
	out := make([]*FieldError, 0, len(v.errs))
	for _, e := range v.errs {
		var fe *FieldError
		if errors.As(e, &fe) {
			out = append(out, fe)
		}
	}
	return out
}

// The checks below skip unset (see defaults.go): the knob was not written.

func (v *validator) percent(path string, p int64) {
	v.between(path, p, 0, 100, "%d is not a percentage; use 0 to 100")
}

func (v *validator) between(path string, p, lo, hi int64, format ...string) {
	if p != unset && (p < lo || p > hi) {
		if len(format) > 0 {
			v.fail(path, format[0], p)
			return
		}
		v.fail(path, "%d is out of range; use %d to %d", p, lo, hi)
	}
}

func (v *validator) atLeast(path string, p, lo int64) {
	if p != unset && p < lo {
		v.fail(path, "%d is too small; use at least %d", p, lo)
	}
}

func (v *validator) flag(path string, p int64) { v.between(path, p, 0, 1) }

// optional runs check on *p when the operator set it (system-config and blkioQOS keep nil for unset).
func optional(p *int64, check func(int64)) {
	if p != nil {
		check(*p)
	}
}

func (v *validator) oneOf(path, value string, allowed ...string) {
	if value != "" && !slices.Contains(allowed, value) {
		v.fail(path, "%q is not supported; use one of %s", value, strings.Join(allowed, ", "))
	}
}

// below reports lower >= upper when both are set.
func (v *validator) below(prefix, lowerKey string, lower int64, upperKey string, upper int64) {
	if lower != unset && upper != unset && lower >= upper {
		v.fail(prefix+"."+lowerKey, "%d must be below %s (%d); lower it or raise %s", lower, upperKey, upper, upperKey)
	}
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

func (v *validator) colocation(s *ColocationSettings) {
	v.atLeast(".metricAggregateDurationSeconds", s.MetricAggregateDurationSeconds, 1)
	v.atLeast(".metricReportIntervalSeconds", s.MetricReportIntervalSeconds, 1)
	for i, d := range s.MetricAggregatePolicy.Durations {
		if d.Duration <= 0 {
			v.fail(fmt.Sprintf(".metricAggregatePolicy.durations[%d]", i), "%s is not a positive duration; use e.g. 5m", d.Duration)
		}
	}
	v.oneOf(".metricMemoryCollectPolicy", string(s.MetricMemoryCollectPolicy),
		string(UsageWithHotPageCache), string(UsageWithoutPageCache), string(UsageWithPageCache))
	// Koordinator bounds the reclaim and batch thresholds below only: they are shares of node capacity
	// that an operator may set above 100 to over-commit.
	v.atLeast(".cpuReclaimThresholdPercent", s.CPUReclaimThresholdPercent, 0)
	v.atLeast(".memoryReclaimThresholdPercent", s.MemoryReclaimThresholdPercent, 0)
	v.oneOf(".cpuCalculatePolicy", string(s.CPUCalculatePolicy), string(CalculateByPodUsage), string(CalculateByPodMaxUsageRequest))
	v.oneOf(".memoryCalculatePolicy", string(s.MemoryCalculatePolicy),
		string(CalculateByPodUsage), string(CalculateByPodRequest), string(CalculateByPodMaxUsageRequest))
	v.atLeast(".degradeTimeMinutes", s.DegradeTimeMinutes, 1)
	v.atLeast(".updateTimeThresholdSeconds", s.UpdateTimeThresholdSeconds, 1)
	if d := s.ResourceDiffThreshold; d <= 0 || d > 1 {
		v.fail(".resourceDiffThreshold", "%v is out of range; use a fraction above 0 and at most 1", d)
	}
	v.oneOf(".midReclaimMode", s.MidReclaimMode, MidReclaimModeStatic)
	v.percent(".midCPUThresholdPercent", s.MidCPUThresholdPercent)
	v.percent(".midMemoryThresholdPercent", s.MidMemoryThresholdPercent)
	v.percent(".midUnallocatedPercent", s.MidUnallocatedPercent)
	v.percent(".midStaticCPUReservedPercent", s.MidStaticCPUReservedPercent)
	v.percent(".midStaticMemoryReservedPercent", s.MidStaticMemoryReservedPercent)
	v.atLeast(".batchCPUThresholdPercent", s.BatchCPUThresholdPercent, 0)
	v.atLeast(".batchMemoryThresholdPercent", s.BatchMemoryThresholdPercent, 0)
}

func (v *validator) threshold(s *ResourceThresholdSettings) {
	v.percent(".cpuSuppressThresholdPercent", s.CPUSuppressThresholdPercent)
	v.percent(".cpuSuppressMinPercent", s.CPUSuppressMinPercent)
	v.oneOf(".cpuSuppressPolicy", string(s.CPUSuppressPolicy), string(CPUSuppressByCPUSet), string(CPUSuppressByCFSQuota))
	v.percent(".memoryEvictThresholdPercent", s.MemoryEvictThresholdPercent)
	v.percent(".memoryEvictLowerPercent", s.MemoryEvictLowerPercent)
	v.percent(".cpuEvictBESatisfactionUpperPercent", s.CPUEvictBESatisfactionUpperPercent)
	v.percent(".cpuEvictBESatisfactionLowerPercent", s.CPUEvictBESatisfactionLowerPercent)
	v.percent(".cpuEvictBEUsageThresholdPercent", s.CPUEvictBEUsageThresholdPercent)
	v.atLeast(".cpuEvictTimeWindowSeconds", s.CPUEvictTimeWindowSeconds, 1)
	v.percent(".cpuEvictThresholdPercent", s.CPUEvictThresholdPercent)
	v.percent(".cpuEvictLowerPercent", s.CPUEvictLowerPercent)
	v.oneOf(".cpuEvictPolicy", string(s.CPUEvictPolicy), string(EvictByRealLimit), string(EvictByAllocatable))
	v.oneOf(".stealHeadroom", string(s.StealHeadroom), string(StealHeadroomAuto), string(StealHeadroomOn), string(StealHeadroomOff))
	v.percent(".stealThresholdPercent", s.StealThresholdPercent)
	v.between(".beCFSPeriodMicros", s.BECFSPeriodMicros, 1000, 1000000)
	v.between(".lsWaitThresholdMicros", s.LSWaitThresholdMicros, 1, 1000000)

	v.below("", "memoryEvictLowerPercent", s.MemoryEvictLowerPercent, "memoryEvictThresholdPercent", s.MemoryEvictThresholdPercent)
	v.below("", "cpuEvictLowerPercent", s.CPUEvictLowerPercent, "cpuEvictThresholdPercent", s.CPUEvictThresholdPercent)
	v.below("", "cpuEvictBESatisfactionLowerPercent", s.CPUEvictBESatisfactionLowerPercent,
		"cpuEvictBESatisfactionUpperPercent", s.CPUEvictBESatisfactionUpperPercent)
}

func (v *validator) qos(s *ResourceQOSSettings) {
	v.oneOf(".policies.cpuPolicy", string(s.Policies.CPUPolicy), string(CPUQOSPolicyGroupIdentity), string(CPUQOSPolicyCoreSched))
	v.oneOf(".policies.netQOSPolicy", string(s.Policies.NetQOSPolicy), string(NetQOSPolicyTC), string(NetQOSPolicyTerwayQoS))
	for _, class := range []struct {
		key string
		c   *ClassSettings
	}{{"lsrClass", &s.LSR}, {"lsClass", &s.LS}, {"beClass", &s.BE}, {"systemClass", &s.System}, {"cgroupRoot", &s.CgroupRoot}} {
		v.class("."+class.key, class.c)
	}
}

func (v *validator) class(prefix string, q *ClassSettings) {
	c, p := q.CPUQOS, prefix+".cpuQOS"
	v.between(p+".groupIdentity", c.GroupIdentity, -1, 2)
	v.flag(p+".schedIdle", c.SchedIdle)
	if c.YieldThreads && prefix != ".beClass" {
		v.fail(p+".yieldThreads", "true is for beClass only: it makes the class's threads yield to every other thread on the node; remove it")
	}
	m, p := q.MemoryQOS, prefix+".memoryQOS"
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
	r, p := q.ResctrlQOS, prefix+".resctrlQOS"
	v.percent(p+".catRangeStartPercent", r.CatRangeStartPercent)
	v.percent(p+".catRangeEndPercent", r.CatRangeEndPercent)
	v.percent(p+".mbaPercent", r.MBAPercent)
	for i, blk := range q.BlkIOQOS.Blocks {
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
			optional(f.n, func(n int64) { v.atLeast(p+".ioCfg."+f.key, n, f.min) })
		}
		optional(io.IOWeightPercent, func(n int64) { v.between(p+".ioCfg.ioWeightPercent", n, 1, 100) })
		optional(io.ReadLatencyPercent, func(n int64) { v.percent(p+".ioCfg.readLatencyPercent", n) })
		optional(io.WriteLatencyPercent, func(n int64) { v.percent(p+".ioCfg.writeLatencyPercent", n) })
	}
	n, p := q.NetworkQOS, prefix+".networkQOS"
	v.bandwidth(p+".ingressRequest", n.IngressRequest)
	v.bandwidth(p+".ingressLimit", n.IngressLimit)
	v.bandwidth(p+".egressRequest", n.EgressRequest)
	v.bandwidth(p+".egressLimit", n.EgressLimit)
	v.below(prefix+".resctrlQOS", "catRangeStartPercent", r.CatRangeStartPercent, "catRangeEndPercent", r.CatRangeEndPercent)
}

// bandwidth accepts a percentage (an integer) or a quantity such as "50M" (a string).
func (v *validator) bandwidth(path string, b *intstr.IntOrString) {
	if b == nil {
		return
	}
	if b.Type == intstr.Int {
		v.percent(path, int64(b.IntVal))
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

func (v *validator) burst(s *CPUBurstSettings) {
	v.oneOf(".policy", string(s.Policy), string(CPUBurstNone), string(CPUBurstOnly), string(CFSQuotaBurstOnly), string(CPUBurstAuto))
	v.between(".cpuBurstPercent", s.CPUBurstPercent, 1, 10000)
	v.atLeast(".cfsQuotaBurstPercent", s.CFSQuotaBurstPercent, 100)
	v.atLeast(".cfsQuotaBurstPeriodSeconds", s.CFSQuotaBurstPeriodSeconds, -1)
	v.percent(".sharePoolThresholdPercent", s.SharePoolThresholdPercent)
}

func (v *validator) system(s *SystemSettings) {
	optional(s.MinFreeKbytesFactor, func(n int64) { v.atLeast(".minFreeKbytesFactor", n, 1) })
	optional(s.WatermarkScaleFactor, func(n int64) { v.between(".watermarkScaleFactor", n, 1, 400) })
	optional(s.MemcgReapBackGround, func(n int64) { v.flag(".memcgReapBackGround", n) })
	optional(s.PageCacheLimitEnabled, func(n int64) { v.flag(".pageCacheLimitEnabled", n) })
	optional(s.SchedGroupIdentityEnabled, func(n int64) { v.flag(".schedGroupIdentityEnabled", n) })
	optional(s.SchedIdleSaverWmark, func(n int64) { v.atLeast(".schedIdleSaverWmark", n, 0) })
	if q := s.TotalNetworkBandwidth; q.Sign() < 0 {
		v.fail(".totalNetworkBandwidth", "%s is negative", q.String())
	}
}

// hostApplications checks each application: a unique name, LS or BE, and a cgroup path that stays below
// its base. The path is checked as written, so the error names the key the operator must fix.
func (v *validator) hostApplications(s *HostApplicationSettings) {
	seen := map[string]int{}
	for i, a := range s.Applications {
		p := fmt.Sprintf(".applications[%d]", i)
		switch prev, dup := seen[a.Name]; {
		case a.Name == "":
			v.fail(p+".name", "missing; name every application so logs and tandemctl config can say which one")
		case dup:
			v.fail(p+".name", "%q is also the name of applications[%d]; use unique names", a.Name, prev)
		default:
			seen[a.Name] = i
		}
		what := fmt.Sprintf("application %q", a.Name)
		switch a.QoS {
		case qos.LS, qos.BE:
		case qos.LSE, qos.LSR:
			v.fail(p+".qos", "%s: %s is not supported for host applications; use LS or BE (LSE and LSR CPUs are exclusive allocations sized by a container's whole-CPU request, which a host process has not got; Koordinator refuses them too)", what, a.QoS)
		case "":
			v.fail(p+".qos", "%s: missing; set LS or BE", what)
		default:
			v.fail(p+".qos", "%s: %q is not supported for host applications; use LS or BE", what, a.QoS)
		}
		v.oneOf(p+".priority", a.Priority, "koord-prod", "koord-mid", "koord-batch", "koord-free")
		if a.CgroupPath == nil {
			// The default path is <class dir>/<name>: the name must be one directory.
			if a.Name != "" && (strings.Contains(a.Name, "/") || a.Name == "." || a.Name == "..") {
				v.fail(p+".name", "%s: without cgroupPath the name is the cgroup directory, so it must not contain / or be . or ..; set cgroupPath.relativePath", what)
			}
			continue
		}
		c := a.CgroupPath
		v.oneOf(p+".cgroupPath.base", string(c.Base), string(CgroupBaseRoot), string(CgroupBaseKubepods),
			string(CgroupBaseKubepodsBurstable), string(CgroupBaseKubepodsBesteffort))
		for _, f := range []struct{ key, val string }{{"parentDir", c.ParentDir}, {"relativePath", c.RelativePath}} {
			if slices.Contains(strings.Split(f.val, "/"), "..") {
				v.fail(p+".cgroupPath."+f.key, "%s: %q climbs out with ..; write a path below the base", what, f.val)
			}
		}
		if strings.Trim(c.RelativePath, "/.") == "" {
			v.fail(p+".cgroupPath.relativePath", "%s: missing; name the application's own cgroup directory (without it the treatment would land on the parent shared by every host application)", what)
		}
	}
}

// batchWindows checks batch-window-config as config/batchwindow builds it: the zone, each window's days
// and times, the shares and durations.
func (v *validator) batchWindows(s *batchwindow.Settings) {
	err := s.Validate()
	var joined interface{ Unwrap() []error }
	errs := []error{err}
	if errors.As(err, &joined) {
		errs = joined.Unwrap()
	}
	for _, e := range errs {
		var fe *batchwindow.FieldError
		if errors.As(e, &fe) {
			v.fail("."+fe.Path, "%s", fe.Message)
		} else if e != nil {
			v.fail("", "%v", e)
		}
	}
}
