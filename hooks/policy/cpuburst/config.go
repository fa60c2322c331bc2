package cpuburst

import (
	"errors"
	"fmt"

	"github.com/tandemkit/tandem/config/slo"
)

// Policy selects which kind of burst runs: cpu-burst-config's "policy".
type Policy = slo.CPUBurstPolicy

// The policies, as Koordinator defines them: auto runs the CFS burst (cpu.cfs_burst_us, set by this
// hook) and the CFS quota burst (cpu.cfs_quota_us raised while the shared pool is idle, by the node loop
// actuate/quotaburst with QuotaBurst's decisions); cpuBurstOnly the first, cfsQuotaBurstOnly the second,
// none neither.
const (
	PolicyNone              = slo.CPUBurstNone
	PolicyCPUBurstOnly      = slo.CPUBurstOnly
	PolicyCFSQuotaBurstOnly = slo.CFSQuotaBurstOnly
	PolicyAuto              = slo.CPUBurstAuto
)

// Config is a cpu-burst-config strategy as operators write it for Koordinator: config/slo's type, with
// the hook's checks.
type Config slo.CPUBurstSettings

// DefaultConfig is the cluster strategy Koordinator ships and operators run as is: off, with Koordinator's
// default percentages ready, so a node that moves to Tandem bursts exactly as it did.
func DefaultConfig() Config {
	return Config{
		Policy:                     PolicyNone,
		CPUBurstPercent:            1000,
		CFSQuotaBurstPercent:       300,
		CFSQuotaBurstPeriodSeconds: -1,
		SharePoolThresholdPercent:  50,
	}
}

// maxPercent keeps quota × percent within int64 for any quota the kernel accepts.
const maxPercent = 100000

// Validate reports every invalid field, named by its json path.
func (c Config) Validate() error {
	var errs []error
	switch c.Policy {
	case PolicyNone, PolicyCPUBurstOnly, PolicyCFSQuotaBurstOnly, PolicyAuto:
	default:
		errs = append(errs, fmt.Errorf("policy: %q is not one of none, cpuBurstOnly, cfsQuotaBurstOnly, auto", c.Policy))
	}
	if c.CPUBurstPercent < 0 || c.CPUBurstPercent > maxPercent {
		errs = append(errs, fmt.Errorf("cpuBurstPercent: %d is outside [0, %d]", c.CPUBurstPercent, maxPercent))
	}
	// Checked only where it is used, so a cpuBurstOnly strategy that leaves it out stays valid.
	if c.RaisesQuota() && (c.CFSQuotaBurstPercent < 100 || c.CFSQuotaBurstPercent > maxPercent) {
		errs = append(errs, fmt.Errorf("cfsQuotaBurstPercent: %d is outside [100, %d]; 100 means no raise", c.CFSQuotaBurstPercent, maxPercent))
	}
	if c.CFSQuotaBurstPeriodSeconds < -1 {
		errs = append(errs, fmt.Errorf("cfsQuotaBurstPeriodSeconds: %d; use -1 for unbounded or a number of seconds", c.CFSQuotaBurstPeriodSeconds))
	}
	if c.SharePoolThresholdPercent < 0 || c.SharePoolThresholdPercent > 100 {
		errs = append(errs, fmt.Errorf("sharePoolThresholdPercent: %d is outside [0, 100]", c.SharePoolThresholdPercent))
	}
	return errors.Join(errs...)
}

// SetsBurst reports whether the policy sets the CFS burst (cpu.cfs_burst_us): cpuBurstOnly and auto.
func (c Config) SetsBurst() bool { return c.Policy == PolicyCPUBurstOnly || c.Policy == PolicyAuto }

// RaisesQuota reports whether the policy runs the CFS quota burst: cfsQuotaBurstOnly and auto.
func (c Config) RaisesQuota() bool {
	return c.Policy == PolicyCFSQuotaBurstOnly || c.Policy == PolicyAuto
}
