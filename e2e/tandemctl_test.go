//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tandemkit/tandem/e2e/framework"
)

// tandemctlView is the part of `tandemctl -o json pods` this test reads.
type tandemctlView struct {
	CgroupVersion int `json:"cgroupVersion"`
	Containers    []struct {
		Namespace   string         `json:"namespace"`
		Pod         string         `json:"pod"`
		Name        string         `json:"container"`
		ID          string         `json:"containerID"`
		QoS         string         `json:"qosClass"`
		Cpuset      tandemctlField `json:"cpuset"`
		CPUQuota    tandemctlField `json:"cpuQuota"`
		CPUShares   tandemctlField `json:"cpuShares"`
		CPUIdle     tandemctlField `json:"cpuIdle"`
		MemoryLimit tandemctlField `json:"memoryLimit"`
	} `json:"containers"`
}

type tandemctlField struct {
	Kernel  string `json:"kernel"`
	Applied string `json:"applied"`
	Unread  string `json:"unread"`
	Differs bool   `json:"differs"`
}

// buildTandemctl builds ./cmd/tandemctl as an operator would install it, where any user may run it.
func buildTandemctl(t *testing.T, ctx context.Context) string {
	t.Helper()
	root, err := framework.RepoRoot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := framework.OpenTempDir("tandemctl")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	bin := filepath.Join(dir, "tandemctl")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/tandemctl")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/tandemctl: %v\n%s", err, out)
	}
	return bin
}

