package main

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
)

// userHZ is the unit of utime and stime in /proc/PID/stat: the kernel's ABI fixes it at 100.
const userHZ = 100

// parseCPUTicks returns utime + stime from the text of /proc/PID/stat. The fields are counted after
// the command name's closing parenthesis, since the name itself may hold spaces and parentheses.
func parseCPUTicks(b []byte) (int64, error) {
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

// readCPUTicks is the CPU time (utime + stime, 1/userHZ s) process pid has used.
func readCPUTicks(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("read CPU time of pid %d: %w", pid, err)
	}
	return parseCPUTicks(b)
}
