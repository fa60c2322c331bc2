package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/tandemkit/tandem/frontend"
	"github.com/tandemkit/tandem/hooks"
	builtinpolicy "github.com/tandemkit/tandem/hooks/policy"
	"github.com/tandemkit/tandem/hooks/remote"
	"github.com/tandemkit/tandem/hooks/remote/v1alpha1"
	"github.com/tandemkit/tandem/proxy"
	"github.com/tandemkit/tandem/resource/cgroup"
	alloc "github.com/tandemkit/tandem/resource/cpuset"
	"github.com/tandemkit/tandem/resource/topology"
)

// remoteDispatcher has one remote hook, the hook server on conn, at PreCreateContainer. Its failure
// policy is Fail, so that a broken hook server stops the run instead of being measured as a fast no-op.
func remoteDispatcher(ctx context.Context, conn *remote.Conn, reg prometheus.Registerer) (*hooks.Dispatcher, error) {
	d, err := hooks.NewDispatcher(ctx, nil, reg)
	if err != nil {
		return nil, err
	}
	hook := hooks.Registration{Name: "bench-remote", Order: 5000, FailurePolicy: hooks.Fail, Stages: []hooks.Stage{hooks.PreCreateContainer},
		New: func() (hooks.Hook, error) { return remote.NewClient("bench-remote", conn), nil }}
	if err := d.SetRemote(ctx, []hooks.Registration{hook}); err != nil {
		return nil, err
	}
	return d, nil
}

// meanHookSeconds is the mean of tandem_hook_duration_seconds in reg, in microseconds.
func meanHookSeconds(reg *prometheus.Registry) (float64, error) {
	mfs, err := reg.Gather()
	if err != nil {
		return 0, fmt.Errorf("read the hook metrics: %w", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "tandem_hook_duration_seconds" {
			continue
		}
		var sum float64
		var n uint64
		for _, m := range mf.GetMetric() {
			sum += m.GetHistogram().GetSampleSum()
			n += m.GetHistogram().GetSampleCount()
		}
		if n > 0 {
			return sum / float64(n) * 1e6, nil
		}
	}
	return 0, errors.New("tandem_hook_duration_seconds has no samples: the remote hook never ran in its proxy")
}

// dispatchOnce runs PreCreateContainer on d for the benchmark's pod and container, as the proxy would; the
// hooks must set CPU shares.
func dispatchOnce(d *hooks.Dispatcher) func(context.Context) (time.Duration, error) {
	sb, ctr := sandboxConfig(), containerConfig()
	r := ctr.GetLinux().GetResources()
	pod := &hooks.PodInfo{Name: sb.GetMetadata().GetName(), Namespace: sb.GetMetadata().GetNamespace(), UID: sb.GetMetadata().GetUid(),
		Labels: sb.GetLabels(), Annotations: sb.GetAnnotations(), CgroupParent: sb.GetLinux().GetCgroupParent()}
	ci := &hooks.ContainerInfo{Name: ctr.GetMetadata().GetName(), Labels: ctr.GetLabels(), Annotations: ctr.GetAnnotations(),
		Env:       map[string]string{"PATH": pathEnv},
		Resources: &hooks.Resources{CPUPeriod: r.GetCpuPeriod(), CPUShares: r.GetCpuShares(), OomScoreAdj: r.GetOomScoreAdj()}}
	return func(ctx context.Context) (time.Duration, error) {
		start := time.Now()
		adj, err := d.Run(ctx, hooks.PreCreateContainer, pod, ci)
		took := time.Since(start)
		if err == nil && (adj == nil || adj.Resources == nil || adj.Resources.CPUShares == nil) {
			err = errors.New("the hooks' answer was lost")
		}
		return took, err
	}
}

// kubeletShares is what kubelet asks for a container without CPU requests.
const kubeletShares = 2

// policy changes one field of its own, as Tandem's policies do, so five of them merge without conflict.
type policy struct {
	name string
	adj  *hooks.Adjustment
}

var _ hooks.PreCreateContainerHook = policy{}

func (p policy) Name() string { return p.name }

func (p policy) PreCreateContainer(context.Context, *hooks.PodInfo, *hooks.ContainerInfo) (*hooks.Adjustment, error) {
	return p.adj, nil
}

// policies returns the first n of five in-process hooks, in order 100, 200, ….
func policies(n int) []hooks.Registration {
	adjs := []*hooks.Adjustment{
		{Resources: &hooks.ResourceAdjustment{CPUShares: hooks.Int64(512)}},
		{Resources: &hooks.ResourceAdjustment{CpusetCpus: hooks.String("0")}},
		{Resources: &hooks.ResourceAdjustment{CPUQuota: hooks.Int64(200000)}},
		{Resources: &hooks.ResourceAdjustment{MemoryLimitInBytes: hooks.Int64(1 << 30)}},
		{Annotations: map[string]string{"tandem.io/qos": "LS"}},
	}
	regs := make([]hooks.Registration, 0, n)
	for i := range n {
		p := policy{name: fmt.Sprintf("policy%d", i+1), adj: adjs[i]}
		regs = append(regs, hooks.Registration{Name: p.name, Order: 100 * (i + 1), New: func() (hooks.Hook, error) { return p, nil }})
	}
	return regs
}

// proxyTarget is a proxy to time, with one pod to create containers in; srv is set where the proxy runs
// in this process.
type proxyTarget struct {
	srv   *proxy.Server
	rs    runtimeapi.RuntimeServiceClient
	req   *runtimeapi.CreateContainerRequest
	podID string
}

// startProxyAt starts a proxy with dispatcher d on sock, in front of the runtime on rtSock, with its
// state in stateDir, and runs a pod through it. The returned func stops it.
func startProxyAt(ctx context.Context, sock, rtSock, stateDir, name string, d *hooks.Dispatcher) (*proxyTarget, func(), error) {
	var stops []func()
	stop := func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	cfg := proxy.DefaultConfig()
	cfg.Listen = sock
	cfg.RuntimeEndpoint = "unix://" + rtSock
	cfg.StateDir = stateDir
	srv, err := proxy.New(cfg, frontend.Deps{Hooks: d})
	if err != nil {
		return nil, nil, err
	}
	stops = append(stops, func() { _ = srv.Close() })
	if err := srv.Recover(ctx); err != nil {
		stop()
		return nil, nil, err
	}
	lis, err := proxy.Listen(ctx, cfg)
	if err != nil {
		stop()
		return nil, nil, err
	}
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(sctx, lis); err != nil {
			klog.FromContext(ctx).Error(err, "Proxy stopped", "variant", name)
		}
	}()
	stops = append(stops, func() { cancel(); <-done })
	t, closeClient, err := dialProxy(ctx, sock)
	if err != nil {
		stop()
		return nil, nil, err
	}
	stops = append(stops, closeClient)
	t.srv = srv
	return t, stop, nil
}

