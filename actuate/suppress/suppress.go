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
// cfsQuota: the quota of the BE parent cgroup (Config.BECgroupParent: <cgroupRoot>/kubepods/besteffort,
// kubepods-besteffort.slice under systemd) is set to the amount, exactly. One write to the parent limits
// every BE pod at once and needs no per-pod bookkeeping; BE containers' own quotas (from their batch
// limits) still apply below it.
//
// # cgroup v1: no child above its parent
//
// cgroup v1 refuses (EINVAL) a child quota, normalised to its period, above its parent's, both when the
// child is written and when the parent is lowered below an existing child (kernel
// tg_cfs_schedulable_down); unlimited children inherit and are fine. cgroup v2 has no such rule. So on
// v1 the loop keeps every BE cgroup at or under the parent:
//
//   - QuotaCeiling tells the batchresource policy the most a BE container or pod cgroup may have now; it
//     caps the quota it derives from a batch-cpu limit there, so a new BE container starts under a clamp.
//   - Shrinking lowers the ceiling first, then lowers existing BE containers through the proxy
//     (Deps.Refresh: the policy decides their capped quotas), caps directly whatever is still above the
//     new level (deepest first), then writes the parent, and retries that when a container created
//     meanwhile made the kernel refuse it.
//   - Widening and lifting write the parent first, then raise the ceiling and ask the proxy to refresh:
//     the policy recomputes each BE container's quota from its batch-cpu limit, which is never lost.
//
// # Limiters: steal headroom, LS wait guard
//
// Deps.Limiters hold BE below ceilings the formula does not see: on a virtual machine whose host takes
// CPU back when the guest fills its vCPUs, metrics/headroom decides one from the steal it sees; where LS
// pods wait for a CPU while BE runs, metrics/interference decides one from their run-queue latency. The
// loop applies the lowest whatever Enable says: with suppression disabled, as the BE parent's CFS quota
// alone (exact to the milli-core, where a cpuset would round up to whole CPUs); with suppression enabled,
// as a cap on the formula's answer under the configured policy. The hysteresis, the cgroup v1 ordering
// and the lifts below apply to it alike.
//
// # Undoing suppression
//
// Suppression never outlives the loop's reasons for it. A reload that disables it or switches policy
// wakes the loop, which lifts at once rather than at the next sample. When Run's context ends (SIGTERM)
// the loop lifts whatever is in force and refreshes through Deps.Refresh, synchronously, before Run
// returns. When Run starts, a clamp left by an earlier run that could not lift (SIGKILL, a crash) is
// found and lifted: a BE parent quota that is not unlimited, or BE cgroups on a cpuset narrower than the
// BE pool.
package suppress

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"
	kcpuset "k8s.io/utils/cpuset"

	"github.com/tandemkit/tandem/config/slo"
	"github.com/tandemkit/tandem/metrics/collector"
	"github.com/tandemkit/tandem/resource/cgroup"
	alloc "github.com/tandemkit/tandem/resource/cpuset"
	"github.com/tandemkit/tandem/resource/qos"
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
	if r.BECFSPeriodMicros > 0 {
		out.CFSPeriodMicros = r.BECFSPeriodMicros
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
	// PoolsChanged asks the proxy, without waiting, to move running containers to what the policies
	// decide now: their pools, and on cgroup v1 BE quotas under QuotaCeiling.
	PoolsChanged func()
	// Refresh moves running containers to what the policies now decide and returns when it is done
	// (proxy.Server.Refresh). The loop calls it when it stops, after lifting, so that BE containers are
	// widened before the proxy goes (nil leaves that to PoolsChanged, which a stopping proxy may not
	// serve), and on cgroup v1 before it lowers the BE parent, so BE containers are lowered through the
	// runtime and the proxy's record of them stays right (nil: the loop caps them by direct writes).
	Refresh func(ctx context.Context) error
	// Cgroups writes the BE parent's quota; nil with the cfsQuota policy is an error. When it also is a
	// cgroup.Tree (cgroup.New's writers are), the loop keeps cgroup v1's rule for BE children and finds
	// stale clamps at start.
	Cgroups cgroup.Writer
	// Registerer receives tandem_suppress_* metrics; nil keeps them unexported.
	Registerer prometheus.Registerer
	// Limiters see every snapshot and may each hold BE below a ceiling of their own: what the host of a
	// virtual machine really gives (metrics/headroom), what lets LS pods run when they wake
	// (metrics/interference). The lowest ceiling applies whether or not suppression is enabled: on its
	// own through the BE parent's CFS quota, with suppression as a cap on the formula's answer.
	Limiters []Limiter
}

