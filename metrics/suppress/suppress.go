// Package suppress keeps best-effort (BE) containers out of the way of everything else on the node: it
// reads each usage snapshot, works out how much CPU BE may have, and shrinks or widens the BE cpuset
// (the "cpuset" policy) or the BE cgroup's CFS quota (the "cfsQuota" policy) to match.
//
// The amount is Koordinator's CPU Suppress formula (resource-threshold-config, documented in the
// Koordinator user manual "CPU Suppress", koordinator.sh/docs/user-manuals/cpu-suppress, and in ACK's
// "Enable CPU Suppress" page):
//
//	suppress(BE) = node.Total × cpuSuppressThresholdPercent − pod(LS).Used − max(system.Used, reserved)
//
// where pod(LS) is every pod that is not BE (LSE, LSR, LS, SYSTEM, and pods without a class), so BE
// gets what the node may use up to the threshold, less what the latency-sensitive pods and the system
// use right now. BE's own use does not count against it: BE is what is being sized.
//
// # Hysteresis
//
// Taking CPU away from BE protects LS, so a lower value applies at the first sample that asks for it.
// Giving CPU back risks LS again if its load only dipped, so a higher value applies only after
// Config.WidenAfterSamples consecutive samples asked for more, and then by at most
// Config.WidenStepPercent of the node per step; a longer rise widens in steps, each after another run
// of samples. A floor of one CPU (and cpuSuppressMinPercent of the node, when higher) always stays.
//
// # Policies
//
// cpuset: the allocator's BE pool is capped (resource/cpuset Allocator.SetBELimit; shared-pool CPUs
// before LSR ones, never LSE ones), and PoolsChanged asks the proxy to move running BE containers,
// which it does through PreUpdateContainerResources like any other pool change. The cpuset is whole
// CPUs, so the amount is rounded up: a fraction of a CPU still needs a CPU to run on.
//
// cfsQuota: the quota of the BE parent cgroup (kubepods/besteffort, kubepods-besteffort.slice under
// systemd) is set to the amount, exactly. One write to the parent limits every BE pod at once and needs
// no per-pod bookkeeping; BE containers' own quotas (from their batch limits) still apply below it.
package suppress

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"

	"github.com/tandemkit/tandem/config/slo"
	"github.com/tandemkit/tandem/metrics/collector"
	"github.com/tandemkit/tandem/resource/cgroup"
	alloc "github.com/tandemkit/tandem/resource/cpuset"
)

// Policy is how BE CPU is suppressed; the values are resource-threshold-config's cpuSuppressPolicy.
type Policy = slo.CPUSuppressPolicy

// The policies.
const (
	PolicyCPUSet   = slo.CPUSuppressByCPUSet
	PolicyCFSQuota = slo.CPUSuppressByCFSQuota
)

// Config is resource-threshold-config's suppress part plus how the loop behaves.
type Config struct {
	// Enable switches suppression on; off lifts any suppression in force.
	Enable bool `json:"enable"`
	// CPUSuppressThresholdPercent is the share of the node's CPU that LS, the system and BE together may
	// use before BE is suppressed.
	CPUSuppressThresholdPercent int64 `json:"cpuSuppressThresholdPercent"`
	// CPUSuppressMinPercent is the share of the node BE keeps however busy LS is (and never less than
	// one CPU).
	CPUSuppressMinPercent int64 `json:"cpuSuppressMinPercent"`
	// CPUSuppressPolicy is "cpuset" or "cfsQuota".
	CPUSuppressPolicy Policy `json:"cpuSuppressPolicy"`
	// ReservedMilli is the CPU the node reserves for the system (kubelet's system-reserved plus
	// kube-reserved); the formula subtracts it when the measured system use is lower.
	ReservedMilli int64 `json:"reservedMilli"`
	// WidenAfterSamples is how many consecutive samples must ask for more before BE widens.
	WidenAfterSamples int `json:"widenAfterSamples"`
	// WidenStepPercent caps one widening step, as a share of the node (at least one CPU).
	WidenStepPercent int64 `json:"widenStepPercent"`
	// BECgroupParent is the BE pods' parent cgroup, for the cfsQuota policy.
	BECgroupParent string `json:"beCgroupParent"`
	// CFSPeriodMicros is the CFS period written with the quota.
	CFSPeriodMicros int64 `json:"cfsPeriodMicros"`
	// Interval is how often the loop looks when no new snapshot wakes it (it also runs on every
	// collector update), so a stalled collector cannot freeze a suppression in place unseen.
	Interval time.Duration `json:"interval"`
}

