package figures

import (
	"regexp"
	"runtime"
	"strings"
	"testing"
)

// ReadMachine reads the real /proc of the test machine: the test checks what every Linux host has.
func TestReadMachine(t *testing.T) {
	t.Parallel()
	m := ReadMachine()
	if m.CPUs != runtime.NumCPU() || m.GOMAXPROCS != runtime.GOMAXPROCS(0) || m.GoVersion != runtime.Version() {
		t.Errorf("runtime facts = %+v", m)
	}
	if m.Kernel == "" {
		t.Error("kernel release not read from /proc/sys/kernel/osrelease")
	}
	if m.Cgroup != 1 && m.Cgroup != 2 {
		t.Errorf("cgroup version %d, want 1 or 2", m.Cgroup)
	}
	if line := m.Line(); !strings.Contains(line, "kernel "+m.Kernel) || !strings.Contains(line, "steal ") {
		t.Errorf("Line() = %q, want the kernel and the steal", line)
	}
	if got := LoadAverage(); !regexp.MustCompile(`^\d+\.\d+ \d+\.\d+ \d+\.\d+$`).MatchString(got) {
		t.Errorf("LoadAverage() = %q, want three averages", got)
	}
}

func TestStealPercent(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		stat string
		want float64
	}{
		{name: "steal a tenth", stat: "cpu  40 0 10 40 0 0 0 10 0 0\ncpu0 1 2 3\n", want: 10},
		{name: "no steal", stat: "cpu  50 0 0 50 0 0 0 0 0 0\n", want: 0},
		{name: "old kernel without steal", stat: "cpu  50 0 0 50 0 0 0\n", want: 0},
		{name: "not the cpu line first", stat: "intr 1 2 3 4 5 6 7 8 9\n", want: 0},
		{name: "all zero", stat: "cpu  0 0 0 0 0 0 0 0 0 0\n", want: 0},
		{name: "garbage", stat: "cpu  a b c d e f g h\n", want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := stealPercent([]byte(tt.stat)); got != tt.want {
				t.Errorf("stealPercent = %v, want %v", got, tt.want)
			}
		})
	}
}
