//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tandemkit/tandem/e2e/framework"
	"github.com/tandemkit/tandem/metrics/collector/bpf"
)

// tracefsDir is where the agent looks for tracefs first (collector.FindTracefs), and where this test
// mounts it when neither that nor debugfs' tracing directory has the sched tracepoints.
const tracefsDir = "/sys/kernel/tracing"

// requireTracefs makes sure the sched tracepoints are visible, mounting tracefs when they are not, and
// unmounts it when the test ends if it mounted it. It skips only where the mount itself is impossible
// (no tracefs in this kernel, no right to mount), or where this kernel refuses BPF to root.
func requireTracefs(t *testing.T) {
	t.Helper()
	if !fileExists("/sys/kernel/debug/tracing/events/sched/sched_switch/id") && !fileExists(tracefsDir+"/events/sched/sched_switch/id") {
		if err := unix.Mount("nodev", tracefsDir, "tracefs", 0, ""); err != nil {
			t.Skipf("SKIPPED: tracefs is not mounted and cannot be: mount -t tracefs nodev %s: %v", tracefsDir, err)
		}
		t.Logf("mounted tracefs on %s for this test", tracefsDir)
		t.Cleanup(func() {
			if err := unix.Unmount(tracefsDir, 0); err != nil {
				t.Errorf("unmount the tracefs this test mounted (umount %s by hand): %v", tracefsDir, err)
			}
		})
		if !fileExists(tracefsDir + "/events/sched/sched_switch/id") {
			t.Fatalf("tracefs mounted on %s has no sched:sched_switch tracepoint: this kernel was built without the scheduler trace events the collector needs", tracefsDir)
		}
	}
	m, err := bpf.NewMap(bpf.MapSpec{Name: "tandem_e2e", Type: bpf.Hash, KeySize: 4, ValueSize: 8, MaxEntries: 1})
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.ENOSYS) {
		t.Skipf("SKIPPED: this kernel does not let root create BPF maps here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	_ = m.Close()
}

// rqSeries is one container's run-queue latency histogram as /metrics shows it.
type rqSeries struct {
	sum, count float64
	ok         bool
}

func (s rqSeries) mean() time.Duration {
	if s.count == 0 {
		return 0
	}
	return time.Duration(s.sum / s.count * 1e9)
}

func (s rqSeries) String() string {
	if !s.ok {
		return "no series"
	}
	return fmt.Sprintf("%.3f s waited in %.0f waits (mean %v)", s.sum, s.count, s.mean().Round(time.Microsecond))
}

func runQueueOf(text, pod string) rqSeries {
	labels := []string{`namespace="e2e"`, `pod="` + pod + `"`, `container="app"`, `qos="LS"`}
	sum, ok1 := metricValue(text, "tandem_container_runqueue_latency_seconds_sum", labels...)
	count, ok2 := metricValue(text, "tandem_container_runqueue_latency_seconds_count", labels...)
	return rqSeries{sum: sum, count: count, ok: ok1 && ok2}
}

// spinPod runs an LS pod whose container "app" spins `threads` shell loops pinned on one CPU with
// busybox's taskset, so that how many of them share that CPU is the test's choice, not the scheduler's.
func spinPod(t *testing.T, ctx context.Context, e *env, name string, cpu, threads int) {
	t.Helper()
	cfg := framework.PodSandboxConfig(name, "e2e", true)
	cfg.Labels["koordinator.sh/qosClass"] = "LS"
	podID, err := e.viaProxy.RunPodSandbox(ctx, cfg, "")
	if err != nil {
		t.Fatal(err)
	}
	removeAtCleanup(t, ctx, e, podID)
	loops := "while :; do :; done"
	for range threads - 1 {
		loops = "while :; do :; done & " + loops
	}
	cmd := fmt.Sprintf("exec taskset -c %d sh -c '%s'", cpu, loops)
	id, err := e.viaProxy.CreateContainer(ctx, podID, framework.ContainerConfig("app", "/bin/sh", "-c", cmd), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.viaProxy.StartContainer(ctx, id); err != nil {
		t.Fatal(err)
	}
}

// TestRunQueueLatencySwitch turns the eBPF run-queue latency collector on with --run-queue-latency on the
// real tandem-proxy binary, with tracefs mounted (by the test, if the machine has not), and checks the
// figures a user would: six spinning threads of two pods pinned on one CPU wait, together, five
// seconds of every six, so each pod's histogram must gain about 2.5 s of wait per second (at least 2,
// never more than its 3 threads' 3), in waits of a scheduler slice or more; one thread spinning alone
// on another CPU must wait less than half that, as one thread cannot wait more than 1 s per second
// however busy the rest of the machine is; and the counts must go on growing from one sample to the
// next.
func TestRunQueueLatencySwitch(t *testing.T) {
	requireRoot(t)
	requireTracefs(t)
	cpus, err := onlineCPUs()
	if err != nil {
		t.Fatal(err)
	}
	if len(cpus) < 2 {
		t.Skipf("SKIPPED: the contended and the uncontended container need a CPU each; this machine runs on %v", cpus)
	}
	shared, own := cpus[len(cpus)-1], cpus[0]
	forEachRuntime(t, envOptions{proxyArgs: []string{"--run-queue-latency", "--run-queue-interval=2s"}}, func(t *testing.T, ctx context.Context, e *env) {
		on := regexp.MustCompile(`"Collector source on".* source="runQueue"`)
		off := regexp.MustCompile(`"Collector source off: the kernel does not offer it here".* source="runQueue" reason="([^"]+)"`)
		disabled := regexp.MustCompile(`"Collector source disabled by config".* source="runQueue"`)
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			b, err := os.ReadFile(e.proxy.LogPath)
			if err != nil {
				t.Fatal(err)
			}
			if disabled.Match(b) {
				t.Fatal("--run-queue-latency did not reach the collector: the agent logged the source disabled by config")
			}
			if m := off.FindSubmatch(b); m != nil {
				t.Fatalf("the run-queue collector is off although tracefs is mounted and this kernel lets root load BPF; the agent says: %s", m[1])
			}
			if on.Match(b) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the agent said nothing of the run-queue collector within 10s; log:\n%s", b)
			}
		}

		spinPod(t, ctx, e, "contended-a", shared, 3)
		spinPod(t, ctx, e, "contended-b", shared, 3)
		spinPod(t, ctx, e, "alone", own, 1)
		t.Logf("contended-a and contended-b spin 3 threads each on CPU %d, alone 1 thread on CPU %d", shared, own)

		// The source drains its programs' maps every --run-queue-interval (2 s here; 10 s by default): wait
		// for a sample that has all three pods, then for the next one, and compare the two.
		scrape := func() (string, map[string]rqSeries) {
			text, err := e.proxy.Metrics(ctx)
			if err != nil {
				t.Fatal(err)
			}
			return text, map[string]rqSeries{"contended-a": runQueueOf(text, "contended-a"), "contended-b": runQueueOf(text, "contended-b"), "alone": runQueueOf(text, "alone")}
		}
		wait := func(what string, within time.Duration, done func(map[string]rqSeries) bool) (time.Time, map[string]rqSeries) {
			t.Helper()
			deadline := time.Now().Add(within)
			for {
				text, s := scrape()
				if done(s) {
					return time.Now(), s
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s within %v: %v; run-queue series in /metrics:\n%s", what, within, s, grepLines(text, "tandem_container_runqueue_latency_seconds_"))
				}
				time.Sleep(250 * time.Millisecond)
			}
		}
		t0, first := wait("no run-queue latency of the three spinning pods", 30*time.Second, func(s map[string]rqSeries) bool {
			return s["contended-a"].count > 0 && s["contended-b"].count > 0 && s["alone"].ok
		})
		// Two or three intervals apart, first seen by a scrape each: the scrapes' 250 ms poll is then a few
		// percent of the window.
		time.Sleep(5 * time.Second)
		_, mid := scrape()
		t1, second := wait("the run-queue counts did not grow", 25*time.Second, func(s map[string]rqSeries) bool {
			return s["contended-a"].count > mid["contended-a"].count && s["contended-b"].count > mid["contended-b"].count
		})
		elapsed := t1.Sub(t0).Seconds()
		rate := func(pod string) float64 { return (second[pod].sum - first[pod].sum) / elapsed }
		window := func(pod string) rqSeries {
			return rqSeries{sum: second[pod].sum - first[pod].sum, count: second[pod].count - first[pod].count, ok: true}
		}
		for _, pod := range []string{"contended-a", "contended-b", "alone"} {
			t.Logf("%s: %v over %.1f s, %.2f s of wait per second; cumulative %v", pod, window(pod), elapsed, rate(pod), second[pod])
		}
		if a := rate("alone"); a > 1.05 {
			t.Errorf("alone waited %.2f s per second, more than its one thread can", a)
		}
		for _, pod := range []string{"contended-a", "contended-b"} {
			// Scrapes see the source's samples, so elapsed is within a scrape poll of whole intervals.
			if r := rate(pod); r < 2 || r > 3.1 {
				t.Errorf("%s waited %.2f s per second; three of six threads on one CPU wait between 2 and 3 (about 2.5)", pod, r)
			}
			if m := window(pod).mean(); m < 100*time.Microsecond || m > time.Second {
				t.Errorf("%s's mean wait is %v; four spinners on one CPU wait a scheduler slice or more, well under a second", pod, m)
			}
			if r, a := rate(pod), rate("alone"); a > r/2 {
				t.Errorf("alone, spinning on a CPU of its own, waited %.2f s per second, not clearly less than %s's %.2f", a, pod, r)
			}
		}
	})
}

// onlineCPUs lists the CPUs this process may run on, lowest first.
func onlineCPUs() ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("read this process's CPU affinity: %w", err)
	}
	var cpus []int
	for c := range 1024 {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}

// grepLines returns text's lines that start with prefix, for a failure message.
func grepLines(text, prefix string) string {
	var out []byte
	for _, line := range regexp.MustCompile(`(?m)^`+regexp.QuoteMeta(prefix)+`.*$`).FindAllString(text, -1) {
		out = append(out, line...)
		out = append(out, '\n')
	}
	return string(out)
}
