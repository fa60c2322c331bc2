// Package headroom keeps best-effort (BE) work below the CPU a virtual machine's host really gives.
//
// Most Kubernetes nodes are virtual machines, and many hosts take CPU back when a guest fills its
// vCPUs: a burstable instance out of credits, a shared host whose other guests are busy, a host-side
// bandwidth limit. The guest sees it as steal (the steal column of /proc/stat) and its services see it
// as stalls of tens of milliseconds (docs/colocation.md: with both of this machine's vCPUs busy, 100 ms
// stalls). Colocation is exactly what fills the vCPUs, so on such a node BE work filling "idle" CPU is
// paid for by the latency-sensitive (LS) pods, and a batch capacity computed from idle CPU promises CPU
// the host does not give.
//
// The Controller reads each usage snapshot and decides a BE-wide CPU ceiling, additive increase and
// multiplicative decrease, as TCP does with a link whose capacity it cannot see:
//
//   - It learns the host's steal without BE: an average of the steal in samples where BE hardly runs
//     (or is already held at the floor), so a host that steals anyway does not make BE pay for it.
//   - When steal rises above that level by more than the threshold while BE runs, BE is held back at
//     once: the ceiling drops to BackoffPercent of what BE ran (the guest's accounting leaves steal out
//     of it, so that is what fitted under the host's line), never below the floor. The guest's total use at that moment is remembered as the knee: the level at which this
//     host started to take CPU back.
//   - While steal stays at its level, the ceiling rises by RaiseStepPercent of the node every
//     RaiseAfterSamples samples, and by a quarter of that once the node would pass the knee again
//     (until KneeMemory has passed), so BE converges on what the host gives instead of oscillating
//     around it. Once it reaches the node's capacity the ceiling is gone.
//
// The Controller decides; it writes nothing. actuate/suppress applies the ceiling to the BE cgroups,
// and metrics/reporter caps the published batch capacity at it.
package headroom

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"

	"github.com/tandemkit/tandem/metrics/collector"
	"github.com/tandemkit/tandem/resource/cgroup"
	"github.com/tandemkit/tandem/resource/qos"
)

// Config is how the controller behaves.
type Config struct {
	// Enable switches the ceiling on; off drops any ceiling at the next sample.
	Enable bool `json:"enable"`
	// StealThresholdMilli is the steal above its level without BE, in milli-cores of the node, that
	// holds BE back.
	StealThresholdMilli int64 `json:"stealThresholdMilli"`
	// BEActiveMilli is the BE use under which BE counts as not running: those samples teach the steal
	// the host takes anyway.
	BEActiveMilli int64 `json:"beActiveMilli"`
	// BackoffPercent is the share of BE's use a hold keeps.
	BackoffPercent int64 `json:"backoffPercent"`
	// RaiseAfterSamples is how many samples in a row with steal at its level raise the ceiling one step.
	RaiseAfterSamples int `json:"raiseAfterSamples"`
	// RaiseStepPercent is one step, in percent of the node.
	RaiseStepPercent int64 `json:"raiseStepPercent"`
	// MinPercent is the floor of the ceiling, in percent of the node (at least 100m): BE keeps making
	// progress whatever the host does.
	MinPercent int64 `json:"minPercent"`
	// KneeMemory is how long the level at which the host took CPU back slows the raises near it.
	KneeMemory time.Duration `json:"kneeMemory"`
	// BaselineSamples is the window, in samples, of the steal level without BE (an exponential average).
	BaselineSamples int `json:"baselineSamples"`
}

// DefaultConfig is off; the agent switches it on where the node is a VM (resource-threshold-config's
// stealHeadroom "auto"). The threshold is 5% of one CPU: 50 ms of steal a second, half of one of the
// 100 ms stalls a host-side bandwidth limit makes, and above the few ticks a quiet shared host steals.
func DefaultConfig() Config {
	return Config{
		StealThresholdMilli: 50,
		BEActiveMilli:       100,
		BackoffPercent:      75,
		RaiseAfterSamples:   10,
		RaiseStepPercent:    5,
		MinPercent:          10,
		KneeMemory:          10 * time.Minute,
		BaselineSamples:     30,
	}
}

