package proxy

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/containerd/errdefs"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/tandemkit/tandem/hooks"
	"github.com/tandemkit/tandem/store"
)

// sharesHook is the test policy that proves hooks reach the runtime through the proxy: containers of pods
// labelled tandem.io/test-shares get 4242 CPU shares and a pod-level cpu.idle, kubelet's updates get
// cpuset 1 merged in, and removals can be refused.
type sharesHook struct {
	mu       sync.Mutex
	rejectRM bool
}

var (
	_ hooks.PreCreateContainerHook          = (*sharesHook)(nil)
	_ hooks.PreUpdateContainerResourcesHook = (*sharesHook)(nil)
	_ hooks.PreRemoveContainerHook          = (*sharesHook)(nil)
)

func (h *sharesHook) Name() string { return "test-shares" }

func (h *sharesHook) PreCreateContainer(_ context.Context, pod *hooks.PodInfo, _ *hooks.ContainerInfo) (*hooks.Adjustment, error) {
	switch pod.Labels["tandem.io/test-shares"] {
	case "":
		return nil, nil
	case "bad":
		return nil, fmt.Errorf("pod %s: label tandem.io/test-shares is not a number: %w", pod.Name, errdefs.ErrInvalidArgument)
	}
	return &hooks.Adjustment{
		Resources:    &hooks.ResourceAdjustment{CPUShares: hooks.Int64(4242)},
		Env:          map[string]string{"TANDEM_TEST": "1"},
		PodResources: &hooks.ResourceAdjustment{Unified: map[string]string{"cpu.idle": "1"}},
	}, nil
}

func (h *sharesHook) PreUpdateContainerResources(context.Context, *hooks.PodInfo, *hooks.ContainerInfo) (*hooks.Adjustment, error) {
	return &hooks.Adjustment{Resources: &hooks.ResourceAdjustment{CpusetCpus: hooks.String("1")}}, nil
}

func (h *sharesHook) PreRemoveContainer(context.Context, *hooks.PodInfo, *hooks.ContainerInfo) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.rejectRM {
		return fmt.Errorf("test refuses removal: %w", errdefs.ErrFailedPrecondition)
	}
	return nil
}

func (h *sharesHook) registration() []hooks.Registration {
	return []hooks.Registration{{Name: h.Name(), Order: 100, New: func() (hooks.Hook, error) { return h, nil }}}
}

func podConfig(name string, labels map[string]string) *runtimeapi.PodSandboxConfig {
	return &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{Name: name, Namespace: "default", Uid: name + "-uid"},
		Labels:   labels,
		Linux:    &runtimeapi.LinuxPodSandboxConfig{CgroupParent: "/kubepods/besteffort/pod" + name + "-uid"},
	}
}

func ctrConfig(name string) *runtimeapi.ContainerConfig {
	return &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: name},
		Image:    &runtimeapi.ImageSpec{Image: "docker.io/library/busybox:1"},
		Linux:    &runtimeapi.LinuxContainerConfig{Resources: &runtimeapi.LinuxContainerResources{CpuShares: 2, MemoryLimitInBytes: 64 << 20}},
	}
}

