package resctrl

import (
	"errors"
	"fmt"

	"github.com/tandemkit/tandem/config/slo"
	resqos "github.com/tandemkit/tandem/resource/qos"
)

// ClassConfig is one class's resctrlQOS block of resource-qos-config: config/slo's type, with the hook's
// checks.
type ClassConfig slo.ResctrlQOSSettings

// Config is the RDT configuration per class, named as in resource-qos-config.
type Config struct {
	// LSRClass applies to LSR and LSE pods.
	LSRClass ClassConfig `json:"lsrClass"`
	LSClass  ClassConfig `json:"lsClass"`
	BEClass  ClassConfig `json:"beClass"`
}

// DefaultConfig is what Koordinator ships and operators run as is: disabled; when enabled, LSR and LS get
// every cache way and BE the first 30%, and every class all the bandwidth.
func DefaultConfig() Config {
	full := ClassConfig{CatRangeStartPercent: 0, CatRangeEndPercent: 100, MBAPercent: 100}
	be := full
	be.CatRangeEndPercent = 30
	return Config{LSRClass: full, LSClass: full, BEClass: be}
}

// Validate reports every invalid field of the enabled classes, named by its json path.
func (c Config) Validate() error {
	var errs []error
	for _, cl := range c.classes() {
		cc := cl.cfg
		if !cc.Enable {
			continue
		}
		if cc.CatRangeStartPercent < 0 || cc.CatRangeEndPercent > 100 || cc.CatRangeStartPercent >= cc.CatRangeEndPercent {
			errs = append(errs, fmt.Errorf("%s.resctrlQOS: catRangeStartPercent %d, catRangeEndPercent %d: want 0 <= start < end <= 100",
				cl.json, cc.CatRangeStartPercent, cc.CatRangeEndPercent))
		}
		if cc.MBAPercent <= 0 || cc.MBAPercent > 100 {
			errs = append(errs, fmt.Errorf("%s.resctrlQOS.mbaPercent: %d is outside [1, 100]", cl.json, cc.MBAPercent))
		}
	}
	return errors.Join(errs...)
}

// Group names, one resctrl control group per class, as koordlet names them.
const (
	GroupLSR = "LSR"
	GroupLS  = "LS"
	GroupBE  = "BE"
)

type class struct {
	json, group string
	cfg         ClassConfig
}

func (c Config) classes() []class {
	return []class{{"lsrClass", GroupLSR, c.LSRClass}, {"lsClass", GroupLS, c.LSClass}, {"beClass", GroupBE, c.BEClass}}
}

// GroupOf returns the group a QoS class's containers belong to, or "" for SYSTEM.
func GroupOf(c resqos.Class) string {
	switch c {
	case resqos.LSE, resqos.LSR:
		return GroupLSR
	case resqos.LS:
		return GroupLS
	case resqos.BE:
		return GroupBE
	}
	return ""
}
