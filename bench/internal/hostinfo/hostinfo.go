// Package hostinfo reads the facts about the machine that a benchmark report prints beside its figures,
// so that figures from different machines and moments are not compared blindly.
package hostinfo

import (
	"bufio"
	"bytes"
	"os"
	"runtime"
	"strings"
)

// Facts describes the machine and the Go runtime a benchmark ran on.
type Facts struct {
	CPUs       int    `json:"cpus"`
	GOMAXPROCS int    `json:"gomaxprocs"`
	CPUModel   string `json:"cpuModel"`
	Kernel     string `json:"kernel"`
	OS         string `json:"os"`
	GoVersion  string `json:"goVersion"`
}

// Read returns this machine's facts; what cannot be read stays empty.
func Read() Facts {
	f := Facts{CPUs: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0), GoVersion: runtime.Version()}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		f.Kernel = strings.TrimSpace(string(b))
	}
	f.CPUModel = firstValue("/proc/cpuinfo", func(line string) (string, bool) {
		k, v, ok := strings.Cut(line, ":")
		return strings.TrimSpace(v), ok && strings.TrimSpace(k) == "model name"
	})
	f.OS = firstValue("/etc/os-release", func(line string) (string, bool) {
		v, ok := strings.CutPrefix(line, "PRETTY_NAME=")
		return strings.Trim(v, `"`), ok
	})
	if b, err := os.ReadFile("/etc/debian_version"); err == nil {
		f.OS += " (" + strings.TrimSpace(string(b)) + ")"
	}
	return f
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
