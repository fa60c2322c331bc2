package proxy

import (
	"context"
	"fmt"

	"github.com/containerd/errdefs"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/tandemkit/tandem/proxy/store"
)

// interceptors maps each lifecycle method to its handler.
func (s *Server) interceptors() map[string]interceptFn {
	const svc = "/runtime.v1.RuntimeService/"
	return map[string]interceptFn{
		svc + "RunPodSandbox":            intercept(s.runPodSandbox),
		svc + "StopPodSandbox":           intercept(s.stopPodSandbox),
		svc + "RemovePodSandbox":         intercept(s.removePodSandbox),
		svc + "CreateContainer":          intercept(s.createContainer),
		svc + "StartContainer":           intercept(s.startContainer),
		svc + "StopContainer":            intercept(s.stopContainer),
		svc + "RemoveContainer":          intercept(s.removeContainer),
		svc + "UpdateContainerResources": intercept(s.updateContainerResources),
	}
}

// intercept decodes the request into its CRI type before calling fn.
func intercept[Req any, PReq interface {
	*Req
	proto.Message
}, Resp proto.Message](fn func(context.Context, PReq, []grpc.CallOption) (Resp, error)) interceptFn {
	return func(ctx context.Context, raw []byte, opts []grpc.CallOption) (proto.Message, error) {
		req := PReq(new(Req))
		if err := proto.Unmarshal(raw, req); err != nil {
			return nil, fmt.Errorf("decode %T: %v: %w", req, err, errdefs.ErrInvalidArgument)
		}
		return fn(ctx, req, opts)
	}
}

// persist writes the checkpoint after a change. A failed write is logged and counted but does not fail
// the call: the runtime has already acted, and the store in memory is still right.
func (s *Server) persist(ctx context.Context) {
	if err := s.checkpoint.Save(s.store.Snapshot); err != nil {
		s.metrics.checkpointErrors.Inc()
		klog.FromContext(ctx).Error(err, "Checkpoint not written; a restart would rebuild from the runtime alone", "path", s.checkpoint.Path())
	}
}

// lookup returns the stored pod of a container, or nil with a log line when the store does not know it:
// such calls pass through without hooks rather than fail, since the runtime may know what the store does not.
func (s *Server) lookup(ctx context.Context, ctrID string) (context.Context, *store.Pod, *store.Container) {
	logger := klog.FromContext(ctx).WithValues("containerID", ctrID)
	ctr, ok := s.store.Container(ctrID)
	if !ok {
		logger.V(2).Info("Container unknown to the store; hooks skipped")
		return klog.NewContext(ctx, logger), nil, nil
	}
	pod, ok := s.store.Pod(ctr.PodSandboxID)
	if !ok {
		logger.V(2).Info("Container's pod sandbox unknown to the store; hooks skipped", "podSandboxID", ctr.PodSandboxID)
		return klog.NewContext(ctx, logger), nil, ctr
	}
	logger = logger.WithValues("pod", klog.KRef(pod.Namespace, pod.Name), "container", ctr.Name)
	return klog.NewContext(ctx, logger), pod, ctr
}

func (s *Server) runPodSandbox(ctx context.Context, req *runtimeapi.RunPodSandboxRequest, opts []grpc.CallOption) (*runtimeapi.RunPodSandboxResponse, error) {
	md := req.GetConfig().GetMetadata()
	logger := klog.FromContext(ctx).WithValues("pod", klog.KRef(md.GetNamespace(), md.GetName()))
	ctx = klog.NewContext(ctx, logger)
	if err := s.hooks.PreRunPodSandbox(ctx, req); err != nil {
		return nil, err
	}
	resp, err := s.rt.RunPodSandbox(ctx, req, opts...)
	if err != nil {
		return nil, err
	}
	pod := podFromConfig(resp.GetPodSandboxId(), req.GetConfig())
	pod.RuntimeHandler = req.GetRuntimeHandler()
	pod.State = runtimeapi.PodSandboxState_SANDBOX_READY.String()
	s.store.PutPod(pod)
	s.persist(ctx)
	logger.V(2).Info("Pod sandbox started", "podSandboxID", pod.ID)
	return resp, nil
}

