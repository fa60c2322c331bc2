//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/tandemkit/tandem/e2e/framework"
)

// podCgroup creates a pod-level cgroup in every v1 hierarchy, as kubelet does before RunPodSandbox, and
// removes it when the test ends.
func podCgroup(t *testing.T, parent string) {
	t.Helper()
	for _, ctrl := range []string{"cpu", "cpuacct", "cpuset", "memory", "pids", "blkio", "devices", "freezer"} {
		dir := filepath.Join("/sys/fs/cgroup", ctrl, parent)
		if _, err := os.Stat(filepath.Dir(filepath.Dir(dir))); err != nil {
			continue
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatalf("create pod cgroup %s: %v", dir, err)
		}
	}
	t.Cleanup(func() {
		// The pod's cgroup, then its QoS and kubepods parents, in every hierarchy (runc also makes the pod's
		// cgroup in the named systemd one): os.Remove only removes empty cgroups, so parents another pod
		// still uses stay. The containers' cgroups are gone with their pod.
		hierarchies, _ := filepath.Glob("/sys/fs/cgroup/*")
		for _, h := range hierarchies {
			for i, p := 0, filepath.Join(h, parent); i < 3; i, p = i+1, filepath.Dir(p) {
				_ = os.Remove(p)
			}
		}
	})
}

// batchSpec is the extended-resource-spec of runBEPod's container c0: 1 batch CPU requested, 1.5 the limit,
// 64Mi of memory.
const batchSpec = `{"containers":{"c0":{"requests":{"kubernetes.io/batch-cpu":"1k","kubernetes.io/batch-memory":"64Mi"},"limits":{"kubernetes.io/batch-cpu":"1500","kubernetes.io/batch-memory":"64Mi"}}}}`

// runBEPod runs a BE pod with batch resources (batchSpec) and one container through the proxy, in a pod
// cgroup made as kubelet would, and removes it when the test ends. It returns the pod's cgroup parent and
// the container's id.
func runBEPod(t *testing.T, ctx context.Context, e *env, name string) (parent, ctrID string) {
	t.Helper()
	cfg := qosPodConfig(t, name, "BE", "besteffort")
	cfg.Annotations["node.koordinator.sh/extended-resource-spec"] = batchSpec
	podID, ids, err := framework.RunPod(ctx, e.viaProxy, cfg, 1)
	removeAtCleanup(t, ctx, e, podID)
	if err != nil {
		t.Fatal(err)
	}
	return cfg.Linux.CgroupParent, ids[0]
}

// qosPodConfig is the config of a pod of a Koordinator QoS class in kubelet's QoS cgroup qosDir
// (besteffort, burstable), its pod cgroup made as kubelet would.
func qosPodConfig(t *testing.T, name, class, qosDir string) *runtimeapi.PodSandboxConfig {
	t.Helper()
	uid := framework.NewUID()
	parent := "/kubepods/" + qosDir + "/pod" + uid
	podCgroup(t, parent)
	cfg := framework.PodSandboxConfig(name, "e2e", true)
	cfg.Metadata.Uid = uid
	cfg.Linux.CgroupParent = parent
	cfg.Labels["koordinator.sh/qosClass"] = class
	return cfg
}

// removeAtCleanup removes the pod, if one was made, when the test ends.
func removeAtCleanup(t *testing.T, ctx context.Context, e *env, podID string) {
	if podID == "" {
		return
	}
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		_ = framework.RemovePod(cctx, e.direct, podID)
	})
}

func readCgroup(t *testing.T, ctrl, parent, file string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup", ctrl, parent, file))
	if err != nil {
		t.Fatal(err)
	}
	return string(b[:len(b)-1])
}

// TestBuiltinPolicies runs the built-in policies in the real tandem-proxy binary (the default
// --policies) against real containerd: a BE pod with batch resources gets its shares, quota and memory
// limit in the container cgroup and cpu.idle on its pod cgroup; an LSE pod asking for a fraction of a CPU
// is refused with InvalidArgument and leaves nothing behind. TestNRIBuiltinPolicies runs the same with
// tandem-nri, Tandem as containerd's NRI plugin.
func TestBuiltinPolicies(t *testing.T) {
	forEachRuntime(t, envOptions{}, testBuiltinPolicies)
}

func testBuiltinPolicies(t *testing.T, ctx context.Context, e *env) {
	parent, ctr := runBEPod(t, ctx, e, "nginx-be")
	ctrDir := filepath.Join(parent, ctr)
	for _, c := range []struct{ ctrl, dir, file, want string }{
		{"cpu", ctrDir, "cpu.shares", "1024"},
		{"cpu", ctrDir, "cpu.cfs_quota_us", "150000"},
		{"memory", ctrDir, "memory.limit_in_bytes", fmt.Sprint(64 << 20)},
		{"cpu", parent, "cpu.idle", "1"},
		// An idle group has the kernel's idle weight, whatever shares it was given.
		{"cpu", parent, "cpu.shares", "3"},
		{"cpu", parent, "cpu.cfs_quota_us", "150000"},
	} {
		if got := readCgroup(t, c.ctrl, c.dir, c.file); got != c.want {
			t.Errorf("%s/%s = %s, want %s", c.dir, c.file, got, c.want)
		}
	}
	if got := containerAnnotation(t, ctx, e, ctr, "tandem.io/qos-class"); got != "BE" {
		t.Errorf("container annotation tandem.io/qos-class = %q, want BE", got)
	}

	// LSE with 500m: refused, nothing created.
	lse := framework.PodSandboxConfig("nginx-lse", "e2e", true)
	lse.Labels["koordinator.sh/qosClass"] = "LSE"
	lseID, _, _ := framework.RunPod(ctx, e.viaProxy, lse, 0)
	t.Cleanup(func() { _ = framework.RemovePod(context.WithoutCancel(ctx), e.direct, lseID) })
	cc := framework.ContainerConfig("nginx", framework.SleepCommand()...)
	cc.Linux.Resources = &runtimeapi.LinuxContainerResources{CpuShares: 512, CpuQuota: 50000, CpuPeriod: 100000}
	_, err := e.viaProxy.CreateContainer(ctx, lseID, cc, lse)
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("LSE container with 500m: %v, want InvalidArgument", err)
	}
	t.Logf("LSE with a fraction of a CPU is refused: %v", err)
	list, err := e.direct.ListContainers(ctx, &runtimeapi.ContainerFilter{PodSandboxId: lseID})
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 0 {
		t.Fatalf("refused LSE container left %d containers behind", len(list))
	}
	if p := poolsOf(t, ctx, e); len(p.Allocations) != 0 || p.LSE != "" {
		t.Fatalf("refused LSE container left CPUs allocated: /debug/pools = %+v", p)
	}
}

// containerAnnotation returns an annotation Tandem gave a container, where the runtime keeps it: a
// proxy adds it to the CreateContainer request, so the CRI status shows it; an NRI plugin adds it to
// the OCI spec, which the verbose status (crictl inspect) shows.
func containerAnnotation(t *testing.T, ctx context.Context, e *env, id, key string) string {
	t.Helper()
	st, err := e.direct.ContainerStatus(ctx, id, true)
	if err != nil {
		t.Fatal(err)
	}
	if !e.nri {
		return st.GetStatus().GetAnnotations()[key]
	}
	var info struct {
		RuntimeSpec struct {
			Annotations map[string]string `json:"annotations"`
		} `json:"runtimeSpec"`
	}
	if err := jsonUnmarshal(st.GetInfo()["info"], &info); err != nil {
		t.Fatalf("verbose status of %s: %v", id, err)
	}
	return info.RuntimeSpec.Annotations[key]
}