// DefaultConfig is Koordinator's default threshold (65%, cpuset) with suppression off, as in
// Koordinator, and a widening that waits three samples and moves by a tenth of the node.
func DefaultConfig() Config {
	return Config{
		CPUSuppressThresholdPercent: 65,
		CPUSuppressPolicy:           PolicyCPUSet,
		WidenAfterSamples:           3,
		WidenStepPercent:            10,
		BECgroupParent:              "/kubepods/besteffort",
		CFSPeriodMicros:             100000,
		Interval:                    time.Second,
	}
}

// FromSLO returns base with the knobs of resource-threshold-config resolved for this node.
func FromSLO(base Config, r slo.ResourceThresholdSettings) Config {
	out := base
	out.Enable = r.Enable
	out.CPUSuppressThresholdPercent = r.CPUSuppressThresholdPercent
	out.CPUSuppressMinPercent = r.CPUSuppressMinPercent
	if r.CPUSuppressPolicy != "" {
		out.CPUSuppressPolicy = r.CPUSuppressPolicy
	}
	return out
}

// Validate reports every bad field by its name.
func (c Config) Validate() error {
	var errs []error
	if c.CPUSuppressThresholdPercent < 0 || c.CPUSuppressThresholdPercent > 100 {
		errs = append(errs, fmt.Errorf("cpuSuppressThresholdPercent: %d is not a percentage (0-100)", c.CPUSuppressThresholdPercent))
	}
	if c.CPUSuppressMinPercent < 0 || c.CPUSuppressMinPercent > 100 {
		errs = append(errs, fmt.Errorf("cpuSuppressMinPercent: %d is not a percentage (0-100)", c.CPUSuppressMinPercent))
	}
	if c.CPUSuppressPolicy != PolicyCPUSet && c.CPUSuppressPolicy != PolicyCFSQuota {
		errs = append(errs, fmt.Errorf("cpuSuppressPolicy: %q is not cpuset or cfsQuota", c.CPUSuppressPolicy))
	}
	if c.ReservedMilli < 0 {
		errs = append(errs, fmt.Errorf("reservedMilli: %d is negative", c.ReservedMilli))
	}
	if c.WidenAfterSamples < 1 {
		errs = append(errs, fmt.Errorf("widenAfterSamples: %d, want 1 or more", c.WidenAfterSamples))
	}
	if c.WidenStepPercent < 1 || c.WidenStepPercent > 100 {
		errs = append(errs, fmt.Errorf("widenStepPercent: %d, want 1-100", c.WidenStepPercent))
	}
	if c.CPUSuppressPolicy == PolicyCFSQuota && c.BECgroupParent == "" {
		errs = append(errs, errors.New("beCgroupParent: empty; the cfsQuota policy needs the BE parent cgroup"))
	}
	if c.CFSPeriodMicros < 1000 || c.CFSPeriodMicros > 1000000 {
		errs = append(errs, fmt.Errorf("cfsPeriodMicros: %d, want 1000-1000000", c.CFSPeriodMicros))
	}
	if c.Interval <= 0 {
		errs = append(errs, fmt.Errorf("interval: %v, want more than 0", c.Interval))
	}
	return errors.Join(errs...)
}

// CPUs is the part of the cpuset allocator the cpuset policy uses.
type CPUs interface {
	SetBELimit(n int) bool
	Pools() alloc.Pools
}

// Deps are the loop's collaborators.
type Deps struct {
	// Latest returns the newest usage snapshot, nil before the first.
	Latest func() *collector.Snapshot
	// Updates wakes the loop after each new snapshot; nil leaves it to Config.Interval.
	Updates <-chan struct{}
	// CPUs is the allocator whose BE pool the cpuset policy caps; nil with that policy is an error.
	CPUs CPUs
	// PoolsChanged asks the proxy to move running containers to their pools.
	PoolsChanged func()
	// Cgroups writes the BE parent's quota; nil with the cfsQuota policy is an error.
	Cgroups cgroup.Writer
	// Registerer receives tandem_suppress_* metrics; nil keeps them unexported.
	Registerer prometheus.Registerer
}

// Decision is what one sample led to.
type Decision struct {
	// WantMilli is the formula's answer (after floor and capacity), before hysteresis.
	WantMilli int64
	// AllowedMilli is what BE may use now; for the cpuset policy, the BE pool's size × 1000.
	AllowedMilli int64
	// CPUs is the size of the BE pool (cpuset policy) or the quota in CPUs, rounded up (cfsQuota).
	CPUs int
	// Changed says whether this sample moved the limit.
	Changed bool
}

// Loop is the suppression loop. Step is not safe for concurrent use; Run calls it from one goroutine.
type Loop struct {
	cfg  atomic.Pointer[Config]
	deps Deps

	// current is the level in force: CPUs for cpuset, milli-cores for cfsQuota; 0 before the first step.
	current int64
	// higher counts consecutive samples that asked for more than current.
	higher int
	// applied records that a limit is in force, so Enable=false lifts it once; appliedPolicy is the
	// policy that put it there, which lifts it when a reload switches policy.
	applied       bool
	appliedPolicy Policy

	mu      sync.Mutex
	allowed int64

	beCPUs  prometheus.Gauge
	changes *prometheus.CounterVec
}

