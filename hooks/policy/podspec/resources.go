package podspec

import (
	"context"
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/tandemkit/tandem/hooks"
	"github.com/tandemkit/tandem/resource/batch"
)

// BatchResources returns the batch resources of each long-running container of pod, read from its spec.
// ok is false when the spec is unknown (not found within the wait, or no API server) or names no batch
// resource at all: the pod is then plain BE. The error is the caller's context ending.
//
// When any container has batch resources, every long-running container is listed, those without as zero,
// so that a container without a limit leaves the pod without one too, as Kubernetes counts limits.
func (s *Source) BatchResources(ctx context.Context, pod *hooks.PodInfo) (map[string]batch.Container, bool, error) {
	p, err := s.lookup(ctx, pod)
	if p == nil || err != nil {
		return nil, false, err
	}
	out := map[string]batch.Container{}
	found := false
	for _, c := range longRunning(p) {
		bc := batch.Container{
			CPURequestMilli: value(c.Resources.Requests, batch.CPU),
			CPULimitMilli:   value(c.Resources.Limits, batch.CPU),
			MemoryRequest:   value(c.Resources.Requests, batch.Memory),
			MemoryLimit:     value(c.Resources.Limits, batch.Memory),
		}
		found = found || bc != batch.Container{}
		out[c.Name] = bc
	}
	if !found {
		return nil, false, nil
	}
	return out, true, nil
}

// MemoryRequest returns a container's memory request from pod's spec (memory, else batch-memory for BE
// containers), or with ctr nil the pod's: its pod-level request when set, else the sum over its
// long-running containers plus the pod overhead. ok is false when the spec is unknown or has no request.
// It satisfies memoryqos.Requests.
func (s *Source) MemoryRequest(ctx context.Context, pod *hooks.PodInfo, ctr *hooks.ContainerInfo) (int64, bool) {
	p, err := s.lookup(ctx, pod)
	if p == nil || err != nil {
		return 0, false
	}
	if ctr != nil {
		// slices.Concat, not append: the cached pod's slices are shared and must not be written.
		for _, c := range slices.Concat(p.Spec.Containers, p.Spec.InitContainers) {
			if c.Name == ctr.Name {
				v := memoryRequest(c.Resources.Requests)
				return v, v > 0
			}
		}
		return 0, false
	}
	if p.Spec.Resources != nil {
		if v := value(p.Spec.Resources.Requests, string(corev1.ResourceMemory)); v > 0 {
			return v, true
		}
	}
	var sum int64
	for _, c := range longRunning(p) {
		sum += memoryRequest(c.Resources.Requests)
	}
	if sum == 0 {
		return 0, false
	}
	return sum + value(p.Spec.Overhead, string(corev1.ResourceMemory)), true
}

// longRunning lists the containers that run side by side: the app containers and the sidecars (init
// containers that restart always). Other init containers finish before the app starts, so adding them to
// a pod's sums would overstate it.
func longRunning(p *corev1.Pod) []corev1.Container {
	var out []corev1.Container
	for _, c := range p.Spec.InitContainers {
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			out = append(out, c)
		}
	}
	return append(out, p.Spec.Containers...)
}

func memoryRequest(l corev1.ResourceList) int64 {
	if v := value(l, string(corev1.ResourceMemory)); v > 0 {
		return v
	}
	return value(l, batch.Memory)
}

// value reads a quantity as an integer: batch-cpu counts milli-cores as whole units ("2k" is 2000),
// memory and batch-memory count bytes.
func value(l corev1.ResourceList, name string) int64 {
	q, ok := l[corev1.ResourceName(name)]
	if !ok {
		return 0
	}
	return q.Value()
}
