package agent

import (
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/tandemkit/tandem/config/knob"
	"github.com/tandemkit/tandem/config/slo"
	"github.com/tandemkit/tandem/metrics/collector"
	"github.com/tandemkit/tandem/resource/cgroup"
)

// nodeFacts is what the base knob table needs to know of the node, detected at start.
type nodeFacts struct {
	cgroups cgroup.Prober // nil: no cgroup hierarchy
	// resctrl says whether the resctrl filesystem is mounted.
	resctrl bool
	// yield says whether the kernel honours the slice requests beClass.cpuQOS.yieldThreads needs.
	yield bool
	// policies are the built-in policies --policies runs.
	policies []string
	// vm says whether the node is a virtual machine (metrics/headroom.DetectVM); vmWhy from what.
	vm    bool
	vmWhy string
	// runQueue says whether --run-queue-latency switched the eBPF run-queue collector on.
	runQueue bool
}

func (f nodeFacts) policy(name string) bool { return slices.Contains(f.policies, name) }

// knobRule decides one key's state from the configuration in force; key is the full dotted key.
type knobRule func(r slo.Resolved, f nodeFacts, key string) (knob.State, string)

func fixed(s knob.State, detail string) knobRule {
	return func(slo.Resolved, nodeFacts, string) (knob.State, string) { return s, detail }
}

// while is Applied when on says the section (or class) is enabled, else Off with why.
func while(on func(slo.Resolved) bool, offDetail string) knobRule {
	return func(r slo.Resolved, _ nodeFacts, _ string) (knob.State, string) {
		if on(r) {
			return knob.Applied, ""
		}
		return knob.Off, offDetail
	}
}

// switchRule is for a section's enable key: Applied when on, Off when not, each saying what it means.
func switchRule(on func(slo.Resolved) bool, onDetail, offDetail string) knobRule {
	return func(r slo.Resolved, _ nodeFacts, _ string) (knob.State, string) {
		if on(r) {
			return knob.Applied, onDetail
		}
		return knob.Off, offDetail
	}
}

// reported marks keys a part of the agent reports itself (knob.Reporter); this state shows only when
// that part is not running.
var reported = fixed(knob.Ignored, "the part of the agent that applies it is not running on this node; its start-up log line says why")

// classOf returns the class segment of a resource-qos-config key (lsrClass, beClass, ...).
func classOf(key string) string { c, _, _ := strings.Cut(key, "."); return c }

func classSettings(r slo.Resolved, class string) slo.ClassSettings {
	q := r.ResourceQOS
	return map[string]slo.ClassSettings{"lsrClass": q.LSR, "lsClass": q.LS, "beClass": q.BE, "systemClass": q.System, "cgroupRoot": q.CgroupRoot}[class]
}

// podClass reports whether class is one whose pods the policies treat (LSE follows lsrClass).
func podClass(class string) bool {
	return class == "lsrClass" || class == "lsClass" || class == "beClass"
}