// New checks cfg and deps and returns a loop that has changed nothing yet.
func New(cfg Config, deps Deps) (*Loop, error) {
	if deps.Latest == nil {
		return nil, errors.New("suppress needs a snapshot source (Deps.Latest)")
	}
	if deps.PoolsChanged == nil {
		deps.PoolsChanged = func() {}
	}
	// A nil *Allocator in the interface is not a nil interface; without this a node without CPU topology
	// would pass the check below and crash at the first sample.
	if a, ok := deps.CPUs.(*alloc.Allocator); ok && a == nil {
		deps.CPUs = nil
	}
	l := &Loop{
		deps: deps,
		beCPUs: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "tandem", Subsystem: "suppress", Name: "be_cpus",
			Help: "CPUs BE pods may use after suppression: the BE cpuset's size, or the BE quota in CPUs.",
		}),
		changes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "tandem", Subsystem: "suppress", Name: "changes_total",
			Help: "Changes of the BE CPU limit, by policy and direction (shrink, widen, lift).",
		}, []string{"policy", "direction"}),
	}
	if err := l.Reconfigure(cfg); err != nil {
		return nil, err
	}
	if deps.Registerer != nil {
		for _, c := range []prometheus.Collector{l.beCPUs, l.changes} {
			if err := deps.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("register suppress metrics: %w", err)
			}
		}
	}
	return l, nil
}

// Reconfigure swaps the configuration in (an slo-config reload); the next sample uses it. A bad config
// is refused and the old one stays. Safe for concurrent use with Run.
func (l *Loop) Reconfigure(cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("suppress config: %w", err)
	}
	switch cfg.CPUSuppressPolicy {
	case PolicyCPUSet:
		if l.deps.CPUs == nil {
			return errors.New("the cpuset suppress policy needs the cpuset allocator; use cfsQuota on a node without CPU topology")
		}
	case PolicyCFSQuota:
		if l.deps.Cgroups == nil {
			return errors.New("the cfsQuota suppress policy needs a cgroup writer; check --cgroup-root")
		}
	}
	l.cfg.Store(&cfg)
	return nil
}

// AllowedMilli is the CPU BE may use now, in milli-cores; 0 before the first sample. The evict loop
// reads it as BE's real limit for the CPU satisfaction. Safe for concurrent use.
func (l *Loop) AllowedMilli() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.allowed
}

// Run steps on every collector update and every Config.Interval until ctx is done.
func (l *Loop) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithName("suppress")
	ctx = klog.NewContext(ctx, logger)
	cfg := l.cfg.Load()
	logger.Info("CPU suppression running", "enable", cfg.Enable, "policy", cfg.CPUSuppressPolicy,
		"thresholdPercent", cfg.CPUSuppressThresholdPercent, "widenAfterSamples", cfg.WidenAfterSamples)
	// The interval is read once: a reload that changes it takes effect at the next start. Follow steps
	// each snapshot once: a tick without a new one is no new sample, and counting it would widen on
	// stale data.
	collector.Follow(ctx, cfg.Interval, l.deps.Updates, l.deps.Latest, func(snap *collector.Snapshot) {
		if _, err := l.Step(ctx, snap); err != nil {
			logger.Error(err, "BE CPU limit not applied; retrying at the next sample")
		}
	})
	return nil
}

// Want is the formula for one snapshot, in milli-cores, floored at the minimum BE keeps and capped at
// the node's capacity. Exported for the benchmark and for tests that check the formula alone.
func (c Config) Want(snap *collector.Snapshot) int64 {
	capacity := snap.Capacity.CPUMilli
	var hp int64
	for _, ctr := range snap.Containers {
		if ctr.QoS != "BE" {
			hp += ctr.CPUMilli
		}
	}
	want := capacity*c.CPUSuppressThresholdPercent/100 - hp - max(snap.System.CPUMilli, c.ReservedMilli)
	floor := max(capacity*c.CPUSuppressMinPercent/100, 1000)
	return min(max(want, floor), max(capacity, 1000))
}

