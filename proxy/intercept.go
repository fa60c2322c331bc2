package proxy

import (
	"context"
	"fmt"

	"github.com/containerd/errdefs"
	"google.golang.org/grpc"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/tandemkit/tandem/hooks"
	"github.com/tandemkit/tandem/store"
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

// intercept decodes the request into its CRI type, and frees it, before calling fn.
func intercept[Req any, PReq interface {
	*Req
	proto.Message
}, Resp proto.Message](fn func(context.Context, PReq, []grpc.CallOption) (Resp, error)) interceptFn {
	return func(ctx context.Context, raw mem.Buffer, opts []grpc.CallOption) (proto.Message, error) {
		req := PReq(new(Req))
		// The decoded request copies what it keeps, so raw can go back to the pool at once.
		err := proto.Unmarshal(raw.ReadOnlyData(), req)
		raw.Free()
		if err != nil {
			return nil, fmt.Errorf("decode %T: %w: %w", req, err, errdefs.ErrInvalidArgument)
		}
		return fn(ctx, req, opts)
	}
}

// checkMetadata refuses a pod (ctr empty) or a container whose labels and annotations exceed
// MaxPodMetadataBytes. The runtime keeps them, sends them back in every listing kubelet and the proxy
// make (16 MiB for the whole node), and the proxy keeps and checkpoints them: a few such pods would fail
// ListPodSandbox for every caller.
func (s *Server) checkMetadata(namespace, pod, ctr string, labels, annotations map[string]string) error {
	n := hooks.MetadataBytes(labels, annotations)
	if n <= s.cfg.MaxPodMetadataBytes {
		return nil
	}
	what := "pod " + namespace + "/" + pod
	if ctr != "" {
		what += " container " + ctr
	}
	return fmt.Errorf("%s: labels and annotations take %d bytes, above the %d tandem-proxy accepts "+
		"(max-pod-metadata-bytes; the API server allows a pod %d bytes of annotations); remove large annotations: %w",
		what, n, s.cfg.MaxPodMetadataBytes, apivalidation.TotalAnnotationSizeLimitB, errdefs.ErrInvalidArgument)
}

// runHooks runs a stage's hooks; without a dispatcher nothing runs.
func (s *Server) runHooks(ctx context.Context, stage hooks.Stage, pod *hooks.PodInfo, ctr *hooks.ContainerInfo) (*hooks.Adjustment, error) {
	if s.hooks == nil {
		return nil, nil
	}
	// Kubelet's metadata is for the runtime, not for hook servers.
	return s.hooks.Run(metadata.NewOutgoingContext(ctx, nil), stage, pod, ctr)
}

// orStub returns pod, or a stand-in carrying only the sandbox id when the store no longer knows the pod,
// so that release hooks still run.
func orStub(pod *store.Pod, podID string) *store.Pod {
	if pod != nil {
		return pod
	}
	return &store.Pod{ID: podID}
}

func (s *Server) rollback(ctx context.Context, stage hooks.Stage, pod *hooks.PodInfo, ctr *hooks.ContainerInfo) {
	if s.hooks != nil {
		s.hooks.Rollback(ctx, stage, pod, ctr)
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

// lookup returns the stored pod and container: calls for containers the store does not know pass
// through without hooks rather than fail, since the runtime may know what the store does not.
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

// postHooks runs a post stage; its failures are logged by the dispatcher and never fail the call.
func (s *Server) postHooks(ctx context.Context, stage hooks.Stage, pod *store.Pod, ctr *store.Container) {
	if pod == nil {
		return
	}
	var ci *hooks.ContainerInfo
	if ctr != nil {
		ci = ctr.HookInfo()
	}
	_, _ = s.runHooks(ctx, stage, pod.HookInfo(), ci)
}

func (s *Server) runPodSandbox(ctx context.Context, req *runtimeapi.RunPodSandboxRequest, opts []grpc.CallOption) (*runtimeapi.RunPodSandboxResponse, error) {
	md := req.GetConfig().GetMetadata()
	logger := klog.FromContext(ctx).WithValues("pod", klog.KRef(md.GetNamespace(), md.GetName()))
	ctx = klog.NewContext(ctx, logger)
	if req.Config == nil {
		req.Config = &runtimeapi.PodSandboxConfig{}
	}
	if err := s.checkMetadata(md.GetNamespace(), md.GetName(), "", req.Config.GetLabels(), req.Config.GetAnnotations()); err != nil {
		return nil, err
	}
	info := sandboxInfo(req)
	adj, err := s.runHooks(ctx, hooks.PreRunPodSandbox, info, nil)
	if err != nil {
		return nil, err
	}
	applySandbox(req.Config, adj)
	resp, err := s.rt.RunPodSandbox(ctx, req, opts...)
	if err != nil {
		s.rollback(ctx, hooks.PreRunPodSandbox, info, nil)
		return nil, err
	}
	pod := podFromConfig(resp.GetPodSandboxId(), req.GetConfig())
	pod.RuntimeHandler = req.GetRuntimeHandler()
	pod.State = store.PodReady
	s.store.PutPod(pod)
	s.writer.PodResources(ctx, pod, adj)
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
	known := s.store.UpdatePod(id, func(p *store.Pod) { p.State = store.PodNotReady })
	if !known {
		klog.FromContext(ctx).V(2).Info("Stopped pod sandbox unknown to the store", "podSandboxID", id)
		return resp, nil
	}
	// Stopping a sandbox stops its containers.
	s.store.UpdatePodContainers(id, func(c *store.Container) { c.State = store.ContainerExited })
	s.persist(ctx)
	if pod, ok := s.store.Pod(id); ok {
		ctx = klog.NewContext(ctx, klog.FromContext(ctx).WithValues("pod", klog.KRef(pod.Namespace, pod.Name)))
		s.postHooks(ctx, hooks.PostStopPodSandbox, pod, nil)
		klog.FromContext(ctx).V(2).Info("Pod sandbox stopped", "podSandboxID", id)
	}
	return resp, nil
}

func (s *Server) removePodSandbox(ctx context.Context, req *runtimeapi.RemovePodSandboxRequest, opts []grpc.CallOption) (*runtimeapi.RemovePodSandboxResponse, error) {
	resp, err := s.rt.RemovePodSandbox(ctx, req, opts...)
	if err != nil {
		return nil, err
	}
	pod, removed := s.store.RemovePod(req.GetPodSandboxId())
	if pod != nil || len(removed) > 0 {
		s.persist(ctx)
	}
	for _, c := range removed {
		s.ctrLocks.Forget(c.ID)
	}
	for _, c := range removed {
		s.postHooks(ctx, hooks.PostRemoveContainer, orStub(pod, c.PodSandboxID), c)
	}
	if pod != nil {
		klog.FromContext(ctx).V(2).Info("Pod sandbox removed", "pod", klog.KRef(pod.Namespace, pod.Name), "podSandboxID", pod.ID, "releasedContainers", len(removed))
	}
	return resp, nil
}

func (s *Server) createContainer(ctx context.Context, req *runtimeapi.CreateContainerRequest, opts []grpc.CallOption) (*runtimeapi.CreateContainerResponse, error) {
	name := req.GetConfig().GetMetadata().GetName()
	logger := klog.FromContext(ctx).WithValues("container", name)
	pod, known := s.store.Pod(req.GetPodSandboxId())
	ns, podName := req.GetSandboxConfig().GetMetadata().GetNamespace(), req.GetSandboxConfig().GetMetadata().GetName()
	if known {
		ns, podName = pod.Namespace, pod.Name
	}
	if err := s.checkMetadata(ns, podName, name, req.GetConfig().GetLabels(), req.GetConfig().GetAnnotations()); err != nil {
		return nil, err
	}
	// The request's resources in the hooks' shape, converted once: the hooks see them, and the store
	// records them with the hooks' adjustment applied, which also goes into the request once.
	resources := resourcesFromCRI(req.GetConfig().GetLinux().GetResources())
	var adj *hooks.Adjustment
	var pi *hooks.PodInfo
	var ci *hooks.ContainerInfo
	if known {
		logger = logger.WithValues("pod", klog.KRef(pod.Namespace, pod.Name))
		ctx = klog.NewContext(ctx, logger)
		if req.Config == nil {
			req.Config = &runtimeapi.ContainerConfig{}
		}
		pi, ci = pod.HookInfo(), containerInfo("", req.Config, resources)
		var err error
		if adj, err = s.runHooks(ctx, hooks.PreCreateContainer, pi, ci); err != nil {
			return nil, err
		}
		applyContainer(req.Config, adj)
		if adj != nil && adj.Resources != nil {
			resources = hooks.ApplyResources(resources, adj.Resources)
		}
		// Files runc would refuse leave the request; resources keeps them, for the start to write.
		s.unsentFiles(req.Config.GetLinux().GetResources())
	} else {
		logger.Info("Pod sandbox unknown to the store; container passed through without hooks", "podSandboxID", req.GetPodSandboxId())
		ctx = klog.NewContext(ctx, logger)
	}
	resp, err := s.rt.CreateContainer(ctx, req, opts...)
	if err != nil {
		if known {
			// What the hooks reserved for this container (exclusive CPUs) goes back.
			s.rollback(ctx, hooks.PreCreateContainer, pi, ci)
		}
		return nil, err
	}
	// The record holds what the runtime could not take (v1 files, the RDT class): the start applies it.
	ctr := containerFromConfig(resp.GetContainerId(), req.GetPodSandboxId(), req.GetConfig(), resources)
	ctr.State = store.ContainerCreated
	s.store.PutContainer(ctr)
	if known {
		s.writer.PodResources(ctx, pod, adj)
	}
	s.persist(ctx)
	logger.V(2).Info("Container created", "containerID", ctr.ID, "resources", ctr.Resources)
	return resp, nil
}

func (s *Server) startContainer(ctx context.Context, req *runtimeapi.StartContainerRequest, opts []grpc.CallOption) (*runtimeapi.StartContainerResponse, error) {
	defer s.ctrLocks.Lock(req.GetContainerId())()
	ctx, pod, ctr := s.lookup(ctx, req.GetContainerId())
	if pod != nil {
		adj, err := s.runHooks(ctx, hooks.PreStartContainer, pod.HookInfo(), ctr.HookInfo())
		if err != nil {
			return nil, err
		}
		if adj != nil && adj.Resources != nil {
			// CRI's StartContainer carries no resources: a pre-start change reaches the runtime as an update.
			upd := &runtimeapi.UpdateContainerResourcesRequest{ContainerId: ctr.ID, Linux: adjusted(ctr.Resources, adj.Resources)}
			if _, err := s.update(ctx, pod, ctr, upd, adj.Resources, opts); err != nil {
				return nil, err
			}
		}
		s.writer.PodResources(ctx, pod, adj)
	}
	resp, err := s.rt.StartContainer(ctx, req, opts...)
	if err != nil {
		return nil, err
	}
	if ctr != nil {
		s.store.UpdateContainer(ctr.ID, func(c *store.Container) { c.State = store.ContainerRunning })
		s.persist(ctx)
		if c, ok := s.store.Container(ctr.ID); ok && pod != nil {
			s.writer.ContainerResources(ctx, pod, c.ID, c.Resources)
			s.postHooks(ctx, hooks.PostStartContainer, pod, c)
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
		s.store.UpdateContainer(ctr.ID, func(c *store.Container) { c.State = store.ContainerExited })
		s.persist(ctx)
		ctr.State = store.ContainerExited
		s.postHooks(ctx, hooks.PostStopContainer, pod, ctr)
	}
	klog.FromContext(ctx).V(2).Info("Container stopped")
	return resp, nil
}

func (s *Server) removeContainer(ctx context.Context, req *runtimeapi.RemoveContainerRequest, opts []grpc.CallOption) (*runtimeapi.RemoveContainerResponse, error) {
	ctx, pod, ctr := s.lookup(ctx, req.GetContainerId())
	if pod != nil {
		if _, err := s.runHooks(ctx, hooks.PreRemoveContainer, pod.HookInfo(), ctr.HookInfo()); err != nil {
			return nil, err
		}
	}
	resp, err := s.rt.RemoveContainer(ctx, req, opts...)
	if err != nil {
		return nil, err
	}
	s.ctrLocks.Forget(req.GetContainerId())
	if removed, ok := s.store.RemoveContainer(req.GetContainerId()); ok {
		s.persist(ctx)
		s.postHooks(ctx, hooks.PostRemoveContainer, orStub(pod, removed.PodSandboxID), removed)
	}
	klog.FromContext(ctx).V(2).Info("Container removed")
	return resp, nil
}

func (s *Server) updateContainerResources(ctx context.Context, req *runtimeapi.UpdateContainerResourcesRequest, opts []grpc.CallOption) (*runtimeapi.UpdateContainerResourcesResponse, error) {
	defer s.ctrLocks.Lock(req.GetContainerId())()
	ctx, pod, ctr := s.lookup(ctx, req.GetContainerId())
	var a *hooks.ResourceAdjustment
	if pod != nil {
		ci := ctr.HookInfo()
		ci.Resources = resourcesFromCRI(req.GetLinux())
		adj, err := s.runHooks(ctx, hooks.PreUpdateContainerResources, pod.HookInfo(), ci)
		if err != nil {
			return nil, err
		}
		if adj != nil && adj.Resources != nil {
			a = adj.Resources
			if req.Linux == nil {
				req.Linux = &runtimeapi.LinuxContainerResources{}
			}
			applyResources(req.Linux, a)
		}
		s.writer.PodResources(ctx, pod, adj)
	}
	// Always forwarded: kubelet's in-place resize depends on its update reaching the runtime.
	if ctr == nil {
		return s.rt.UpdateContainerResources(ctx, req, opts...)
	}
	resp, err := s.update(ctx, pod, ctr, req, a, opts)
	if err != nil {
		return nil, err
	}
	if req.GetLinux() != nil {
		s.persist(ctx)
		klog.FromContext(ctx).V(2).Info("Container resources updated", "resources", req.GetLinux())
	}
	return resp, nil
}

// StopPodSandbox stops a pod on the proxy's own behalf, as if kubelet had asked: the runtime stops it,
// the store and the post-stop hooks see it. The node loops use it to evict when no API server is there.
func (s *Server) StopPodSandbox(ctx context.Context, id string) error {
	logger := klog.FromContext(ctx).WithValues("rpc", "StopPodSandbox", "podSandboxID", id)
	_, err := s.stopPodSandbox(klog.NewContext(ctx, logger), &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}, nil)
	return err
}
