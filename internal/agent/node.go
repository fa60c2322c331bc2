package agent

import (
	"math"
	"sync"

	"github.com/tandemkit/tandem/actuate/evict"
	"github.com/tandemkit/tandem/hooks"
	"github.com/tandemkit/tandem/hooks/policy/qos"
	"github.com/tandemkit/tandem/metrics/collector"
	"github.com/tandemkit/tandem/metrics/headroom"
	"github.com/tandemkit/tandem/metrics/interference"
	"github.com/tandemkit/tandem/metrics/reclaim"
	"github.com/tandemkit/tandem/metrics/reporter"
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
