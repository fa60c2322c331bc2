package suppress

import (
	"context"
	"errors"
	"fmt"
	"syscall"

	"k8s.io/klog/v2"

	"github.com/tandemkit/tandem/resource/cgroup"
)

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
