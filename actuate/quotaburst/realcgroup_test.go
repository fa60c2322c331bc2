package quotaburst

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tandemkit/tandem/resource/cgroup"
	"github.com/tandemkit/tandem/resource/qos"
)

// TestRealCgroupV1 runs the loop on real cgroup v1 cgroups made for the test under the cpu hierarchy, where
// the kernel itself refuses a container quota above its pod's and a quota below the burst: a raise and a
// reset only succeed in the right order. It skips where the machine has no cgroup v1 cpu hierarchy with
// the burst file, or the test is not root.
func TestRealCgroupV1(t *testing.T) {
	const hier = "/sys/fs/cgroup/cpu"
	if os.Geteuid() != 0 {
		t.Skip("SKIPPED: making cgroups needs root")
	}
	if _, err := os.Stat(filepath.Join(hier, "cpu.cfs_burst_us")); err != nil {
		t.Skipf("SKIPPED: no cgroup v1 cpu hierarchy with cpu.cfs_burst_us here: %v", err)
	}
	top := fmt.Sprintf("/tandem-quotaburst-test-%d", os.Getpid())
	podRel, ctrRel := top+"/podp", top+"/podp/a"
	for _, d := range []string{top, podRel, ctrRel} {
		if err := os.Mkdir(filepath.Join(hier, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, d := range []string{ctrRel, podRel, top} {
			if err := os.Remove(filepath.Join(hier, d)); err != nil {
				t.Errorf("remove test cgroup %s: %v", d, err)
			}
		}
	})
	write := func(rel, file string, v int64) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(hier, rel, file), []byte(strconv.FormatInt(v, 10)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// As kubelet and runc leave them: the pod's quota the sum of its containers' limits, the burst as the
	// cpuburst policy sets it (100% of the quota).
	write(podRel, "cpu.cfs_quota_us", 20000)
	write(ctrRel, "cpu.cfs_quota_us", 20000)
	write(ctrRel, "cpu.cfs_burst_us", 20000)

	real, err := cgroup.New("/sys/fs/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, root: "/sys/fs/cgroup", throttled: map[string]int64{}, now: time.Unix(1_700_000_000, 0), reg: prometheus.NewRegistry(),
		w:    &strictWriter{Writer: real, Tree: real.(cgroup.Tree), kernel: true},
		ctrs: []Container{{ID: "a", Name: "a", PodID: "p", Class: qos.LS, PodCgroupParent: podRel, Quota: 20000, Period: 100000, Running: true}}}
	h.l, err = New(quotaCfg(nil), Deps{Latest: h.snapshot, Containers: h.containers, Cgroups: h.w, Registerer: h.reg})
	if err != nil {
		t.Fatal(err)
	}
	h.step(idle)
	h.step(idle, "a")
	if got, pod := h.quota(ctrRel), h.quota(podRel); got != 24000 || pod != 24000 {
		t.Fatalf("after a throttled step on an idle pool: container %d, pod %d; want 24000 both (writes: %s)", got, pod, joined(h.w.writes()))
	}
	// A burst the size of the raised quota: the reset must lower it before the quota.
	write(ctrRel, "cpu.cfs_burst_us", 24000)
	h.step(busy, "a")
	if got, pod := h.quota(ctrRel), h.quota(podRel); got != 20000 || pod != 20000 {
		t.Fatalf("after a busy step: container %d, pod %d; want 20000 both (writes: %s)", got, pod, joined(h.w.writes()))
	}
	if b, err := h.w.ReadFile(ctrRel, "cpu.cfs_burst_us"); err != nil || b != "20000" {
		t.Fatalf("container burst = %q, %v; want 20000", b, err)
	}
}