// dialProxy connects to the proxy on sock, as kubelet does, and runs a pod through it.
func dialProxy(ctx context.Context, sock string) (*proxyTarget, func(), error) {
	cc, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, nil, err
	}
	t := &proxyTarget{rs: runtimeapi.NewRuntimeServiceClient(cc)}
	sandbox := sandboxConfig()
	pod, err := t.rs.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: sandbox})
	if err != nil {
		_ = cc.Close()
		return nil, nil, fmt.Errorf("run a pod through the proxy on %s: %w", sock, err)
	}
	t.podID = pod.GetPodSandboxId()
	t.req = &runtimeapi.CreateContainerRequest{PodSandboxId: t.podID, Config: containerConfig(), SandboxConfig: sandbox}
	return t, func() { _ = cc.Close() }, nil
}

// once times one CreateContainer, then removes the container untimed, so the store keeps its size.
func (t *proxyTarget) once(ctx context.Context) (time.Duration, error) {
	start := time.Now()
	resp, err := t.rs.CreateContainer(ctx, t.req)
	d := time.Since(start)
	if err != nil {
		return 0, fmt.Errorf("CreateContainer: %w", err)
	}
	if _, err := t.rs.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: resp.GetContainerId()}); err != nil {
		return 0, fmt.Errorf("RemoveContainer: %w", err)
	}
	return d, nil
}

// verify creates one container and checks, in the proxy's store, that the hooks changed what they should.
func (t *proxyTarget) verify(ctx context.Context, want func(*hooks.Resources, map[string]string) bool) error {
	resp, err := t.rs.CreateContainer(ctx, t.req)
	if err != nil {
		return fmt.Errorf("CreateContainer: %w", err)
	}
	c, ok := t.srv.Store().Container(resp.GetContainerId())
	if !ok || c.Resources == nil || !want(c.Resources, c.Annotations) {
		return fmt.Errorf("the hooks did not act as expected: the store holds %+v", c)
	}
	if _, err := t.rs.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: resp.GetContainerId()}); err != nil {
		return fmt.Errorf("RemoveContainer: %w", err)
	}
	return nil
}

// builtinDispatcher builds the built-in policies with what tandem-proxy gives them on this machine.
func builtinDispatcher(ctx context.Context) (*hooks.Dispatcher, error) {
	deps := builtinpolicy.Deps{}
	if w, err := cgroup.New("/sys/fs/cgroup"); err == nil {
		deps.Cgroups = w
	}
	topo, err := topology.Discover("/sys")
	if err != nil {
		return nil, fmt.Errorf("CPU topology: %w", err)
	}
	cpus, err := alloc.New(topo, alloc.DefaultConfig())
	if err != nil {
		return nil, err
	}
	deps.CPUSet = cpus
	return hooks.NewDispatcher(ctx, builtinpolicy.Builtin(builtinpolicy.DefaultConfig(), deps), nil)
}

