package proxy

import (
	"maps"
	"slices"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/tandemkit/tandem/hooks"
	"github.com/tandemkit/tandem/store"
)

func podFromConfig(id string, cfg *runtimeapi.PodSandboxConfig) *store.Pod {
	md := cfg.GetMetadata()
	return &store.Pod{
		ID:           id,
		Name:         md.GetName(),
		Namespace:    md.GetNamespace(),
		UID:          md.GetUid(),
		Attempt:      md.GetAttempt(),
		CgroupParent: cfg.GetLinux().GetCgroupParent(),
		Labels:       maps.Clone(cfg.GetLabels()),
		Annotations:  maps.Clone(cfg.GetAnnotations()),
		Resources:    resourcesFromCRI(cfg.GetLinux().GetResources()),
	}
}

// containerFromConfig is the store's record of a created container; resources are its config's, in the
// hooks' shape, with what hooks changed.
func containerFromConfig(id, podID string, cfg *runtimeapi.ContainerConfig, resources *hooks.Resources) *store.Container {
	return &store.Container{
		ID:           id,
		PodSandboxID: podID,
		Name:         cfg.GetMetadata().GetName(),
		Attempt:      cfg.GetMetadata().GetAttempt(),
		Image:        cfg.GetImage().GetImage(),
		Labels:       maps.Clone(cfg.GetLabels()),
		Annotations:  maps.Clone(cfg.GetAnnotations()),
		Resources:    resources,
	}
}

// resourcesFromCRI converts CRI resources into the hooks' shape; nil stays nil. CRI has no RDT class: the
// store's record carries the one hooks chose.
func resourcesFromCRI(r *runtimeapi.LinuxContainerResources) *hooks.Resources {
	if r == nil {
		return nil
	}
	out := &hooks.Resources{
		CPUPeriod: r.CpuPeriod, CPUQuota: r.CpuQuota, CPUShares: r.CpuShares,
		MemoryLimitInBytes: r.MemoryLimitInBytes, MemorySwapLimitInBytes: r.MemorySwapLimitInBytes,
		OomScoreAdj: r.OomScoreAdj, CpusetCpus: r.CpusetCpus, CpusetMems: r.CpusetMems,
	}
	if len(r.Unified) > 0 {
		out.Unified = maps.Clone(r.Unified)
	}
	for _, h := range r.HugepageLimits {
		if out.HugepageLimits == nil {
			out.HugepageLimits = map[string]uint64{}
		}
		out.HugepageLimits[h.GetPageSize()] = h.GetLimit()
	}
	return out
}

func sandboxInfo(req *runtimeapi.RunPodSandboxRequest) *hooks.PodInfo {
	cfg := req.GetConfig()
	md := cfg.GetMetadata()
	return &hooks.PodInfo{
		Name: md.GetName(), Namespace: md.GetNamespace(), UID: md.GetUid(), Attempt: md.GetAttempt(),
		RuntimeHandler: req.GetRuntimeHandler(), Labels: cfg.GetLabels(), Annotations: cfg.GetAnnotations(),
		CgroupParent: cfg.GetLinux().GetCgroupParent(),
		Resources:    resourcesFromCRI(cfg.GetLinux().GetResources()),
		Overhead:     resourcesFromCRI(cfg.GetLinux().GetOverhead()),
	}
}

// containerInfo is what PreCreateContainer hooks see of a container; resources are its config's, in the
// hooks' shape.
func containerInfo(id string, cfg *runtimeapi.ContainerConfig, resources *hooks.Resources) *hooks.ContainerInfo {
	ci := &hooks.ContainerInfo{
		ID: id, Name: cfg.GetMetadata().GetName(), Attempt: cfg.GetMetadata().GetAttempt(),
		Labels: cfg.GetLabels(), Annotations: cfg.GetAnnotations(), Resources: resources,
	}
	for _, kv := range cfg.GetEnvs() {
		if ci.Env == nil {
			ci.Env = map[string]string{}
		}
		ci.Env[kv.GetKey()] = string(kv.GetValue())
	}
	return ci
}

