package proxy

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/tandemkit/tandem/proxy/store"
)

// Hooks is the seam where policies see and adjust the lifecycle calls. The proxy calls it around each
// intercepted RPC; the hook framework implements it by dispatching to in-process and remote hooks.
//
// Pre methods run before the call is forwarded and may modify the request in place; an error fails the
// call with that error and nothing is forwarded. Post methods run after the runtime succeeded; their
// errors are logged, never returned, because the runtime has already acted. Every method must be
// idempotent: after a proxy restart the same container may be seen again.
type Hooks interface {
	PreRunPodSandbox(ctx context.Context, req *runtimeapi.RunPodSandboxRequest) error
	PostStopPodSandbox(ctx context.Context, pod *store.Pod) error
	PreCreateContainer(ctx context.Context, pod *store.Pod, req *runtimeapi.CreateContainerRequest) error
	// CreateContainerFailed lets a hook release what PreCreateContainer reserved when the runtime then
	// refused the container.
	CreateContainerFailed(ctx context.Context, pod *store.Pod, req *runtimeapi.CreateContainerRequest)
	PreStartContainer(ctx context.Context, pod *store.Pod, ctr *store.Container) error
	PostStartContainer(ctx context.Context, pod *store.Pod, ctr *store.Container) error
	PostStopContainer(ctx context.Context, pod *store.Pod, ctr *store.Container) error
	PreRemoveContainer(ctx context.Context, pod *store.Pod, ctr *store.Container) error
	// PreUpdateContainerResources may merge policy into kubelet's update; it must not drop kubelet's
	// fields, which in-place pod resize depends on.
	PreUpdateContainerResources(ctx context.Context, pod *store.Pod, ctr *store.Container, req *runtimeapi.UpdateContainerResourcesRequest) error
	// ContainerReleased is called once for each container the proxy forgets, whether it was removed
	// through the proxy or found gone from the runtime.
	ContainerReleased(ctx context.Context, ctr *store.Container)
}

// NopHooks changes nothing. It is what tandem-proxy runs with until policies are configured.
type NopHooks struct{}

var _ Hooks = NopHooks{}

func (NopHooks) PreRunPodSandbox(context.Context, *runtimeapi.RunPodSandboxRequest) error { return nil }
func (NopHooks) PostStopPodSandbox(context.Context, *store.Pod) error                     { return nil }
func (NopHooks) PreCreateContainer(context.Context, *store.Pod, *runtimeapi.CreateContainerRequest) error {
	return nil
}
func (NopHooks) CreateContainerFailed(context.Context, *store.Pod, *runtimeapi.CreateContainerRequest) {
}
func (NopHooks) PreStartContainer(context.Context, *store.Pod, *store.Container) error  { return nil }
func (NopHooks) PostStartContainer(context.Context, *store.Pod, *store.Container) error { return nil }
func (NopHooks) PostStopContainer(context.Context, *store.Pod, *store.Container) error  { return nil }
func (NopHooks) PreRemoveContainer(context.Context, *store.Pod, *store.Container) error { return nil }
func (NopHooks) PreUpdateContainerResources(context.Context, *store.Pod, *store.Container, *runtimeapi.UpdateContainerResourcesRequest) error {
	return nil
}
func (NopHooks) ContainerReleased(context.Context, *store.Container) {}
