package agent

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"

	"github.com/tandemkit/tandem/actuate/evict"
	"github.com/tandemkit/tandem/actuate/suppress"
	"github.com/tandemkit/tandem/actuate/yield"
	"github.com/tandemkit/tandem/config/slo"
	"github.com/tandemkit/tandem/hooks"
	"github.com/tandemkit/tandem/hooks/policy"
	"github.com/tandemkit/tandem/hooks/policy/qos"
	"github.com/tandemkit/tandem/internal/supervise"
	"github.com/tandemkit/tandem/metrics/collector"
	"github.com/tandemkit/tandem/metrics/headroom"
	"github.com/tandemkit/tandem/metrics/interference"
	"github.com/tandemkit/tandem/metrics/reclaim"
	"github.com/tandemkit/tandem/metrics/reporter"
	"github.com/tandemkit/tandem/resource/cgroup"
	alloc "github.com/tandemkit/tandem/resource/cpuset"
	resqos "github.com/tandemkit/tandem/resource/qos"
	"github.com/tandemkit/tandem/store"
)

// perContainer maps the store's containers (with their pods) through f, rebuilt only when the store
// changed: the loops that read it ask every interval, and the store changes far less often. Each
// container's class is the one the qos policy recorded, or, for the pods that ran before the agent was
// installed and carry no record, resolved from their labels as the policy would have: otherwise a BE
// pod of a node converted while running would count as a high-priority one, never evicted and
// suppressing itself.
func perContainer[T any](st *store.Store, staticCPUManager bool, f func(p *store.Pod, c *store.Container, class resqos.Class) T) func() []T {
	var mu sync.Mutex
	gen, cached := uint64(math.MaxUint64), []T(nil)
	return func() []T {
		mu.Lock()
		defer mu.Unlock()
		if g := st.Generation(); g == gen {
			return cached
		} else {
			gen = g
		}
		snap := st.Snapshot()
		pods := make(map[string]*store.Pod, len(snap.Pods))
		for _, p := range snap.Pods {
			pods[p.ID] = p
		}
		cached = make([]T, 0, len(snap.Containers))
		for _, c := range snap.Containers {
			p := pods[c.PodSandboxID]
			if p == nil {
				continue
			}
			cached = append(cached, f(p, c, classOfStored(p, c, staticCPUManager)))
		}
		return cached
	}
}

// classOfStored is the class of a stored container (nil: of the pod), as perContainer says.
func classOfStored(p *store.Pod, c *store.Container, staticCPUManager bool) resqos.Class {
	pod := &hooks.PodInfo{ID: p.ID, Name: p.Name, Namespace: p.Namespace, UID: p.UID, Labels: p.Labels, Annotations: p.Annotations, CgroupParent: p.CgroupParent}
	var ctr *hooks.ContainerInfo
	if c != nil {
		ctr = &hooks.ContainerInfo{Annotations: c.Annotations}
	}
	return qos.ClassFor(pod, ctr, staticCPUManager)
}

// collectorTargets lists the store's containers for the collector.
func collectorTargets(st *store.Store, staticCPUManager bool) func() []collector.Target {
	return perContainer(st, staticCPUManager, func(p *store.Pod, c *store.Container, class resqos.Class) collector.Target {
		return collector.Target{Namespace: p.Namespace, Pod: p.Name, PodUID: p.UID,
			Container: c.Name, ContainerID: c.ID, QoS: class, CgroupParent: p.CgroupParent}
	})
}

// podRequests sums, per pod, the requests of its live containers as the runtime got them: CPU from the
// shares, memory from the limit (the runtime never sees the memory request, so this errs towards less
// batch capacity).
func podRequests(st *store.Store, staticCPUManager bool) func() []reporter.PodRequest {
	return func() []reporter.PodRequest {
		snap := st.Snapshot()
		byPod := map[string]*reporter.PodRequest{}
		for _, p := range snap.Pods {
			byPod[p.ID] = &reporter.PodRequest{UID: p.UID, QoS: classOfStored(p, nil, staticCPUManager)}
		}
		for _, c := range snap.Containers {
			pr, ok := byPod[c.PodSandboxID]
			if !ok || c.Resources == nil || c.State == store.ContainerExited {
				continue
			}
			r := reclaim.RequestFromLinux(c.Resources.CPUShares, c.Resources.CPUQuota, c.Resources.CPUPeriod, c.Resources.MemoryLimitInBytes)
			pr.Request.CPUMilli += r.CPUMilli
			pr.Request.MemoryBytes += r.MemoryBytes
		}
		out := make([]reporter.PodRequest, 0, len(byPod))
		for _, pr := range byPod {
			out = append(out, *pr)
		}
		return out
	}
}