// Validate reports every bad field by its name.
func (c Config) Validate() error {
	var errs []error
	if c.StealThresholdMilli < 0 {
		errs = append(errs, fmt.Errorf("stealThresholdMilli: %d is negative", c.StealThresholdMilli))
	}
	if c.BEActiveMilli < 0 {
		errs = append(errs, fmt.Errorf("beActiveMilli: %d is negative", c.BEActiveMilli))
	}
	if c.BackoffPercent < 1 || c.BackoffPercent > 99 {
		errs = append(errs, fmt.Errorf("backoffPercent: %d, want 1-99", c.BackoffPercent))
	}
	if c.RaiseAfterSamples < 1 {
		errs = append(errs, fmt.Errorf("raiseAfterSamples: %d, want 1 or more", c.RaiseAfterSamples))
	}
	if c.RaiseStepPercent < 1 || c.RaiseStepPercent > 100 {
		errs = append(errs, fmt.Errorf("raiseStepPercent: %d, want 1-100", c.RaiseStepPercent))
	}
	if c.MinPercent < 0 || c.MinPercent > 100 {
		errs = append(errs, fmt.Errorf("minPercent: %d is not a percentage (0-100)", c.MinPercent))
	}
	if c.KneeMemory < 0 {
		errs = append(errs, fmt.Errorf("kneeMemory: %v is negative", c.KneeMemory))
	}
	if c.BaselineSamples < 1 {
		errs = append(errs, fmt.Errorf("baselineSamples: %d, want 1 or more", c.BaselineSamples))
	}
	return errors.Join(errs...)
}

// Status is what the controller last saw and decided, for tandemctl and logs.
type Status struct {
	// Enabled says whether the ceiling runs; Why says why it is on or off (the mode and whether the
	// node is a VM).
	Enabled bool   `json:"enabled"`
	Why     string `json:"why,omitempty"`
	// Time is the sample's time.
	Time time.Time `json:"time"`
	// StealMilli is the node's steal in the sample; PerCPUMilli each CPU's, in milli of that CPU.
	StealMilli  int64         `json:"stealMilli"`
	PerCPUMilli map[int]int64 `json:"perCPUMilli,omitempty"`
	// BaselineMilli is the steal level learnt without BE.
	BaselineMilli int64 `json:"baselineMilli"`
	// BEUsedMilli is what BE pods used in the sample; GuestMilli what the whole node ran.
	BEUsedMilli int64 `json:"beUsedMilli"`
	GuestMilli  int64 `json:"guestMilli"`
	// CapacityMilli is the node's CPUs × 1000.
	CapacityMilli int64 `json:"capacityMilli"`
	// Limited says whether a ceiling is in force; CeilingMilli is it (0 when none).
	Limited      bool  `json:"limited"`
	CeilingMilli int64 `json:"ceilingMilli"`
	// KneeMilli is the guest's use when the host last started to take CPU back (0: never, or forgotten).
	KneeMilli int64 `json:"kneeMilli"`
	// Holds counts the holds since start; LastHold is when the last was, LastHoldReason what caused it.
	Holds          int64     `json:"holds"`
	LastHold       time.Time `json:"lastHold"`
	LastHoldReason string    `json:"lastHoldReason,omitempty"`
	// Decision is what this sample did: "none", "hold", "raise", "lift", "calm", "learn".
	Decision string `json:"decision"`
}

// Controller decides the BE ceiling. Observe runs from one goroutine (the suppress loop); Ceiling and
// Status are safe for concurrent use.
type Controller struct {
	mu       sync.Mutex
	cfg      Config
	why      string
	baseline float64
	learnt   bool
	ceiling  int64 // 0: none
	calm     int
	knee     int64
	kneeAt   time.Time
	status   Status

	ceilingGauge, stealGauge, baselineGauge prometheus.Gauge
	holds, raises                           prometheus.Counter
}