// knobRules says, for every key of the slo-config, what Tandem does with it. A rule applies to its key and
// every key below it; the longest match wins; "*" matches one segment. TestKnobRulesCoverEveryKey fails
// when a key is added to config/slo without a rule here, so no key can be parsed and silently dropped.
func knobRules() map[string]knobRule {
	colocation := while(func(r slo.Resolved) bool { return r.Colocation.Enable }, "colocation-config.enable is false: no batch capacity is published")
	threshold := while(func(r slo.Resolved) bool { return r.ResourceThreshold.Enable }, "resource-threshold-config.enable is false")
	return map[string]knobRule{
		// colocation-config: the reclaim formula and the node reporter (metrics/reclaim, metrics/reporter).
		"colocation-config/enable": switchRule(func(r slo.Resolved) bool { return r.Colocation.Enable },
			"batch capacity is published on the Node while the agent has API access", "no batch capacity is published; the keys below wait for it"),
		"colocation-config/metricAggregateDurationSeconds": colocation,
		"colocation-config/metricReportIntervalSeconds":    colocation,
		"colocation-config/cpuReclaimThresholdPercent":     colocation,
		"colocation-config/cpuCalculatePolicy":             colocation,
		"colocation-config/memoryReclaimThresholdPercent":  colocation,
		"colocation-config/memoryCalculatePolicy":          colocation,
		"colocation-config/degradeTimeMinutes":             colocation,
		"colocation-config/updateTimeThresholdSeconds":     colocation,
		"colocation-config/resourceDiffThreshold":          colocation,
		"colocation-config/batchCPUThresholdPercent":       colocation,
		"colocation-config/batchMemoryThresholdPercent":    colocation,
		"colocation-config/metricAggregatePolicy":          fixed(knob.Unsupported, "the node metric annotation carries the windows Tandem's peak predictor uses, not these"),
		"colocation-config/metricMemoryCollectPolicy":      fixed(knob.Unsupported, "memory usage is always the working set (usage minus inactive page cache)"),
		"colocation-config/midReclaimMode":                 fixed(knob.Unsupported, "Tandem publishes no mid-tier resources"),
		"colocation-config/midCPUThresholdPercent":         fixed(knob.Unsupported, "Tandem publishes no mid-tier resources"),
		"colocation-config/midMemoryThresholdPercent":      fixed(knob.Unsupported, "Tandem publishes no mid-tier resources"),
		"colocation-config/midUnallocatedPercent":          fixed(knob.Unsupported, "Tandem publishes no mid-tier resources"),
		"colocation-config/midStaticCPUReservedPercent":    fixed(knob.Unsupported, "Tandem publishes no mid-tier resources"),
		"colocation-config/midStaticMemoryReservedPercent": fixed(knob.Unsupported, "Tandem publishes no mid-tier resources"),
		"colocation-config/extensions":                     fixed(knob.Unsupported, "third-party extensions are accepted and not read"),

		// resource-threshold-config: CPU suppression and eviction (actuate/suppress, actuate/evict).
		"resource-threshold-config/enable": switchRule(func(r slo.Resolved) bool { return r.ResourceThreshold.Enable },
			"CPU suppression and BE eviction run", "no CPU suppression and no BE eviction; the keys below wait for it"),
		"resource-threshold-config/cpuSuppressThresholdPercent":        threshold,
		"resource-threshold-config/cpuSuppressMinPercent":              threshold,
		"resource-threshold-config/cpuSuppressPolicy":                  threshold,
		"resource-threshold-config/memoryEvictThresholdPercent":        threshold,
		"resource-threshold-config/memoryEvictLowerPercent":            threshold,
		"resource-threshold-config/cpuEvictBESatisfactionUpperPercent": threshold,
		"resource-threshold-config/cpuEvictBESatisfactionLowerPercent": threshold,
		"resource-threshold-config/cpuEvictBEUsageThresholdPercent":    threshold,
		"resource-threshold-config/cpuEvictTimeWindowSeconds":          threshold,
		"resource-threshold-config/cpuEvictThresholdPercent":           fixed(knob.Unsupported, "BE pods are evicted by CPU satisfaction (cpuEvictBESatisfaction*), not by node CPU usage"),
		"resource-threshold-config/cpuEvictLowerPercent":               fixed(knob.Unsupported, "BE pods are evicted by CPU satisfaction (cpuEvictBESatisfaction*), not by node CPU usage"),
		"resource-threshold-config/cpuEvictPolicy":                     fixed(knob.Unsupported, "CPU satisfaction is measured against the BE CPUs suppression allows (evictByRealLimit)"),
		"resource-threshold-config/evictEnabledPriorityThreshold":      fixed(knob.Unsupported, "every BE pod may be evicted, lowest priority first"),
		"resource-threshold-config/stealHeadroom":                      stealRule,
		"resource-threshold-config/stealThresholdPercent":              stealRule,
		"resource-threshold-config/beCFSPeriodMicros":                  periodRule,
		"resource-threshold-config/lsWaitGuard":                        lsWaitRule,
		"resource-threshold-config/lsWaitThresholdMicros":              lsWaitRule,

		// resource-qos-config.
		"resource-qos-config/policies.cpuPolicy":     fixed(knob.Unsupported, "the mechanism follows the kernel: group identity (cpu.bvt_warp_ns) where offered, cpu.idle for BE pods in any case"),
		"resource-qos-config/policies.netQOSPolicy":  fixed(knob.Unsupported, "network QoS is not applied"),
		"resource-qos-config/*.cpuQOS":               fixed(knob.Unsupported, "applies to pods' classes only (lsrClass, lsClass, beClass)"),
		"resource-qos-config/*.cpuQOS.enable":        cpuQOSRule,
		"resource-qos-config/*.cpuQOS.groupIdentity": cpuQOSRule,
		"resource-qos-config/*.cpuQOS.schedIdle":     fixed(knob.Unsupported, "BE pods get cpu.idle = 1 from the cpuidle policy whatever this says; other classes none"),
		"resource-qos-config/*.cpuQOS.coreExpeller":  fixed(knob.Unsupported, "core scheduling is not applied"),
		"resource-qos-config/*.cpuQOS.yieldThreads":  yieldRule,
		// memoryqos reports these itself.
		"resource-qos-config/*.memoryQOS":  reported,
		"resource-qos-config/*.resctrlQOS": resctrlRule,
		"resource-qos-config/*.blkioQOS":   blkioRule,
		"resource-qos-config/*.networkQOS": fixed(knob.Unsupported, "network QoS is accepted and not applied"),

		// cpu-burst-config and system-config: their loops report them (host-application-config has no fixed keys: its loop lists the applications).
		"cpu-burst-config": reported,
		"system-config":    reported,
	}
}

