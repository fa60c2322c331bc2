package hooks

import (
	"context"
	"fmt"
)

// Stage is a point in a pod's or container's lifecycle where hooks run. The names are those of the
// hooks.d files and of Koordinator's runtime hook RPCs without the "Hook" suffix.
type Stage string

// The stages, in lifecycle order.
const (
	PreRunPodSandbox            Stage = "PreRunPodSandbox"
	PostStopPodSandbox          Stage = "PostStopPodSandbox"
	PreCreateContainer          Stage = "PreCreateContainer"
	PreStartContainer           Stage = "PreStartContainer"
	PostStartContainer          Stage = "PostStartContainer"
	PreUpdateContainerResources Stage = "PreUpdateContainerResources"
	PostStopContainer           Stage = "PostStopContainer"
	PreRemoveContainer          Stage = "PreRemoveContainer"
	// PostRemoveContainer runs once a container is gone: removed through the proxy, with its pod, or found
	// missing from the runtime when the store is reconciled. Policies release what the container held.
	PostRemoveContainer Stage = "PostRemoveContainer"
)

// Stages lists every stage in lifecycle order.
func Stages() []Stage {
	return []Stage{PreRunPodSandbox, PostStopPodSandbox, PreCreateContainer, PreStartContainer,
		PostStartContainer, PreUpdateContainerResources, PostStopContainer, PreRemoveContainer, PostRemoveContainer}
}

// ParseStage accepts a stage name, with or without Koordinator's "Hook" suffix.
func ParseStage(s string) (Stage, error) {
	for _, st := range Stages() {
		if s == string(st) || s == string(st)+"Hook" {
			return st, nil
		}
	}
	return "", fmt.Errorf("unknown stage %q; want one of %v", s, Stages())
}

// post stages run after the runtime acted: their adjustments are not applied and their errors are
// logged, never returned to kubelet.
func (s Stage) post() bool {
	return s == PostStopPodSandbox || s == PostStartContainer || s == PostStopContainer || s == PostRemoveContainer
}

// Hook is the part every hook shares. Name keys logs, metrics, the hooks.d order and conflict messages.
type Hook interface {
	Name() string
}

// PreRunPodSandboxHook runs before RunPodSandbox is forwarded. It may set sandbox labels, annotations and
// the cgroup parent, and pod-level resources. Idempotent: kubelet retries failed sandboxes.
type PreRunPodSandboxHook interface {
	Hook
	PreRunPodSandbox(ctx context.Context, pod *PodInfo) (*Adjustment, error)
}

// PostStopPodSandboxHook runs after a sandbox stopped; use it to release what the pod held.
type PostStopPodSandboxHook interface {
	Hook
	PostStopPodSandbox(ctx context.Context, pod *PodInfo) error
}

// PreCreateContainerHook runs before CreateContainer is forwarded. It may change the container's
// resources, labels, annotations and environment, and pod-level resources. Idempotent: after a proxy
// restart it may see the same container again.
type PreCreateContainerHook interface {
	Hook
	PreCreateContainer(ctx context.Context, pod *PodInfo, ctr *ContainerInfo) (*Adjustment, error)
}

// PreStartContainerHook runs before StartContainer is forwarded; resource changes reach the runtime as an
// UpdateContainerResources just before the start.
type PreStartContainerHook interface {
	Hook
	PreStartContainer(ctx context.Context, pod *PodInfo, ctr *ContainerInfo) (*Adjustment, error)
}

// PostStartContainerHook runs after a container started.
type PostStartContainerHook interface {
	Hook
	PostStartContainer(ctx context.Context, pod *PodInfo, ctr *ContainerInfo) error
}

// PreUpdateContainerResourcesHook runs before UpdateContainerResources is forwarded, whether kubelet or the
// proxy itself sent it. Its changes are merged into the update; kubelet's own fields stay unless a hook
// changes them (in-place resize depends on them).
type PreUpdateContainerResourcesHook interface {
	Hook
	PreUpdateContainerResources(ctx context.Context, pod *PodInfo, ctr *ContainerInfo) (*Adjustment, error)
}

// PostStopContainerHook runs after a container stopped.
type PostStopContainerHook interface {
	Hook
	PostStopContainer(ctx context.Context, pod *PodInfo, ctr *ContainerInfo) error
}

// PreRemoveContainerHook runs before RemoveContainer is forwarded; an error refuses the removal (under the
// Fail policy), so it should be rare.
type PreRemoveContainerHook interface {
	Hook
	PreRemoveContainer(ctx context.Context, pod *PodInfo, ctr *ContainerInfo) error
}

// PostRemoveContainerHook runs after a container is gone, however it went; release what it held here.
// Idempotent: a container may be reported gone by a reconcile after its removal was seen.
type PostRemoveContainerHook interface {
	Hook
	PostRemoveContainer(ctx context.Context, pod *PodInfo, ctr *ContainerInfo) error
}

// RollbackHook is implemented by hooks that reserve something in a Pre stage (exclusive CPUs, say) and
// must give it back when the call does not go through: a later hook failed, the hook's own adjustment was
// dropped, or the runtime refused the call. Rollback must be idempotent and must not fail.
type RollbackHook interface {
	Hook
	Rollback(ctx context.Context, stage Stage, pod *PodInfo, ctr *ContainerInfo)
}

// call is a hook bound to one stage, in the shape the dispatcher runs.
type call func(ctx context.Context, pod *PodInfo, ctr *ContainerInfo) (*Adjustment, error)

// bind returns the hook's method for a stage, or nil when the hook does not implement it. It runs once
// per registration, so dispatch never pays for type assertions.
func bind(h Hook, s Stage) call {
	noAdj := func(f func(context.Context, *PodInfo, *ContainerInfo) error) call {
		return func(ctx context.Context, p *PodInfo, c *ContainerInfo) (*Adjustment, error) { return nil, f(ctx, p, c) }
	}
	switch s {
	case PreRunPodSandbox:
		if x, ok := h.(PreRunPodSandboxHook); ok {
			return func(ctx context.Context, p *PodInfo, _ *ContainerInfo) (*Adjustment, error) {
				return x.PreRunPodSandbox(ctx, p)
			}
		}
	case PostStopPodSandbox:
		if x, ok := h.(PostStopPodSandboxHook); ok {
			return noAdj(func(ctx context.Context, p *PodInfo, _ *ContainerInfo) error { return x.PostStopPodSandbox(ctx, p) })
		}
	case PreCreateContainer:
		if x, ok := h.(PreCreateContainerHook); ok {
			return x.PreCreateContainer
		}
	case PreStartContainer:
		if x, ok := h.(PreStartContainerHook); ok {
			return x.PreStartContainer
		}
	case PostStartContainer:
		if x, ok := h.(PostStartContainerHook); ok {
			return noAdj(x.PostStartContainer)
		}
	case PreUpdateContainerResources:
		if x, ok := h.(PreUpdateContainerResourcesHook); ok {
			return x.PreUpdateContainerResources
		}
	case PostStopContainer:
		if x, ok := h.(PostStopContainerHook); ok {
			return noAdj(x.PostStopContainer)
		}
	case PreRemoveContainer:
		if x, ok := h.(PreRemoveContainerHook); ok {
			return noAdj(x.PreRemoveContainer)
		}
	case PostRemoveContainer:
		if x, ok := h.(PostRemoveContainerHook); ok {
			return noAdj(x.PostRemoveContainer)
		}
	}
	return nil
}