// New returns a controller with no ceiling. why says why cfg.Enable is what it is (logged and shown by
// tandemctl). reg receives tandem_headroom_* metrics; nil keeps them unexported.
func New(cfg Config, why string, reg prometheus.Registerer) (*Controller, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("steal headroom config: %w", err)
	}
	g := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "tandem", Subsystem: "headroom", Name: name, Help: help})
	}
	c := &Controller{
		cfg: cfg, why: why,
		ceilingGauge:  g("be_ceiling_cores", "CPU BE pods may use because of what the host takes back; the node's capacity when there is no ceiling."),
		stealGauge:    g("steal_cores", "Steal in the last sample, as the headroom controller read it."),
		baselineGauge: g("steal_baseline_cores", "Steal the host takes without BE running, as learnt."),
		holds: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "tandem", Subsystem: "headroom", Name: "holds_total",
			Help: "Times BE was held back because steal rose above its level without BE."}),
		raises: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "tandem", Subsystem: "headroom", Name: "raises_total",
			Help: "Times the BE ceiling was raised after steal stayed at its level."}),
	}
	c.status = Status{Enabled: cfg.Enable, Why: why, Decision: "none"}
	if reg != nil {
		for _, m := range []prometheus.Collector{c.ceilingGauge, c.stealGauge, c.baselineGauge, c.holds, c.raises} {
			if err := reg.Register(m); err != nil {
				return nil, fmt.Errorf("register headroom metrics: %w", err)
			}
		}
	}
	return c, nil
}

// Reconfigure swaps the configuration in; a bad one is refused and the old one stays. Switching off
// drops the ceiling at once; what was learnt (the steal level, the knee) is kept.
func (c *Controller) Reconfigure(cfg Config, why string) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("steal headroom config: %w", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cfg, c.why = cfg, why
	c.status.Enabled, c.status.Why = cfg.Enable, why
	if !cfg.Enable {
		c.ceiling, c.calm = 0, 0
		c.status.Limited, c.status.CeilingMilli = false, 0
	}
	return nil
}

// Ceiling is the most CPU BE may use now, in milli-cores; limited is false when there is none.
func (c *Controller) Ceiling() (milli int64, limited bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ceiling, c.ceiling > 0
}

// Status returns what the controller last saw and decided.
func (c *Controller) Status() Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.status
}

// PeriodMicros is the CFS period the headroom's quota wants when it alone holds BE back: the kernel's
// 100 ms, whatever beCFSPeriodMicros says for suppression, since a host that limits the VM at 100 ms
// would steal during the burst a longer period lets BE run at the start of each one. Unmeasured either
// way here (no stealing host at hand), so the period the headroom was built with stays.
const PeriodMicros = cgroup.DefaultPeriod

// Limit is Observe for actuate/suppress: the ceiling (0: none) and its period, with a log line for
// each hold.
func (c *Controller) Limit(ctx context.Context, snap *collector.Snapshot) (milli, periodMicros int64) {
	st := c.Observe(snap)
	if st.Decision == "hold" {
		klog.FromContext(ctx).Info("BE held back: the host takes CPU back while BE runs", "reason", st.LastHoldReason,
			"stealMilli", st.StealMilli, "baselineMilli", st.BaselineMilli, "perCPUMilli", st.PerCPUMilli, "ceilingMilli", st.CeilingMilli)
	}
	return st.CeilingMilli, PeriodMicros
}

