package remote

import (
	"maps"
	"slices"

	"github.com/tandemkit/tandem/hooks"
	"github.com/tandemkit/tandem/hooks/remote/v1alpha1"
)

// The protocol has no "unset": a hook server answers with plain values. A zero number, an empty string
// or an empty map in a response therefore means "no change". Values equal to the request's are no
// change either (the dispatcher's merge sees to that), so a server that echoes the request back claims
// no field.

func podMeta(pod *hooks.PodInfo) *v1alpha1.PodSandboxMetadata {
	return &v1alpha1.PodSandboxMetadata{Name: pod.Name, Uid: pod.UID, Namespace: pod.Namespace, Attempt: pod.Attempt}
}

func podSandboxRequest(pod *hooks.PodInfo) *v1alpha1.PodSandboxHookRequest {
	return &v1alpha1.PodSandboxHookRequest{
		PodMeta:        podMeta(pod),
		RuntimeHandler: pod.RuntimeHandler,
		Labels:         pod.Labels,
		Annotations:    pod.Annotations,
		CgroupParent:   pod.CgroupParent,
		Overhead:       protoResources(pod.Overhead),
		Resources:      protoResources(pod.Resources),
	}
}

func containerRequest(pod *hooks.PodInfo, ctr *hooks.ContainerInfo) *v1alpha1.ContainerResourceHookRequest {
	req := &v1alpha1.ContainerResourceHookRequest{
		PodMeta:         podMeta(pod),
		PodResources:    protoResources(pod.Resources),
		PodAnnotations:  pod.Annotations,
		PodLabels:       pod.Labels,
		PodCgroupParent: pod.CgroupParent,
	}
	if ctr != nil {
		req.ContainerMata = &v1alpha1.ContainerMetadata{Name: ctr.Name, Attempt: ctr.Attempt, Id: ctr.ID}
		req.ContainerAnnotations = ctr.Annotations
		req.ContainerResources = protoResources(ctr.Resources)
		req.ContainerEnvs = ctr.Env
	}
	return req
}

// protoResources is r in the protocol's shape: every field, hugepage limits in page size order so the
// same resources always make the same request. The protocol has no RDT class.
func protoResources(r *hooks.Resources) *v1alpha1.LinuxContainerResources {
	if r == nil {
		return nil
	}
	out := &v1alpha1.LinuxContainerResources{
		CpuPeriod: r.CPUPeriod, CpuQuota: r.CPUQuota, CpuShares: r.CPUShares,
		MemoryLimitInBytes: r.MemoryLimitInBytes, MemorySwapLimitInBytes: r.MemorySwapLimitInBytes,
		OomScoreAdj: r.OomScoreAdj, CpusetCpus: r.CpusetCpus, CpusetMems: r.CpusetMems,
		Unified: nonEmpty(maps.Clone(r.Unified)),
	}
	for _, size := range slices.Sorted(maps.Keys(r.HugepageLimits)) {
		out.HugepageLimits = append(out.HugepageLimits, &v1alpha1.HugepageLimit{PageSize: size, Limit: r.HugepageLimits[size]})
	}
	return out
}

// resourceAdjustment reads the resources of a hook server's answer: a zero field, and a hugepage limit
// without a page size, say nothing. Nil when nothing is set.
func resourceAdjustment(r *v1alpha1.LinuxContainerResources) *hooks.ResourceAdjustment {
	if r == nil {
		return nil
	}
	a := &hooks.ResourceAdjustment{
		CPUPeriod: nonZero(r.CpuPeriod), CPUQuota: nonZero(r.CpuQuota), CPUShares: nonZero(r.CpuShares),
		MemoryLimitInBytes: nonZero(r.MemoryLimitInBytes), MemorySwapLimitInBytes: nonZero(r.MemorySwapLimitInBytes),
		OomScoreAdj: nonZero(r.OomScoreAdj), CpusetCpus: nonZero(r.CpusetCpus), CpusetMems: nonZero(r.CpusetMems),
		Unified: nonEmpty(maps.Clone(r.Unified)),
	}
	for _, h := range r.HugepageLimits {
		if h.GetPageSize() == "" {
			continue
		}
		if a.HugepageLimits == nil {
			a.HugepageLimits = map[string]uint64{}
		}
		a.HugepageLimits[h.GetPageSize()] = h.GetLimit()
	}
	if a.Empty() {
		return nil
	}
	return a
}

func nonZero[T comparable](v T) *T {
	var zero T
	if v == zero {
		return nil
	}
	return &v
}

func nonEmpty(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	return m
}

// sandboxAdjustment reads a PreRunPodSandboxHook answer. Its resources are pod-level settings.
func sandboxAdjustment(resp *v1alpha1.PodSandboxHookResponse) *hooks.Adjustment {
	a := &hooks.Adjustment{
		Labels:       nonEmpty(resp.GetLabels()),
		Annotations:  nonEmpty(resp.GetAnnotations()),
		CgroupParent: nonZero(resp.GetCgroupParent()),
		PodResources: resourceAdjustment(resp.GetResources()),
	}
	if a.Empty() {
		return nil
	}
	return a
}

// containerAdjustment reads a container hook's answer. pod_cgroup_parent is not read: see preContainer.
func containerAdjustment(resp *v1alpha1.ContainerResourceHookResponse) *hooks.Adjustment {
	a := &hooks.Adjustment{
		Annotations: nonEmpty(resp.GetContainerAnnotations()),
		Resources:   resourceAdjustment(resp.GetContainerResources()),
		Env:         nonEmpty(resp.GetContainerEnvs()),
	}
	if a.Empty() {
		return nil
	}
	return a
}
