//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"

	"github.com/tandemkit/tandem/e2e/framework"
	"github.com/tandemkit/tandem/metrics/interference"
)

// TestLSWaitGuard runs the LS wait guard in the real tandem-proxy binary, with the eBPF run-queue
// collector on real containers (tracefs mounted by the test if the machine has not), resource-threshold-config
// suppression off and lsWaitGuard on with a 1 ms threshold, and checks both ways it can judge:
//
//   - BE's doing: an LS pod and a BE pod each spin one thread on the same CPU. The BE pod's cgroup is
//     given cpu.idle 0 and shares 1024, which stands for BE work the CPU controller cannot demote
//     (kernel threads working for it, a kernel without cpu.idle): LS then waits a scheduler slice at
//     every turn. The guard must clamp the BE parent's CFS quota (in beCFSPeriodMicros' 1 s period),
//     judge that LS's waits fell, keep the clamp, and LS's run-queue wait per second, read from
//     /metrics as a user would, must have fallen; SIGTERM gives the BE parent its unlimited quota back.
//   - Not BE's doing: three threads of an LS pod spin on one CPU, BE (with Tandem's cpu.idle) on the
//     other. LS waits behind its own threads; the guard holds BE, sees LS's waits unchanged, and must
//     give the CPU back (the BE parent unlimited again) and say why in tandemctl interference.
func TestLSWaitGuard(t *testing.T) {
	requireRoot(t)
	requireTracefs(t)
	if _, err := os.Stat("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"); err != nil {
		t.Skip("SKIPPED: this test reads cgroup v1 cpu files, and this host has no v1 cpu hierarchy; the unit tests cover the decisions")
	}
	cpus, err := onlineCPUs()
	if err != nil {
		t.Fatal(err)
	}
	if len(cpus) < 2 {
		t.Skipf("SKIPPED: LS and BE need a CPU each in the second case; this machine runs on %v", cpus)
	}
	shared, other := cpus[len(cpus)-1], cpus[0]
	bin := buildTandemctl(t, context.Background())

	t.Run("BE's doing", func(t *testing.T) {
		g := startGuard(t, "lsw-a")
		spinPod(t, g.ctx, g.e, "web", shared, 1)
		bePod, beCtr := g.bePod(t, "batch", shared, 1)
		// Undemotable BE: the pod group competes as an equal of LS. cpu.idle first: an idle group refuses
		// writes to its shares (EINVAL).
		for _, w := range [][2]string{{"cpu.idle", "0"}, {"cpu.shares", "1024"}} {
			if err := os.WriteFile(filepath.Join("/sys/fs/cgroup/cpu", bePod, w[0]), []byte(w[1]), 0); err != nil {
				t.Fatalf("%s of the BE pod: %v", w[0], err)
			}
		}
		t.Logf("web (LS) and batch (BE, container %s) spin one thread each on CPU %d; the BE pod competes at cpu.idle 0, shares 1024", beCtr[:12], shared)

		text := g.metrics(t)
		before, t0 := runQueueOf(text, "web"), time.Now()
		st := g.waitStatus(t, bin, "a hold", 60*time.Second, func(s interference.Status) bool { return s.Holds > 0 })
		t.Logf("held: %s", st.LastHoldReason)
		held := runQueueOf(g.metrics(t), "web")
		heldAt := time.Now()
		quota, period := g.beQuota(t)
		if quota == "-1" || period != "1000000" {
			t.Errorf("BE parent after the hold: quota %s period %s; want a clamp in beCFSPeriodMicros' 1000000", quota, period)
		}
		st = g.waitStatus(t, bin, "a verdict", 60*time.Second, func(s interference.Status) bool { return s.LastVerdict != "" })
		t.Logf("verdict: %s", st.LastVerdict)
		if !strings.HasPrefix(st.LastVerdict, "BE's doing") || st.Releases != 0 || !st.Limited {
			t.Fatalf("the guard gave the CPU back although BE kept LS waiting: %+v", st)
		}
		// What a user checks: LS waits less with BE held than before.
		time.Sleep(3 * time.Second)
		after, t2 := runQueueOf(g.metrics(t), "web"), time.Now()
		rateBefore := (held.sum - before.sum) / heldAt.Sub(t0).Seconds()
		rateAfter := (after.sum - held.sum) / t2.Sub(heldAt).Seconds()
		t.Logf("web waited %.3f s per second before the hold, %.3f s per second with BE held (BE parent %s/%s)", rateBefore, rateAfter, quota, period)
		if rateAfter > 0.75*rateBefore {
			t.Errorf("web waited %.3f s per second with BE held against %.3f before; the hold did not help LS", rateAfter, rateBefore)
		}
		if v, ok := metricValue(g.metrics(t), "tandem_interference_holds_total"); !ok || v < 1 {
			t.Errorf("tandem_interference_holds_total = %v (present %v), want at least 1", v, ok)
		}
		stopProxy(t, g.ctx, g.e)
		if q, p := g.beQuota(t); q != "-1" || p != "100000" {
			t.Errorf("BE parent after SIGTERM: quota %s period %s, want -1 in 100000", q, p)
		}
	})

	t.Run("not BE's doing", func(t *testing.T) {
		g := startGuard(t, "lsw-b")
		spinPod(t, g.ctx, g.e, "web", shared, 3)
		g.bePod(t, "batch", other, 1)
		t.Logf("web (LS) spins 3 threads on CPU %d, batch (BE, cpu.idle as Tandem sets it) one on CPU %d", shared, other)
		st := g.waitStatus(t, bin, "a hold", 60*time.Second, func(s interference.Status) bool { return s.Holds > 0 })
		t.Logf("held: %s", st.LastHoldReason)
		st = g.waitStatus(t, bin, "a verdict", 60*time.Second, func(s interference.Status) bool { return s.LastVerdict != "" })
		t.Logf("verdict: %s", st.LastVerdict)
		if !strings.HasPrefix(st.LastVerdict, "not BE's doing") || st.Releases != 1 || st.Limited {
			t.Fatalf("the guard kept BE held although LS waited behind its own threads: %+v", st)
		}
		if q, _ := g.beQuota(t); q != "-1" {
			t.Errorf("BE parent after the release: quota %s, want -1", q)
		}
		out, err := tandemctl(t, g.ctx, bin, "--proxy-debug-socket", g.e.proxy.DebugSocket, "interference")
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"last verdict   not BE's doing", "ignoring       LS waits hold BE no more until"} {
			if !strings.Contains(out, want) {
				t.Errorf("tandemctl interference lacks %q:\n%s", want, out)
			}
		}
		t.Logf("tandemctl interference:\n%s", out)
	})
}

