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
// wakes the loop, which lifts at once rather than at the next sample. When the agent stops (SIGTERM), it
// ends Run and then calls Restore, which lifts whatever is in force and refreshes through Deps.Refresh,
// synchronously, before it returns. When Run starts, a clamp left by an earlier run that could not lift (SIGKILL, a crash) is
// found and lifted: a BE parent quota that is not unlimited, or BE cgroups on a cpuset narrower than the
// BE pool.
//
// # Dry run
//
// With Config.DryRun (dry-run-config's suppress) every sample decides the BE limit exactly as above:
// the formula, the limiters' ceilings, the hysteresis, the policy. Nothing of it is applied: no BE
// cgroup is written, the allocator's BE pool is not capped, the proxy is not asked to move anything,
// QuotaCeiling gives no ceiling, and AllowedMilli is the node's capacity, which is what BE really has.
// When the decision moves materially from the last one reported (suppression starts or stops, the
// policy changes, the cpuset's size changes, the quota moves by a tenth of the node or more) it is
// reported through Deps.Dry: a log line, a WouldSuppress Event on the Node,
// tandem_dry_run_actions_total{action="suppress"}; a 500 ms sample that moves it less reports nothing.
// Switching dry run on lifts whatever suppression or limiter clamp is in force, as disabling does;
// switching it off starts the real loop from nothing, as enabling does. Restore and the stale-clamp lift
// at start work as always, so they lift only what a real run, this one or an earlier one, left.
package suppress

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"

	"github.com/tandemkit/tandem/actuate/dryrun"
	"github.com/tandemkit/tandem/metrics/collector"
	"github.com/tandemkit/tandem/resource/cgroup"
	alloc "github.com/tandemkit/tandem/resource/cpuset"
)

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
	// Dry records the limits Config.DryRun holds back; nil: nothing is recorded of them.
	Dry *dryrun.Recorder
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
	// DryRun says the limit was decided and not applied; WouldMilli is then what BE would be allowed
	// (for the cpuset policy, the capped pool's size × 1000), 0 when it would not be limited.
	DryRun     bool
	WouldMilli int64
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
	// dry is whether the last sample ran in dry run; current and higher are then the level decided,
	// not the one in force. reported is the level last reported in dry run (milli-cores; 0: none, BE
	// not limited) and reportedPolicy its policy.
	dry            bool
	reported       int64
	reportedPolicy Policy

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

	metrics
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
		deps:    deps,
		wake:    make(chan struct{}, 1),
		metrics: newMetrics(),
	}
	if t, ok := deps.Cgroups.(cgroup.Tree); ok {
		l.tree = t
	}
	if err := l.Reconfigure(cfg); err != nil {
		return nil, err
	}
	if deps.Registerer != nil {
		if err := l.metrics.register(deps.Registerer); err != nil {
			return nil, err
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
// reads it as BE's real limit for the CPU satisfaction. In dry run it is the node's capacity: nothing
// holds BE back. Safe for concurrent use.
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
	logger.Info("CPU suppression running", "enable", cfg.Enable, "dryRun", cfg.DryRun, "policy", cfg.CPUSuppressPolicy,
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
