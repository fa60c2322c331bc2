//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2/ktesting"

	"github.com/tandemkit/tandem/e2e/framework"
	"github.com/tandemkit/tandem/frontend"
	"github.com/tandemkit/tandem/hooks"
	"github.com/tandemkit/tandem/proxy"
)

// pinHook is a policy written for this test: containers of pods labelled tandem.io/e2e-pin get 512 CPU
// shares and CPU 0, and keep CPU 0 across kubelet's later updates. It runs through the real hook
// dispatcher to prove a policy changes what the runtime really applies.
type pinHook struct{}

func (pinHook) Name() string { return "e2e-pin" }

func (pinHook) PreCreateContainer(_ context.Context, pod *hooks.PodInfo, _ *hooks.ContainerInfo) (*hooks.Adjustment, error) {
	if pod.Labels["tandem.io/e2e-pin"] != "true" {
		return nil, nil
	}
	return &hooks.Adjustment{Resources: &hooks.ResourceAdjustment{CPUShares: hooks.Int64(512), CpusetCpus: hooks.String("0")}}, nil
}

func (pinHook) PreUpdateContainerResources(_ context.Context, pod *hooks.PodInfo, _ *hooks.ContainerInfo) (*hooks.Adjustment, error) {
	if pod.Labels["tandem.io/e2e-pin"] != "true" {
		return nil, nil
	}
	return &hooks.Adjustment{Resources: &hooks.ResourceAdjustment{CpusetCpus: hooks.String("0")}}, nil
}

// hostCgroupFile reads a cgroup v1 file of a process from the host's hierarchy, as an operator would.
func hostCgroupFile(t *testing.T, pid int64, controller, file string) string {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			if c == controller {
				b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup", parts[1], parts[2], file))
				if err != nil {
					t.Fatal(err)
				}
				return strings.TrimSpace(string(b))
			}
		}
	}
	t.Fatalf("process %d has no %s cgroup", pid, controller)
	return ""
}

func containerPID(t *testing.T, ctx context.Context, e runtimeStatus, id string) int64 {
	t.Helper()
	st, err := e.ContainerStatus(ctx, id, true)
	if err != nil {
		t.Fatal(err)
	}
	var info struct {
		Pid int64 `json:"pid"`
	}
	if err := jsonUnmarshal(st.GetInfo()["info"], &info); err != nil || info.Pid == 0 {
		t.Fatalf("no pid in the verbose status of %s: %v", id, err)
	}
	return info.Pid
}

type runtimeStatus interface {
	ContainerStatus(ctx context.Context, id string, verbose bool) (*runtimeapi.ContainerStatusResponse, error)
}

// TestHookSeamChangesRealCgroups runs tandem-proxy in-process with pinHook in front of real containerd and
// checks the container's cgroup files on the host.
func TestHookSeamChangesRealCgroups(t *testing.T) {
	requireRoot(t)
	for _, flavor := range flavors() {
		t.Run("containerd-"+flavor, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			dir, ctrd := privateContainerd(t, ctx, flavor, "tdm-seam-")

			cfg := proxy.DefaultConfig()
			cfg.Listen = filepath.Join(dir, "tandem.sock")
			cfg.RuntimeEndpoint = ctrd.Endpoint
			cfg.StateDir = filepath.Join(dir, "state")
			d, err := hooks.NewDispatcher(ctx, []hooks.Registration{{Name: "e2e-pin", Order: 100, New: func() (hooks.Hook, error) { return pinHook{}, nil }}}, nil)
			if err != nil {
				t.Fatal(err)
			}
			srv, err := proxy.New(cfg, frontend.Deps{Hooks: d})
			if err != nil {
				t.Fatal(err)
			}
			if err := srv.Recover(ctx); err != nil {
				t.Fatal(err)
			}
			lis, err := proxy.Listen(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			sctx, stop := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- srv.Serve(sctx, lis) }()
			t.Cleanup(func() {
				stop()
				if err := <-done; err != nil {
					t.Errorf("Serve: %v", err)
				}
				_ = srv.Close()
			})

			rs, _, err := framework.NewCRIClients(ctx, "unix://"+cfg.Listen)
			if err != nil {
				t.Fatal(err)
			}
			direct, _, err := framework.NewCRIClients(ctx, ctrd.Endpoint)
			if err != nil {
				t.Fatal(err)
			}
			pinned := framework.PodSandboxConfig("pinned", "e2e", true)
			pinned.Labels["tandem.io/e2e-pin"] = "true"
			plain := framework.PodSandboxConfig("plain", "e2e", true)
			var pinnedID, plainID string
			for _, p := range []struct {
				cfg *runtimeapi.PodSandboxConfig
				id  *string
			}{{pinned, &pinnedID}, {plain, &plainID}} {
				podID, ids, err := framework.RunPod(ctx, rs, p.cfg, 1)
				if podID != "" {
					t.Cleanup(func() { _ = framework.RemovePod(context.WithoutCancel(ctx), direct, podID) })
				}
				if err != nil {
					t.Fatal(err)
				}
				*p.id = ids[0]
			}

			pid := containerPID(t, ctx, direct, pinnedID)
			if got := hostCgroupFile(t, pid, "cpu", "cpu.shares"); got != "512" {
				t.Errorf("pinned cpu.shares = %s, want the hook's 512", got)
			}
			if got := hostCgroupFile(t, pid, "cpuset", "cpuset.cpus"); got != "0" {
				t.Errorf("pinned cpuset.cpus = %s, want the hook's 0", got)
			}
			plainPID := containerPID(t, ctx, direct, plainID)
			if got := hostCgroupFile(t, plainPID, "cpu", "cpu.shares"); got != "2" {
				t.Errorf("plain cpu.shares = %s, want kubelet's 2 (the hook must not touch other pods)", got)
			}

			// Kubelet's own update reaches the runtime, merged with the policy's cpuset.
			err = rs.UpdateContainerResources(ctx, pinnedID, &runtimeapi.ContainerResources{Linux: &runtimeapi.LinuxContainerResources{
				CpuShares: 1024, CpuPeriod: 100000, CpuQuota: 50000, CpusetCpus: "0-1",
			}})
			if err != nil {
				t.Fatal(err)
			}
			if got := hostCgroupFile(t, pid, "cpu", "cpu.cfs_quota_us"); got != "50000" {
				t.Errorf("cpu.cfs_quota_us after kubelet's update = %s, want 50000", got)
			}
			if got := hostCgroupFile(t, pid, "cpu", "cpu.shares"); got != strconv.Itoa(1024) {
				t.Errorf("cpu.shares after kubelet's update = %s, want 1024", got)
			}
			if got := hostCgroupFile(t, pid, "cpuset", "cpuset.cpus"); got != "0" {
				t.Errorf("cpuset.cpus after kubelet's update = %s, want the policy's 0 kept", got)
			}
			c, ok := srv.Store().Container(pinnedID)
			if !ok || c.Resources.CpusetCpus != "0" || c.Resources.CPUQuota != 50000 {
				t.Errorf("store holds %+v, want the applied resources", c)
			}
		})
	}
}

func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }
