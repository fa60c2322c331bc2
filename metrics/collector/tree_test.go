package collector

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// Fake trees: cgroup v2 cannot be tested for real on the project's machines (they are hybrid: every
// controller is on v1 and the unified mount is empty), and exact CPU arithmetic needs counters that
// move by known amounts. The files and their formats are copied from what the kernel writes; the
// real v1 hierarchy is read by realhost_test.go.

func writeFiles(t testing.TB, dir string, files map[string]string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// fakeProc writes /proc/stat for two CPUs and /proc/meminfo.
func fakeProc(t testing.TB, root string, user, idle uint64, memTotalKB, memAvailKB int64) {
	t.Helper()
	stat := fmt.Sprintf("cpu  %d 0 0 %d 0 0 0 0 0 0\ncpu0 %d 0 0 %d 0 0 0 0 0 0\ncpu1 %d 0 0 %d 0 0 0 0 0 0\nintr 1 2 3\nctxt 42\n",
		user, idle, user/2, idle/2, user-user/2, idle-idle/2)
	mem := fmt.Sprintf("MemTotal:       %d kB\nMemFree:         1000 kB\nMemAvailable:   %d kB\nBuffers:           0 kB\n", memTotalKB, memAvailKB)
	writeFiles(t, root, map[string]string{"stat": stat, "meminfo": mem})
	writeFiles(t, filepath.Join(root, "pressure"), map[string]string{
		"cpu":    "some avg10=1.00 avg60=0.50 avg300=0.10 total=2500000\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
		"memory": "some avg10=0.00 avg60=0.00 avg300=0.00 total=1000000\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=500000\n",
		"io":     "some avg10=0.00 avg60=0.00 avg300=0.00 total=3000000\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=2000000\n",
	})
}

// ctrCounters are what a fake container cgroup reports.
type ctrCounters struct {
	cpuNanos         uint64
	usage, inactive  uint64
	throttled, total uint64
}

// fakeV1Container writes a container cgroup in the cpu, cpuacct and memory hierarchies.
func fakeV1Container(t testing.TB, root, rel string, c ctrCounters) {
	t.Helper()
	writeFiles(t, filepath.Join(root, "cpuacct", rel), map[string]string{
		"cpuacct.usage":        fmt.Sprint(c.cpuNanos),
		"cpuacct.usage_percpu": fmt.Sprintf("%d %d", c.cpuNanos/2, c.cpuNanos-c.cpuNanos/2),
		"cpuacct.stat":         "user 10\nsystem 5\n",
	})
	writeFiles(t, filepath.Join(root, "cpu", rel), map[string]string{
		"cpu.stat": fmt.Sprintf("nr_periods %d\nnr_throttled %d\nthrottled_time 12345\n", c.total, c.throttled),
	})
	writeFiles(t, filepath.Join(root, "memory", rel), map[string]string{
		"memory.stat":               fmt.Sprintf("cache 0\nrss %d\ninactive_file %d\ntotal_rss %d\ntotal_inactive_file %d\n", c.usage, c.inactive, c.usage, c.inactive),
		"memory.usage_in_bytes":     fmt.Sprint(c.usage),
		"memory.max_usage_in_bytes": fmt.Sprint(c.usage),
		"memory.limit_in_bytes":     "9223372036854771712",
		"memory.failcnt":            "0",
		"memory.oom_control":        "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n",
	})
}

// fakeV1Root makes root look like a hybrid host's /sys/fs/cgroup.
func fakeV1Root(t testing.TB, root string) {
	t.Helper()
	for _, c := range []string{"cpu", "cpuacct", "memory", "unified"} {
		writeFiles(t, filepath.Join(root, c), nil)
	}
}

// fakeV2Root makes root look like a cgroup v2 /sys/fs/cgroup.
func fakeV2Root(t testing.TB, root string) {
	t.Helper()
	writeFiles(t, root, map[string]string{"cgroup.controllers": "cpuset cpu io memory pids\n"})
}

// fakeV2Cgroup writes a v2 cgroup's cpu.stat, memory files and pressure files.
func fakeV2Cgroup(t testing.TB, root, rel string, c ctrCounters) {
	t.Helper()
	writeFiles(t, filepath.Join(root, rel), map[string]string{
		"cgroup.controllers": "cpu io memory pids\n",
		"cpu.stat": fmt.Sprintf("usage_usec %d\nuser_usec 1\nsystem_usec 1\nnr_periods %d\nnr_throttled %d\nthrottled_usec 7\n",
			c.cpuNanos/1000, c.total, c.throttled),
		"memory.current":  fmt.Sprint(c.usage),
		"memory.max":      "max",
		"memory.stat":     fmt.Sprintf("anon %d\nfile 0\ninactive_file %d\nactive_file 0\n", c.usage, c.inactive),
		"cpu.pressure":    "some avg10=0.00 avg60=0.00 avg300=0.00 total=4000000\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=1000000\n",
		"memory.pressure": "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
		"io.pressure":     "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
	})
}