// Observe reads one snapshot and returns the status after it.
func (c *Controller) Observe(snap *collector.Snapshot) Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	cfg := c.cfg
	capacity := max(snap.Capacity.CPUMilli, 1000)
	var be int64
	for _, ctr := range snap.Containers {
		if ctr.QoS == qos.BE {
			be = cgroup.Add(be, max(ctr.CPUMilli, 0))
		}
	}
	steal := max(snap.Steal.CPUMilli, 0)
	floor := max(cgroup.Scale(capacity, cfg.MinPercent, 100), 100)
	s := Status{
		Enabled: cfg.Enable, Why: c.why, Time: snap.Time, StealMilli: steal, PerCPUMilli: snap.Steal.PerCPU,
		BEUsedMilli: be, GuestMilli: snap.Node.CPUMilli, CapacityMilli: capacity,
		Holds: c.status.Holds, LastHold: c.status.LastHold, LastHoldReason: c.status.LastHoldReason, Decision: "none",
	}
	// The steal level without BE is learnt whether or not the ceiling is on, so that switching it on
	// starts from what this host does. A sample with BE held at the floor teaches it too: BE cannot be
	// held lower, so steal that goes on is the host's own.
	quiet := be < cfg.BEActiveMilli || (c.ceiling > 0 && c.ceiling <= floor)
	if quiet {
		n := float64(cfg.BaselineSamples)
		if !c.learnt {
			c.baseline, c.learnt = float64(steal), true
		} else {
			c.baseline += (float64(steal) - c.baseline) / n
		}
	}
	baseline := int64(c.baseline)
	excess := steal - baseline
	if !c.kneeAt.IsZero() && cfg.KneeMemory > 0 && snap.Time.Sub(c.kneeAt) > cfg.KneeMemory {
		c.knee, c.kneeAt = 0, time.Time{}
	}
	switch {
	case !cfg.Enable:
		c.ceiling, c.calm = 0, 0
	case be >= cfg.BEActiveMilli && excess > cfg.StealThresholdMilli && !(c.ceiling > 0 && c.ceiling <= floor):
		from := be
		if c.ceiling > 0 {
			from = min(from, c.ceiling)
		}
		// What BE ran is what fitted beside the rest under the host's line: the guest's accounting leaves
		// steal out of it. Holding below it by the backoff leaves the host room; subtracting the steal
		// as well would count what the host took twice and drop BE to the floor at every large stall.
		next := max(cgroup.Scale(from, cfg.BackoffPercent, 100), floor)
		if c.ceiling == 0 || next < c.ceiling {
			c.ceiling = next
			c.knee, c.kneeAt = snap.Node.CPUMilli, snap.Time
			s.Holds++
			s.LastHold = snap.Time
			s.LastHoldReason = fmt.Sprintf("steal %dm, %dm above its level without BE (threshold %dm), while BE used %dm of the node's %dm: BE held to %dm",
				steal, excess, cfg.StealThresholdMilli, be, snap.Node.CPUMilli, c.ceiling)
			s.Decision = "hold"
			c.holds.Inc()
		}
		c.calm = 0
	case c.ceiling > 0 && excess <= cfg.StealThresholdMilli/2:
		c.calm++
		s.Decision = "calm"
		if c.calm < cfg.RaiseAfterSamples {
			break
		}
		c.calm = 0
		step := max(cgroup.Scale(capacity, cfg.RaiseStepPercent, 100), 50)
		others := max(snap.Node.CPUMilli-be, 0)
		if c.knee > 0 && cgroup.Add(others, c.ceiling+step) >= c.knee {
			// Near the level where the host took CPU back last time: creep, so that finding the
			// line again costs a small hold, not a large one.
			step = max(step/4, 10)
		}
		c.ceiling += step
		s.Decision = "raise"
		c.raises.Inc()
		if c.ceiling >= capacity {
			c.ceiling = 0
			s.Decision = "lift"
		}
	case c.ceiling > 0:
		// Steal between half the threshold and the threshold: neither a reason to hold nor calm.
		c.calm = 0
	}
	if quiet && s.Decision == "none" {
		s.Decision = "learn"
	}
	s.BaselineMilli = int64(c.baseline)
	s.Limited, s.CeilingMilli = c.ceiling > 0, c.ceiling
	s.KneeMilli = c.knee
	c.status = s
	c.stealGauge.Set(float64(steal) / 1000)
	c.baselineGauge.Set(c.baseline / 1000)
	if c.ceiling > 0 {
		c.ceilingGauge.Set(float64(c.ceiling) / 1000)
	} else {
		c.ceilingGauge.Set(float64(capacity) / 1000)
	}
	return s
}
