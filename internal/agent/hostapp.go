package agent

import (
	"context"
	"fmt"

	"k8s.io/klog/v2"

	"github.com/tandemkit/tandem/actuate/hostapp"
	"github.com/tandemkit/tandem/config/knob"
	"github.com/tandemkit/tandem/config/slo"
	"github.com/tandemkit/tandem/internal/supervise"
	"github.com/tandemkit/tandem/metrics/collector"
	"github.com/tandemkit/tandem/resource/cgroup"
	alloc "github.com/tandemkit/tandem/resource/cpuset"
)

// startHostApps starts the loop that treats host-application-config's applications as pods of their
// class (actuate/hostapp), follows the configuration, has the collector sample their cgroups and reports
// their keys. It runs after startNodeLoops: the BE CFS ceiling comes from the suppress loop.
func startHostApps(ctx context.Context, loops *supervise.Group, st settings, cgroups cgroup.Writer, cpus *alloc.Allocator,
	col *collector.Collector, poolsChanged <-chan struct{}, cons *consumers) error {
	if cgroups == nil {
		cons.report(knob.ReporterFunc(func() []knob.Status {
			return []knob.Status{{Section: slo.HostApplicationConfigKey, Key: "applications", State: knob.Ignored,
				Detail: fmt.Sprintf("no cgroup hierarchy under %s (--cgroup-root)", st.cgroupRoot)}}
		}))
		return nil
	}
	cfg := hostapp.DefaultConfig()
	cfg.CgroupDriver = st.kubelet.cgroupDriver
	cfg.KubeletCgroupRoot = st.kubeletCgroupRoot
	deps := hostapp.Deps{Cgroups: cgroups, BEQuotaCeiling: beQuotaCeiling(st, cgroups, cons), Kick: poolsChanged}
	if cpus != nil {
		deps.CPUs = cpus
	}
	l, err := hostapp.New(cfg, deps)
	if err != nil {
		return fmt.Errorf("host application loop: %w", err)
	}
	col.AddTargets(l.Targets)
	cons.follow(ctx, func(_ context.Context, r slo.Resolved) { l.Set(r.HostApplications.Applications) })
	cons.report(l)
	loops.Go("host-applications", l.Run)
	klog.FromContext(ctx).V(2).Info("Host application loop started", "cgroupDriver", cfg.CgroupDriver, "kubeletCgroupRoot", cfg.KubeletCgroupRoot)
	return nil
}

// beQuotaCeiling is the CFS limit BE pods are under now, for BE host applications: on cgroup v1 the
// suppress loop's ceiling (which leads the parent while it shrinks), else the BE parent's own limit. It
// reads what is in force rather than the configuration, so whatever holds BE through the parent's quota
// (cfsQuota suppression, the steal headroom) holds BE host applications alike; the cpuset policy and a
// disabled loop leave the parent unlimited.
func beQuotaCeiling(st settings, cgroups cgroup.Writer, cons *consumers) func() (cgroup.CPUMax, bool) {
	cons.mu.Lock()
	sup := cons.sup
	cons.mu.Unlock()
	tree, _ := cgroups.(cgroup.Tree)
	return func() (cgroup.CPUMax, bool) {
		if sup != nil {
			if c, ok := sup.QuotaCeiling(); ok {
				return c, true
			}
		}
		if tree != nil {
			if m, err := tree.CPUMax(st.beParent); err == nil && !m.Unlimited() {
				return m, true
			}
		}
		return cgroup.CPUMax{}, false
	}
}
