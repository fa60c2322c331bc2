package suppress

import (
	"context"
	"fmt"
	"strings"

	"github.com/tandemkit/tandem/actuate/dryrun"
	"github.com/tandemkit/tandem/metrics/collector"
	"github.com/tandemkit/tandem/resource/cgroup"
	"github.com/tandemkit/tandem/resource/qos"
)

// wouldOf is what BE would be allowed at level, in milli-cores: the quota, or the size of the BE pool
// capped to level CPUs.
func (l *Loop) wouldOf(cfg Config, level int64) int64 {
	if cfg.CPUSuppressPolicy == PolicyCPUSet {
		return min(level, int64(l.deps.CPUs.Pools().BE.Size())) * 1000
	}
	return level
}

// wouldLevel is want as the policy applies it: whole CPUs for cpuset.
func wouldLevel(cfg Config, want int64) int64 {
	if cfg.CPUSuppressPolicy == PolicyCPUSet {
		return (want + 999) / 1000 * 1000
	}
	return want
}

// moved reports whether would differs materially from the level last reported: another policy, another
// cpuset size, or a quota a tenth of the node away or more.
func (l *Loop) moved(cfg Config, would, capacity int64) bool {
	if l.reported == 0 || cfg.CPUSuppressPolicy != l.reportedPolicy {
		return true
	}
	if cfg.CPUSuppressPolicy == PolicyCPUSet {
		return would != l.reported
	}
	diff := would - l.reported
	if diff < 0 {
		diff = -diff
	}
	return cgroup.Scale(diff, 10, 1) >= capacity
}

// reportLimit records, in dry run, a BE limit decided that moved materially from the last one reported.
func (l *Loop) reportLimit(ctx context.Context, cfg, asked Config, snap *collector.Snapshot, would, want, ceiling int64) {
	capacity := snap.Capacity.CPUMilli
	if !l.moved(cfg, would, capacity) {
		return
	}
	var what string
	if cfg.CPUSuppressPolicy == PolicyCPUSet {
		what = fmt.Sprintf("limit BE pods to %d CPUs (cpuset: the BE pool of %d CPUs capped)", would/1000, l.deps.CPUs.Pools().BE.Size())
	} else {
		quota := cgroup.MilliCPUToQuota(would, cfg.CFSPeriodMicros)
		what = fmt.Sprintf("limit BE pods to %s cores (cfsQuota: %s quota %d µs per %d µs period)", cores(would), cfg.BECgroupParent, quota, cfg.CFSPeriodMicros)
	}
	switch {
	case l.reported == 0 || cfg.CPUSuppressPolicy != l.reportedPolicy:
	case cfg.CPUSuppressPolicy == PolicyCPUSet:
		what += fmt.Sprintf(", from %d CPUs", l.reported/1000)
	default:
		what += ", from " + cores(l.reported) + " cores"
	}
	var why []string
	formula := max(capacity, 1000)
	if asked.Enable {
		formula = cfg.Want(snap)
		var ls int64
		for _, c := range snap.Containers {
			if c.QoS != qos.BE {
				ls = cgroup.Add(ls, max(c.CPUMilli, 0))
			}
		}
		why = append(why, fmt.Sprintf("cpuSuppressThresholdPercent %d%% of %s cores less %s used by LS pods and %s by the system leaves BE %s",
			cfg.CPUSuppressThresholdPercent, cores(capacity), cores(ls), cores(max(snap.System.CPUMilli, cfg.ReservedMilli, 0)), cores(formula)))
	}
	if ceiling > 0 && ceiling < formula {
		why = append(why, fmt.Sprintf("the steal headroom or the LS wait guard holds BE under %s cores", cores(ceiling)))
	}
	if target := wouldLevel(cfg, want); would < target {
		why = append(why, fmt.Sprintf("%s cores wanted; widening waits widenAfterSamples %d samples and moves at most widenStepPercent %d%% of the node a step",
			cores(target), cfg.WidenAfterSamples, cfg.WidenStepPercent))
	}
	l.deps.Dry.Would(ctx, dryrun.Suppress, dryrun.Object{}, what+": "+strings.Join(why, "; "))
	l.reported, l.reportedPolicy = would, cfg.CPUSuppressPolicy
}

// reportLift records, in dry run, that a limit reported would be lifted now.
func (l *Loop) reportLift(ctx context.Context, why string) {
	if l.reported == 0 {
		return
	}
	l.deps.Dry.Would(ctx, dryrun.Suppress, dryrun.Object{}, fmt.Sprintf("lift the BE pods' CPU limit of %s cores (%s): %s", cores(l.reported), l.reportedPolicy, why))
	l.reported = 0
}

// cores prints milli-cores as cores with one decimal.
func cores(milli int64) string { return fmt.Sprintf("%.1f", float64(milli)/1000) }
