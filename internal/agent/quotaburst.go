package agent

import (
	"context"

	"k8s.io/klog/v2"

	"github.com/tandemkit/tandem/actuate/dryrun"
	"github.com/tandemkit/tandem/actuate/quotaburst"
	"github.com/tandemkit/tandem/config/knob"
	"github.com/tandemkit/tandem/config/slo"
	"github.com/tandemkit/tandem/hooks/policy/cpuburst"
	resqos "github.com/tandemkit/tandem/resource/qos"
	"github.com/tandemkit/tandem/store"
)

// quotaBurst is the CFS quota burst loop (actuate/quotaburst), driven by cpu-burst-config. It reads the
// collector's snapshots on its own ticker, not through col.Updates: that channel has one slot, and the
// suppress loop, which must react within a second, waits on it.
func (n *nodeParts) quotaBurst(ctx context.Context) component {
	logger := klog.FromContext(ctx)
	// Without cgroups there is nothing to write the quotas into; the keys still say so.
	off := switchedOff("quota-burst", func(r slo.Resolved) []knob.Status { return quotaburst.Knobs(cpuburst.Config(r.CPUBurst), nil, nil) })
	if n.cgroups == nil {
		logger.Info("CFS quota burst off: no cgroup hierarchy", "cgroupRoot", n.st.cgroupRoot)
		return off
	}
	deps := quotaburst.Deps{Latest: n.col.Latest, Containers: burstContainers(n.fe.Store(), n.st.policy.QoS.StaticCPUManager), Cgroups: n.cgroups, Registerer: n.reg,
		Dry: n.dry}
	if n.cpus != nil {
		deps.SharePoolMilli = func() int64 { return int64(n.cpus.Pools().LS.Size()) * 1000 }
	}
	cfg := cpuburst.Config(n.st.colocation.Load().CPUBurst)
	l, err := startOrOff(ctx, "CFS quota burst", cfg, func(cpuburst.Config) cpuburst.Config { return cpuburst.DefaultConfig() },
		func(c cpuburst.Config) (*quotaburst.Loop, error) { return quotaburst.New(c, deps) })
	if err != nil {
		// The CRI path never depends on it: the agent runs on without the quota burst.
		logger.Error(err, "CFS quota burst off", "cgroupRoot", n.st.cgroupRoot)
		return off
	}
	// dry-run-config's cfsQuotaBurst is not cpu-burst-config's: the loop has its own switch for it.
	dry := func(ctx context.Context, on bool) {
		if l.SetDryRun(on) {
			klog.FromContext(ctx).Info("Dry run switched", "action", dryrun.CFSQuotaBurst, "on", on)
		}
	}
	dry(ctx, n.st.colocation.Load().DryRun.CFSQuotaBurst)
	return &loop{name: "quota-burst", run: l.Run, restore: l.Restore, knobs: l, configure: func(ctx context.Context, r slo.Resolved) error {
		// Switched whether or not cpu-burst-config is refused: it is a section of its own.
		dry(ctx, r.DryRun.CFSQuotaBurst)
		return l.Reconfigure(cpuburst.Config(r.CPUBurst))
	}}
}

// burstContainers lists the store's containers for the quota burst loop.
func burstContainers(st *store.Store, staticCPUManager bool) func() []quotaburst.Container {
	return perContainer(st, staticCPUManager, func(p *store.Pod, c *store.Container, class resqos.Class) quotaburst.Container {
		bc := quotaburst.Container{ID: c.ID, Name: c.Name, PodID: p.ID, Namespace: p.Namespace, Pod: p.Name, Class: class,
			PodCgroupParent: p.CgroupParent, Running: c.State == store.ContainerRunning}
		if c.Resources != nil {
			bc.Quota, bc.Period = c.Resources.CPUQuota, c.Resources.CPUPeriod
		}
		return bc
	})
}