func (s *Server) stopPodSandbox(ctx context.Context, req *runtimeapi.StopPodSandboxRequest, opts []grpc.CallOption) (*runtimeapi.StopPodSandboxResponse, error) {
	resp, err := s.rt.StopPodSandbox(ctx, req, opts...)
	if err != nil {
		return nil, err
	}
	id := req.GetPodSandboxId()
	known := s.store.UpdatePod(id, func(p *store.Pod) { p.State = runtimeapi.PodSandboxState_SANDBOX_NOTREADY.String() })
	// Stopping a sandbox stops its containers.
	for _, c := range s.store.Snapshot().Containers {
		if c.PodSandboxID == id && c.State != runtimeapi.ContainerState_CONTAINER_EXITED.String() {
			s.store.UpdateContainer(c.ID, func(c *store.Container) { c.State = runtimeapi.ContainerState_CONTAINER_EXITED.String() })
		}
	}
	if !known {
		klog.FromContext(ctx).V(2).Info("Stopped pod sandbox unknown to the store", "podSandboxID", id)
		return resp, nil
	}
	s.persist(ctx)
	if pod, ok := s.store.Pod(id); ok {
		logger := klog.FromContext(ctx).WithValues("pod", klog.KRef(pod.Namespace, pod.Name))
		if err := s.hooks.PostStopPodSandbox(klog.NewContext(ctx, logger), pod); err != nil {
			logger.Error(err, "Post-stop hook failed; the sandbox is stopped regardless")
		}
		logger.V(2).Info("Pod sandbox stopped", "podSandboxID", id)
	}
	return resp, nil
}

func (s *Server) removePodSandbox(ctx context.Context, req *runtimeapi.RemovePodSandboxRequest, opts []grpc.CallOption) (*runtimeapi.RemovePodSandboxResponse, error) {
	resp, err := s.rt.RemovePodSandbox(ctx, req, opts...)
	if err != nil {
		return nil, err
	}
	pod, removed := s.store.RemovePod(req.GetPodSandboxId())
	for _, c := range removed {
		s.hooks.ContainerReleased(ctx, c)
	}
	if pod != nil || len(removed) > 0 {
		s.persist(ctx)
	}
	if pod != nil {
		klog.FromContext(ctx).V(2).Info("Pod sandbox removed", "pod", klog.KRef(pod.Namespace, pod.Name), "podSandboxID", pod.ID, "releasedContainers", len(removed))
	}
	return resp, nil
}

func (s *Server) createContainer(ctx context.Context, req *runtimeapi.CreateContainerRequest, opts []grpc.CallOption) (*runtimeapi.CreateContainerResponse, error) {
	logger := klog.FromContext(ctx).WithValues("container", req.GetConfig().GetMetadata().GetName())
	pod, known := s.store.Pod(req.GetPodSandboxId())
	if known {
		logger = logger.WithValues("pod", klog.KRef(pod.Namespace, pod.Name))
		ctx = klog.NewContext(ctx, logger)
		if err := s.hooks.PreCreateContainer(ctx, pod, req); err != nil {
			return nil, err
		}
	} else {
		logger.Info("Pod sandbox unknown to the store; container passed through without hooks", "podSandboxID", req.GetPodSandboxId())
		ctx = klog.NewContext(ctx, logger)
	}
	resp, err := s.rt.CreateContainer(ctx, req, opts...)
	if err != nil {
		if known {
			s.hooks.CreateContainerFailed(ctx, pod, req)
		}
		return nil, err
	}
	ctr := containerFromConfig(resp.GetContainerId(), req.GetPodSandboxId(), req.GetConfig())
	ctr.State = runtimeapi.ContainerState_CONTAINER_CREATED.String()
	s.store.PutContainer(ctr)
	s.persist(ctx)
	logger.V(2).Info("Container created", "containerID", ctr.ID, "resources", ctr.Resources)
	return resp, nil
}

