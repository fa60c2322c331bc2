package hostinfo

import (
	"regexp"
	"runtime"
	"testing"
)

// This package reads the real /proc of the test machine: the test checks what every Linux host has.
func TestRead(t *testing.T) {
	t.Parallel()
	f := Read()
	if f.CPUs != runtime.NumCPU() || f.GOMAXPROCS != runtime.GOMAXPROCS(0) || f.GoVersion != runtime.Version() {
		t.Errorf("runtime facts = %+v", f)
	}
	if f.Kernel == "" {
		t.Error("kernel release not read from /proc/sys/kernel/osrelease")
	}
	if got := LoadAverage(); !regexp.MustCompile(`^\d+\.\d+ \d+\.\d+ \d+\.\d+$`).MatchString(got) {
		t.Errorf("LoadAverage() = %q, want three averages", got)
	}
}