func TestLifecycleThroughHooksAndStore(t *testing.T) {
	t.Parallel()
	hook := &sharesHook{}
	cg := fakeCgroupV1(t, "/kubepods/besteffort/podweb-uid", "cpu.idle")
	h := newHarness(t, harnessOpts{hooks: hook.registration(), cgroups: cg.writer})
	ctx := testCtx(t)
	rs := h.rs()

	pod, err := rs.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: podConfig("web", map[string]string{"tandem.io/test-shares": "yes"})})
	if err != nil {
		t.Fatal(err)
	}
	ctr, err := rs.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: pod.PodSandboxId, Config: ctrConfig("app"), SandboxConfig: podConfig("web", nil)})
	if err != nil {
		t.Fatal(err)
	}
	if got := h.rt.lastCreate.GetConfig().GetLinux().GetResources().GetCpuShares(); got != 4242 {
		t.Fatalf("runtime saw cpu shares %d, want the hook's 4242", got)
	}
	if got := h.rt.lastCreate.GetConfig().GetLinux().GetResources().GetMemoryLimitInBytes(); got != 64<<20 {
		t.Fatalf("runtime saw memory limit %d, want kubelet's %d untouched", got, 64<<20)
	}
	if envs := h.rt.lastCreate.GetConfig().GetEnvs(); len(envs) != 1 || envs[0].GetKey() != "TANDEM_TEST" || string(envs[0].GetValue()) != "1" {
		t.Fatalf("runtime saw env %v, want the hook's TANDEM_TEST=1", envs)
	}
	if got := cg.read(t, "cpu.idle"); got != "1" {
		t.Fatalf("pod cgroup cpu.idle = %q, want the hook's pod-level 1", got)
	}
	if _, err := rs.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: ctr.ContainerId}); err != nil {
		t.Fatal(err)
	}

	c, ok := h.srv.Store().Container(ctr.ContainerId)
	if !ok || c.State != "CONTAINER_RUNNING" || c.Resources.CPUShares != 4242 || c.PodSandboxID != pod.PodSandboxId {
		t.Fatalf("stored container = %+v, want running with the applied shares 4242", c)
	}
	p, ok := h.srv.Store().Pod(pod.PodSandboxId)
	if !ok || p.CgroupParent != "/kubepods/besteffort/podweb-uid" || p.Name != "web" {
		t.Fatalf("stored pod = %+v", p)
	}

	// Kubelet's update is merged with the hook's, and always forwarded.
	upd := &runtimeapi.UpdateContainerResourcesRequest{ContainerId: ctr.ContainerId, Linux: &runtimeapi.LinuxContainerResources{CpuQuota: 50000, CpuPeriod: 100000}}
	if _, err := rs.UpdateContainerResources(ctx, upd); err != nil {
		t.Fatal(err)
	}
	got := h.rt.lastUpdate.GetLinux()
	if got.GetCpuQuota() != 50000 || got.GetCpusetCpus() != "1" {
		t.Fatalf("runtime saw update %v, want kubelet's quota 50000 and the hook's cpuset 1", got)
	}
	if c, _ := h.srv.Store().Container(ctr.ContainerId); c.Resources.CPUQuota != 50000 || c.Resources.CpusetCpus != "1" {
		t.Fatalf("stored resources after update = %+v", c.Resources)
	}

	// A hook may refuse a removal with a classed error, which kubelet sees as a gRPC code.
	hook.mu.Lock()
	hook.rejectRM = true
	hook.mu.Unlock()
	if _, err := rs.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: ctr.ContainerId}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("refused removal: %v, want FailedPrecondition", err)
	}
	hook.mu.Lock()
	hook.rejectRM = false
	hook.mu.Unlock()

	if _, err := rs.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: ctr.ContainerId}); err != nil {
		t.Fatal(err)
	}
	if c, _ := h.srv.Store().Container(ctr.ContainerId); c.State != store.ContainerExited {
		t.Fatalf("state after stop = %s", c.State)
	}
	if _, err := rs.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: ctr.ContainerId}); err != nil {
		t.Fatal(err)
	}
	if _, ok := h.srv.Store().Container(ctr.ContainerId); ok {
		t.Fatal("container still stored after RemoveContainer")
	}
	if _, err := rs.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: pod.PodSandboxId}); err != nil {
		t.Fatal(err)
	}
	if p, _ := h.srv.Store().Pod(pod.PodSandboxId); p.State != "SANDBOX_NOTREADY" {
		t.Fatalf("pod state after stop = %s", p.State)
	}
	if _, err := rs.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: pod.PodSandboxId}); err != nil {
		t.Fatal(err)
	}
	if snap := h.srv.Store().Snapshot(); len(snap.Pods)+len(snap.Containers) != 0 {
		t.Fatalf("store not empty after the pod was removed: %+v", snap)
	}
	// The checkpoint follows the store.
	disk, err := h.srv.checkpoint.Load()
	if err != nil || len(disk.Pods) != 0 {
		t.Fatalf("checkpoint after removal = %+v, %v", disk, err)
	}
}

func TestCreateContainerBadInput(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		labels     map[string]string
		sandbox    string // empty: the pod created by the test
		runtimeErr error
		wantCode   codes.Code
	}{
		{name: "hook rejects with a classed error", labels: map[string]string{"tandem.io/test-shares": "bad"}, wantCode: codes.InvalidArgument},
		{name: "runtime rejects: its error passes unchanged and the hook may roll back", labels: map[string]string{"tandem.io/test-shares": "yes"},
			runtimeErr: status.Error(codes.ResourceExhausted, "no space left"), wantCode: codes.ResourceExhausted},
		{name: "sandbox unknown to the store passes through", sandbox: "unknown-pod", wantCode: codes.NotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			hook := &sharesHook{}
			h := newHarness(t, harnessOpts{hooks: hook.registration()})
			ctx := testCtx(t)
			pod, err := h.rs().RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: podConfig("p", tt.labels)})
			if err != nil {
				t.Fatal(err)
			}
			sandbox := pod.PodSandboxId
			if tt.sandbox != "" {
				sandbox = tt.sandbox
			}
			h.rt.mu.Lock()
			h.rt.createErr = tt.runtimeErr
			h.rt.mu.Unlock()
			_, err = h.rs().CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: sandbox, Config: ctrConfig("c")})
			if status.Code(err) != tt.wantCode {
				t.Fatalf("CreateContainer: %v, want %v", err, tt.wantCode)
			}
			if tt.runtimeErr != nil && status.Convert(err).Message() != status.Convert(tt.runtimeErr).Message() {
				t.Fatalf("runtime message changed: %q", status.Convert(err).Message())
			}
			if n := len(h.srv.Store().Snapshot().Containers); n != 0 {
				t.Fatalf("store holds %d containers after a failed create", n)
			}
		})
	}
}

func TestStatusMapping(t *testing.T) {
	t.Parallel()
	tests := []struct {
		err  error
		want codes.Code
	}{
		{fmt.Errorf("x: %w", errdefs.ErrInvalidArgument), codes.InvalidArgument},
		{fmt.Errorf("x: %w", errdefs.ErrResourceExhausted), codes.ResourceExhausted},
		{fmt.Errorf("x: %w", errdefs.ErrNotFound), codes.NotFound},
		{fmt.Errorf("x: %w", errdefs.ErrUnavailable), codes.Unavailable},
		{fmt.Errorf("x: %w", context.DeadlineExceeded), codes.DeadlineExceeded},
		{status.Error(codes.Aborted, "from the runtime"), codes.Aborted},
		// A hook server's answer that is not gRPC: Internal, as the log line says, not Unknown.
		{fmt.Errorf("x: %w", errdefs.ErrInternal), codes.Internal},
		{errors.New("plain"), codes.Unknown},
	}
	for _, tt := range tests {
		if got := status.Code(toStatus(tt.err)); got != tt.want {
			t.Errorf("toStatus(%v) code = %v, want %v", tt.err, got, tt.want)
		}
	}
}