func cpuQOSRule(r slo.Resolved, f nodeFacts, key string) (knob.State, string) {
	class := classOf(key)
	switch {
	case !podClass(class):
		return knob.Unsupported, "applies to pods' classes only (lsrClass, lsClass, beClass)"
	case !f.policy("cpuidle"):
		return knob.Off, "the cpuidle policy is not in --policies"
	case !classSettings(r, class).CPUQOS.Enable:
		return knob.Off, class + ".cpuQOS.enable is false"
	case f.cgroups == nil || !f.cgroups.Supports("cpu.bvt_warp_ns"):
		return knob.Ignored, "group identity needs cpu.bvt_warp_ns (Anolis OS), which this kernel lacks; BE pods still get cpu.idle"
	}
	return knob.Applied, ""
}

func yieldRule(r slo.Resolved, f nodeFacts, key string) (knob.State, string) {
	switch {
	case classOf(key) != "beClass":
		return knob.Unsupported, "beClass only"
	case !r.ResourceQOS.BE.CPUQOS.YieldThreads:
		return knob.Off, ""
	case f.cgroups == nil:
		return knob.Ignored, "no cgroup hierarchy to find BE threads in"
	case !f.yield:
		return knob.Ignored, "the kernel does not honour slice requests (Linux 6.12+)"
	}
	return knob.Applied, ""
}

// blkioRule says what blkioQOS does per class: the BE parent's limits for beClass (its loop reports
// the devices), nothing for the others, as koordlet.
func blkioRule(r slo.Resolved, f nodeFacts, key string) (knob.State, string) {
	switch class := classOf(key); {
	case class == "cgroupRoot":
		return knob.Unsupported, "the blk-iocost model of the node's disks (Anolis OS's blkio.cost.*) is not applied; beClass.blkioQOS is"
	case class != "beClass":
		return knob.Unsupported, "beClass only, as in Koordinator: LS and LSR pods keep the disks' full rate"
	case !r.ResourceQOS.BE.BlkIOQOS.Enable:
		return knob.Off, "beClass.blkioQOS.enable is false"
	case f.cgroups == nil:
		return knob.Ignored, "no cgroup hierarchy to find the BE pods' parent in"
	}
	return reported(r, f, key)
}

// stealRule says whether the steal headroom runs: on, off, or auto on a virtual machine, whatever
// resource-threshold-config.enable says.
func stealRule(r slo.Resolved, f nodeFacts, _ string) (knob.State, string) {
	on := r.ResourceThreshold.StealHeadroom == slo.StealHeadroomOn || (r.ResourceThreshold.StealHeadroom == slo.StealHeadroomAuto && f.vm)
	switch {
	case !on && r.ResourceThreshold.StealHeadroom == slo.StealHeadroomAuto:
		return knob.Off, "auto, and this node is not a virtual machine: " + f.vmWhy
	case !on:
		return knob.Off, ""
	case f.cgroups == nil:
		return knob.Ignored, "no cgroup hierarchy to hold BE back with"
	case r.ResourceThreshold.StealHeadroom == slo.StealHeadroomAuto:
		return knob.Applied, "auto, and this node is a virtual machine: " + f.vmWhy
	}
	return knob.Applied, ""
}

// lsWaitRule says whether the LS wait guard runs: it needs the run-queue collector's samples and a
// cgroup hierarchy to hold BE back with, whatever resource-threshold-config.enable says.
func lsWaitRule(r slo.Resolved, f nodeFacts, _ string) (knob.State, string) {
	th := r.ResourceThreshold
	switch {
	case !th.LSWaitGuard:
		return knob.Off, ""
	case f.cgroups == nil:
		return knob.Ignored, "no cgroup hierarchy to hold BE back with"
	case !f.runQueue:
		return knob.Ignored, "needs LS pods' run-queue latency: start tandem-proxy with --run-queue-latency (and tracefs mounted)"
	}
	return knob.Applied, fmt.Sprintf("BE held back while more than 1%% of LS waits for a CPU last %v or longer (tandemctl interference)",
		collector.RunQueueBound(time.Duration(th.LSWaitThresholdMicros)*time.Microsecond))
}

// periodRule says whether cfsQuota suppression puts a quota on the BE parent, whose period
// beCFSPeriodMicros is (the steal headroom alone keeps the kernel's 100 ms).
func periodRule(r slo.Resolved, f nodeFacts, key string) (knob.State, string) {
	th := r.ResourceThreshold
	switch {
	case !th.Enable || th.CPUSuppressPolicy != slo.CPUSuppressByCFSQuota:
		return knob.Off, "applies to cfsQuota suppression (the steal headroom alone holds BE with the kernel's 100 ms period)"
	case f.cgroups == nil:
		return knob.Ignored, "no cgroup hierarchy to put a quota in"
	}
	return knob.Applied, "the period of cfsQuota suppression's quota (and of the steal headroom's under it)"
}