func (s *Server) startContainer(ctx context.Context, req *runtimeapi.StartContainerRequest, opts []grpc.CallOption) (*runtimeapi.StartContainerResponse, error) {
	ctx, pod, ctr := s.lookup(ctx, req.GetContainerId())
	if pod != nil {
		if err := s.hooks.PreStartContainer(ctx, pod, ctr); err != nil {
			return nil, err
		}
	}
	resp, err := s.rt.StartContainer(ctx, req, opts...)
	if err != nil {
		return nil, err
	}
	if ctr != nil {
		s.store.UpdateContainer(ctr.ID, func(c *store.Container) { c.State = runtimeapi.ContainerState_CONTAINER_RUNNING.String() })
		s.persist(ctx)
		ctr.State = runtimeapi.ContainerState_CONTAINER_RUNNING.String()
	}
	if pod != nil {
		if err := s.hooks.PostStartContainer(ctx, pod, ctr); err != nil {
			klog.FromContext(ctx).Error(err, "Post-start hook failed; the container runs regardless")
		}
	}
	klog.FromContext(ctx).V(2).Info("Container started")
	return resp, nil
}

func (s *Server) stopContainer(ctx context.Context, req *runtimeapi.StopContainerRequest, opts []grpc.CallOption) (*runtimeapi.StopContainerResponse, error) {
	ctx, pod, ctr := s.lookup(ctx, req.GetContainerId())
	resp, err := s.rt.StopContainer(ctx, req, opts...)
	if err != nil {
		return nil, err
	}
	if ctr != nil {
		s.store.UpdateContainer(ctr.ID, func(c *store.Container) { c.State = runtimeapi.ContainerState_CONTAINER_EXITED.String() })
		s.persist(ctx)
		ctr.State = runtimeapi.ContainerState_CONTAINER_EXITED.String()
	}
	if pod != nil {
		if err := s.hooks.PostStopContainer(ctx, pod, ctr); err != nil {
			klog.FromContext(ctx).Error(err, "Post-stop hook failed; the container is stopped regardless")
		}
	}
	klog.FromContext(ctx).V(2).Info("Container stopped")
	return resp, nil
}

func (s *Server) removeContainer(ctx context.Context, req *runtimeapi.RemoveContainerRequest, opts []grpc.CallOption) (*runtimeapi.RemoveContainerResponse, error) {
	ctx, pod, ctr := s.lookup(ctx, req.GetContainerId())
	if pod != nil {
		if err := s.hooks.PreRemoveContainer(ctx, pod, ctr); err != nil {
			return nil, err
		}
	}
	resp, err := s.rt.RemoveContainer(ctx, req, opts...)
	if err != nil {
		return nil, err
	}
	if removed, ok := s.store.RemoveContainer(req.GetContainerId()); ok {
		s.hooks.ContainerReleased(ctx, removed)
		s.persist(ctx)
	}
	klog.FromContext(ctx).V(2).Info("Container removed")
	return resp, nil
}

func (s *Server) updateContainerResources(ctx context.Context, req *runtimeapi.UpdateContainerResourcesRequest, opts []grpc.CallOption) (*runtimeapi.UpdateContainerResourcesResponse, error) {
	ctx, pod, ctr := s.lookup(ctx, req.GetContainerId())
	if pod != nil {
		if err := s.hooks.PreUpdateContainerResources(ctx, pod, ctr, req); err != nil {
			return nil, err
		}
	}
	// Always forwarded: kubelet's in-place resize depends on its update reaching the runtime.
	resp, err := s.rt.UpdateContainerResources(ctx, req, opts...)
	if err != nil {
		return nil, err
	}
	if ctr != nil && req.GetLinux() != nil {
		applied := resourcesFromCRI(req.GetLinux())
		s.store.UpdateContainer(ctr.ID, func(c *store.Container) { c.Resources = applied })
		s.persist(ctx)
		klog.FromContext(ctx).V(2).Info("Container resources updated", "resources", applied)
	}
	return resp, nil
}
