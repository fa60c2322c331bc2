package memoryqos

import (
	"errors"
	"fmt"

	resqos "github.com/tandemkit/tandem/resource/qos"
)

// ClassConfig is one class's memoryQOS block of seed 004's resource-qos-config.
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
}

// Config is the memory QoS configuration per class, named as in resource-qos-config.
type Config struct {
	// LSRClass applies to LSR pods and to LSE pods, which Koordinator configures with the LSR class.
	LSRClass ClassConfig `json:"lsrClass"`
	LSClass  ClassConfig `json:"lsClass"`
	BEClass  ClassConfig `json:"beClass"`
}

// DefaultConfig is seed 004's: every class disabled, every percentage 0.
func DefaultConfig() Config { return Config{} }

// Validate reports every invalid field, named by its json path.
func (c Config) Validate() error {
	var errs []error
	classes := []struct {
		name string
		cc   ClassConfig
	}{{"lsrClass", c.LSRClass}, {"lsClass", c.LSClass}, {"beClass", c.BEClass}}
	for _, cl := range classes {
		fields := []struct {
			name string
			v    int64
		}{{"minLimitPercent", cl.cc.MinLimitPercent}, {"lowLimitPercent", cl.cc.LowLimitPercent}, {"throttlingPercent", cl.cc.ThrottlingPercent}}
		for _, f := range fields {
			if f.v < 0 || f.v > 100 {
				errs = append(errs, fmt.Errorf("%s.memoryQOS.%s: %d is outside [0, 100]", cl.name, f.name, f.v))
			}
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
	default:
		return cc, false
	}
	return cc, cc.Enable
}

func (c Config) anyEnabled() bool { return c.LSRClass.Enable || c.LSClass.Enable || c.BEClass.Enable }
