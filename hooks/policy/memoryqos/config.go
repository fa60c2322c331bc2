package memoryqos

import (
	"errors"
	"fmt"

	resqos "github.com/tandemkit/tandem/resource/qos"
)

// ClassConfig is one class's memoryQOS block of resource-qos-config. A value of 0 leaves its
// file as the kernel or kubelet set it (see Files). Its fields are config/slo's MemoryQOSSettings', in
// the same order, so that one converts to the other (hooks/policy.FromSLO).
type ClassConfig struct {
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
	// PageCacheLimitEnable, PageCacheLimitSync and PageCacheLimitSize are accepted so that a ConfigMap
	// written for Koordinator on Anolis loads unchanged, and reported as unsupported: Tandem sets no page
	// cache limit.
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

// Config is the memory QoS configuration per class, named as in resource-qos-config.
type Config struct {
	// LSRClass applies to LSR pods and to LSE pods, which Koordinator configures with the LSR class.
	LSRClass ClassConfig `json:"lsrClass"`
	LSClass  ClassConfig `json:"lsClass"`
	BEClass  ClassConfig `json:"beClass"`
	// SystemClass applies to pods labelled SYSTEM, as in koordlet.
	SystemClass ClassConfig `json:"systemClass"`
	// CgroupRoot is accepted and reported as unsupported: Koordinator applies cgroupRoot to block I/O
	// only, and Tandem sets no memory QoS on the node's root cgroups.
	CgroupRoot ClassConfig `json:"cgroupRoot"`
}

// DefaultConfig is what Koordinator ships and operators run as is: every class disabled, every value 0.
func DefaultConfig() Config { return Config{} }

// field is one integer field of a class and the range the hook accepts for it: the kernel's range, with 0
// (leave the file alone) allowed in every case.
type field struct {
	name     string
	v        int64
	min, max int64
}

func (cc ClassConfig) fields() []field {
	return []field{
		{"minLimitPercent", cc.MinLimitPercent, 0, 100},
		{"lowLimitPercent", cc.LowLimitPercent, 0, 100},
		{"throttlingPercent", cc.ThrottlingPercent, 0, 100},
		{"wmarkRatio", cc.WmarkRatio, 0, 100},
		{"wmarkScalePermill", cc.WmarkScalePermill, 0, 1000},
		{"wmarkMinAdj", cc.WmarkMinAdj, -25, 50},
		{"priorityEnable", cc.PriorityEnable, 0, 1},
		{"priority", cc.Priority, 0, 12},
		{"oomKillGroup", cc.OomKillGroup, 0, 1},
		{"pageCacheLimitEnable", cc.PageCacheLimitEnable, 0, 1},
		{"pageCacheLimitSync", cc.PageCacheLimitSync, 0, 1},
	}
}

// class is a class's config with its resource-qos-config name.
type class struct {
	name string
	cc   ClassConfig
}

func (c Config) classes() []class {
	return []class{{"lsrClass", c.LSRClass}, {"lsClass", c.LSClass}, {"beClass", c.BEClass}, {"systemClass", c.SystemClass}, {"cgroupRoot", c.CgroupRoot}}
}

// Validate reports every invalid field, named by its json path.
func (c Config) Validate() error {
	var errs []error
	for _, cl := range c.classes() {
		for _, f := range cl.cc.fields() {
			if f.v < f.min || f.v > f.max {
				errs = append(errs, fmt.Errorf("%s.memoryQOS.%s: %d is outside [%d, %d]", cl.name, f.name, f.v, f.min, f.max))
			}
		}
		if cl.cc.PageCacheLimitSize < 0 {
			errs = append(errs, fmt.Errorf("%s.memoryQOS.pageCacheLimitSize: %d is negative", cl.name, cl.cc.PageCacheLimitSize))
		}
	}
	return errors.Join(errs...)
}

// For returns the configuration of a class and whether memory QoS is on for it.
func (c Config) For(class resqos.Class) (ClassConfig, bool) {
	var cc ClassConfig
	switch class {
	case resqos.LSE, resqos.LSR:
		cc = c.LSRClass
	case resqos.LS:
		cc = c.LSClass
	case resqos.BE:
		cc = c.BEClass
	case resqos.System:
		cc = c.SystemClass
	default:
		return cc, false
	}
	return cc, cc.Enable
}

// applied are the classes the hook acts on: every one but cgroupRoot.
func (c Config) applied() []class { return c.classes()[:4] }

func (c Config) anyEnabled() bool {
	for _, cl := range c.applied() {
		if cl.cc.Enable {
			return true
		}
	}
	return false
}
