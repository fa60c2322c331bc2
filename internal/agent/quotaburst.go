package agent

import (
	"context"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"

	"github.com/tandemkit/tandem/actuate/quotaburst"
	"github.com/tandemkit/tandem/config/knob"
	"github.com/tandemkit/tandem/config/slo"
	"github.com/tandemkit/tandem/hooks/policy/cpuburst"
	"github.com/tandemkit/tandem/internal/supervise"
	"github.com/tandemkit/tandem/metrics/collector"
	"github.com/tandemkit/tandem/resource/cgroup"
	alloc "github.com/tandemkit/tandem/resource/cpuset"
	resqos "github.com/tandemkit/tandem/resource/qos"
	"github.com/tandemkit/tandem/store"
)

// startQuotaBurst starts the CFS quota burst loop (actuate/quotaburst), driven by cpu-burst-config and
// reconfigured on every change of it, and reports cpu-burst-config's keys. It reads the collector's
// snapshots on its own ticker, not through col.Updates: that channel has one slot, and the suppress loop,
// which must react within a second, waits on it.
func startQuotaBurst(ctx context.Context, loops *supervise.Group, st settings, col *collector.Collector, cpus *alloc.Allocator,
	cgroups cgroup.Writer, fe FrontEnd, reg prometheus.Registerer, cons *consumers) error {
	logger := klog.FromContext(ctx)
	// Without cgroups there is nothing to write the quotas into; the keys still say so.
	noCgroups := func() {
		var mu sync.Mutex
		cfg := cpuburst.Config(st.colocation.Load().CPUBurst)
		cons.follow(ctx, func(_ context.Context, r slo.Resolved) { mu.Lock(); cfg = cpuburst.Config(r.CPUBurst); mu.Unlock() })
		cons.report(knob.ReporterFunc(func() []knob.Status {
			mu.Lock()
			defer mu.Unlock()
			return quotaburst.Knobs(cfg, nil, nil)
		}))
	}
	if cgroups == nil {
		noCgroups()
		logger.Info("CFS quota burst off: no cgroup hierarchy", "cgroupRoot", st.cgroupRoot)
		return nil
	}
	deps := quotaburst.Deps{Latest: col.Latest, Containers: burstContainers(fe.Store(), st.policy.QoS.StaticCPUManager), Cgroups: cgroups, Registerer: reg}
	if cpus != nil {
		deps.SharePoolMilli = func() int64 { return int64(cpus.Pools().LS.Size()) * 1000 }
	}
	cfg := cpuburst.Config(st.colocation.Load().CPUBurst)
	l, err := quotaburst.New(cfg, deps)
	if err != nil {
		// A configuration the loop refuses still lets it start switched off; a later one may switch it on.
		off := cpuburst.DefaultConfig()
		logger.Error(err, "cpu-burst-config refused by the CFS quota burst; it starts off", "policy", cfg.Policy)
		if l, err = quotaburst.New(off, deps); err != nil {
			// The CRI path never depends on it: the agent runs on without the quota burst.
			logger.Error(err, "CFS quota burst off", "cgroupRoot", st.cgroupRoot)
			noCgroups()
			return nil
		}
		_ = l.Reconfigure(cfg) // records the refusal for tandemctl config
	}
	loops.Go("quota-burst", l.Run)
	cons.follow(ctx, func(ctx context.Context, r slo.Resolved) {
		if err := l.Reconfigure(cpuburst.Config(r.CPUBurst)); err != nil {
			klog.FromContext(ctx).Error(err, "CFS quota burst settings refused; the ones in force stay")
		}
	})
	cons.report(l)
	return nil
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