func tandemctl(t *testing.T, ctx context.Context, bin string, args ...string) (string, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		return stdout.String(), fmt.Errorf("tandemctl %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// TestTandemctl runs the pods of Koordinator's documented QoS example, scaled to this machine, through the
// real tandem-proxy and real containerd, and checks that `tandemctl pods` shows for each container the
// cpuset, shares, quota and memory limit that its cgroup files hold (found independently, through
// /proc/<pid>/cgroup), that `tandemctl pools` shows the LSE container's exclusive CPU, that a value
// changed behind the proxy's back is flagged as a difference, and that a user other than root is told the
// proxy's store is root's.
func TestTandemctl(t *testing.T) {
	forEachRuntime(t, envOptions{}, func(t *testing.T, ctx context.Context, e *env) {
		bin := buildTandemctl(t, ctx)
		addr := "--proxy-debug-socket=" + e.proxy.DebugSocket

		// A plain pod (no class label), an LSE pod with one whole CPU and a BE pod with batch
		// resources in a pod cgroup of its own, as kubelet would create it.
		_, plainIDs := e.runPod(t, ctx, e.viaProxy, "plain", true, 1)
		_, lse, err := classPod(t, ctx, e, e.viaProxy, "nginx-lse", "LSE", 1000)
		if err != nil {
			t.Fatal(err)
		}
		parent, be := runBEPod(t, ctx, e, "nginx-be")
		exclusive := cpusetOf(t, ctx, e, lse)
		// The LS/BE pools move off the LSE CPU asynchronously; wait until the kernel shows it.
		other := map[string]string{"0": "1", "1": "0"}[exclusive]
		waitCPUSet(t, ctx, e, plainIDs[0], other, 2*time.Second)
		waitCPUSet(t, ctx, e, be, other, 2*time.Second)

		table, err := tandemctl(t, ctx, bin, addr, "pods")
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("tandemctl pods:\n%s", table)
		out, err := tandemctl(t, ctx, bin, addr, "-o", "json", "pods")
		if err != nil {
			t.Fatal(err)
		}
		var view tandemctlView
		if err := json.Unmarshal([]byte(out), &view); err != nil {
			t.Fatalf("tandemctl -o json pods is not JSON: %v\n%s", err, out)
		}
		want := map[string]struct {
			pod, class string
			idle       string
		}{
			plainIDs[0]: {"plain", "LS", "-"}, // no class label, no kubelet cgroup parent: the shared pool
			lse:         {"nginx-lse", "LSE", "-"},
			be:          {"nginx-be", "BE", "1"},
		}
		seen := 0
		for _, c := range view.Containers {
			w, ok := want[c.ID]
			if !ok {
				continue
			}
			seen++
			pid := containerPID(t, ctx, e.direct, c.ID)
			ref := c.Namespace + "/" + c.Pod + " " + c.Name
			if c.Namespace != "e2e" || c.Pod != w.pod {
				t.Errorf("container %s shown in pod %s/%s, want e2e/%s", c.ID[:12], c.Namespace, c.Pod, w.pod)
			}
			if c.QoS != w.class {
				t.Errorf("%s: QoS class %q, want %s", ref, c.QoS, w.class)
			}
			for _, f := range []struct {
				name       string
				got        tandemctlField
				ctrl, file string
				want       func(string) string
			}{
				{"cpuset", c.Cpuset, "cpuset", "cpuset.cpus", func(s string) string { return s }},
				{"shares", c.CPUShares, "cpu", "cpu.shares", func(s string) string { return s }},
				{"quota", c.CPUQuota, "cpu", "cpu.cfs_quota_us", func(s string) string {
					period := hostCgroupFile(t, pid, "cpu", "cpu.cfs_period_us")
					if s == "-1" {
						return "max/" + period
					}
					return s + "/" + period
				}},
			} {
				real := f.want(hostCgroupFile(t, pid, f.ctrl, f.file))
				if f.got.Kernel != real || f.got.Unread != "" {
					t.Errorf("%s: tandemctl shows %s %q (unread %q), the cgroup file holds %q", ref, f.name, f.got.Kernel, f.got.Unread, real)
				}
				if f.got.Differs {
					t.Errorf("%s: %s flagged as differing (kernel %q, applied %q) though nothing touched it", ref, f.name, f.got.Kernel, f.got.Applied)
				}
			}
			if w.idle != "-" && c.CPUIdle.Kernel != w.idle {
				t.Errorf("%s: cpu.idle %q (unread %q), want %s", ref, c.CPUIdle.Kernel, c.CPUIdle.Unread, w.idle)
			}
			if !strings.Contains(table, c.Namespace+"/"+c.Pod) || !strings.Contains(table, c.Cpuset.Kernel) {
				t.Errorf("%s: the table lacks the pod or its cpuset %s", ref, c.Cpuset.Kernel)
			}
		}
		if seen != len(want) {
			t.Fatalf("tandemctl shows %d of the %d containers:\n%s", seen, len(want), out)
		}
		if n := strings.Count(table, "\n"); n < 4 {
			t.Errorf("table has %d lines, want a header and three rows", n)
		}

		// BE memory limit as the file says, in the table's units.
		if got := readCgroup(t, "memory", filepath.Join(parent, be), "memory.limit_in_bytes"); got != fmt.Sprint(64<<20) {
			t.Fatalf("BE memory.limit_in_bytes %s, want 64 MiB", got)
		}
		for _, c := range view.Containers {
			if c.ID == be && c.MemoryLimit.Kernel != "64Mi" {
				t.Errorf("BE memory limit shown %q, want 64Mi", c.MemoryLimit.Kernel)
			}
		}

		pools, err := tandemctl(t, ctx, bin, addr, "pools")
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("tandemctl pools:\n%s", pools)
		lseRow := lineWith(pools, "e2e/nginx-lse")
		if f := strings.Fields(lseRow); len(f) < 4 || f[2] != "LSE" || f[3] != exclusive {
			t.Errorf("pools: LSE row %q, want class LSE and CPU %s", lseRow, exclusive)
		}
		if f := strings.Fields(lineWith(pools, "LS ")); len(f) < 2 || f[1] != other {
			t.Errorf("pools: LS pool %v, want %s", f, other)
		}

		// Someone changes the plain container's shares behind the proxy's back: tandemctl flags it.
		shares := filepath.Join("/sys/fs/cgroup/cpu/k8s.io", plainIDs[0], "cpu.shares")
		if err := os.WriteFile(shares, []byte("777"), 0); err != nil {
			t.Fatalf("change %s: %v", shares, err)
		}
		table, err = tandemctl(t, ctx, bin, addr, "pods")
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("tandemctl pods after cpu.shares was changed by hand:\n%s", table)
		row := lineWith(table, "e2e/plain")
		if !strings.Contains(row, "777 (proxy ") || !strings.Contains(table, "1 value differs") {
			t.Errorf("changed shares not flagged; row %q", row)
		}

		// Not root: the store holds every pod's annotations, secrets among them.
		var stderr bytes.Buffer
		nobody := exec.CommandContext(ctx, bin, addr, "pods")
		nobody.Stderr = &stderr
		nobody.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		if err := nobody.Run(); err == nil || !strings.Contains(stderr.String(), "tandem-proxy's debug socket "+e.proxy.DebugSocket+" is root's alone: run tandemctl as root") {
			t.Errorf("tandemctl as nobody: %v, %s; want it refused and told to run as root", err, stderr.String())
		}

		// The proxy gone: a clear error and a non-zero exit.
		if _, err := e.proxy.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		_, err = tandemctl(t, ctx, bin, addr, "pods")
		if err == nil || !strings.Contains(err.Error(), "tandem-proxy does not answer on "+e.proxy.DebugSocket+" (is it running? set --proxy-debug-socket)") {
			t.Errorf("tandemctl with the proxy stopped: %v, want the \"does not answer\" error", err)
		}
	})
}

// lineWith returns the first line of s that contains sub.
func lineWith(s, sub string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			return l
		}
	}
	return ""
}
