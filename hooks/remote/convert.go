package remote

import (
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

func protoResources(r *hooks.Resources) *v1alpha1.LinuxContainerResources {
	if r == nil {
		return nil
	}
	out := &v1alpha1.LinuxContainerResources{}
	hooks.ApplyToProto(out.ProtoReflect(), hooks.Whole(r))
	return out
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
		PodResources: hooks.AdjustmentFromProto(resp.GetResources().ProtoReflect()),
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
		Resources:   hooks.AdjustmentFromProto(resp.GetContainerResources().ProtoReflect()),
		Env:         nonEmpty(resp.GetContainerEnvs()),
	}
	if a.Empty() {
		return nil
	}
	return a
}
