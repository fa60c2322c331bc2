package nri

import (
	"maps"
	"slices"
	"strings"

	"github.com/containerd/nri/pkg/api"

	"github.com/tandemkit/tandem/hooks"
	"github.com/tandemkit/tandem/store"
)

// resourcesFromNRI converts NRI's Linux resources into the hooks' shape; nil stays nil.
func resourcesFromNRI(r *api.LinuxResources) *hooks.Resources {
	if r == nil {
		return nil
	}
	out := &hooks.Resources{}
	if c := r.GetCpu(); c != nil {
		out.CPUShares = int64(c.GetShares().GetValue())
		out.CPUQuota = c.GetQuota().GetValue()
		out.CPUPeriod = int64(c.GetPeriod().GetValue())
		out.CpusetCpus = c.GetCpus()
		out.CpusetMems = c.GetMems()
	}
	if m := r.GetMemory(); m != nil {
		out.MemoryLimitInBytes = m.GetLimit().GetValue()
		out.MemorySwapLimitInBytes = m.GetSwap().GetValue()
	}
	for _, h := range r.GetHugepageLimits() {
		if out.HugepageLimits == nil {
			out.HugepageLimits = map[string]uint64{}
		}
		out.HugepageLimits[h.GetPageSize()] = h.GetLimit()
	}
	out.Unified = maps.Clone(r.GetUnified())
	out.RDTClass = r.GetRdtClass().GetValue()
	return out
}

// containerResources is a container's resources as NRI reports them, with its oom_score_adj.
func containerResources(c *api.Container) *hooks.Resources {
	r := resourcesFromNRI(c.GetLinux().GetResources())
	if adj := c.GetLinux().GetOomScoreAdj(); adj != nil {
		if r == nil {
			r = &hooks.Resources{}
		}
		r.OomScoreAdj = adj.GetValue()
	}
	return r
}

// podFromNRI is the store's record of a sandbox NRI reports. NRI has no sandbox state: a sandbox it
// reports is taken as ready, and its containers' states say the rest.
func podFromNRI(p *api.PodSandbox) *store.Pod {
	return &store.Pod{
		ID: p.GetId(), Name: p.GetName(), Namespace: p.GetNamespace(), UID: p.GetUid(),
		State:          store.PodReady,
		CgroupParent:   p.GetLinux().GetCgroupParent(),
		RuntimeHandler: p.GetRuntimeHandler(),
		Labels:         maps.Clone(p.GetLabels()),
		Annotations:    maps.Clone(p.GetAnnotations()),
		Resources:      resourcesFromNRI(p.GetLinux().GetPodResources()),
	}
}

// containerFromNRI is the store's record of a container NRI reports.
func containerFromNRI(c *api.Container) *store.Container {
	return &store.Container{
		ID: c.GetId(), PodSandboxID: c.GetPodSandboxId(), Name: c.GetName(),
		State:       containerState(c.GetState()),
		Labels:      maps.Clone(c.GetLabels()),
		Annotations: maps.Clone(c.GetAnnotations()),
		Resources:   containerResources(c),
		CreatedAt:   c.GetCreatedAt(),
	}
}

// containerState names NRI's states as CRI does, which is what the store and the node loops read.
func containerState(s api.ContainerState) store.ContainerState {
	switch s {
	case api.ContainerState_CONTAINER_CREATED:
		return store.ContainerCreated
	case api.ContainerState_CONTAINER_RUNNING, api.ContainerState_CONTAINER_PAUSED:
		return store.ContainerRunning
	case api.ContainerState_CONTAINER_STOPPED:
		return store.ContainerExited
	}
	return store.ContainerUnknown
}

// sandboxInfo is what PreRunPodSandbox hooks see of a sandbox NRI reports.
func sandboxInfo(p *api.PodSandbox) *hooks.PodInfo {
	info := podFromNRI(p).HookInfo()
	info.Overhead = resourcesFromNRI(p.GetLinux().GetPodOverhead())
	return info
}

