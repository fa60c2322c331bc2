package suppress_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"

	"github.com/tandemkit/tandem/metrics/collector"
	"github.com/tandemkit/tandem/metrics/headroom"
	"github.com/tandemkit/tandem/metrics/suppress"
	"github.com/tandemkit/tandem/resource/cgroup"
	"github.com/tandemkit/tandem/resource/qos"
)

// TestRealStealHeadroom holds real BE work on this machine's cgroup v1 cpu hierarchy. Two spinning
// processes in a BE cgroup want both CPUs; a model host takes back whatever the guest runs above 1.2
// CPUs, as steal (a host's bandwidth limit, which this machine's host has but does not apply on demand,
// so the steal figure is the model's while every CPU figure is the kernel's). The loop, with suppression
// disabled as by default, must bring BE's real use under what the host gives, and keep at least 80% of
// it, through the BE parent's CFS quota alone; stopping lifts the quota. Skips without root or a v1 cpu
// hierarchy.
func TestRealStealHeadroom(t *testing.T) {
	const (
		hier  = "/sys/fs/cgroup/cpu"
		gives = 1200 // milli-cores the model host gives before it takes back
	)
	if os.Geteuid() != 0 {
		t.Skip("SKIPPED: making cgroups needs root")
	}
	if _, err := os.Stat(filepath.Join(hier, "cpu.cfs_quota_us")); err != nil {
		t.Skipf("SKIPPED: no cgroup v1 cpu hierarchy here: %v", err)
	}
	_, ctx := ktesting.NewTestContext(t)
	parent := fmt.Sprintf("/tandem-headroom-test-%d", os.Getpid())
	pod := parent + "/pod"
	for _, d := range []string{parent, pod} {
		if err := os.Mkdir(filepath.Join(hier, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	var spinners []*exec.Cmd
	t.Cleanup(func() {
		for _, c := range spinners {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
		for _, d := range []string{pod, parent} {
			if err := os.Remove(filepath.Join(hier, d)); err != nil {
				t.Errorf("remove test cgroup %s: %v", d, err)
			}
		}
	})
	for range 2 {
		c := exec.Command("sh", "-c", "while :; do :; done")
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		spinners = append(spinners, c)
		if err := os.WriteFile(filepath.Join(hier, pod, "cgroup.procs"), []byte(strconv.Itoa(c.Process.Pid)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// BE's real use: the spinners' CPU time from /proc, in clock ticks (100 per second).
	ticks := func() int64 {
		var sum int64
		for _, c := range spinners {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", c.Process.Pid))
			if err != nil {
				t.Fatal(err)
			}
			f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
			u, _ := strconv.ParseInt(f[11], 10, 64) // utime: field 14 of the line
			s, _ := strconv.ParseInt(f[12], 10, 64) // stime
			sum += u + s
		}
		return sum
	}

	w, err := cgroup.New("/sys/fs/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	hcfg := headroom.DefaultConfig()
	hcfg.Enable, hcfg.RaiseAfterSamples = true, 3 // raise faster than on a node: the test has seconds, not minutes
	h, err := headroom.New(hcfg, "test", nil)
	if err != nil {
		t.Fatal(err)
	}
	scfg := suppress.DefaultConfig()
	scfg.BECgroupParent = parent
	scfg.CPUSuppressPolicy = suppress.PolicyCFSQuota // suppression disabled: the policy only has to be one this test can apply
	l, err := suppress.New(scfg, suppress.Deps{Latest: func() *collector.Snapshot { return nil }, Cgroups: w, Headroom: h})
	if err != nil {
		t.Fatal(err)
	}

	const interval = 500 * time.Millisecond
	prev, at := ticks(), time.Now()
	var used []int64 // BE's real use per sample, milli-cores
	for i := range 60 {
		time.Sleep(interval)
		cur, now := ticks(), time.Now()
		be := (cur - prev) * 10 * int64(time.Second) / int64(now.Sub(at)) // ticks of 10 ms → milli-cores
		prev, at = cur, now
		used = append(used, be)
		snap := &collector.Snapshot{
			Time:       now,
			Capacity:   collector.Usage{CPUMilli: 2000},
			Node:       collector.Usage{CPUMilli: be},
			Steal:      collector.Steal{CPUMilli: max(be-gives, 0)},
			Containers: []collector.ContainerUsage{{Target: collector.Target{Pod: "be", QoS: qos.BE}, Usage: collector.Usage{CPUMilli: be}}},
		}
		if _, err := l.Step(ctx, snap); err != nil {
			t.Fatalf("sample %d: %v", i, err)
		}
	}
	// The last 20 samples: held under what the host gives (a sample may run over by a tick or two of
	// the accounting), and filling most of it.
	var sum int64
	tail := used[len(used)-20:]
	for _, u := range tail {
		sum += u
	}
	mean := sum / int64(len(tail))
	st := h.Status()
	t.Logf("BE use per sample (milli-cores): %v; holds %d, ceiling %dm", used, st.Holds, st.CeilingMilli)
	if used[0] < gives+100 {
		t.Skipf("SKIPPED: BE got only %dm of this machine before any ceiling (other work runs here): the model host never takes CPU back, so nothing is shown", used[0])
	}
	over := 0
	for _, u := range tail {
		if u > gives+50 {
			over++
		}
	}
	// The ceiling probes for the line now and then (additive increase): one sample over it per probe.
	if over > 3 {
		t.Errorf("BE ran above what the host gives (%dm) in %d of the last 20 samples; want at most 3", gives, over)
	}
	if mean > gives || mean < gives*80/100 {
		t.Errorf("BE's mean use over the last 20 samples is %dm; want between 80%% of what the host gives (%dm) and it (%dm)", mean, gives*80/100, gives)
	}
	if q, err := w.(cgroup.Tree).CPUMax(parent); err != nil || q.Unlimited() {
		t.Errorf("BE parent quota %+v, %v; want the ceiling in force", q, err)
	}
}
