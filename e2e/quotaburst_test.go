//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/tandemkit/tandem/e2e/framework"
)

// quotaBurstConfig is a cpu-burst-config with only the CFS quota burst on: 150% of the limit at most,
// for period seconds (-1 unbounded), while the shared pool's usage is below threshold percent. 150% is
// three steps of a fifth from the base, so a machine busy with other work, where the pool is idle only
// now and then, still lets the test see the whole climb.
func quotaBurstConfig(period, threshold int) string {
	return fmt.Sprintf(`cpu-burst-config: |
  {"clusterStrategy": {"policy": "cfsQuotaBurstOnly", "cfsQuotaBurstPercent": 150, "cfsQuotaBurstPeriodSeconds": %d, "sharePoolThresholdPercent": %d}}
`, period, threshold)
}

// TestCFSQuotaBurst runs the CFS quota burst in the real tandem-proxy against real containerd: an LS pod
// with a 200m limit spins, so the kernel really throttles it, and the loop (actuate/quotaburst) raises its
// container's real cpu.cfs_quota_us, and its pod's, above the 20000 µs the limit gives:
//
//  1. sharePoolThresholdPercent 100, so the pool is idle unless the machine is saturated: the quota
//     climbs by a fifth per throttled second to 150% (24000, 28800, 30000), the pod's by as much.
//  2. cfsQuotaBurstPeriodSeconds 2: the raise has lasted longer, so both go back to 20000, for that
//     reason (tandem_cpu_quota_burst_resets_total{reason="period"}).
//  3. Unbounded again: raised again. sharePoolThresholdPercent 1, which the spinning container alone
//     exceeds (the pool is busy): back to 20000.
//  4. Raised again, then tandem-proxy stops (SIGTERM): back to 20000 before it exits.
//
// The pod cgroup is given the sum of its containers' limits as kubelet would, so cgroup v1's rule that no
// child has more quota than its parent holds the loop to its order (pod first up, last down). The shared
// pool counts the whole node's use apart from LSE, LSR and BE containers, so a machine saturated by other
// work (over 90% of both CPUs) holds the raise back: the failure message then shows the pool's usage.
func TestCFSQuotaBurst(t *testing.T) {
	testCFSQuotaBurst(t, forEachRuntime)
}

// TestCFSQuotaBurstNRI is TestCFSQuotaBurst with tandem-nri as containerd's NRI plugin: the loop is the
// same, fed by the NRI front end's store; stopping tandem-nri puts the quotas back.
func TestCFSQuotaBurstNRI(t *testing.T) {
	testCFSQuotaBurst(t, forNRI)
}

