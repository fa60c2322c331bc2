package memoryqos

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/tandemkit/tandem/config/knob"
	"github.com/tandemkit/tandem/resource/cgroup"
)

// Section is the slo-controller-config key that holds memoryQOS.
const Section = "resource-qos-config"

// anolisOnly are the files only Anolis OS kernels have; the others are cgroup v2's too.
func anolisOnly(file string) bool {
	switch file {
	case FileWmarkRatio, FileWmarkScaleFactor, FileWmarkMinAdj, FilePriority, FileUsePriorityOOM:
		return true
	}
	return false
}

// Knobs says, for every class and memoryQOS key of resource-qos-config, what the hook built from cfg does
// on a node whose cgroups p probes (nil: no cgroup hierarchy): Applied, Off (class disabled, or a value of
// 0, which leaves the file alone), Ignored (the kernel lacks the file; Detail names it) or Unsupported
// (pageCacheLimit*, and cgroupRoot's memoryQOS). It is what the hook does, not what it did: min and low
// still need a memory request per pod, and the policy must run (--policies).
func Knobs(cfg Config, p cgroup.Prober) []knob.Status {
	var out []knob.Status
	for _, cl := range cfg.classes() {
		prefix := cl.name + ".memoryQOS."
		add := func(key, value string, state knob.State, detail string) {
			out = append(out, knob.Status{Section: Section, Key: prefix + key, Value: value, State: state, Detail: detail})
		}
		cc := cl.cc
		pageCache := []struct {
			key string
			v   int64
		}{{"pageCacheLimitEnable", cc.PageCacheLimitEnable}, {"pageCacheLimitSync", cc.PageCacheLimitSync}, {"pageCacheLimitSize", cc.PageCacheLimitSize}}
		if cl.name == "cgroupRoot" {
			const why = "Koordinator applies cgroupRoot to block I/O only; Tandem sets no memory QoS on the node's root cgroups"
			add("enable", strconv.FormatBool(cc.Enable), knob.Unsupported, why)
			for _, s := range settings() {
				add(s.key, strconv.FormatInt(s.value(cc), 10), knob.Unsupported, why)
			}
			for _, f := range pageCache {
				add(f.key, strconv.FormatInt(f.v, 10), knob.Unsupported, why)
			}
			continue
		}
		state, detail := enableState(cl.name, cc, p)
		add("enable", strconv.FormatBool(cc.Enable), state, detail)
		for _, s := range settings() {
			state, detail := settingState(cl.name, cc, s, p)
			add(s.key, strconv.FormatInt(s.value(cc), 10), state, detail)
		}
		for _, f := range pageCache {
			add(f.key, strconv.FormatInt(f.v, 10), knob.Unsupported, "Tandem sets no page cache limit (Anolis memory.pagecache_limit.*)")
		}
	}
	return out
}

func enableState(class string, cc ClassConfig, p cgroup.Prober) (knob.State, string) {
	if !cc.Enable {
		return knob.Off, "the class's cgroups keep what kubelet and the kernel set"
	}
	files := wanted(cc)
	if len(files) == 0 {
		return knob.Off, "every value of " + class + ".memoryQOS is 0: nothing to set"
	}
	if p == nil {
		return knob.Ignored, "no cgroup hierarchy under the cgroup root"
	}
	var have, lack []string
	for _, f := range files {
		if p.Supports(f) {
			have = append(have, f)
		} else {
			lack = append(lack, f)
		}
	}
	if len(have) == 0 {
		return knob.Ignored, fmt.Sprintf("this kernel's cgroup v%d hierarchy has none of %s", p.Version(), strings.Join(lack, ", "))
	}
	if len(lack) > 0 {
		return knob.Applied, fmt.Sprintf("sets %s on the class's pod and container cgroups; this kernel lacks %s", strings.Join(have, ", "), strings.Join(lack, ", "))
	}
	return knob.Applied, fmt.Sprintf("sets %s on the class's pod and container cgroups", strings.Join(have, ", "))
}

func settingState(class string, cc ClassConfig, s setting, p cgroup.Prober) (knob.State, string) {
	lacks := func() string {
		if p == nil {
			return "no cgroup hierarchy under the cgroup root: no " + s.file
		}
		if p.Supports(s.file) {
			return ""
		}
		has := "cgroup v2 and Anolis OS kernels have it"
		if anolisOnly(s.file) {
			has = "Anolis OS kernels have it"
		}
		return fmt.Sprintf("no %s in this kernel's cgroup v%d memory controller (%s)", s.file, p.Version(), has)
	}
	// Off says whether enabling would help: an operator planning to switch a class on reads it here.
	off := func(why string) (knob.State, string) {
		if l := lacks(); l != "" {
			return knob.Off, why + "; and " + l
		}
		return knob.Off, why
	}
	if !cc.Enable {
		return off(class + ".memoryQOS.enable is false")
	}
	if !s.on(cc) {
		return off("0 leaves " + s.file + " as kubelet and the kernel set it")
	}
	if l := lacks(); l != "" {
		return knob.Ignored, l
	}
	v := s.value(cc)
	switch s.percentOf {
	case "request":
		return knob.Applied, fmt.Sprintf("%s = %d%% of the memory request, on pod and container cgroups (where the request is known)", s.file, v)
	case "limit":
		return knob.Applied, fmt.Sprintf("%s = %d%% of the memory limit (max without one), on pod and container cgroups", s.file, v)
	}
	return knob.Applied, fmt.Sprintf("%s = %d on pod and container cgroups", s.file, v)
}
