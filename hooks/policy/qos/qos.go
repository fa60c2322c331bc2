// Package qos is the built-in hook that decides each pod's QoS class (SYSTEM, LSE, LSR, LS, BE) and
// records it where later hooks and operators see it: the tandem.io/qos-class annotation on the sandbox and
// its containers. It also enforces the rules of the exclusive classes and sets oom_score_adj by class.
package qos

import (
	"context"
	"fmt"

	"k8s.io/klog/v2"

	"github.com/tandemkit/tandem/hooks"
	resqos "github.com/tandemkit/tandem/resource/qos"
)

// Name is the hook's name in logs, metrics and conflict messages.
const Name = "qos"

// AnnotationClass carries the resolved class on sandboxes and containers.
const AnnotationClass = "tandem.io/qos-class"

// AnnotationCPUsFrom is set to CPUsFromKubelet on a container whose exclusive CPUs kubelet's static CPU
// manager chose: Tandem records them as LSR and never replaces them (see the cpuset hook).
const AnnotationCPUsFrom = "tandem.io/cpus-from"

// CPUsFromKubelet is AnnotationCPUsFrom's value for CPUs kubelet's static CPU manager chose.
const CPUsFromKubelet = "kubelet-static-cpu-manager"

// KubeletOwned says whether kubelet's static CPU manager chose the container's CPUs.
func KubeletOwned(ctr *hooks.ContainerInfo) bool {
	return ctr != nil && ctr.Annotations[AnnotationCPUsFrom] == CPUsFromKubelet
}

// OOM scores by class. BE goes first when memory runs out; the exclusive classes last, as far as the
// runtime allows (containerd raises scores below its own when restrict_oom_score_adj is set).
const (
	oomScoreBE        = 1000
	oomScoreExclusive = -998
)

// Config configures the qos hook.
type Config struct {
	// StaticCPUManager says kubelet runs the static CPU manager: its Guaranteed pods are LSR.
	StaticCPUManager bool `json:"staticCPUManager"`
}

// QoS is the hook.
type QoS struct{ cfg Config }

var (
	_ hooks.PreRunPodSandboxHook   = (*QoS)(nil)
	_ hooks.PreCreateContainerHook = (*QoS)(nil)
)

// New returns the hook.
func New(cfg Config) (*QoS, error) { return &QoS{cfg: cfg}, nil }

// Name implements hooks.Hook.
func (q *QoS) Name() string { return Name }

// Class returns the class the qos hook recorded for a container or its pod. Pods created before Tandem ran
// carry no record; their class is resolved from the dialects again (without the static CPU manager
// setting, which only the qos hook knows), or "" when their labels are invalid.
func Class(pod *hooks.PodInfo, ctr *hooks.ContainerInfo) resqos.Class {
	return ClassFor(pod, ctr, false)
}

// ClassFor is Class for a reader that knows whether kubelet runs the static CPU manager, as the node
// agent does: a Guaranteed pod that ran before Tandem is LSR there, as the qos hook would have made it.
func ClassFor(pod *hooks.PodInfo, ctr *hooks.ContainerInfo, staticCPUManager bool) resqos.Class {
	if ctr != nil {
		if c, err := resqos.Parse(ctr.Annotations[AnnotationClass]); err == nil {
			return c
		}
	}
	if c, err := resqos.Parse(pod.Annotations[AnnotationClass]); err == nil {
		return c
	}
	r, err := resqos.Resolve(resqos.Input{Labels: pod.Labels, Annotations: pod.Annotations, CgroupParent: pod.CgroupParent, StaticCPUManager: staticCPUManager})
	if err != nil {
		return ""
	}
	return r.Class
}

func (q *QoS) resolve(ctx context.Context, pod *hooks.PodInfo) (resqos.Result, error) {
	r, err := resqos.Resolve(resqos.Input{Labels: pod.Labels, Annotations: pod.Annotations, CgroupParent: pod.CgroupParent, StaticCPUManager: q.cfg.StaticCPUManager})
	if err != nil {
		return r, fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	if r.Conflict != "" {
		klog.FromContext(ctx).Info("QoS dialects disagree", "pod", klog.KRef(pod.Namespace, pod.Name), "detail", r.Conflict)
	}
	return r, nil
}

// PreRunPodSandbox annotates the sandbox with its class.
func (q *QoS) PreRunPodSandbox(ctx context.Context, pod *hooks.PodInfo) (*hooks.Adjustment, error) {
	r, err := q.resolve(ctx, pod)
	if err != nil {
		return nil, err
	}
	return &hooks.Adjustment{Annotations: map[string]string{AnnotationClass: string(r.Class)}}, nil
}

// PreCreateContainer annotates the container, checks the exclusive classes' rules and sets the OOM score.
func (q *QoS) PreCreateContainer(ctx context.Context, pod *hooks.PodInfo, ctr *hooks.ContainerInfo) (*hooks.Adjustment, error) {
	r, err := q.resolve(ctx, pod)
	if err != nil {
		return nil, err
	}
	adj := &hooks.Adjustment{Annotations: map[string]string{AnnotationClass: string(r.Class)}}
	if r.Source == resqos.FromKubernetes && r.Class == resqos.LSR {
		return q.kubeletStatic(ctx, pod, ctr, adj), nil
	}
	switch {
	case r.Class.Exclusive():
		res := ctr.Resources
		if res == nil {
			res = &hooks.Resources{}
		}
		if _, err := resqos.ExclusiveCPUs(res.CPUQuota, res.CPUPeriod, res.CPUShares); err != nil {
			return nil, fmt.Errorf("pod %s/%s container %s: %s %w", pod.Namespace, pod.Name, ctr.Name, r.Class, err)
		}
		adj.Resources = &hooks.ResourceAdjustment{OomScoreAdj: hooks.Int64(oomScoreExclusive)}
	case r.Class == resqos.BE:
		adj.Resources = &hooks.ResourceAdjustment{OomScoreAdj: hooks.Int64(oomScoreBE)}
	}
	return adj, nil
}

// kubeletStatic classes a container of a Guaranteed pod under kubelet's static CPU manager as kubelet
// treats it: a container with whole CPUs got exclusive CPUs from kubelet, which is what LSR means (seed
// 000); one with a fractional request runs in kubelet's shared pool, so it is LS here, not refused as a
// labelled LSR pod would be: the operator chose kubelet's policy, not Tandem's classes.
func (q *QoS) kubeletStatic(ctx context.Context, pod *hooks.PodInfo, ctr *hooks.ContainerInfo, adj *hooks.Adjustment) *hooks.Adjustment {
	res := ctr.Resources
	if res == nil {
		res = &hooks.Resources{}
	}
	if _, err := resqos.ExclusiveCPUs(res.CPUQuota, res.CPUPeriod, res.CPUShares); err != nil {
		klog.FromContext(ctx).V(2).Info("Guaranteed container without whole CPUs runs in the shared pool, as kubelet's static CPU manager runs it",
			"pod", klog.KRef(pod.Namespace, pod.Name), "container", ctr.Name)
		adj.Annotations[AnnotationClass] = string(resqos.LS)
		return adj
	}
	adj.Annotations[AnnotationCPUsFrom] = CPUsFromKubelet
	adj.Resources = &hooks.ResourceAdjustment{OomScoreAdj: hooks.Int64(oomScoreExclusive)}
	return adj
}
