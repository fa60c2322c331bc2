package cpuburst

import (
	"errors"
	"fmt"
)

// Policy selects which kind of burst runs, as Koordinator's cpu-burst-config "policy" does.
type Policy string

// The policies. Tandem implements the CFS burst (cpu.cfs_burst_us) in the hook; the CFS quota burst is a
// decision function (QuotaBurst) until node usage metrics arrive to drive it.
const (
	PolicyNone              Policy = "none"
	PolicyCPUBurstOnly      Policy = "cpuBurstOnly"
	PolicyCFSQuotaBurstOnly Policy = "cfsQuotaBurstOnly"
	PolicyAuto              Policy = "auto"
)

// Config is seed 004's cpu-burst-config strategy, field for field.
type Config struct {
	// Policy: none, cpuBurstOnly, cfsQuotaBurstOnly or auto.
	Policy Policy `json:"policy"`
	// CPUBurstPercent sets cpu.cfs_burst_us to this percentage of the container's CFS quota. The kernel
	// refuses a burst above the quota (EINVAL), so values above 100 act as 100.
	CPUBurstPercent int64 `json:"cpuBurstPercent"`
	// CFSQuotaBurstPercent is the most the CFS quota may be raised to, in percent of the quota the limit
	// gives (300 = three times the limit).
	CFSQuotaBurstPercent int64 `json:"cfsQuotaBurstPercent"`
	// CFSQuotaBurstPeriodSeconds bounds one raised-quota period; -1 means unbounded.
	CFSQuotaBurstPeriodSeconds int64 `json:"cfsQuotaBurstPeriodSeconds"`
	// SharePoolThresholdPercent: while the shared pool's usage is at or above it, quotas go back to the
	// limit's.
	SharePoolThresholdPercent int64 `json:"sharePoolThresholdPercent"`
}

// DefaultConfig is seed 004's cluster strategy: off, with Koordinator's default percentages ready.
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
	if c.quotaBurst() && (c.CFSQuotaBurstPercent < 100 || c.CFSQuotaBurstPercent > maxPercent) {
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

func (c Config) cfsBurst() bool { return c.Policy == PolicyCPUBurstOnly || c.Policy == PolicyAuto }

func (c Config) quotaBurst() bool {
	return c.Policy == PolicyCFSQuotaBurstOnly || c.Policy == PolicyAuto
}
