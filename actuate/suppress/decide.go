package suppress

import (
	"context"

	"k8s.io/klog/v2"

	"github.com/tandemkit/tandem/metrics/collector"
	"github.com/tandemkit/tandem/resource/cgroup"
)

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
	if cfg.DryRun != l.dry {
		// The level decided in dry run was never in force, and the one in force was lifted above: the
		// other mode starts from nothing.
		l.current, l.higher, l.reported, l.dry = 0, 0, 0, cfg.DryRun
	}
	if !cfg.Enable {
		if cfg.DryRun {
			l.current, l.higher = 0, 0
			l.reportLift(ctx, "suppression is disabled (resource-threshold-config) and no limiter holds BE back")
		}
		d := Decision{WantMilli: snap.Capacity.CPUMilli, AllowedMilli: snap.Capacity.CPUMilli, CPUs: int((snap.Capacity.CPUMilli + 999) / 1000), DryRun: cfg.DryRun}
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
	if cfg.DryRun {
		// Decided, not applied: BE keeps the whole node, and the decision is reported when it moved.
		l.current = next
		d.DryRun, d.WouldMilli = true, l.wouldOf(cfg, next)
		d.AllowedMilli, d.CPUs = snap.Capacity.CPUMilli, int((snap.Capacity.CPUMilli+999)/1000)
		l.setAllowed(d.AllowedMilli)
		l.beCPUs.Set(float64(d.AllowedMilli) / 1000)
		l.reportLimit(ctx, cfg, asked, snap, d.WouldMilli, want, ceiling)
		return d, nil
	}
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