// hookClient is a typed client of the hook server on sock.
func hookClient(sock string) (v1alpha1.RuntimeHookServiceClient, func(), error) {
	cc, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, nil, err
	}
	return v1alpha1.NewRuntimeHookServiceClient(cc), func() { _ = cc.Close() }, nil
}

// hookCall times one PreCreateContainerHook call on api.
func hookCall(api v1alpha1.RuntimeHookServiceClient) func(context.Context) (time.Duration, error) {
	req := hookRequest()
	return func(ctx context.Context) (time.Duration, error) {
		start := time.Now()
		_, err := api.PreCreateContainerHook(ctx, req)
		return time.Since(start), err
	}
}

// hookRequest carries what the proxy sends the hook server for the benchmark's container.
func hookRequest() *v1alpha1.ContainerResourceHookRequest {
	sb, ctr := sandboxConfig(), containerConfig()
	r := ctr.GetLinux().GetResources()
	return &v1alpha1.ContainerResourceHookRequest{
		PodMeta: &v1alpha1.PodSandboxMetadata{Name: sb.GetMetadata().GetName(), Uid: sb.GetMetadata().GetUid(),
			Namespace: sb.GetMetadata().GetNamespace()},
		ContainerMata:        &v1alpha1.ContainerMetadata{Name: ctr.GetMetadata().GetName()},
		ContainerAnnotations: ctr.GetAnnotations(),
		ContainerResources: &v1alpha1.LinuxContainerResources{CpuPeriod: r.GetCpuPeriod(), CpuQuota: r.GetCpuQuota(),
			CpuShares: r.GetCpuShares(), MemoryLimitInBytes: r.GetMemoryLimitInBytes(), OomScoreAdj: r.GetOomScoreAdj()},
		PodAnnotations:  sb.GetAnnotations(),
		PodLabels:       sb.GetLabels(),
		PodCgroupParent: sb.GetLinux().GetCgroupParent(),
		ContainerEnvs:   map[string]string{"PATH": pathEnv},
	}
}

const pathEnv = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// sandboxConfig and containerConfig are shaped like kubelet's for a best-effort pod, so that every
// field the hooks set is a change.
func sandboxConfig() *runtimeapi.PodSandboxConfig {
	return &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{Name: "web-7d4b9c-x2x8q", Namespace: "default", Uid: "6f1c1f4e-3b8a-4d7e-9a51-2b0c2f9d4e11"},
		Labels: map[string]string{
			"app": "web", "pod-template-hash": "7d4b9c",
			"io.kubernetes.pod.name": "web-7d4b9c-x2x8q", "io.kubernetes.pod.namespace": "default",
			"io.kubernetes.pod.uid": "6f1c1f4e-3b8a-4d7e-9a51-2b0c2f9d4e11",
		},
		Annotations:  map[string]string{"kubernetes.io/config.source": "api", "kubernetes.io/config.seen": "2026-01-01T00:00:00Z"},
		LogDirectory: "/var/log/pods/default_web-7d4b9c-x2x8q_6f1c1f4e-3b8a-4d7e-9a51-2b0c2f9d4e11",
		Linux:        &runtimeapi.LinuxPodSandboxConfig{CgroupParent: "/kubepods/besteffort/pod6f1c1f4e-3b8a-4d7e-9a51-2b0c2f9d4e11"},
	}
}

func containerConfig() *runtimeapi.ContainerConfig {
	return &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "web"},
		Image:    &runtimeapi.ImageSpec{Image: "docker.io/library/web:1.0"},
		Command:  []string{"/web", "--port=8080"},
		Envs:     []*runtimeapi.KeyValue{{Key: "PATH", Value: []byte(pathEnv)}},
		Labels:   map[string]string{"io.kubernetes.container.name": "web", "io.kubernetes.pod.name": "web-7d4b9c-x2x8q"},
		Annotations: map[string]string{"io.kubernetes.container.hash": "3f2a1b0c", "io.kubernetes.container.restartCount": "0",
			"io.kubernetes.container.terminationMessagePath": "/dev/termination-log"},
		LogPath: "web/0.log",
		Linux: &runtimeapi.LinuxContainerConfig{Resources: &runtimeapi.LinuxContainerResources{
			CpuPeriod: 100000, CpuShares: kubeletShares, OomScoreAdj: 1000,
		}},
	}
}
