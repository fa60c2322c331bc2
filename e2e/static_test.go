//go:build e2e

package e2e

import (
	"context"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/tandemkit/tandem/e2e/framework"
)

// guaranteedPod runs a Guaranteed pod as kubelet does under its static CPU manager: no Koordinator class,
// the pod cgroup /kubepods/pod<uid>, and one container with request == limit whose cpuset is the one
// kubelet's CPU manager chose (kubeletCPUs; "" for none). It returns the pod's sandbox and uid and the
// started container.
func guaranteedPod(t *testing.T, ctx context.Context, e *env, name string, milli int64, kubeletCPUs string) (podID, uid, ctr string, err error) {
	t.Helper()
	uid = framework.NewUID()
	parent := "/kubepods/pod" + uid
	podCgroup(t, parent)
	cfg := framework.PodSandboxConfig(name, "e2e", true)
	cfg.Metadata.Uid = uid
	cfg.Labels["io.kubernetes.pod.uid"] = uid
	cfg.Linux.CgroupParent = parent
	podID, err = e.viaProxy.RunPodSandbox(ctx, cfg, "")
	if err != nil {
		t.Fatal(err)
	}
	removeAtCleanup(t, ctx, e, podID)
	cc := framework.ContainerConfig("app", framework.SleepCommand()...)
	cc.Linux.Resources = &runtimeapi.LinuxContainerResources{CpuShares: milli * 1024 / 1000, CpuQuota: milli * 100, CpuPeriod: 100000, CpusetCpus: kubeletCPUs}
	ctr, err = e.viaProxy.CreateContainer(ctx, podID, cc, cfg)
	if err != nil {
		return podID, uid, "", err
	}
	if err := e.viaProxy.StartContainer(ctx, ctr); err != nil {
		t.Fatal(err)
	}
	return podID, uid, ctr, nil
}

// TestKubeletStaticCPUManager runs tandem-proxy with --cpu-manager-policy=static against real containerd,
// sending what kubelet's static CPU manager sends: a Guaranteed container with one whole CPU keeps the
// CPU kubelet chose, at creation and at kubelet's reconcile updates; Tandem records it as LSR, so the LS
// pool and the other containers leave it alone; a Guaranteed container with a fractional CPU is not
// refused and runs in the shared pool; when the pod goes its CPU returns.
func TestKubeletStaticCPUManager(t *testing.T) {
	forEachRuntime(t, envOptions{proxyArgs: []string{"--cpu-manager-policy", "static"}}, testKubeletStaticCPUManager)
}

// TestNRIKubeletStaticCPUManager is TestKubeletStaticCPUManager with tandem-nri as containerd's NRI plugin.
func TestNRIKubeletStaticCPUManager(t *testing.T) {
	forNRI(t, envOptions{proxyArgs: []string{"--cpu-manager-policy", "static"}}, testKubeletStaticCPUManager)
}

func testKubeletStaticCPUManager(t *testing.T, ctx context.Context, e *env) {
	_, ls, err := classPod(t, ctx, e, e.viaProxy, "burstable-ls", "LS", 0)
	if err != nil {
		t.Fatal(err)
	}
	// Kubelet chose CPU 1: the highest, so that Tandem's own first pick (CPU 0) would differ.
	gPod, gUID, g, err := guaranteedPod(t, ctx, e, "guaranteed", 1000, "1")
	if err != nil {
		t.Fatalf("Guaranteed container with kubelet's CPU 1: %v", err)
	}
	if got := cpusetOf(t, ctx, e, g); got != "1" {
		t.Fatalf("Guaranteed container cpuset %s, want 1 as kubelet's static CPU manager chose", got)
	}
	wantPools(t, ctx, e, framework.PoolsDump{LSR: "1", LS: "0", BE: "0-1", Allocations: map[string]framework.Allocation{
		gUID + "/app": {Class: "LSR", CPUs: "1"},
	}})
	waitCPUSet(t, ctx, e, ls, "0", time.Second)

	// Kubelet's reconcile loop sends every container's cpuset again: its choice stays for the
	// Guaranteed container, and Tandem's pool for the LS one (kubelet would say its shared pool, 0-1).
	for id, cpus := range map[string]string{g: "1", ls: "0-1"} {
		if err := e.viaProxy.UpdateContainerResources(ctx, id, &runtimeapi.ContainerResources{Linux: &runtimeapi.LinuxContainerResources{CpuShares: 1024, CpuQuota: 100000, CpuPeriod: 100000, CpusetCpus: cpus}}); err != nil {
			t.Fatalf("kubelet's reconcile update of %s: %v", id[:12], err)
		}
	}
	if got := cpusetOf(t, ctx, e, g); got != "1" {
		t.Errorf("Guaranteed container after kubelet's update: cpuset %s, want 1", got)
	}
	if got := cpusetOf(t, ctx, e, ls); got != "0" {
		t.Errorf("LS container after kubelet's update: cpuset %s, want 0 (the LS pool without kubelet's exclusive CPU)", got)
	}

	// A fractional Guaranteed container runs in kubelet's shared pool, which is Tandem's LS pool.
	_, _, frac, err := guaranteedPod(t, ctx, e, "guaranteed-fraction", 500, "0")
	if err != nil {
		t.Fatalf("Guaranteed container with 500m refused: %v (kubelet runs it in the shared pool)", err)
	}
	if got := cpusetOf(t, ctx, e, frac); got != "0" {
		t.Errorf("fractional Guaranteed container cpuset %s, want the LS pool 0", got)
	}

	// The pod goes: its CPU returns to the LS pool.
	if err := framework.RemovePod(ctx, e.viaProxy, gPod); err != nil {
		t.Fatal(err)
	}
	waitCPUSet(t, ctx, e, ls, "0-1", time.Second)
	wantPools(t, ctx, e, framework.PoolsDump{LS: "0-1", BE: "0-1"})
}
