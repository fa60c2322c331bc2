// Package hooks is Tandem's hook framework: the stages at which policies see pod and container lifecycle
// calls, the registry that orders in-process and remote hooks, and the dispatcher that runs every
// matching hook under its own timeout and failure policy and merges their adjustments field by field.
//
// Hooks see neutral structs (PodInfo, ContainerInfo) built at the edges: the proxy builds them from CRI
// requests, the remote client turns them into Koordinator's runtime hook protocol. A hook returns an
// Adjustment in which nil means "leave as is"; the dispatcher records which hook changed which field, and
// a second hook changing the same field to another value is a conflict that names both.
package hooks

import "maps"

// Resources are a container's (or a pod's) Linux resources, as CRI's LinuxContainerResources.
type Resources struct {
	CPUPeriod              int64             `json:"cpuPeriod,omitempty"`
	CPUQuota               int64             `json:"cpuQuota,omitempty"`
	CPUShares              int64             `json:"cpuShares,omitempty"`
	MemoryLimitInBytes     int64             `json:"memoryLimitInBytes,omitempty"`
	MemorySwapLimitInBytes int64             `json:"memorySwapLimitInBytes,omitempty"`
	OomScoreAdj            int64             `json:"oomScoreAdj,omitempty"`
	CpusetCpus             string            `json:"cpusetCpus,omitempty"`
	CpusetMems             string            `json:"cpusetMems,omitempty"`
	HugepageLimits         map[string]uint64 `json:"hugepageLimits,omitempty"`
	// Unified holds cgroup files by name ("cpu.idle", "memory.high"). The front end has the runtime write
	// them where it can (cgroup v2); on cgroup v1, where runc refuses them, it writes each into the
	// container's cgroup itself, in the controller its prefix names, once the container has started.
	Unified map[string]string `json:"unified,omitempty"`
	// RDTClass is the resctrl group the container's tasks run in. CRI has no field for it: the front end
	// moves the tasks after start and at every update.
	RDTClass string `json:"rdtClass,omitempty"`
}

// Clone returns a deep copy; nil stays nil.
func (r *Resources) Clone() *Resources {
	if r == nil {
		return nil
	}
	c := *r
	c.HugepageLimits = maps.Clone(r.HugepageLimits)
	c.Unified = maps.Clone(r.Unified)
	return &c
}

// PodInfo is what a hook sees of a pod.
type PodInfo struct {
	ID             string
	Name           string
	Namespace      string
	UID            string
	Attempt        uint32
	RuntimeHandler string
	Labels         map[string]string
	Annotations    map[string]string
	// CgroupParent is the pod's cgroup, as kubelet named it (cgroupfs path or systemd slice).
	CgroupParent string
	// Resources are the pod-level resources (the sum of its containers') where kubelet sends them.
	Resources *Resources
	Overhead  *Resources
}

// ContainerInfo is what a hook sees of a container.
type ContainerInfo struct {
	ID          string
	Name        string
	Attempt     uint32
	Labels      map[string]string
	Annotations map[string]string
	Resources   *Resources
	Env         map[string]string
}

// Clone returns a deep copy.
func (p *PodInfo) Clone() *PodInfo {
	if p == nil {
		return nil
	}
	c := *p
	c.Labels = maps.Clone(p.Labels)
	c.Annotations = maps.Clone(p.Annotations)
	c.Resources = p.Resources.Clone()
	c.Overhead = p.Overhead.Clone()
	return &c
}

// Clone returns a deep copy.
func (c *ContainerInfo) Clone() *ContainerInfo {
	if c == nil {
		return nil
	}
	n := *c
	n.Labels = maps.Clone(c.Labels)
	n.Annotations = maps.Clone(c.Annotations)
	n.Resources = c.Resources.Clone()
	n.Env = maps.Clone(c.Env)
	return &n
}

// ResourceAdjustment changes resources. A nil field is left as it is; maps add or replace keys.
type ResourceAdjustment struct {
	CPUPeriod              *int64            `json:"cpuPeriod,omitempty"`
	CPUQuota               *int64            `json:"cpuQuota,omitempty"`
	CPUShares              *int64            `json:"cpuShares,omitempty"`
	MemoryLimitInBytes     *int64            `json:"memoryLimitInBytes,omitempty"`
	MemorySwapLimitInBytes *int64            `json:"memorySwapLimitInBytes,omitempty"`
	OomScoreAdj            *int64            `json:"oomScoreAdj,omitempty"`
	CpusetCpus             *string           `json:"cpusetCpus,omitempty"`
	CpusetMems             *string           `json:"cpusetMems,omitempty"`
	HugepageLimits         map[string]uint64 `json:"hugepageLimits,omitempty"`
	Unified                map[string]string `json:"unified,omitempty"`
	RDTClass               *string           `json:"rdtClass,omitempty"`
}

// Adjustment is what a hook changes. Container fields apply to the container of a container stage;
// Labels, Annotations and CgroupParent apply to the sandbox in PreRunPodSandbox. PodResources are
// pod-level cgroup settings: CRI has no call for them, so the proxy writes them to the pod's cgroup itself.
type Adjustment struct {
	Labels       map[string]string   `json:"labels,omitempty"`
	Annotations  map[string]string   `json:"annotations,omitempty"`
	CgroupParent *string             `json:"cgroupParent,omitempty"`
	Resources    *ResourceAdjustment `json:"resources,omitempty"`
	Env          map[string]string   `json:"env,omitempty"`
	PodResources *ResourceAdjustment `json:"podResources,omitempty"`
}

// Empty reports whether the adjustment changes nothing.
func (a *Adjustment) Empty() bool {
	return a == nil || (len(a.Labels) == 0 && len(a.Annotations) == 0 && a.CgroupParent == nil &&
		a.Resources.Empty() && len(a.Env) == 0 && a.PodResources.Empty())
}

// Int64 and String make adjustment literals short: &hooks.ResourceAdjustment{CPUShares: hooks.Int64(512)}.
func Int64(v int64) *int64 { return &v }

// String returns a pointer to v.
func String(v string) *string { return &v }
