//go:build e2e

package e2e

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/tandemkit/tandem/e2e/framework"
	"github.com/tandemkit/tandem/resource/topology/topologytest"
)

// classPod runs a pod of one container of a QoS class with CPU request == limit (milli-cores; 0 means
// none), as kubelet would send it.
func classPod(t *testing.T, ctx context.Context, e *env, rs internalapi.RuntimeService, name, class string, milli int64) (string, string, error) {
	t.Helper()
	p, err := createClassPod(t, ctx, e, rs, name, class, milli, nil)
	if err != nil {
		return p.id, "", err
	}
	if err := rs.StartContainer(ctx, p.ctr); err != nil {
		t.Fatal(err)
	}
	return p.id, p.ctr, nil
}

// classPodIDs name a pod createClassPod made: its sandbox, its uid and its container "app".
type classPodIDs struct{ id, uid, ctr string }

// createClassPod runs the sandbox of classPod's pod, with annotations added to the pod's, and creates
// its container without starting it. The sandbox is removed when the test ends.
func createClassPod(t *testing.T, ctx context.Context, e *env, rs internalapi.RuntimeService, name, class string, milli int64, annotations map[string]string) (classPodIDs, error) {
	t.Helper()
	cfg := framework.PodSandboxConfig(name, "e2e", true)
	cfg.Labels["koordinator.sh/qosClass"] = class
	for k, v := range annotations {
		cfg.Annotations[k] = v
	}
	podID, err := rs.RunPodSandbox(ctx, cfg, "")
	if err != nil {
		t.Fatal(err)
	}
	removeAtCleanup(t, ctx, e, podID)
	p := classPodIDs{id: podID, uid: cfg.Metadata.Uid}
	cc := framework.ContainerConfig("app", framework.SleepCommand()...)
	if milli > 0 {
		cc.Linux.Resources = &runtimeapi.LinuxContainerResources{CpuShares: milli * 1024 / 1000, CpuQuota: milli * 100, CpuPeriod: 100000}
	}
	p.ctr, err = rs.CreateContainer(ctx, podID, cc, cfg)
	return p, err
}

func cpusetOf(t *testing.T, ctx context.Context, e *env, id string) string {
	t.Helper()
	return hostCgroupFile(t, containerPID(t, ctx, e.direct, id), "cpuset", "cpuset.cpus")
}

// TestCPUSetPools runs the cpuset rules of Koordinator's documented QoS example on this 2-CPU machine
// through the real tandem-proxy binary and real containerd: an LSE container gets a CPU of its own, LS and
// BE containers are kept off it, and when the LSE pod goes they widen again within a second. A proxy
// SIGKILL and restart keeps every allocation, so a second LSE container is refused rather than given the
// same CPU. TestNRICPUSetPools runs the same with tandem-nri, Tandem as containerd's NRI plugin.
func TestCPUSetPools(t *testing.T) {
	forEachRuntime(t, envOptions{}, testCPUSetPools)
}

