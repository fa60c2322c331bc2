package figures

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
)

// Machine describes the machine and the Go runtime a benchmark ran on.
type Machine struct {
	CPUs       int    `json:"cpus"`
	GOMAXPROCS int    `json:"gomaxprocs"`
	CPUModel   string `json:"cpuModel"`
	Kernel     string `json:"kernel"`
	OS         string `json:"os"`
	GoVersion  string `json:"goVersion"`
	// Cgroup is the cgroup version mounted at /sys/fs/cgroup: 2 for the unified hierarchy, else 1.
	Cgroup int `json:"cgroupVersion"`
	// StealPercent is the share of the CPUs' time since boot that the hypervisor gave to other guests
	// (/proc/stat's steal): a guest with much of it stalls, and its tails are the host's.
	StealPercent float64 `json:"stealPercent"`
}

// ReadMachine returns this machine's facts; what cannot be read stays empty.
func ReadMachine() Machine {
	m := Machine{CPUs: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0), GoVersion: runtime.Version(), Cgroup: cgroupVersion()}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	m.CPUModel = firstValue("/proc/cpuinfo", func(line string) (string, bool) {
		k, v, ok := strings.Cut(line, ":")
		return strings.TrimSpace(v), ok && strings.TrimSpace(k) == "model name"
	})
	m.OS = firstValue("/etc/os-release", func(line string) (string, bool) {
		v, ok := strings.CutPrefix(line, "PRETTY_NAME=")
		return strings.Trim(v, `"`), ok
	})
	if b, err := os.ReadFile("/etc/debian_version"); err == nil {
		m.OS += " (" + strings.TrimSpace(string(b)) + ")"
	}
	if b, err := os.ReadFile("/proc/stat"); err == nil {
		m.StealPercent = stealPercent(b)
	}
	return m
}

// Line is the machine in one line, for a report's header.
func (m Machine) Line() string {
	return fmt.Sprintf("%d vCPU (%s), GOMAXPROCS %d, kernel %s, cgroup v%d, steal %.1f%% since boot, %s, %s",
		m.CPUs, m.CPUModel, m.GOMAXPROCS, m.Kernel, m.Cgroup, m.StealPercent, m.OS, m.GoVersion)
}

// cgroupVersion is 2 when /sys/fs/cgroup is the unified hierarchy, else 1.
func cgroupVersion() int {
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		return 2
	}
	return 1
}

// stealPercent is steal over all the time of /proc/stat's "cpu" line (user nice system idle iowait irq
// softirq steal; guest time is inside user's), 0 when the line is not there.
func stealPercent(stat []byte) float64 {
	line, _, _ := bytes.Cut(stat, []byte("\n"))
	f := strings.Fields(string(line))
	if len(f) < 9 || f[0] != "cpu" {
		return 0
	}
	var total, steal float64
	for i, s := range f[1:9] {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return 0
		}
		total += v
		if i == 7 {
			steal = v
		}
	}
	if total == 0 {
		return 0
	}
	return 100 * steal / total
}

// firstValue returns what match finds on the first line of path that it matches.
func firstValue(path string, match func(line string) (string, bool)) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if v, ok := match(sc.Text()); ok {
			return v
		}
	}
	return ""
}

// LoadAverage returns the 1, 5 and 15 minute load averages: other work on the machine shows here.
func LoadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