// applySandbox writes a PreRunPodSandbox adjustment into the request.
func applySandbox(cfg *runtimeapi.PodSandboxConfig, a *hooks.Adjustment) {
	if a == nil {
		return
	}
	cfg.Labels = mergeMap(cfg.Labels, a.Labels)
	cfg.Annotations = mergeMap(cfg.Annotations, a.Annotations)
	if a.CgroupParent != nil {
		if cfg.Linux == nil {
			cfg.Linux = &runtimeapi.LinuxPodSandboxConfig{}
		}
		cfg.Linux.CgroupParent = *a.CgroupParent
	}
}

// applyContainer writes a PreCreateContainer adjustment into the request.
func applyContainer(cfg *runtimeapi.ContainerConfig, a *hooks.Adjustment) {
	if a == nil {
		return
	}
	cfg.Labels = mergeMap(cfg.Labels, a.Labels)
	cfg.Annotations = mergeMap(cfg.Annotations, a.Annotations)
	for _, k := range slices.Sorted(maps.Keys(a.Env)) {
		replaced := false
		for _, kv := range cfg.Envs {
			if kv.Key == k {
				kv.Value, replaced = []byte(a.Env[k]), true
			}
		}
		if !replaced {
			cfg.Envs = append(cfg.Envs, &runtimeapi.KeyValue{Key: k, Value: []byte(a.Env[k])})
		}
	}
	if a.Resources != nil {
		if cfg.Linux == nil {
			cfg.Linux = &runtimeapi.LinuxContainerConfig{}
		}
		if cfg.Linux.Resources == nil {
			cfg.Linux.Resources = &runtimeapi.LinuxContainerResources{}
		}
		applyResources(cfg.Linux.Resources, a.Resources)
	}
}

// applyResources writes a resource adjustment into CRI resources: set fields replace, map entries are
// added or replaced (hugepage limits in page size order, so the same adjustment always makes the same
// bytes). The RDT class has no CRI field; the proxy applies it itself (frontend.Writer).
func applyResources(r *runtimeapi.LinuxContainerResources, a *hooks.ResourceAdjustment) {
	if a == nil {
		return
	}
	setIf(&r.CpuPeriod, a.CPUPeriod)
	setIf(&r.CpuQuota, a.CPUQuota)
	setIf(&r.CpuShares, a.CPUShares)
	setIf(&r.MemoryLimitInBytes, a.MemoryLimitInBytes)
	setIf(&r.MemorySwapLimitInBytes, a.MemorySwapLimitInBytes)
	setIf(&r.OomScoreAdj, a.OomScoreAdj)
	setIf(&r.CpusetCpus, a.CpusetCpus)
	setIf(&r.CpusetMems, a.CpusetMems)
	r.Unified = mergeMap(r.Unified, a.Unified)
	for _, size := range slices.Sorted(maps.Keys(a.HugepageLimits)) {
		limit := a.HugepageLimits[size]
		replaced := false
		for _, h := range r.HugepageLimits {
			if h.GetPageSize() == size {
				h.Limit, replaced = limit, true
			}
		}
		if !replaced {
			r.HugepageLimits = append(r.HugepageLimits, &runtimeapi.HugepageLimit{PageSize: size, Limit: limit})
		}
	}
}

// setIf sets *dst to *v when an adjustment sets the field (v not nil).
func setIf[T any](dst *T, v *T) {
	if v != nil {
		*dst = *v
	}
}

// adjusted returns a container's stored resources with an adjustment applied, as a whole update for the
// runtime.
func adjusted(stored *hooks.Resources, a *hooks.ResourceAdjustment) *runtimeapi.LinuxContainerResources {
	r := &runtimeapi.LinuxContainerResources{}
	applyResources(r, hooks.Whole(stored))
	applyResources(r, a)
	return r
}

func mergeMap(dst, src map[string]string) map[string]string {
	if len(src) == 0 {
		return dst
	}
	if dst == nil {
		dst = make(map[string]string, len(src))
	}
	maps.Copy(dst, src)
	return dst
}