// Limiter holds BE below a ceiling for a reason of its own, which the formula does not see.
type Limiter interface {
	// Limit reads one snapshot and returns the ceiling in milli-cores (0: none) and the CFS period its
	// quota should have when it alone holds BE back (0: Config.CFSPeriodMicros). It logs its holds.
	Limit(ctx context.Context, snap *collector.Snapshot) (milli, periodMicros int64)
}

// Decision is what one sample led to.
type Decision struct {
	// WantMilli is the formula's answer (after floor and capacity) and the limiters' ceiling, whichever
	// is lower, before hysteresis.
	WantMilli int64
	// LimitMilli is the lowest of the limiters' ceilings; 0 when there is none.
	LimitMilli int64
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
	// period is the CFS period of the cfsQuota level in force.
	current, period int64
	// higher counts consecutive samples that asked for more than current.
	higher int
	// applied records that a limit is in force, so Enable=false lifts it once; appliedPolicy is the
	// policy that put it there, which lifts it when a reload switches policy.
	applied       bool
	appliedPolicy Policy
	// limitPeriod is the CFS period the limiters' ceiling wants when it was in force at the last sample
	// (0: none was), so a reload that finds suppression disabled does not lift the clamp a limiter put
	// there.
	limitPeriod int64

	// stepMu serialises Step with the lifts a reload or the stop asks for.
	stepMu sync.Mutex
	// wake tells Run that Reconfigure swapped a configuration in.
	wake chan struct{}
	// tree reads the BE subtree; nil when Deps.Cgroups is not a cgroup.Tree.
	tree cgroup.Tree

	mu      sync.Mutex
	allowed int64
	// ceiling is the BE quota the loop has decided on cgroup v1 (nil: none), lowered before a shrink and
	// raised after a widen; QuotaCeiling also reads the parent, whichever is lower wins.
	ceiling *cgroup.CPUMax

	beCPUs  prometheus.Gauge
	changes *prometheus.CounterVec
	capped  prometheus.Counter
	resets  prometheus.Counter
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
		wake: make(chan struct{}, 1),
		beCPUs: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "tandem", Subsystem: "suppress", Name: "be_cpus",
			Help: "CPUs BE pods may use after suppression: the BE cpuset's size, or the BE quota in CPUs.",
		}),
		changes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "tandem", Subsystem: "suppress", Name: "changes_total",
			Help: "Changes of the BE CPU limit, by policy and direction (shrink, widen, lift).",
		}, []string{"policy", "direction"}),
		capped: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "tandem", Subsystem: "suppress", Name: "be_cgroups_capped_total",
			Help: "BE pod and container cgroups whose CFS quota was lowered to the BE parent's before a shrink (cgroup v1).",
		}),
		resets: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "tandem", Subsystem: "suppress", Name: "be_quota_rewrites_total",
			Help: "Times the BE parent's CFS quota was found changed by someone else (systemd re-applying the slice's properties) and written again.",
		}),
	}
	if t, ok := deps.Cgroups.(cgroup.Tree); ok {
		l.tree = t
	}
	if err := l.Reconfigure(cfg); err != nil {
		return nil, err
	}
	if deps.Registerer != nil {
		for _, c := range []prometheus.Collector{l.beCPUs, l.changes, l.capped, l.resets} {
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
	// Wake Run: switching suppression off (or to the other policy) must not wait for the next sample.
	select {
	case l.wake <- struct{}{}:
	default:
	}
	return nil
}

// AllowedMilli is the CPU BE may use now, in milli-cores; 0 before the first sample. The evict loop
// reads it as BE's real limit for the CPU satisfaction. Safe for concurrent use.
func (l *Loop) AllowedMilli() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.allowed
}