// startNodeLoops starts CPU suppression and eviction, configured by resource-threshold-config (off unless
// the operator enables it, as in Koordinator) and reconfigured by cons on every change of it.
func startNodeLoops(ctx context.Context, loops *supervise.Group, st settings, col *collector.Collector, cpus *alloc.Allocator,
	cgroups cgroup.Writer, poolsChanged func(), evictor evict.Evictor, fe FrontEnd, reg prometheus.Registerer, cons *consumers, limiters []suppress.Limiter) error {
	logger := klog.FromContext(ctx)
	thresholds := st.colocation.Load().ResourceThreshold
	sdeps := suppress.Deps{Latest: col.Latest, Updates: col.Updates(), PoolsChanged: poolsChanged, Refresh: fe.Refresh,
		Cgroups: cgroups, Registerer: reg, Limiters: limiters}
	if cpus != nil {
		sdeps.CPUs = cpus
	}
	supBase := suppress.DefaultConfig()
	supBase.BECgroupParent = st.beParent
	sup, err := suppress.New(suppress.FromSLO(supBase, thresholds), sdeps)
	if err != nil {
		// Start switched off with a policy this node can apply, so that a later configuration can switch
		// it on; Reconfigure refuses (and logs) one the node cannot apply.
		off := supBase
		off.Enable = false
		if cgroups != nil {
			off.CPUSuppressPolicy = suppress.PolicyCFSQuota
		}
		sup, err = suppress.New(off, sdeps)
	}
	if err != nil {
		// A node with neither CPU topology nor cgroups has nothing to suppress with.
		logger.Error(err, "CPU suppression off")
		sup = nil
	} else {
		loops.Go("suppress", sup.Run)
	}
	edeps := evict.Deps{Latest: col.Latest, Evictor: evictor, Registerer: reg, Pods: podMeta(fe.Store())}
	if sup != nil {
		edeps.BEAllowedMilli = sup.AllowedMilli
	}
	evBase := evict.DefaultConfig()
	el, err := evict.New(evict.FromSLO(evBase, thresholds), edeps)
	if err != nil {
		return fmt.Errorf("eviction: %w", err)
	}
	loops.Go("evict", el.Run)
	cons.setLoops(ctx, col, sup, supBase, el, evBase)
	if sup != nil {
		// BE containers created while BE is clamped must fit under the clamp (cgroup v1).
		cons.setPodSpecs(ctx, func(d *policy.Deps) { d.BEQuotaCeiling = sup.QuotaCeiling })
	}
	return nil
}

// newHeadroom builds the steal headroom for resource-threshold-config's stealHeadroom, "auto" deciding on
// whether the node is a virtual machine (vm, vmWhy).
func newHeadroom(ctx context.Context, st settings, vm bool, vmWhy string, reg prometheus.Registerer) (*headroom.Controller, error) {
	cfg, why := headroom.Resolve(headroom.DefaultConfig(), st.colocation.Load().ResourceThreshold, vm, vmWhy)
	hr, err := headroom.New(cfg, why, reg)
	if err != nil {
		return nil, err
	}
	klog.FromContext(ctx).Info("Steal headroom", "enable", cfg.Enable, "why", why, "stealThresholdMilli", cfg.StealThresholdMilli)
	return hr, nil
}

