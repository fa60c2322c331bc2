package proxy

import (
	"maps"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/tandemkit/tandem/proxy/store"
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
	}
}

func containerFromConfig(id, podID string, cfg *runtimeapi.ContainerConfig) *store.Container {
	return &store.Container{
		ID:           id,
		PodSandboxID: podID,
		Name:         cfg.GetMetadata().GetName(),
		Attempt:      cfg.GetMetadata().GetAttempt(),
		Image:        cfg.GetImage().GetImage(),
		Labels:       maps.Clone(cfg.GetLabels()),
		Annotations:  maps.Clone(cfg.GetAnnotations()),
		Resources:    resourcesFromCRI(cfg.GetLinux().GetResources()),
	}
}

// resourcesFromCRI converts CRI resources for the store; nil stays nil.
func resourcesFromCRI(r *runtimeapi.LinuxContainerResources) *store.Resources {
	if r == nil {
		return nil
	}
	out := &store.Resources{
		CPUPeriod:              r.GetCpuPeriod(),
		CPUQuota:               r.GetCpuQuota(),
		CPUShares:              r.GetCpuShares(),
		MemoryLimitInBytes:     r.GetMemoryLimitInBytes(),
		MemorySwapLimitInBytes: r.GetMemorySwapLimitInBytes(),
		OomScoreAdj:            r.GetOomScoreAdj(),
		CpusetCpus:             r.GetCpusetCpus(),
		CpusetMems:             r.GetCpusetMems(),
		Unified:                maps.Clone(r.GetUnified()),
	}
	for _, h := range r.GetHugepageLimits() {
		if out.HugepageLimits == nil {
			out.HugepageLimits = map[string]uint64{}
		}
		out.HugepageLimits[h.GetPageSize()] = h.GetLimit()
	}
	return out
}