func testCPUSetPools(t *testing.T, ctx context.Context, e *env) {
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

	// tandem-proxy SIGKILL and restart: the allocation survives exactly, bound to the same container.
	before := poolsOf(t, ctx, e)
	if err := e.proxy.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := e.proxy.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	waitVersion(t, ctx, e)
	if after := poolsOf(t, ctx, e); !reflect.DeepEqual(after, before) {
		t.Errorf("/debug/pools after a restart = %+v, want %+v as before", after, before)
	}
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

// machine16Args writes a fake sysfs CPU tree of the machine of Koordinator's documented QoS example (16
// CPUs, 2 sockets = 2 NUMA nodes, SMT: CPU i and i+8 are siblings) and returns the tandem-proxy flags that
// make it the machine's topology.
func machine16Args(t *testing.T) []string {
	t.Helper()
	root := t.TempDir()
	if err := (topologytest.Machine{Sockets: 2, CoresPerDie: 4, ThreadsPerCore: 2}).Write(root); err != nil {
		t.Fatal(err)
	}
	return []string{"--sysfs-root", root}
}

// TestCPUSetSeed000 runs the four nginx Deployments of Koordinator's documented QoS example (LSE, LSR, LS,
// BE, each asking for 2 CPUs but BE, with SpreadByPCPUs) through tandem-proxy on its 16-CPU, 2-socket
// machine, and checks the cpusets it shows, which users check a colocation system against: LSE 0-1, LSR
// 2-3, LS 4-15, BE 2-15; when the LSE pod goes, LS and BE widen. This machine has 2 CPUs, so the topology
// is a fake sysfs tree and the containers are created but not started (runc cannot pin a task to a CPU the
// kernel lacks): the cpusets checked are those of the containers' OCI specs, what runc applies when they
// start. TestNRICPUSetSeed000 runs the same with tandem-nri as the NRI plugin.
func TestCPUSetSeed000(t *testing.T) {
	forEachRuntime(t, envOptions{proxyArgs: machine16Args(t)}, testSeed000)
}

func testSeed000(t *testing.T, ctx context.Context, e *env) {
	spread := map[string]string{"scheduling.koordinator.sh/resource-spec": `{"preferredCPUBindPolicy": "SpreadByPCPUs"}`}
	pods := map[string]classPodIDs{}
	for _, p := range []struct {
		name, class string
		milli       int64
		want        string
	}{
		{"nginx-lse", "LSE", 2000, "0-1"},
		{"nginx-lsr", "LSR", 2000, "2-3"},
		{"nginx-ls", "LS", 2000, "4-15"},
		{"nginx-be", "BE", 0, "2-15"},
	} {
		ids, err := createClassPod(t, ctx, e, e.viaProxy, p.name, p.class, p.milli, spread)
		if err != nil {
			t.Fatalf("%s: %v", p.name, err)
		}
		pods[p.name] = ids
		if got := specCPUs(t, ctx, e, ids.ctr); got != p.want {
			t.Errorf("%s: cpuset %q, want %s", p.name, got, p.want)
		}
	}
	wantPools(t, ctx, e, framework.PoolsDump{LSE: "0-1", LSR: "2-3", LS: "4-15", BE: "2-15", Allocations: map[string]framework.Allocation{
		pods["nginx-lse"].uid + "/app": {Class: "LSE", CPUs: "0-1"},
		pods["nginx-lsr"].uid + "/app": {Class: "LSR", CPUs: "2-3"},
	}})

	// The LSE pod goes: its CPUs return to LS and BE.
	if err := framework.RemovePod(ctx, e.viaProxy, pods["nginx-lse"].id); err != nil {
		t.Fatal(err)
	}
	waitSpecCPUs(t, ctx, e, pods["nginx-ls"].ctr, "0-1,4-15", time.Second)
	waitSpecCPUs(t, ctx, e, pods["nginx-be"].ctr, "0-15", time.Second)
	wantPools(t, ctx, e, framework.PoolsDump{LSR: "2-3", LS: "0-1,4-15", BE: "0-15", Allocations: map[string]framework.Allocation{
		pods["nginx-lsr"].uid + "/app": {Class: "LSR", CPUs: "2-3"},
	}})
}

// specCPUs returns the cpuset of the container's OCI spec, as containerd's verbose status shows it
// (crictl inspect): what runc applies when the container starts.
func specCPUs(t *testing.T, ctx context.Context, e *env, id string) string {
	t.Helper()
	st, err := e.direct.ContainerStatus(ctx, id, true)
	if err != nil {
		t.Fatal(err)
	}
	var info struct {
		RuntimeSpec struct {
			Linux struct {
				Resources struct {
					CPU struct {
						CPUs string `json:"cpus"`
					} `json:"cpu"`
				} `json:"resources"`
			} `json:"linux"`
		} `json:"runtimeSpec"`
	}
	if err := jsonUnmarshal(st.GetInfo()["info"], &info); err != nil {
		t.Fatalf("verbose status of %s: %v", id, err)
	}
	return info.RuntimeSpec.Linux.Resources.CPU.CPUs
}

func waitSpecCPUs(t *testing.T, ctx context.Context, e *env, id, want string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		got := specCPUs(t, ctx, e, id)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("container %s: spec cpuset %q, want %s within %v", id[:12], got, want, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func poolsOf(t *testing.T, ctx context.Context, e *env) framework.PoolsDump {
	t.Helper()
	p, err := e.proxy.Pools(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return *p
}

// wantPools checks /debug/pools; which container uses an allocation is left out of the comparison.
func wantPools(t *testing.T, ctx context.Context, e *env, want framework.PoolsDump) {
	t.Helper()
	got := poolsOf(t, ctx, e)
	for o, a := range got.Allocations {
		a.Container = ""
		got.Allocations[o] = a
	}
	if len(got.Allocations) == 0 {
		got.Allocations = nil
	}
	if len(want.Allocations) == 0 {
		want.Allocations = nil
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("/debug/pools = %+v, want %+v", got, want)
	}
}
