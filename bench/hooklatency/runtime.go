package main

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/tandemkit/tandem/hooks/remote/v1alpha1"
)

// stubRuntime is the container runtime behind the measured proxies. It is a stub on purpose: containerd
// takes some 50 ms per CreateContainer, which would drown the microseconds that hooks add (the e2e
// test TestHooksRemoteServer covers the same path against real containerd). It answers the calls the
// proxy makes at once, and keeps its pods and containers so that the proxy's reconcile with it sees
// what the proxy created, as with a real runtime.
type stubRuntime struct {
	runtimeapi.UnimplementedRuntimeServiceServer

	mu         sync.Mutex
	next       int
	pods       map[string]*runtimeapi.PodSandbox
	containers map[string]*runtimeapi.Container
}

func newStubRuntime() *stubRuntime {
	return &stubRuntime{pods: map[string]*runtimeapi.PodSandbox{}, containers: map[string]*runtimeapi.Container{}}
}

// id returns a runtime-style 64-hex-digit id.
func (r *stubRuntime) id() string {
	r.next++
	return fmt.Sprintf("%064x", r.next)
}

func (r *stubRuntime) Version(context.Context, *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	return &runtimeapi.VersionResponse{Version: "0.1.0", RuntimeName: "hooklatency-stub", RuntimeVersion: "0", RuntimeApiVersion: "v1"}, nil
}

func (r *stubRuntime) RunPodSandbox(_ context.Context, req *runtimeapi.RunPodSandboxRequest) (*runtimeapi.RunPodSandboxResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	id := r.id()
	cfg := req.GetConfig()
	r.pods[id] = &runtimeapi.PodSandbox{Id: id, Metadata: cfg.GetMetadata(), State: runtimeapi.PodSandboxState_SANDBOX_READY,
		CreatedAt: time.Now().UnixNano(), Labels: cfg.GetLabels(), Annotations: cfg.GetAnnotations()}
	return &runtimeapi.RunPodSandboxResponse{PodSandboxId: id}, nil
}

func (r *stubRuntime) StopPodSandbox(_ context.Context, req *runtimeapi.StopPodSandboxRequest) (*runtimeapi.StopPodSandboxResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if p, ok := r.pods[req.GetPodSandboxId()]; ok {
		p.State = runtimeapi.PodSandboxState_SANDBOX_NOTREADY
	}
	return &runtimeapi.StopPodSandboxResponse{}, nil
}

func (r *stubRuntime) RemovePodSandbox(_ context.Context, req *runtimeapi.RemovePodSandboxRequest) (*runtimeapi.RemovePodSandboxResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.pods, req.GetPodSandboxId())
	for id, c := range r.containers {
		if c.GetPodSandboxId() == req.GetPodSandboxId() {
			delete(r.containers, id)
		}
	}
	return &runtimeapi.RemovePodSandboxResponse{}, nil
}

func (r *stubRuntime) PodSandboxStatus(_ context.Context, req *runtimeapi.PodSandboxStatusRequest) (*runtimeapi.PodSandboxStatusResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, ok := r.pods[req.GetPodSandboxId()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "pod sandbox %s not found", req.GetPodSandboxId())
	}
	return &runtimeapi.PodSandboxStatusResponse{Status: &runtimeapi.PodSandboxStatus{Id: p.Id, Metadata: p.Metadata, State: p.State,
		CreatedAt: p.CreatedAt, Labels: p.Labels, Annotations: p.Annotations}}, nil
}

func (r *stubRuntime) ListPodSandbox(context.Context, *runtimeapi.ListPodSandboxRequest) (*runtimeapi.ListPodSandboxResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := &runtimeapi.ListPodSandboxResponse{}
	for _, p := range r.pods {
		out.Items = append(out.Items, p)
	}
	return out, nil
}

func (r *stubRuntime) CreateContainer(_ context.Context, req *runtimeapi.CreateContainerRequest) (*runtimeapi.CreateContainerResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.pods[req.GetPodSandboxId()]; !ok {
		return nil, status.Errorf(codes.NotFound, "pod sandbox %s not found", req.GetPodSandboxId())
	}
	id := r.id()
	cfg := req.GetConfig()
	r.containers[id] = &runtimeapi.Container{Id: id, PodSandboxId: req.GetPodSandboxId(), Metadata: cfg.GetMetadata(),
		Image: cfg.GetImage(), ImageRef: cfg.GetImage().GetImage(), State: runtimeapi.ContainerState_CONTAINER_CREATED,
		CreatedAt: time.Now().UnixNano(), Labels: cfg.GetLabels(), Annotations: cfg.GetAnnotations()}
	return &runtimeapi.CreateContainerResponse{ContainerId: id}, nil
}

func (r *stubRuntime) RemoveContainer(_ context.Context, req *runtimeapi.RemoveContainerRequest) (*runtimeapi.RemoveContainerResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.containers, req.GetContainerId())
	return &runtimeapi.RemoveContainerResponse{}, nil
}

func (r *stubRuntime) ContainerStatus(_ context.Context, req *runtimeapi.ContainerStatusRequest) (*runtimeapi.ContainerStatusResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.containers[req.GetContainerId()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "container %s not found", req.GetContainerId())
	}
	return &runtimeapi.ContainerStatusResponse{Status: &runtimeapi.ContainerStatus{Id: c.Id, Metadata: c.Metadata, State: c.State,
		CreatedAt: c.CreatedAt, Image: c.Image, ImageRef: c.ImageRef, Labels: c.Labels, Annotations: c.Annotations}}, nil
}

func (r *stubRuntime) ListContainers(context.Context, *runtimeapi.ListContainersRequest) (*runtimeapi.ListContainersResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := &runtimeapi.ListContainersResponse{}
	for _, c := range r.containers {
		out.Containers = append(out.Containers, c)
	}
	return out, nil
}

// hookServer is the remote hook server of the benchmark: it answers PreCreateContainerHook with one
// change, as a small real policy does, and no more, so its own time is the protocol's.
type hookServer struct {
	v1alpha1.UnimplementedRuntimeHookServiceServer
}

func (hookServer) PreCreateContainerHook(context.Context, *v1alpha1.ContainerResourceHookRequest) (*v1alpha1.ContainerResourceHookResponse, error) {
	return &v1alpha1.ContainerResourceHookResponse{ContainerResources: &v1alpha1.LinuxContainerResources{CpuShares: 512}}, nil
}

// relay is a gRPC server whose handler makes the bare hook call (or none) while its caller waits: the
// floor of what calling a hook server costs any gRPC proxy.
type relay struct {
	v1alpha1.UnimplementedRuntimeHookServiceServer
	hook v1alpha1.RuntimeHookServiceClient // nil answers at once
}

func (r relay) PreCreateContainerHook(ctx context.Context, req *v1alpha1.ContainerResourceHookRequest) (*v1alpha1.ContainerResourceHookResponse, error) {
	if r.hook != nil {
		if _, err := r.hook.PreCreateContainerHook(ctx, req); err != nil {
			return nil, err
		}
	}
	return &v1alpha1.ContainerResourceHookResponse{}, nil
}

func registerHookServer(s *grpc.Server) { v1alpha1.RegisterRuntimeHookServiceServer(s, hookServer{}) }

// serveUnix serves the services that register adds on a unix socket at path; the returned func stops it.
func serveUnix(ctx context.Context, path string, register func(*grpc.Server)) (func(), error) {
	var lc net.ListenConfig
	lis, err := lc.Listen(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	srv := grpc.NewServer()
	register(srv)
	go func() { _ = srv.Serve(lis) }()
	return srv.Stop, nil
}