// Step applies one snapshot.
func (l *Loop) Step(ctx context.Context, snap *collector.Snapshot) (Decision, error) {
	logger := klog.FromContext(ctx)
	cfg := *l.cfg.Load()
	if l.applied && (!cfg.Enable || cfg.CPUSuppressPolicy != l.appliedPolicy) {
		if err := l.lift(ctx, cfg); err != nil {
			return Decision{}, err
		}
	}
	if !cfg.Enable {
		d := Decision{WantMilli: snap.Capacity.CPUMilli, AllowedMilli: snap.Capacity.CPUMilli, CPUs: int((snap.Capacity.CPUMilli + 999) / 1000)}
		l.setAllowed(d.AllowedMilli)
		l.beCPUs.Set(float64(d.AllowedMilli) / 1000)
		return d, nil
	}
	want := cfg.Want(snap)
	cpuset := cfg.CPUSuppressPolicy == PolicyCPUSet
	// Levels: CPUs for cpuset (rounded up: a fraction of a CPU still needs one), milli for cfsQuota.
	level, unit := want, int64(1)
	if cpuset {
		level, unit = (want+999)/1000, 1000
	}
	step := max(snap.Capacity.CPUMilli*cfg.WidenStepPercent/100, 1000) / unit
	next := l.current
	switch {
	case l.current == 0 || level < l.current:
		next, l.higher = level, 0
	case level > l.current:
		l.higher++
		if l.higher >= cfg.WidenAfterSamples {
			next, l.higher = min(level, l.current+step), 0
		}
	default:
		l.higher = 0
	}
	d := Decision{WantMilli: want}
	changed, err := l.apply(ctx, cfg, next)
	if err != nil {
		return d, err
	}
	direction := "widen"
	if next < l.current || l.current == 0 {
		direction = "shrink"
	}
	l.current, l.applied, l.appliedPolicy = next, true, cfg.CPUSuppressPolicy
	d.AllowedMilli, d.CPUs = l.allowedOf(cfg, next)
	d.Changed = changed
	l.setAllowed(d.AllowedMilli)
	if changed {
		l.changes.WithLabelValues(string(cfg.CPUSuppressPolicy), direction).Inc()
		logger.Info("BE CPU limit changed", "policy", cfg.CPUSuppressPolicy, "direction", direction,
			"beCPUs", d.CPUs, "allowedMilli", d.AllowedMilli, "wantMilli", want,
			"nodeMilli", snap.Node.CPUMilli, "systemMilli", snap.System.CPUMilli, "sampleTime", snap.Time)
	}
	return d, nil
}

// allowedOf turns a level into milli-cores and CPUs as the node sees them.
func (l *Loop) allowedOf(cfg Config, level int64) (int64, int) {
	if cfg.CPUSuppressPolicy == PolicyCPUSet {
		n := l.deps.CPUs.Pools().BE.Size()
		l.beCPUs.Set(float64(n))
		return int64(n) * 1000, n
	}
	l.beCPUs.Set(float64(level) / 1000)
	return level, int((level + 999) / 1000)
}

func (l *Loop) setAllowed(v int64) {
	l.mu.Lock()
	l.allowed = v
	l.mu.Unlock()
}

// apply puts a level in force and reports whether what BE runs on changed.
func (l *Loop) apply(ctx context.Context, cfg Config, level int64) (bool, error) {
	if cfg.CPUSuppressPolicy == PolicyCPUSet {
		if !l.deps.CPUs.SetBELimit(int(level)) {
			return false, nil
		}
		l.deps.PoolsChanged()
		return true, nil
	}
	if level == l.current {
		return false, nil
	}
	quota := level * cfg.CFSPeriodMicros / 1000
	period := cfg.CFSPeriodMicros
	if err := l.deps.Cgroups.Write(cfg.BECgroupParent, cgroup.Settings{CPUQuota: &quota, CPUPeriod: &period}); err != nil {
		return false, fmt.Errorf("write the CFS quota of the BE cgroup %s (is beCgroupParent right?): %w", cfg.BECgroupParent, err)
	}
	klog.FromContext(ctx).V(4).Info("BE CFS quota written", "cgroup", cfg.BECgroupParent, "quota", quota, "period", period)
	return true, nil
}

// lift removes the suppression in force, by the policy that put it there, once suppression is switched
// off or moved to the other policy.
func (l *Loop) lift(ctx context.Context, cfg Config) error {
	if l.appliedPolicy == PolicyCPUSet {
		if l.deps.CPUs.SetBELimit(0) {
			l.deps.PoolsChanged()
		}
	} else {
		unlimited, period := int64(-1), cfg.CFSPeriodMicros
		if err := l.deps.Cgroups.Write(cfg.BECgroupParent, cgroup.Settings{CPUQuota: &unlimited, CPUPeriod: &period}); err != nil {
			return fmt.Errorf("lift the CFS quota of the BE cgroup %s: %w", cfg.BECgroupParent, err)
		}
	}
	l.changes.WithLabelValues(string(l.appliedPolicy), "lift").Inc()
	klog.FromContext(ctx).Info("BE CPU suppression lifted", "policy", l.appliedPolicy)
	l.applied, l.current, l.higher = false, 0, 0
	return nil
}
