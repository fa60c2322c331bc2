// Package procstat reads the CPU time a process has used from /proc/PID/stat: what the benchmarks
// count of each proxy, runtime and server they run, in the kernel's own ticks.
package procstat

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"time"
)

// UserHZ is the unit of utime and stime in /proc/PID/stat: the kernel's ABI fixes it at 100.
const UserHZ = 100

// ParseCPUTicks returns utime + stime from the text of /proc/PID/stat. The fields are counted after
// the command name's closing parenthesis, since the name itself may hold spaces and parentheses.
func ParseCPUTicks(b []byte) (int64, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("no command name in /proc stat %q", b)
	}
	// After ") ": state is field 3, utime field 14 and stime field 15.
	f := bytes.Fields(b[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("short /proc stat %q", b)
	}
	var total int64
	for _, s := range f[11:13] {
		v, err := strconv.ParseInt(string(s), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("parse /proc stat times: %w", err)
		}
		total += v
	}
	return total, nil
}

// CPUTicks is the CPU time (utime + stime, 1/UserHZ s) process pid has used.
func CPUTicks(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("read CPU time of pid %d: %w", pid, err)
	}
	return ParseCPUTicks(b)
}

// CPUTime is CPUTicks as a duration.
func CPUTime(pid int) (time.Duration, error) {
	t, err := CPUTicks(pid)
	return time.Duration(t) * time.Second / UserHZ, err
}