func resctrlRule(r slo.Resolved, f nodeFacts, key string) (knob.State, string) {
	class := classOf(key)
	switch {
	case !podClass(class):
		return knob.Unsupported, "applies to pods' classes only (lsrClass, lsClass, beClass)"
	case !f.policy("resctrl"):
		return knob.Off, "the resctrl policy is not in --policies"
	case !classSettings(r, class).ResctrlQOS.Enable:
		return knob.Off, class + ".resctrlQOS.enable is false"
	case !f.resctrl:
		return knob.Ignored, "no resctrl filesystem at /sys/fs/resctrl (Intel RDT or AMD PQoS, mounted)"
	}
	return knob.Applied, ""
}

// matchRule returns the rule of the longest pattern matching key or one of its ancestors.
func matchRule(rules map[string]knobRule, section, key string) (knobRule, bool) {
	segs := strings.Split(key, ".")
	for n := len(segs); n >= 0; n-- {
		for pattern, rule := range rules {
			ps, pk, _ := strings.Cut(pattern, "/")
			if ps != section {
				continue
			}
			var pseg []string
			if pk != "" {
				pseg = strings.Split(pk, ".")
			}
			if len(pseg) != n {
				continue
			}
			ok := true
			for i, p := range pseg {
				if p != "*" && p != segs[i] {
					ok = false
					break
				}
			}
			if ok {
				return rule, true
			}
		}
	}
	return nil, false
}

// sectionValues pairs each ConfigMap key with the value of its section in r.
func sectionValues(r slo.Resolved) map[string]any {
	return map[string]any{
		slo.ColocationConfigKey:        r.Colocation,
		slo.ResourceThresholdConfigKey: r.ResourceThreshold,
		slo.ResourceQOSConfigKey:       r.ResourceQOS,
		slo.CPUBurstConfigKey:          r.CPUBurst,
		slo.SystemConfigKey:            r.System,
	}
}

// leafKeys lists v's keys as dotted JSON paths with their values as JSON. It descends into this
// repository's structs; anything else (numbers, lists, maps, apimachinery types) is one value.
func leafKeys(prefix string, v reflect.Value, add func(key, value string)) {
	t := v.Type()
	if t.Kind() != reflect.Struct || !strings.HasPrefix(t.PkgPath(), "github.com/tandemkit/tandem/") {
		value := ""
		if !(v.Kind() == reflect.Pointer || v.Kind() == reflect.Map || v.Kind() == reflect.Slice) || !v.IsNil() {
			if b, err := json.Marshal(v.Interface()); err == nil {
				value = string(b)
			}
		}
		add(prefix, value)
		return
	}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		if prefix != "" {
			name = prefix + "." + name
		}
		leafKeys(name, v.Field(i), add)
	}
}

// baseKnobs is every key of the configuration in force with the state the table gives it; the reports
// of the parts that act on keys are laid over it (knob.Merge).
func baseKnobs(r slo.Resolved, f nodeFacts) []knob.Status {
	rules := knobRules()
	var out []knob.Status
	for section, v := range sectionValues(r) {
		leafKeys("", reflect.ValueOf(v), func(key, value string) {
			s := knob.Status{Section: section, Key: key, Value: value, State: knob.Unsupported, Detail: "no rule says what Tandem does with it"}
			if rule, ok := matchRule(rules, section, key); ok {
				s.State, s.Detail = rule(r, f, key)
			}
			out = append(out, s)
		})
	}
	return out
}

// refusedKnobs is one row per section the configuration refused, keyed by the section alone: its keys
// below show the values in force, which are its last good ones (Koordinator's defaults at a first start),
// not what the operator wrote.
func refusedKnobs(refused []slo.SectionError) []knob.Status {
	out := make([]knob.Status, 0, len(refused))
	for _, r := range refused {
		out = append(out, knob.Status{Section: r.Key, State: knob.Refused,
			Detail: r.Error() + "; the section keeps its last good value (Koordinator's defaults at a first start), which the keys below show"})
	}
	return out
}

// knobsReport is /debug/config's answer.
type knobsReport struct {
	Node string        `json:"node"`
	Keys []knob.Status `json:"keys"`
}

// configHandler serves /debug/config: every slo-config key's state on this node.
func configHandler(node string, cons *consumers, facts nodeFacts) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		cons.mu.Lock()
		r, refused := cons.resolved, cons.refused
		cons.mu.Unlock()
		rep := knobsReport{Node: node, Keys: knob.Merge(baseKnobs(r, facts), append(cons.knobReports(), refusedKnobs(refused))...)}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(rep)
	}
}