// guardEnv is tandem-proxy with the LS wait guard on, under a cgroup root of the test's own.
type guardEnv struct {
	ctx  context.Context
	e    *env
	root string
}

func startGuard(t *testing.T, name string) *guardEnv {
	t.Helper()
	root := fmt.Sprintf("/tdm-%s-%d", name, os.Getpid())
	if err := os.MkdirAll(filepath.Join("/sys/fs/cgroup/cpu", root, "kubepods", "besteffort"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeCgroupTree(t, root) })
	cfgFile := filepath.Join(t.TempDir(), "slo-config.yaml")
	cfg := `resource-threshold-config: |
  {"clusterStrategy": {"enable": false, "lsWaitGuard": true, "lsWaitThresholdMicros": 1000}}
`
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	_, ctx := ktesting.NewTestContext(t)
	e := newEnv(t, ctx, flavors()[0], envOptions{proxyArgs: []string{"--slo-config", cfgFile, "--kubelet-cgroup-root", root,
		"--run-queue-latency", "--run-queue-interval=1s"}})
	return &guardEnv{ctx: ctx, e: e, root: root}
}

// bePod runs a BE pod, in a pod cgroup under the test's BE parent as kubelet would make it, whose one
// container spins `threads` shell loops on cpu; it returns the pod's cgroup parent and the container's id.
func (g *guardEnv) bePod(t *testing.T, name string, cpu, threads int) (string, string) {
	t.Helper()
	uid := framework.NewUID()
	parent := g.root + "/kubepods/besteffort/pod" + uid
	podCgroup(t, parent)
	cfg := framework.PodSandboxConfig(name, "e2e", true)
	cfg.Metadata.Uid = uid
	cfg.Linux.CgroupParent = parent
	cfg.Labels["koordinator.sh/qosClass"] = "BE"
	podID, err := g.e.viaProxy.RunPodSandbox(g.ctx, cfg, "")
	if err != nil {
		t.Fatal(err)
	}
	removeAtCleanup(t, g.ctx, g.e, podID)
	loops := "while :; do :; done"
	for range threads - 1 {
		loops = "while :; do :; done & " + loops
	}
	id, err := g.e.viaProxy.CreateContainer(g.ctx, podID, framework.ContainerConfig("work", "/bin/sh", "-c", fmt.Sprintf("exec taskset -c %d sh -c '%s'", cpu, loops)), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.e.viaProxy.StartContainer(g.ctx, id); err != nil {
		t.Fatal(err)
	}
	return parent, id
}

func (g *guardEnv) metrics(t *testing.T) string {
	t.Helper()
	text, err := g.e.proxy.Metrics(g.ctx)
	if err != nil {
		t.Fatal(err)
	}
	return text
}

// beQuota reads the BE parent's CFS quota and period.
func (g *guardEnv) beQuota(t *testing.T) (quota, period string) {
	t.Helper()
	dir := filepath.Join("/sys/fs/cgroup/cpu", g.root, "kubepods", "besteffort")
	return strings.TrimSpace(readFile(t, filepath.Join(dir, "cpu.cfs_quota_us"))), strings.TrimSpace(readFile(t, filepath.Join(dir, "cpu.cfs_period_us")))
}

// waitStatus polls `tandemctl interference -o json` until done says so.
func (g *guardEnv) waitStatus(t *testing.T, bin, what string, within time.Duration, done func(interference.Status) bool) interference.Status {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		out, err := tandemctl(t, g.ctx, bin, "--proxy-debug-socket", g.e.proxy.DebugSocket, "interference", "-o", "json")
		if err != nil {
			t.Fatal(err)
		}
		var s interference.Status
		if err := json.Unmarshal([]byte(out), &s); err != nil {
			t.Fatalf("tandemctl interference -o json: %v\n%s", err, out)
		}
		if done(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s within %v; the guard's last status: %+v", what, within, s)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
