//go:build e2e

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/tandemkit/tandem/e2e/framework"
)

// classPod runs a pod of one container of a QoS class with CPU request == limit (milli-cores; 0 means
// none), as kubelet would send it.
func classPod(t *testing.T, ctx context.Context, e *env, rs internalapi.RuntimeService, name, class string, milli int64) (string, string, error) {
	t.Helper()
	cfg := framework.PodSandboxConfig(name, "e2e", true)
	cfg.Labels["koordinator.sh/qosClass"] = class
	podID, err := rs.RunPodSandbox(ctx, cfg, "")
	if err != nil {
		t.Fatal(err)
	}
	removeAtCleanup(t, ctx, e, podID)
	cc := framework.ContainerConfig("app", framework.SleepCommand()...)
	if milli > 0 {
		cc.Linux.Resources = &runtimeapi.LinuxContainerResources{CpuShares: milli * 1024 / 1000, CpuQuota: milli * 100, CpuPeriod: 100000}
	}
	id, err := rs.CreateContainer(ctx, podID, cc, cfg)
	if err != nil {
		return podID, "", err
	}
	if err := rs.StartContainer(ctx, id); err != nil {
		t.Fatal(err)
	}
	return podID, id, nil
}

func cpusetOf(t *testing.T, ctx context.Context, e *env, id string) string {
	t.Helper()
	return hostCgroupFile(t, containerPID(t, ctx, e.direct, id), "cpuset", "cpuset.cpus")
}

// TestCPUSetPools runs seed 000's rules on this 2-CPU machine through the real tandem-proxy binary and real
// containerd: an LSE container gets a CPU of its own, LS and BE containers are kept off it, and when the
// LSE pod goes they widen again within a second. A proxy SIGKILL and restart keeps every allocation, so a
// second LSE container is refused rather than given the same CPU.
func TestCPUSetPools(t *testing.T) {
	forEachRuntime(t, envOptions{}, func(t *testing.T, ctx context.Context, e *env) {
		lsPod, ls, err := classPod(t, ctx, e, e.viaProxy, "nginx-ls", "LS", 0)
		if err != nil {
			t.Fatal(err)
		}
		_ = lsPod
		if got := cpusetOf(t, ctx, e, ls); got != "0-1" {
			t.Fatalf("LS container alone: cpuset %s, want 0-1", got)
		}
		_, be, err := classPod(t, ctx, e, e.viaProxy, "nginx-be", "BE", 0)
		if err != nil {
			t.Fatal(err)
		}

		lsePod, lse, err := classPod(t, ctx, e, e.viaProxy, "nginx-lse", "LSE", 1000)
		if err != nil {
			t.Fatal(err)
		}
		exclusive := cpusetOf(t, ctx, e, lse)
		if exclusive != "0" && exclusive != "1" {
			t.Fatalf("LSE container cpuset %s, want one CPU", exclusive)
		}
		other := map[string]string{"0": "1", "1": "0"}[exclusive]
		// Running LS and BE containers move off the LSE CPU.
		waitCPUSet(t, ctx, e, ls, other, time.Second)
		waitCPUSet(t, ctx, e, be, other, time.Second)

		// Proxy SIGKILL and restart: the allocation survives exactly.
		if err := e.proxy.Kill(); err != nil {
			t.Fatal(err)
		}
		if err := e.proxy.Restart(ctx); err != nil {
			t.Fatal(err)
		}
		waitVersion(t, ctx, e)
		_, _, err = classPod(t, ctx, e, e.viaProxy, "nginx-lse2", "LSE", 1000)
		if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "want 1, free 0") {
			t.Fatalf("second LSE container after a restart: %v, want ResourceExhausted \"want 1, free 0\"", err)
		}
		if got := cpusetOf(t, ctx, e, lse); got != exclusive {
			t.Fatalf("LSE container after restart: cpuset %s, want %s", got, exclusive)
		}

		// The LSE pod goes: LS and BE widen within a second.
		start := time.Now()
		if err := framework.RemovePod(ctx, e.viaProxy, lsePod); err != nil {
			t.Fatal(err)
		}
		waitCPUSet(t, ctx, e, ls, "0-1", time.Second)
		waitCPUSet(t, ctx, e, be, "0-1", time.Second)
		t.Logf("LS and BE widened %v after the LSE pod's removal returned", time.Since(start).Round(time.Millisecond))
	})
}

func waitCPUSet(t *testing.T, ctx context.Context, e *env, id, want string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		got := cpusetOf(t, ctx, e, id)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("container %s cpuset %s, want %s within %v", id[:12], got, want, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitVersion waits until the restarted proxy answers, as kubelet's next relist would.
func waitVersion(t *testing.T, ctx context.Context, e *env) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := e.viaProxy.Version(ctx, ""); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("proxy does not answer after its restart")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
