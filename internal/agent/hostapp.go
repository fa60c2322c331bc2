package agent

import (
	"context"
	"fmt"

	"k8s.io/klog/v2"

	"github.com/tandemkit/tandem/actuate/hostapp"
	"github.com/tandemkit/tandem/actuate/suppress"
	"github.com/tandemkit/tandem/config/knob"
	"github.com/tandemkit/tandem/config/slo"
	"github.com/tandemkit/tandem/resource/cgroup"
)

// hostApps treats host-application-config's applications as pods of their class (actuate/hostapp) and
// has the collector sample their cgroups. It is built after suppress: the BE CFS ceiling comes from it.
func (n *nodeParts) hostApps(ctx context.Context) (component, error) {
	if n.cgroups == nil {
		why := fmt.Sprintf("no cgroup hierarchy under %s (--cgroup-root)", n.st.cgroupRoot)
		return switchedOff("host-applications", func(slo.Resolved) []knob.Status {
			return []knob.Status{{Section: slo.HostApplicationConfigKey, Key: "applications", State: knob.Ignored, Detail: why}}
		}), nil
	}
	cfg := hostapp.DefaultConfig()
	cfg.CgroupDriver = n.st.kubelet.cgroupDriver
	cfg.KubeletCgroupRoot = n.st.kubeletCgroupRoot
	deps := hostapp.Deps{Cgroups: n.cgroups, BEQuotaCeiling: beQuotaCeiling(n.st.beParent, n.cgroups, n.sup), Kick: n.poolsKick}
	if n.cpus != nil {
		deps.CPUs = n.cpus
	}
	l, err := hostapp.New(cfg, deps)
	if err != nil {
		return nil, fmt.Errorf("host application loop: %w", err)
	}
	n.col.AddTargets(l.Targets)
	klog.FromContext(ctx).V(2).Info("Host application loop", "cgroupDriver", cfg.CgroupDriver, "kubeletCgroupRoot", cfg.KubeletCgroupRoot)
	return &loop{name: "host-applications", run: l.Run, restore: l.Restore, knobs: l,
		configure: func(_ context.Context, r slo.Resolved) error { l.Set(r.HostApplications.Applications); return nil }}, nil
}

// beQuotaCeiling is the CFS limit BE pods are under now, for BE host applications: on cgroup v1 the
// suppress loop's ceiling (which leads the parent while it shrinks), else the BE parent's own limit. It
// reads what is in force rather than the configuration, so whatever holds BE through the parent's quota
// (cfsQuota suppression, the steal headroom) holds BE host applications alike; the cpuset policy and a
// disabled loop leave the parent unlimited.
func beQuotaCeiling(beParent string, cgroups cgroup.Writer, sup *suppress.Loop) func() (cgroup.CPUMax, bool) {
	tree, _ := cgroups.(cgroup.Tree)
	return func() (cgroup.CPUMax, bool) {
		if sup != nil {
			if c, ok := sup.QuotaCeiling(); ok {
				return c, true
			}
		}
		if tree != nil {
			if m, err := tree.CPUMax(beParent); err == nil && !m.Unlimited() {
				return m, true
			}
		}
		return cgroup.CPUMax{}, false
	}
}
