// Package interference holds best-effort (BE) work back when latency-sensitive (LS) pods wait for a CPU
// while it runs, and gives the CPU back when holding BE back did not help.
//
// CPU suppression (actuate/suppress) sizes BE by node CPU use: below its threshold it does nothing,
// however LS fares. The run-queue latency of LS pods (metrics/collector's eBPF source) is the interference
// itself: a thread of an LS pod that is runnable and not running, whatever holds the CPU (BE threads,
// kernel threads working for BE, the host's own). It works on stock kernels, cgroup v1 and v2.
//
// The Controller looks at each run-queue sample (--run-queue-interval apart):
//
//   - LS suffers when more than SlowPercent of its waits in the interval lasted WaitThreshold or longer
//     (with SlowPercent 1: its run-queue p99 is above the threshold), counted over at least MinWaits waits.
//   - Hold: when LS suffers while BE ran (BEActiveMilli on average since the last sample), the ceiling
//     drops to BackoffPercent of what BE used (or of the ceiling in force), never below the floor.
//   - Verify: over the VerifySamples samples after a hold, the least time LS waited per second must have
//     fallen by VerifyDropPercent (the least: whatever else wakes on LS's CPUs only adds waits, so one
//     busy sample must not pass for a hold that did not help) (the time, not the count of slow waits: a clamp that lets BE run part of each
//     period removes waits in proportion to the CPU it takes away, where slices keep their length). If they did, BE was the cause and the hold stays (and deepens while LS still
//     suffers). If they did not, BE was not the cause (LS's own threads, the system, an interrupt storm):
//     the ceiling goes back to what it was before the hold, and LS waits do not hold BE again for
//     IgnoreFor. A loop that only took CPU away would starve batch work on a node whose LS pods are
//     short of CPU on their own, which no amount of holding BE back cures.
//   - Raise: while LS does not suffer, the ceiling rises by RaiseStepPercent of the node every
//     RaiseAfterSamples samples, and goes once it reaches the node's capacity.
//
// The Controller decides; it writes nothing. actuate/suppress applies the ceiling to the BE cgroups and
// metrics/reporter caps the published batch capacity at it.
package interference

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"

	"github.com/tandemkit/tandem/config/slo"
	"github.com/tandemkit/tandem/metrics/collector"
	"github.com/tandemkit/tandem/resource/cgroup"
	"github.com/tandemkit/tandem/resource/qos"
)

// Config is how the controller behaves.
type Config struct {
	// Enable switches the loop on; off drops any ceiling at the next sample.
	Enable bool `json:"enable"`
	// WaitThreshold is how long an LS wait for a CPU must be to count as slow; the histogram counts it
	// from the next power of two microseconds (collector.RunQueueBound).
	WaitThreshold time.Duration `json:"waitThreshold"`
	// SlowPercent is the share of LS waits that may be slow before LS suffers (1: the p99).
	SlowPercent int64 `json:"slowPercent"`
	// MinWaits is how many LS waits a sample needs to say anything: a handful of waits has no p99.
	MinWaits uint64 `json:"minWaits"`
	// BEActiveMilli is the BE use, averaged since the last sample, under which BE counts as not running.
	BEActiveMilli int64 `json:"beActiveMilli"`
	// BackoffPercent is the share of BE's use a hold keeps.
	BackoffPercent int64 `json:"backoffPercent"`
	// VerifySamples is how many samples after a hold the loop judges whether it helped.
	VerifySamples int `json:"verifySamples"`
	// VerifyDropPercent is how much the time LS waits per second must fall for the hold to have helped.
	VerifyDropPercent int64 `json:"verifyDropPercent"`
	// RaiseAfterSamples is how many samples in a row without LS suffering raise the ceiling one step.
	RaiseAfterSamples int `json:"raiseAfterSamples"`
	// RaiseStepPercent is one step, in percent of the node.
	RaiseStepPercent int64 `json:"raiseStepPercent"`
	// MinPercent is the floor of the ceiling, in percent of the node (at least 100m).
	MinPercent int64 `json:"minPercent"`
	// IgnoreFor is how long LS waits hold BE no more after a hold that did not help.
	IgnoreFor time.Duration `json:"ignoreFor"`
}

