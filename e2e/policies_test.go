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
	var made []string
	for _, ctrl := range []string{"cpu", "cpuacct", "cpuset", "memory", "pids", "blkio", "devices", "freezer"} {
		dir := filepath.Join("/sys/fs/cgroup", ctrl, parent)
		if _, err := os.Stat(filepath.Dir(filepath.Dir(dir))); err != nil {
			continue
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatalf("create pod cgroup %s: %v", dir, err)
		}
		made = append(made, dir)
	}
	t.Cleanup(func() {
		// Innermost first; the containers' cgroups are gone once their pod was removed.
		for _, d := range made {
			for p := d; p != filepath.Dir(filepath.Join("/sys/fs/cgroup", filepath.Base(filepath.Dir(filepath.Dir(d))))); p = filepath.Dir(p) {
				if filepath.Base(p) == "kubepods" || filepath.Base(filepath.Dir(p)) == "kubepods" || filepath.Base(p) == filepath.Base(d) {
					_ = os.Remove(p)
				}
				if filepath.Base(p) == "kubepods" {
					break
				}
			}
		}
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
// is refused with InvalidArgument and leaves nothing behind.
func TestBuiltinPolicies(t *testing.T) {
	forEachRuntime(t, envOptions{}, func(t *testing.T, ctx context.Context, e *env) {
		uid := framework.NewUID()
		parent := "/kubepods/besteffort/pod" + uid
		podCgroup(t, parent)

		cfg := framework.PodSandboxConfig("nginx-be", "e2e", true)
		cfg.Metadata.Uid = uid
		cfg.Linux.CgroupParent = parent
		cfg.Labels["koordinator.sh/qosClass"] = "BE"
		cfg.Annotations["node.koordinator.sh/extended-resource-spec"] =
			`{"containers":{"c0":{"requests":{"kubernetes.io/batch-cpu":"1k","kubernetes.io/batch-memory":"64Mi"},"limits":{"kubernetes.io/batch-cpu":"1500","kubernetes.io/batch-memory":"64Mi"}}}}`
		podID, ids, err := framework.RunPod(ctx, e.viaProxy, cfg, 1)
		if podID != "" {
			t.Cleanup(func() {
				cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
				defer cancel()
				_ = framework.RemovePod(cctx, e.direct, podID)
			})
		}
		if err != nil {
			t.Fatal(err)
		}
		ctrDir := filepath.Join(parent, ids[0])
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
		st, err := e.direct.ContainerStatus(ctx, ids[0], false)
		if err != nil {
			t.Fatal(err)
		}
		if got := st.GetStatus().GetAnnotations()["tandem.io/qos-class"]; got != "BE" {
			t.Errorf("container annotation tandem.io/qos-class = %q, want BE", got)
		}

		// LSE with 500m: refused, nothing created.
		lse := framework.PodSandboxConfig("nginx-lse", "e2e", true)
		lse.Labels["koordinator.sh/qosClass"] = "LSE"
		lseID, _, _ := framework.RunPod(ctx, e.viaProxy, lse, 0)
		t.Cleanup(func() { _ = framework.RemovePod(context.WithoutCancel(ctx), e.direct, lseID) })
		cc := framework.ContainerConfig("nginx", framework.SleepCommand()...)
		cc.Linux.Resources = &runtimeapi.LinuxContainerResources{CpuShares: 512, CpuQuota: 50000, CpuPeriod: 100000}
		_, err = e.viaProxy.CreateContainer(ctx, lseID, cc, lse)
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
	})
}
