package suppress

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/klog/v2"
	kcpuset "k8s.io/utils/cpuset"

	"github.com/tandemkit/tandem/resource/cgroup"
)

// liftIfOff lifts the suppression in force when cfg switched it off, moved it to the other policy or
// switched dry run on.
func (l *Loop) liftIfOff(ctx context.Context, cfg Config) error {
	if l.applied && (!cfg.Enable || cfg.DryRun || cfg.CPUSuppressPolicy != l.appliedPolicy) {
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