// DefaultConfig is off (resource-threshold-config's lsWaitGuard switches it on). A wait of 4 ms or more
// in more than 1 % of LS wake-ups is a run-queue p99 of 4 ms, several scheduler slices: a service
// whose threads wait that long is being kept from its CPU, not scheduled among its peers.
func DefaultConfig() Config {
	return Config{
		WaitThreshold:     4 * time.Millisecond,
		SlowPercent:       1,
		MinWaits:          100,
		BEActiveMilli:     100,
		BackoffPercent:    50,
		VerifySamples:     2,
		VerifyDropPercent: 25,
		RaiseAfterSamples: 3,
		RaiseStepPercent:  10,
		MinPercent:        10,
		IgnoreFor:         5 * time.Minute,
	}
}

// Validate reports every bad field by its name.
func (c Config) Validate() error {
	var errs []error
	if c.WaitThreshold < time.Microsecond || c.WaitThreshold > time.Second {
		errs = append(errs, fmt.Errorf("waitThreshold: %v, want 1µs to 1s", c.WaitThreshold))
	}
	if c.SlowPercent < 1 || c.SlowPercent > 99 {
		errs = append(errs, fmt.Errorf("slowPercent: %d, want 1-99", c.SlowPercent))
	}
	if c.BEActiveMilli < 0 {
		errs = append(errs, fmt.Errorf("beActiveMilli: %d is negative", c.BEActiveMilli))
	}
	if c.BackoffPercent < 1 || c.BackoffPercent > 99 {
		errs = append(errs, fmt.Errorf("backoffPercent: %d, want 1-99", c.BackoffPercent))
	}
	if c.VerifySamples < 1 {
		errs = append(errs, fmt.Errorf("verifySamples: %d, want 1 or more", c.VerifySamples))
	}
	if c.VerifyDropPercent < 1 || c.VerifyDropPercent > 99 {
		errs = append(errs, fmt.Errorf("verifyDropPercent: %d, want 1-99", c.VerifyDropPercent))
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
	if c.IgnoreFor < 0 {
		errs = append(errs, fmt.Errorf("ignoreFor: %v is negative", c.IgnoreFor))
	}
	return errors.Join(errs...)
}

// The decisions of a sample.
const (
	DecisionNone    = "none"    // nothing to do
	DecisionQuiet   = "quiet"   // too few LS waits to judge
	DecisionHold    = "hold"    // BE held back
	DecisionWait    = "verify"  // a hold is being judged
	DecisionConfirm = "confirm" // the hold helped: BE's doing
	DecisionRelease = "release" // the hold did not help: not BE's doing, the ceiling given back
	DecisionRaise   = "raise"   // the ceiling rose a step
	DecisionLift    = "lift"    // the ceiling is gone
	DecisionIgnore  = "ignore"  // LS suffers, but a hold did not help lately
)

// Status is what the controller last saw and decided, for tandemctl and logs.
type Status struct {
	// Enabled says whether the loop runs; Why says why not when it cannot (no run-queue samples).
	Enabled bool   `json:"enabled"`
	Why     string `json:"why,omitempty"`
	// Time is the run-queue sample's time; Interval the time since the one before.
	Time     time.Time     `json:"time"`
	Interval time.Duration `json:"interval"`
	// ThresholdMicros is the wait from which a wait is slow, as the histogram counts it.
	ThresholdMicros int64 `json:"thresholdMicros"`
	// Waits and SlowWaits are LS pods' waits in the interval and those at or above the threshold.
	Waits     uint64 `json:"waits"`
	SlowWaits uint64 `json:"slowWaits"`
	// Waited is the time LS pods' threads waited for a CPU in the interval, in all.
	Waited time.Duration `json:"waited"`
	// Worst names the LS container with the most slow waits, "namespace/pod/container".
	Worst string `json:"worst,omitempty"`
	// BEUsedMilli is BE's average use over the interval; CapacityMilli the node's CPUs × 1000.
	BEUsedMilli   int64 `json:"beUsedMilli"`
	CapacityMilli int64 `json:"capacityMilli"`
	// Limited says whether a ceiling is in force; CeilingMilli is it (0 when none).
	Limited      bool  `json:"limited"`
	CeilingMilli int64 `json:"ceilingMilli"`
	// Holds counts holds, Releases the holds that did not help; LastHold/LastHoldReason the last hold,
	// LastVerdict how the last judged hold turned out.
	Holds          int64     `json:"holds"`
	Releases       int64     `json:"releases"`
	LastHold       time.Time `json:"lastHold"`
	LastHoldReason string    `json:"lastHoldReason,omitempty"`
	LastVerdict    string    `json:"lastVerdict,omitempty"`
	// IgnoreUntil is when LS waits may hold BE again after a hold that did not help.
	IgnoreUntil time.Time `json:"ignoreUntil"`
	// Decision is what the last sample did (Decision* constants).
	Decision string `json:"decision"`
}

// SlowPercent is the share of LS waits that were slow, in percent.
func (s Status) SlowPercent() float64 {
	if s.Waits == 0 {
		return 0
	}
	return 100 * float64(s.SlowWaits) / float64(s.Waits)
}

// lsCount is one LS container's cumulative counts at the last sample.
type lsCount struct {
	waits, slow uint64
	waited      time.Duration
}

// Controller decides the BE ceiling. Limit runs from one goroutine (the suppress loop); Ceiling and
// Status are safe for concurrent use.
type Controller struct {
	// runQueue returns the collector's newest run-queue sample (collector.Collector.RunQueue).
	runQueue func() *collector.RunQueueSample

	mu      sync.Mutex
	cfg     Config
	status  Status
	ceiling int64 // 0: none
	seq     uint64
	last    time.Time
	prev    map[string]lsCount
	// beSum and beN average BE's use over the usage snapshots between two run-queue samples.
	beSum, beN int64
	// verify counts the samples since the hold being judged; 0 when none is. before is the ceiling the
	// hold replaced, waitRate the time LS waited per second at the hold, minRate the least since.
	verify            int
	before            int64
	waitRate, minRate float64
	calm              int

	ceilingGauge, slowGauge      prometheus.Gauge
	holds, releases, raisesCount prometheus.Counter
}

// New returns a controller with no ceiling. runQueue is the collector's run-queue samples; reg receives
// tandem_interference_* metrics (nil keeps them unexported).
func New(cfg Config, runQueue func() *collector.RunQueueSample, reg prometheus.Registerer) (*Controller, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("LS wait guard config: %w", err)
	}
	if runQueue == nil {
		return nil, errors.New("LS wait guard needs the collector's run-queue samples")
	}
	c := &Controller{
		runQueue: runQueue, cfg: cfg,
		ceilingGauge: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "tandem", Subsystem: "interference", Name: "be_ceiling_cores",
			Help: "CPU BE pods may use because LS pods waited for a CPU while BE ran; the node's capacity when there is no ceiling."}),
		slowGauge: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "tandem", Subsystem: "interference", Name: "ls_slow_wait_ratio",
			Help: "Share of LS pods' run-queue waits at or above the LS wait guard's threshold in the last run-queue sample."}),
		holds: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "tandem", Subsystem: "interference", Name: "holds_total",
			Help: "Times BE was held back because LS pods waited for a CPU while BE ran."}),
		releases: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "tandem", Subsystem: "interference", Name: "releases_total",
			Help: "Holds given back because LS pods' waits did not fall with BE held back: the waits were not BE's doing."}),
		raisesCount: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "tandem", Subsystem: "interference", Name: "raises_total",
			Help: "Times the BE ceiling was raised a step while LS pods did not suffer."}),
	}
	c.status = Status{Enabled: cfg.Enable, Decision: DecisionNone, ThresholdMicros: collector.RunQueueBound(cfg.WaitThreshold).Microseconds()}
	if reg != nil {
		for _, m := range []prometheus.Collector{c.ceilingGauge, c.slowGauge, c.holds, c.releases, c.raisesCount} {
			if err := reg.Register(m); err != nil {
				return nil, fmt.Errorf("register LS wait guard metrics: %w", err)
			}
		}
	}
	return c, nil
}