// newLSWaitGuard builds the LS wait guard for resource-threshold-config's lsWaitGuard, reconfigured by
// cons on every change of it.
func newLSWaitGuard(ctx context.Context, st settings, col *collector.Collector, reg prometheus.Registerer, cons *consumers) (*interference.Controller, error) {
	base := interference.DefaultConfig()
	cfg := interference.Resolve(base, st.colocation.Load().ResourceThreshold)
	lw, err := interference.New(cfg, col.RunQueue, reg)
	if err != nil {
		return nil, err
	}
	klog.FromContext(ctx).Info("LS wait guard", "enable", cfg.Enable, "waitThreshold", cfg.WaitThreshold, "runQueueSource", st.runQueue)
	cons.follow(ctx, func(ctx context.Context, r slo.Resolved) {
		cfg := interference.Resolve(base, r.ResourceThreshold)
		was := lw.Status().Enabled
		if err := lw.Reconfigure(cfg); err != nil {
			klog.FromContext(ctx).Error(err, "LS wait guard settings refused; the ones in force stay")
		} else if was != cfg.Enable {
			klog.FromContext(ctx).Info("LS wait guard switched", "enable", cfg.Enable, "waitThreshold", cfg.WaitThreshold)
		}
	})
	return lw, nil
}

// lowestCeiling is the lowest of the limiters' BE ceilings, which the published batch capacity never
// exceeds.
func lowestCeiling(hr *headroom.Controller, lw *interference.Controller) func() (int64, bool) {
	return func() (int64, bool) {
		var lowest int64
		for _, f := range []func() (int64, bool){hr.Ceiling, lw.Ceiling} {
			if m, ok := f(); ok && (lowest == 0 || m < lowest) {
				lowest = m
			}
		}
		return lowest, lowest > 0
	}
}

// startYield starts the loop that makes BE threads yield to every other thread (actuate/yield), switched by resource-qos-config's
// beClass.cpuQOS.yieldThreads and reconfigured by cons on every change of it. A node without a cgroup
// hierarchy has no BE cgroup to sweep.
func startYield(ctx context.Context, loops *supervise.Group, st settings, cgroups cgroup.Writer, kick <-chan struct{},
	reg prometheus.Registerer, cons *consumers) error {
	if cgroups == nil {
		klog.FromContext(ctx).Info("BE threads keep the default scheduling: no cgroup hierarchy to find them in", "cgroupRoot", st.cgroupRoot)
		return nil
	}
	if _, ok := yield.Mechanism(); !ok {
		klog.FromContext(ctx).Info("BE threads keep the default scheduling: the kernel does not honour slice requests (Linux 6.12+); BE pods still get cpu.idle (docs/colocation.md)")
		return nil
	}
	base := yield.DefaultConfig()
	// The pods' cpu cgroups: the cpu controller's hierarchy on v1, the unified one on v2.
	if cgroups.Version() == 2 {
		base.BECgroupDir = filepath.Join(st.cgroupRoot, cgroup.Path(st.beParent))
	} else {
		base.BECgroupDir = filepath.Join(st.cgroupRoot, "cpu", cgroup.Path(st.beParent))
	}
	cfg := base
	cfg.Enable = st.colocation.Load().ResourceQOS.BE.CPUQOS.YieldThreads
	l, err := yield.New(cfg, yield.Deps{Kick: kick, Registerer: reg})
	if err != nil {
		return fmt.Errorf("BE thread scheduling loop: %w", err)
	}
	loops.Go("yield", l.Run)
	cons.setYield(ctx, l, base)
	return nil
}

// podMeta tells the eviction loop a pod's sandbox and CPU request, from the store. The loop asks once per
// candidate pod; the index is rebuilt only when the store changed, not copied on every question.
func podMeta(st *store.Store) func(uid string) (evict.PodMeta, bool) {
	var mu sync.Mutex
	gen, byUID := uint64(math.MaxUint64), map[string]evict.PodMeta(nil)
	return func(uid string) (evict.PodMeta, bool) {
		mu.Lock()
		defer mu.Unlock()
		if g := st.Generation(); g != gen {
			gen = g
			snap := st.Snapshot()
			byID := make(map[string]string, len(snap.Pods))
			byUID = make(map[string]evict.PodMeta, len(snap.Pods))
			for _, p := range snap.Pods {
				byID[p.ID] = p.UID
				byUID[p.UID] = evict.PodMeta{SandboxID: p.ID}
			}
			for _, c := range snap.Containers {
				u, ok := byID[c.PodSandboxID]
				if !ok || c.Resources == nil {
					continue
				}
				m := byUID[u]
				m.CPURequestMilli += reclaim.RequestFromLinux(c.Resources.CPUShares, c.Resources.CPUQuota, c.Resources.CPUPeriod, 0).CPUMilli
				byUID[u] = m
			}
		}
		m, ok := byUID[uid]
		return m, ok
	}
}