// Run steps on every collector update and every Config.Interval until ctx is done. It first lifts a
// stale clamp an earlier run left; what is in force when ctx ends stays until Restore.
func (l *Loop) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithName("suppress")
	ctx = klog.NewContext(ctx, logger)
	cfg := l.cfg.Load()
	logger.Info("CPU suppression running", "enable", cfg.Enable, "policy", cfg.CPUSuppressPolicy,
		"thresholdPercent", cfg.CPUSuppressThresholdPercent, "widenAfterSamples", cfg.WidenAfterSamples)
	l.stepMu.Lock()
	l.liftStale(ctx)
	l.stepMu.Unlock()
	warned := warnCFSQuota(ctx, *cfg, false)

	followed := make(chan struct{})
	go func() {
		defer close(followed)
		// The interval is read once: a reload that changes it takes effect at the next start. Follow
		// steps each snapshot once: a tick without a new one is no new sample, and counting it would
		// widen on stale data.
		collector.Follow(ctx, cfg.Interval, l.deps.Updates, l.deps.Latest, func(snap *collector.Snapshot) {
			l.stepMu.Lock()
			defer l.stepMu.Unlock()
			if _, err := l.Step(ctx, snap); err != nil {
				logger.Error(err, "BE CPU limit not applied; retrying at the next sample")
			}
		})
	}()
	for stopped := false; !stopped; {
		select {
		case <-l.wake:
			warned = warnCFSQuota(ctx, *l.cfg.Load(), warned)
			l.stepMu.Lock()
			if err := l.liftIfOff(ctx, l.effective(*l.cfg.Load(), l.limitPeriod)); err != nil {
				logger.Error(err, "BE CPU suppression not lifted; retrying at the next sample")
			}
			l.stepMu.Unlock()
		case <-ctx.Done():
			stopped = true
		}
	}
	<-followed
	return nil
}

// Restore gives BE its whole pool back, whatever put the clamp there, and refreshes through
// Deps.Refresh: the caller keeps the front end's runtime connection open until it returns, and bounds
// ctx so that a stuck runtime cannot hold the agent's stop.
func (l *Loop) Restore(ctx context.Context) error {
	l.stepMu.Lock()
	defer l.stepMu.Unlock()
	return l.liftOnStop(klog.NewContext(ctx, klog.FromContext(ctx).WithName("suppress")))
}

// warnCFSQuota says, once each time it is switched on with a CFS period under a second, that cfsQuota
// suppression then costs LS latency instead of protecting it: bench/colocation measured LS p99 at
// 2.7-3.0x solo with the kernel's 100 ms period, 1.1-1.6x with 1 s (beCFSPeriodMicros' default), and
// 1.0-1.5x without suppression (docs/colocation.md). It reports whether such a policy is in force.
func warnCFSQuota(ctx context.Context, cfg Config, warned bool) bool {
	on := cfg.Enable && cfg.CPUSuppressPolicy == PolicyCFSQuota && cfg.CFSPeriodMicros < 1000000
	if on && !warned {
		klog.FromContext(ctx).Info("Warning: cfsQuota CPU suppression with a CFS period under a second makes latency-sensitive pods slower than no suppression at all (LS p99 2.7-3.0x solo at 100 ms, 1.1-1.6x at 1 s, in docs/colocation.md); leave resource-threshold-config's beCFSPeriodMicros at its default, 1000000",
			"policy", cfg.CPUSuppressPolicy, "thresholdPercent", cfg.CPUSuppressThresholdPercent, "beCFSPeriodMicros", cfg.CFSPeriodMicros)
	}
	return on
}