// Reconfigure swaps the configuration in; a bad one is refused and the old one stays. Switching off
// drops the ceiling and any hold being judged at once.
func (c *Controller) Reconfigure(cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("LS wait guard config: %w", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cfg = cfg
	c.status.Enabled = cfg.Enable
	c.status.ThresholdMicros = collector.RunQueueBound(cfg.WaitThreshold).Microseconds()
	if !cfg.Enable {
		// Switched on again, the guard starts afresh: a hold that did not help then says nothing now.
		c.ceiling, c.verify, c.calm = 0, 0, 0
		c.status.Limited, c.status.CeilingMilli, c.status.IgnoreUntil = false, 0, time.Time{}
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

// Limit reads one usage snapshot and, when the run-queue source has a sample it has not seen, decides
// on it; it returns the ceiling in force (0: none) and the CFS period it wants, 0 for the one
// configured for suppression (beCFSPeriodMicros): holding BE back for LS is what that period was
// measured for. It logs each hold, verdict and lift.
func (c *Controller) Limit(ctx context.Context, snap *collector.Snapshot) (milli, periodMicros int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cfg.Enable {
		var be int64
		for _, ctr := range snap.Containers {
			if ctr.QoS == qos.BE {
				be = cgroup.Add(be, max(ctr.CPUMilli, 0))
			}
		}
		c.beSum, c.beN = cgroup.Add(c.beSum, be), c.beN+1
	}
	rq := c.runQueue()
	switch {
	case !c.cfg.Enable:
		// Switched on later, the loop starts afresh: counts from before would make one long interval.
		c.ceiling, c.verify, c.last, c.prev, c.beSum, c.beN = 0, 0, time.Time{}, nil, 0, 0
	case rq == nil:
		c.status.Why = "no run-queue samples: the guard needs tandem-proxy started with --run-queue-latency and tracefs mounted (docs/node-loops.md)"
	case rq.Seq != c.seq:
		c.status.Why = ""
		c.observe(ctx, rq, snap.Capacity.CPUMilli)
	}
	c.status.Limited, c.status.CeilingMilli = c.ceiling > 0, c.ceiling
	if c.ceiling > 0 {
		c.ceilingGauge.Set(float64(c.ceiling) / 1000)
	} else {
		c.ceilingGauge.Set(float64(snap.Capacity.CPUMilli) / 1000)
	}
	return c.ceiling, 0
}

// observe decides on one new run-queue sample. c.mu is held.
func (c *Controller) observe(ctx context.Context, rq *collector.RunQueueSample, capacity int64) {
	logger := klog.FromContext(ctx)
	cfg := c.cfg
	capacity = max(capacity, 1000)
	be := c.beSum / max(c.beN, 1)
	c.beSum, c.beN = 0, 0
	interval := rq.Time.Sub(c.last)
	first := c.last.IsZero()
	c.seq, c.last = rq.Seq, rq.Time

	now := make(map[string]lsCount, len(rq.Containers))
	var waits, slow, worstSlow uint64
	var waited time.Duration
	worst := ""
	for i := range rq.Containers {
		h := &rq.Containers[i]
		if !latencySensitive(h.QoS) {
			continue
		}
		cur := lsCount{waits: h.Waits(), slow: h.AtLeast(cfg.WaitThreshold), waited: h.Waited()}
		now[h.ContainerID] = cur
		// A container first seen here counts from when the source started watching it: one interval.
		p := c.prev[h.ContainerID]
		dw, ds := cur.waits-min(p.waits, cur.waits), cur.slow-min(p.slow, cur.slow)
		waits += dw
		slow += ds
		waited += cur.waited - min(p.waited, cur.waited)
		if ds > worstSlow {
			worstSlow, worst = ds, h.Namespace+"/"+h.Pod+"/"+h.Container
		}
	}
	c.prev = now
	s := Status{
		Enabled: cfg.Enable, Time: rq.Time, Interval: interval, ThresholdMicros: collector.RunQueueBound(cfg.WaitThreshold).Microseconds(),
		Waits: waits, SlowWaits: slow, Waited: waited, Worst: worst, BEUsedMilli: be, CapacityMilli: capacity,
		Holds: c.status.Holds, Releases: c.status.Releases, LastHold: c.status.LastHold, LastHoldReason: c.status.LastHoldReason,
		LastVerdict: c.status.LastVerdict, IgnoreUntil: c.status.IgnoreUntil, Decision: DecisionNone,
	}
	if waits > 0 {
		c.slowGauge.Set(float64(slow) / float64(waits))
	} else {
		c.slowGauge.Set(0)
	}
	if first || interval <= 0 {
		// The first sample has no interval to judge: its counts are since each container was first seen.
		s.Decision = DecisionQuiet
		c.status = s
		return
	}
	// Milliseconds of wait per second.
	rate := float64(waited.Microseconds()) / 1000 / interval.Seconds()
	judged := waits >= max(cfg.MinWaits, 1)
	suffers := judged && slow*100 > uint64(cfg.SlowPercent)*waits
	floor := max(cgroup.Scale(capacity, cfg.MinPercent, 100), 100)

	if c.verify > 0 {
		c.verify++
		c.minRate = min(c.minRate, rate)
		if c.verify <= cfg.VerifySamples {
			s.Decision = DecisionWait
			c.status = s
			return
		}
		c.verify = 0
		least := c.minRate
		if least <= c.waitRate*float64(100-cfg.VerifyDropPercent)/100 {
			s.LastVerdict = fmt.Sprintf("BE's doing: LS waited %.0f ms per second at the hold, %.0f ms with BE held to %dm", c.waitRate, least, c.ceiling)
			s.Decision = DecisionConfirm
			logger.Info("LS waits fell with BE held back: the hold stays", "fromMsPerSecond", c.waitRate, "toMsPerSecond", least, "ceilingMilli", c.ceiling)
		} else {
			s.LastVerdict = fmt.Sprintf("not BE's doing: LS waited %.0f ms per second at the hold, %.0f ms with BE held to %dm; BE given back %s and not held for LS waits until %s",
				c.waitRate, least, c.ceiling, describeCeiling(c.before), rq.Time.Add(cfg.IgnoreFor).Format(time.TimeOnly))
			s.Decision = DecisionRelease
			s.Releases++
			s.IgnoreUntil = rq.Time.Add(cfg.IgnoreFor)
			c.releases.Inc()
			logger.Info("LS waits did not fall with BE held back: not BE's doing, BE given back", "fromMsPerSecond", c.waitRate, "toMsPerSecond", least,
				"heldMilli", c.ceiling, "restoredMilli", c.before, "worst", worst, "ignoreFor", cfg.IgnoreFor)
			c.ceiling, c.calm = c.before, 0
			c.status = s
			return
		}
	}
	ignoring := !s.IgnoreUntil.IsZero() && rq.Time.Before(s.IgnoreUntil)
	switch {
	case suffers && ignoring:
		s.Decision = DecisionIgnore
		c.calm = 0
	case suffers && be >= cfg.BEActiveMilli && !(c.ceiling > 0 && c.ceiling <= floor):
		from := be
		if c.ceiling > 0 {
			from = min(from, c.ceiling)
		}
		next := max(cgroup.Scale(from, cfg.BackoffPercent, 100), floor)
		if c.ceiling == 0 || next < c.ceiling {
			c.before, c.ceiling = c.ceiling, next
			c.waitRate, c.minRate, c.verify, c.calm = rate, math.Inf(1), 1, 0
			s.Holds++
			s.LastHold = rq.Time
			s.LastHoldReason = fmt.Sprintf("%d of %d LS waits (%.1f%%) were %v or longer (worst %s) while BE used %dm: BE held to %dm",
				slow, waits, s.SlowPercent(), collector.RunQueueBound(cfg.WaitThreshold), worst, be, next)
			s.Decision = DecisionHold
			c.holds.Inc()
			logger.Info("BE held back: LS pods wait for a CPU while BE runs", "reason", s.LastHoldReason, "waitedMsPerSecond", rate, "ceilingMilli", next)
		}
	case suffers:
		c.calm = 0
	case c.ceiling > 0:
		// LS does not suffer, or too few of its threads woke to say: either way BE may have a step more.
		c.calm++
		if c.calm < cfg.RaiseAfterSamples {
			break
		}
		c.calm = 0
		c.ceiling += max(cgroup.Scale(capacity, cfg.RaiseStepPercent, 100), 50)
		s.Decision = DecisionRaise
		c.raisesCount.Inc()
		if c.ceiling >= capacity {
			c.ceiling = 0
			s.Decision = DecisionLift
			logger.Info("BE ceiling for LS waits lifted: LS pods did not suffer while it rose")
		}
	case !judged:
		s.Decision = DecisionQuiet
	}
	c.status = s
}

func describeCeiling(m int64) string {
	if m == 0 {
		return "the whole node"
	}
	return fmt.Sprintf("%dm", m)
}

// latencySensitive says whether a container's waits are the guard's business: the LS classes, not BE
// and not the system or unclassified pods.
func latencySensitive(c qos.Class) bool {
	return c == qos.LSE || c == qos.LSR || c == qos.LS
}

// Resolve turns resource-threshold-config's lsWaitGuard and lsWaitThresholdMicros into base's Enable
// and threshold.
func Resolve(base Config, r slo.ResourceThresholdSettings) Config {
	out := base
	out.Enable = r.LSWaitGuard
	if r.LSWaitThresholdMicros > 0 {
		out.WaitThreshold = time.Duration(r.LSWaitThresholdMicros) * time.Microsecond
	}
	return out
}
