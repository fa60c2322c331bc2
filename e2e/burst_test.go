//go:build e2e

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/tandemkit/tandem/e2e/framework"
	"github.com/tandemkit/tandem/resource/cgroup"
)

// burstConfig switches the CFS burst on at half the quota, as an operator's cpu-burst-config would.
const burstConfig = `cpu-burst-config: |
  {"clusterStrategy": {"policy": "cpuBurstOnly", "cpuBurstPercent": 50}}
`

// TestCPUBurstThroughTheProxy: the cpuburst policy returns the burst in its Adjustment and tandem-proxy
// applies it to real containers. On cgroup v1, where runc refuses unified resources, the proxy writes
// cpu.cfs_burst_us into the cgroup containerd made for the container after the start; on v2 runc writes
// cpu.max.burst. A downward resize through the proxy succeeds, which needs the lower burst in place
// before runc lowers the quota (the kernel refuses a quota below the burst).
func TestCPUBurstThroughTheProxy(t *testing.T) {
	w, err := cgroup.New("/sys/fs/cgroup")
	if err != nil {
		t.Skipf("SKIPPED: no cgroup hierarchy: %v", err)
	}
	file, dirOf := "cpu.cfs_burst_us", func(rel string) string { return filepath.Join("/sys/fs/cgroup/cpu", rel) }
	if w.Version() == 2 {
		file, dirOf = "cpu.max.burst", func(rel string) string { return filepath.Join("/sys/fs/cgroup", rel) }
	}
	if !w.Supports(file) {
		t.Skipf("SKIPPED: the kernel has no %s (CFS burst needs Linux 5.14+)", file)
	}
	cfgFile := filepath.Join(t.TempDir(), "slo-config.yaml")
	if err := os.WriteFile(cfgFile, []byte(burstConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	forEachRuntime(t, envOptions{proxyArgs: []string{"--slo-config", cfgFile}}, func(t *testing.T, ctx context.Context, e *env) {
		cfg := qosPodConfig(t, "web-ls", "LS", "burstable")
		podID, err := e.viaProxy.RunPodSandbox(ctx, cfg, "")
		removeAtCleanup(t, ctx, e, podID)
		if err != nil {
			t.Fatal(err)
		}
		cc := framework.ContainerConfig("app", framework.SleepCommand()...)
		cc.Linux.Resources = &runtimeapi.LinuxContainerResources{CpuShares: 1024, CpuQuota: 100000, CpuPeriod: 100000}
		ctrID, err := e.viaProxy.CreateContainer(ctx, podID, cc, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.viaProxy.StartContainer(ctx, ctrID); err != nil {
			t.Fatal(err)
		}
		dir := dirOf(filepath.Join(cfg.Linux.CgroupParent, ctrID))
		read := func(name string) string {
			t.Helper()
			b, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			return string(b[:len(b)-1])
		}
		if got := read(file); got != "50000" {
			t.Fatalf("%s of the running container = %s, want 50000 (50%% of its 100000 µs quota)", file, got)
		}
		// A downward resize, as kubelet's in-place resize sends it.
		if err := e.viaProxy.UpdateContainerResources(ctx, ctrID,
			&runtimeapi.ContainerResources{Linux: &runtimeapi.LinuxContainerResources{CpuShares: 512, CpuQuota: 40000, CpuPeriod: 100000}}); err != nil {
			t.Fatalf("a downward resize through the proxy failed: %v", err)
		}
		if got := read(file); got != "20000" {
			t.Fatalf("%s after the resize = %s, want 20000", file, got)
		}
		if w.Version() == 1 {
			if got := read("cpu.cfs_quota_us"); got != "40000" {
				t.Fatalf("cpu.cfs_quota_us after the resize = %s, want 40000", got)
			}
		}
	})
}