func testCFSQuotaBurst(t *testing.T, each func(*testing.T, envOptions, func(*testing.T, context.Context, *env))) {
	requireRoot(t)
	hier := "/sys/fs/cgroup/cpu"
	if _, err := os.Stat(filepath.Join(hier, "cpu.cfs_quota_us")); err != nil {
		t.Skipf("SKIPPED: this test reads cgroup v1 cpu.cfs_quota_us (none here: %v)", err)
	}
	cfgFile := filepath.Join(t.TempDir(), "slo-config.yaml")
	writeConfig := func(t *testing.T, period, threshold int) {
		t.Helper()
		// Replaced whole, as kubelet swaps a mounted ConfigMap: the watcher never reads half a file.
		tmp := cfgFile + ".tmp"
		if err := os.WriteFile(tmp, []byte(quotaBurstConfig(period, threshold)), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, cfgFile); err != nil {
			t.Fatal(err)
		}
	}
	writeConfig(t, -1, 100)
	each(t, envOptions{proxyArgs: []string{"--slo-config", cfgFile}}, func(t *testing.T, ctx context.Context, e *env) {
		t.Cleanup(func() { writeConfig(t, -1, 100) }) // the next flavor starts from step 1
		cfg := qosPodConfig(t, "burst-ls", "LS", "burstable")
		podDir := filepath.Join(hier, cfg.Linux.CgroupParent)
		// Kubelet's pod cgroup and its quota, the sum of its containers' limits (podCgroup makes pod cgroups
		// only under an existing kubepods; its clean-up removes them and their empty parents).
		if err := os.MkdirAll(podDir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(podDir, "cpu.cfs_quota_us"), []byte("20000"), 0o644); err != nil {
			t.Fatal(err)
		}
		podID, err := e.viaProxy.RunPodSandbox(ctx, cfg, "")
		removeAtCleanup(t, ctx, e, podID)
		if err != nil {
			t.Fatal(err)
		}
		cc := framework.ContainerConfig("spin", "/bin/sh", "-c", "trap 'exit 0' TERM; while :; do :; done")
		cc.Linux.Resources = &runtimeapi.LinuxContainerResources{CpuShares: 204, CpuQuota: 20000, CpuPeriod: 100000}
		ctrID, err := e.viaProxy.CreateContainer(ctx, podID, cc, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.viaProxy.StartContainer(ctx, ctrID); err != nil {
			t.Fatal(err)
		}
		ctrDir := filepath.Join(podDir, ctrID)
		quotas := func() (ctr, pod int64) {
			return readQuota(t, ctrDir), readQuota(t, podDir)
		}
		// waitFor polls until ok holds for the container's and the pod's quotas.
		waitFor := func(what string, within time.Duration, ok func(ctr, pod int64) bool) (int64, int64) {
			t.Helper()
			start := time.Now()
			for {
				c, p := quotas()
				if ok(c, p) {
					t.Logf("%s after %s: container %d, pod %d", what, time.Since(start).Round(100*time.Millisecond), c, p)
					return c, p
				}
				if time.Since(start) > within {
					t.Fatalf("%s: not within %s: container quota %d, pod quota %d; shared pool usage %s, throttled periods %s",
						what, within, c, p, poolUsage(ctx, e), throttledPeriods(ctrDir))
				}
				time.Sleep(200 * time.Millisecond)
			}
		}
		raised := func(c, p int64) bool { return c > 20000 && p == c }
		atBase := func(c, p int64) bool { return c == 20000 && p == 20000 }

		// 1. Idle pool: up to 150%, the pod by as much, and never more.
		waitFor("raised to 150%", 3*time.Minute, func(c, p int64) bool {
			if c > 30000 || p > 30000 {
				t.Fatalf("container quota %d, pod quota %d: want at most 30000 (150%%)", c, p)
			}
			return c == 30000 && p == 30000
		})

		// 2. A raise lasts 2 s at most: back to the base, because of the period.
		before := resets(ctx, t, e, "period")
		writeConfig(t, 2, 100)
		waitFor("back to the base when the period ended", 20*time.Second, atBase)
		if after := resets(ctx, t, e, "period"); after <= before {
			t.Fatalf("resets_total{reason=period} = %v, was %v: the reset was not the period's", after, before)
		}

		// 3. Unbounded again: raised; then the pool is busy: back to the base.
		writeConfig(t, -1, 100)
		waitFor("raised again", 2*time.Minute, raised)
		before = resets(ctx, t, e, "poolBusy")
		writeConfig(t, -1, 1)
		waitFor("back to the base on a busy pool", 20*time.Second, atBase)
		if after := resets(ctx, t, e, "poolBusy"); after <= before {
			t.Fatalf("resets_total{reason=poolBusy} = %v, was %v", after, before)
		}

		// 4. Raised again; tandem-proxy stops: back to the base before it exits.
		writeConfig(t, -1, 100)
		waitFor("raised before the stop", 2*time.Minute, raised)
		if code, err := e.proxy.Stop(ctx); err != nil || code != 0 {
			t.Fatalf("stop Tandem: exit %d, %v", code, err)
		}
		if c, p := quotas(); !atBase(c, p) {
			t.Fatalf("after Tandem stopped: container quota %d, pod quota %d; want 20000 both", c, p)
		}
	})
}

// readQuota reads a cgroup v1 directory's cpu.cfs_quota_us.
func readQuota(t *testing.T, dir string) int64 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "cpu.cfs_quota_us"))
	if err != nil {
		t.Fatal(err)
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// poolUsage is the loop's tandem_cpu_quota_burst_share_pool_usage_ratio, for failure messages.
func poolUsage(ctx context.Context, e *env) string {
	text, err := e.proxy.Metrics(ctx)
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "tandem_cpu_quota_burst_share_pool_usage_ratio "); ok {
			return v
		}
	}
	return "not exported"
}

// resets reads tandem_cpu_quota_burst_resets_total{reason} from the proxy's /metrics.
func resets(ctx context.Context, t *testing.T, e *env, reason string) float64 {
	t.Helper()
	text, err := e.proxy.Metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	prefix := `tandem_cpu_quota_burst_resets_total{reason="` + reason + `"} `
	for _, l := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(l, prefix); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	return 0
}

// throttledPeriods is the container's nr_throttled, for failure messages.
func throttledPeriods(dir string) string {
	b, err := os.ReadFile(filepath.Join(dir, "cpu.stat"))
	if err != nil {
		return err.Error()
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "nr_throttled "); ok {
			return v
		}
	}
	return "?"
}