// effective is the configuration a sample applies: cfg, or, when suppression is disabled and a limiter
// holds BE back, the CFS quota of the BE parent alone, with the period the limiter asked for (period;
// cfg's when it asked for none), or the cpuset on a node without a cgroup writer: a fraction of a CPU is
// what a limiter's ceiling is about, and the quota expresses it exactly where a cpuset rounds up to whole
// CPUs.
func (l *Loop) effective(cfg Config, period int64) Config {
	if cfg.Enable || period == 0 {
		return cfg
	}
	eff := cfg
	switch {
	case l.deps.Cgroups != nil:
		eff.Enable, eff.CPUSuppressPolicy = true, PolicyCFSQuota
		if period > 0 {
			eff.CFSPeriodMicros = period
		}
	case l.deps.CPUs != nil:
		eff.Enable, eff.CPUSuppressPolicy = true, PolicyCPUSet
	}
	return eff
}

// liftIfOff lifts the suppression in force when cfg switched it off or moved it to the other policy.
func (l *Loop) liftIfOff(ctx context.Context, cfg Config) error {
	if l.applied && (!cfg.Enable || cfg.CPUSuppressPolicy != l.appliedPolicy) {
		return l.lift(ctx, cfg)
	}
	return nil
}

// liftOnStop gives BE its whole pool back as the loop stops, whatever put the clamp there, and waits
// for the containers to be moved.
func (l *Loop) liftOnStop(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	cfg := *l.cfg.Load()
	var errs []error
	lifted := false
	if l.deps.CPUs != nil && l.deps.CPUs.SetBELimit(0) {
		lifted = true
	}
	if l.deps.Cgroups != nil {
		clamped := l.applied && l.appliedPolicy == PolicyCFSQuota
		if l.tree != nil {
			if m, err := l.tree.CPUMax(cfg.BECgroupParent); err == nil && !m.Unlimited() {
				clamped = true
			}
		}
		if clamped {
			if err := l.writeUnlimited(cfg); err != nil {
				errs = append(errs, err)
			} else {
				lifted = true
			}
		}
	}
	if lifted {
		l.changes.WithLabelValues(string(cfg.CPUSuppressPolicy), "lift").Inc()
	}
	l.applied, l.current, l.higher = false, 0, 0
	l.setCeiling(nil)
	if lifted {
		// On cgroup v1, BE containers may sit at the ceiling, below their batch-cpu limits, until then.
		if err := l.refresh(ctx, true); err != nil {
			errs = append(errs, fmt.Errorf("move BE containers back to their full limits: %w", err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		logger.Error(err, "BE CPU suppression not fully lifted on stop; the next start lifts what is left")
		return err
	}
	if lifted {
		logger.Info("BE CPU suppression lifted on stop", "policy", cfg.CPUSuppressPolicy)
	}
	return nil
}

// liftStale lifts, at start, a clamp an earlier run left in place: nothing is in force in this process
// yet, so a BE parent quota that is not unlimited, or a BE cgroup on a cpuset narrower than the BE pool,
// is stale.
func (l *Loop) liftStale(ctx context.Context) {
	if l.tree == nil {
		return
	}
	logger := klog.FromContext(ctx)
	cfg := *l.cfg.Load()
	stale := false
	if m, err := l.tree.CPUMax(cfg.BECgroupParent); err == nil && !m.Unlimited() {
		if err := l.writeUnlimited(cfg); err != nil {
			logger.Error(err, "Stale BE CFS quota not lifted", "cgroup", cfg.BECgroupParent, "quota", m.Quota, "period", m.Period)
		} else {
			logger.Info("Stale BE CPU suppression lifted", "policy", PolicyCFSQuota, "cgroup", cfg.BECgroupParent, "quota", m.Quota, "period", m.Period)
			l.changes.WithLabelValues(string(PolicyCFSQuota), "lift").Inc()
			stale = true
		}
	}
	if l.deps.CPUs != nil {
		if n := l.narrowedCPUSets(cfg); n > 0 {
			logger.Info("Stale BE CPU suppression lifted", "policy", PolicyCPUSet, "cgroup", cfg.BECgroupParent, "narrowedCgroups", n, "bePool", l.deps.CPUs.Pools().BE.String())
			l.changes.WithLabelValues(string(PolicyCPUSet), "lift").Inc()
			stale = true
		}
	}
	if stale {
		// Asynchronous: the proxy is not serving yet when Run starts; its refresh loop takes it up.
		l.deps.PoolsChanged()
	}
}

// narrowedCPUSets counts the BE cgroups whose cpuset is a strict subset of the BE pool.
func (l *Loop) narrowedCPUSets(cfg Config) int {
	pool := l.deps.CPUs.Pools().BE
	below, err := l.tree.Descendants(cfg.BECgroupParent, "cpuset")
	if err != nil {
		return 0
	}
	n := 0
	for _, d := range below {
		v, err := l.tree.ReadFile(d, "cpuset.cpus")
		if err != nil || v == "" {
			continue
		}
		set, err := kcpuset.Parse(v)
		if err != nil {
			continue
		}
		if set.Size() < pool.Size() && set.IsSubsetOf(pool) {
			n++
		}
	}
	return n
}

// Want is the formula for one snapshot, in milli-cores, floored at the minimum BE keeps and capped at
// the node's capacity. Exported for the benchmark and for tests that check the formula alone. The
// arithmetic saturates and a usage below zero (a counter glitch) counts as none: a sum that wrapped
// would hand BE the whole node while LS is busiest.
func (c Config) Want(snap *collector.Snapshot) int64 {
	capacity := snap.Capacity.CPUMilli
	var hp int64
	for _, ctr := range snap.Containers {
		if ctr.QoS != qos.BE {
			hp = cgroup.Add(hp, max(ctr.CPUMilli, 0))
		}
	}
	used := cgroup.Add(hp, max(snap.System.CPUMilli, c.ReservedMilli, 0))
	want := cgroup.Add(cgroup.Scale(capacity, c.CPUSuppressThresholdPercent, 100), -used)
	floor := max(cgroup.Scale(capacity, c.CPUSuppressMinPercent, 100), 1000)
	return min(max(want, floor), max(capacity, 1000))
}

// Step applies one snapshot.
func (l *Loop) Step(ctx context.Context, snap *collector.Snapshot) (Decision, error) {
	logger := klog.FromContext(ctx)
	asked := *l.cfg.Load()
	// The lowest ceiling wins, and its period; limitPeriod is -1 for "limited, at cfg's period".
	var ceiling int64
	l.limitPeriod = 0
	for _, lim := range l.deps.Limiters {
		m, period := lim.Limit(ctx, snap)
		if m > 0 && (ceiling == 0 || m < ceiling) {
			ceiling, l.limitPeriod = m, period
			if period == 0 {
				l.limitPeriod = -1
			}
		}
	}
	cfg := l.effective(asked, l.limitPeriod)
	if err := l.liftIfOff(ctx, cfg); err != nil {
		return Decision{}, err
	}
	if !cfg.Enable {
		d := Decision{WantMilli: snap.Capacity.CPUMilli, AllowedMilli: snap.Capacity.CPUMilli, CPUs: int((snap.Capacity.CPUMilli + 999) / 1000)}
		l.setAllowed(d.AllowedMilli)
		l.beCPUs.Set(float64(d.AllowedMilli) / 1000)
		return d, nil
	}
	want := max(snap.Capacity.CPUMilli, 1000)
	if asked.Enable {
		want = cfg.Want(snap)
	}
	if ceiling > 0 {
		want = min(want, ceiling)
	}
	cpuset := cfg.CPUSuppressPolicy == PolicyCPUSet
	// Levels: CPUs for cpuset (rounded up: a fraction of a CPU still needs one), milli for cfsQuota.
	level, unit := want, int64(1)
	if cpuset {
		level, unit = (want+999)/1000, 1000
	}
	step := max(cgroup.Scale(snap.Capacity.CPUMilli, cfg.WidenStepPercent, 100), 1000) / unit
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
	d := Decision{WantMilli: want, LimitMilli: ceiling}
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
			"beCPUs", d.CPUs, "allowedMilli", d.AllowedMilli, "wantMilli", want, "limitMilli", ceiling,
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
	period := cfg.CFSPeriodMicros
	target := cgroup.CPUMax{Quota: cgroup.MilliCPUToQuota(level, period), Period: period}
	if level == l.current {
		// The same level in another period (a limiter with a period of its own took over, or gave
		// way) is written again; so is the same quota someone else reset.
		if period == l.period && !l.reset(ctx, cfg, target) {
			return false, nil
		}
		// Written again below, as a shrink from nothing: children first where v1 needs it.
		l.current = 0
	}
	shrink := l.current == 0 || level < l.current
	capped := 0
	if shrink && l.capping() {
		// New BE containers are created under the new level from now on; existing ones are lowered
		// next, through the proxy first, so that its record of each container's quota stays what the
		// kernel has and the refresh after a widen finds what to raise.
		l.setCeiling(&target)
		if l.deps.Refresh != nil {
			if err := l.deps.Refresh(ctx); err != nil {
				klog.FromContext(ctx).V(2).Info("BE containers not all lowered through the proxy; capping them directly", "err", err)
			}
		}
	}
	var err error
	// What the proxy did not lower (no Refresh, a container it does not know) is capped directly. A BE
	// container whose quota was decided under the old ceiling may reach the kernel between the caps and
	// the parent write, which then fails with EINVAL: cap again and retry.
	for attempt := 0; attempt < 3; attempt++ {
		if shrink && l.capping() {
			capped += l.capChildren(ctx, cfg, target)
		}
		if err = l.deps.Cgroups.Write(cfg.BECgroupParent, cgroup.Settings{CPUQuota: &target.Quota, CPUPeriod: &period}); err == nil || !errors.Is(err, syscall.EINVAL) {
			break
		}
	}
	if err != nil {
		return false, fmt.Errorf("write the CFS quota of the BE cgroup %s (is beCgroupParent right?): %w", cfg.BECgroupParent, err)
	}
	l.period = period
	klog.FromContext(ctx).V(4).Info("BE CFS quota written", "cgroup", cfg.BECgroupParent, "quota", target.Quota, "period", period)
	if capped > 0 {
		// The proxy's record of the capped containers is now above the kernel's: a refresh, which
		// decides the same capped quotas, brings it down to match.
		l.deps.PoolsChanged()
	}
	if !shrink && l.capping() {
		// The parent is wider now: raise the ceiling, and let the policy give capped containers more.
		l.setCeiling(&target)
		l.deps.PoolsChanged()
	}
	return true, nil
}

// reset reports whether the BE parent lost the clamp in force to someone else's write. On a node with
// kubelet's systemd driver, systemd owns kubepods-besteffort.slice and writes every property of the unit
// again whenever kubelet updates one (its QoS reconcile does, on pod changes): an unset CPUQuota= puts
// cpu.max back to "max" under a clamp, which the loop, seeing its level unchanged, would never
// rewrite.
func (l *Loop) reset(ctx context.Context, cfg Config, target cgroup.CPUMax) bool {
	if l.tree == nil || l.current == 0 {
		return false
	}
	m, err := l.tree.CPUMax(cfg.BECgroupParent)
	if err != nil || m == target {
		return false
	}
	klog.FromContext(ctx).Info("BE CFS quota found changed by someone else (systemd re-applying the slice's properties, an operator); writing it again",
		"cgroup", cfg.BECgroupParent, "found", m, "want", target)
	l.resets.Inc()
	return true
}

// capping reports whether BE children must be kept under the parent: cgroup v1 with a readable tree.
func (l *Loop) capping() bool {
	return l.tree != nil && l.deps.Cgroups != nil && l.deps.Cgroups.Version() == 1
}

// capChildren lowers every BE cgroup still above target to it, deepest first, so the parent can be
// lowered (cgroup v1 refuses a parent under one of its children), and returns how many it lowered. The
// policy gives them back their batch-cpu limits when the parent widens.
func (l *Loop) capChildren(ctx context.Context, cfg Config, target cgroup.CPUMax) int {
	logger := klog.FromContext(ctx)
	below, err := l.tree.Descendants(cfg.BECgroupParent, "cpu")
	if err != nil {
		logger.Error(err, "BE cgroups not listed; lowering the BE quota may fail", "cgroup", cfg.BECgroupParent)
		return 0
	}
	n := 0
	for _, d := range below {
		m, err := l.tree.CPUMax(d)
		if err != nil || !m.Above(target) {
			continue // a cgroup gone meanwhile needs nothing
		}
		q := target.Under(m.Period)
		if err := l.deps.Cgroups.Write(d, cgroup.Settings{CPUQuota: &q}); err != nil {
			logger.V(2).Info("BE cgroup not capped", "cgroup", d, "err", err)
			continue
		}
		n++
		logger.V(4).Info("BE cgroup capped under the BE quota", "cgroup", d, "quota", q, "period", m.Period, "was", m.Quota)
	}
	if n > 0 {
		l.capped.Add(float64(n))
		logger.V(2).Info("BE cgroups capped under the new BE quota", "cgroups", n, "quota", target.Quota, "period", target.Period)
	}
	return n
}

// QuotaCeiling is the most CFS bandwidth a BE pod or container cgroup may have now: on cgroup v1, the
// lower of the BE parent's quota and the level the loop is moving to; ok is false when there is no
// ceiling (no clamp, or cgroup v2, where a child above its parent is allowed and simply throttled by
// it). The batchresource policy caps the quotas it derives from batch-cpu limits there. Safe for
// concurrent use, and usable before Run: it reads the parent, so a stale clamp is honoured too.
func (l *Loop) QuotaCeiling() (cgroup.CPUMax, bool) {
	if !l.capping() {
		return cgroup.CPUMax{}, false
	}
	cfg := l.cfg.Load()
	l.mu.Lock()
	var c *cgroup.CPUMax
	if l.ceiling != nil {
		v := *l.ceiling
		c = &v
	}
	l.mu.Unlock()
	if m, err := l.tree.CPUMax(cfg.BECgroupParent); err == nil && !m.Unlimited() && (c == nil || c.Above(m)) {
		c = &m
	}
	if c == nil {
		return cgroup.CPUMax{}, false
	}
	return *c, true
}

func (l *Loop) setCeiling(c *cgroup.CPUMax) {
	l.mu.Lock()
	l.ceiling = c
	l.mu.Unlock()
}

// kernelPeriodMicros is the CFS period a cgroup has until someone sets one, and the one kubelet leaves
// on the QoS cgroups: a lifted BE parent gets it back with its unlimited quota.
const kernelPeriodMicros = 100000

// writeUnlimited takes the quota off the BE parent and puts the kernel's period back.
func (l *Loop) writeUnlimited(cfg Config) error {
	unlimited, period := int64(-1), int64(kernelPeriodMicros)
	if err := l.deps.Cgroups.Write(cfg.BECgroupParent, cgroup.Settings{CPUQuota: &unlimited, CPUPeriod: &period}); err != nil {
		return fmt.Errorf("lift the CFS quota of the BE cgroup %s: %w", cfg.BECgroupParent, err)
	}
	return nil
}

// refresh asks the proxy to move containers to what the policies decide now; wait uses Deps.Refresh and
// returns when the containers were moved.
func (l *Loop) refresh(ctx context.Context, wait bool) error {
	if wait && l.deps.Refresh != nil {
		return l.deps.Refresh(ctx)
	}
	l.deps.PoolsChanged()
	return nil
}

// lift removes the suppression in force, by the policy that put it there, once suppression is switched
// off or moved to the other policy.
func (l *Loop) lift(ctx context.Context, cfg Config) error {
	if l.appliedPolicy == PolicyCPUSet {
		if l.deps.CPUs.SetBELimit(0) {
			l.deps.PoolsChanged()
		}
	} else {
		if err := l.writeUnlimited(cfg); err != nil {
			return err
		}
		// Parent first, then the containers capped under it get their batch-cpu limits back.
		l.setCeiling(nil)
		if l.capping() {
			l.deps.PoolsChanged()
		}
	}
	l.changes.WithLabelValues(string(l.appliedPolicy), "lift").Inc()
	klog.FromContext(ctx).Info("BE CPU suppression lifted", "policy", l.appliedPolicy)
	l.applied, l.current, l.higher = false, 0, 0
	return nil
}