// containerInfo is what the hooks see of a container NRI reports, environment included.
func containerInfo(c *api.Container) *hooks.ContainerInfo {
	ci := containerFromNRI(c).HookInfo()
	for _, kv := range c.GetEnv() {
		k, v, _ := strings.Cut(kv, "=")
		if ci.Env == nil {
			ci.Env = map[string]string{}
		}
		ci.Env[k] = v
	}
	return ci
}

// resourceSetter is what NRI's ContainerAdjustment and ContainerUpdate share: the same setters, so one
// function fills either.
type resourceSetter interface {
	SetLinuxCPUShares(uint64)
	SetLinuxCPUQuota(int64)
	SetLinuxCPUPeriod(int64)
	SetLinuxCPUSetCPUs(string)
	SetLinuxCPUSetMems(string)
	SetLinuxMemoryLimit(int64)
	SetLinuxMemorySwap(int64)
	AddLinuxHugepageLimit(string, uint64)
	AddLinuxUnified(string, string)
}

// setResources writes a resource adjustment through NRI's setters. The RDT class and, where unified is
// false (cgroup v1, on which runc refuses them), the unified files are left out: the plugin applies those
// itself once the container runs, as the proxy does. oom_score_adj is set by the caller, as only a new
// container's adjustment has it.
func setResources(s resourceSetter, a *hooks.ResourceAdjustment, unified bool) {
	if a == nil {
		return
	}
	if a.CPUShares != nil {
		s.SetLinuxCPUShares(uint64(max(*a.CPUShares, 0)))
	}
	if a.CPUQuota != nil {
		s.SetLinuxCPUQuota(*a.CPUQuota)
	}
	if a.CPUPeriod != nil {
		s.SetLinuxCPUPeriod(*a.CPUPeriod)
	}
	if a.CpusetCpus != nil {
		s.SetLinuxCPUSetCPUs(*a.CpusetCpus)
	}
	if a.CpusetMems != nil {
		s.SetLinuxCPUSetMems(*a.CpusetMems)
	}
	if a.MemoryLimitInBytes != nil {
		s.SetLinuxMemoryLimit(*a.MemoryLimitInBytes)
	}
	if a.MemorySwapLimitInBytes != nil {
		s.SetLinuxMemorySwap(*a.MemorySwapLimitInBytes)
	}
	for _, k := range slices.Sorted(maps.Keys(a.HugepageLimits)) {
		s.AddLinuxHugepageLimit(k, a.HugepageLimits[k])
	}
	if unified {
		for _, k := range slices.Sorted(maps.Keys(a.Unified)) {
			s.AddLinuxUnified(k, a.Unified[k])
		}
	}
}

// containerAdjustment turns a PreCreateContainer adjustment into NRI's. What NRI cannot set on a
// container (labels) is reported back so the caller can say so.
func containerAdjustment(a *hooks.Adjustment, unified bool) (*api.ContainerAdjustment, []string) {
	if a == nil {
		return nil, nil
	}
	out := &api.ContainerAdjustment{}
	for _, k := range slices.Sorted(maps.Keys(a.Annotations)) {
		out.AddAnnotation(k, a.Annotations[k])
	}
	for _, k := range slices.Sorted(maps.Keys(a.Env)) {
		out.AddEnv(k, a.Env[k])
	}
	if r := a.Resources; r != nil {
		setResources(out, r, unified)
		if r.OomScoreAdj != nil {
			v := int(*r.OomScoreAdj)
			out.SetLinuxOomScoreAdj(&v)
		}
	}
	return out, slices.Sorted(maps.Keys(a.Labels))
}

// containerUpdate turns a resource adjustment into an update of container id; nil when it changes
// nothing the runtime is sent.
func containerUpdate(id string, a *hooks.ResourceAdjustment, unified bool) *api.ContainerUpdate {
	u := &api.ContainerUpdate{}
	setResources(u, a, unified)
	if u.GetLinux() == nil {
		return nil
	}
	u.SetContainerId(id)
	return u
}
