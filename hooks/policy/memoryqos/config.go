package memoryqos

import (
	"errors"
	"fmt"

	"github.com/tandemkit/tandem/config/slo"
	resqos "github.com/tandemkit/tandem/resource/qos"
)

// ClassConfig is one class's memoryQOS block of resource-qos-config: config/slo's type, which documents
// each field, with the hook's checks and the files it sets. A value of 0 leaves its file as the kernel or
// kubelet set it (see Files).
type ClassConfig slo.MemoryQOSSettings

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
