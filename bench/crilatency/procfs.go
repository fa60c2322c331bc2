package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// userHZ is the unit of utime and stime in /proc/PID/stat. The kernel's ABI
// fixes it at 100 on every architecture Tandem runs on, whatever CONFIG_HZ is.
const userHZ = 100

// memory is what /proc/PID/status says about a process's resident set.
type memory struct {
	VmRSSKiB, VmHWMKiB int64
}

func parseStatus(b []byte) (memory, error) {
	var m memory
	found := 0
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok || (name != "VmRSS" && name != "VmHWM") {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) != 2 || fields[1] != "kB" {
			return m, fmt.Errorf("unexpected %s line %q in /proc status", name, sc.Text())
		}
		v, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil {
			return m, fmt.Errorf("%s in /proc status: %w", name, err)
		}
		if name == "VmRSS" {
			m.VmRSSKiB = v
		} else {
			m.VmHWMKiB = v
		}
		found++
	}
	if found != 2 {
		return m, fmt.Errorf("/proc status lacks VmRSS or VmHWM: is the process a zombie?")
	}
	return m, nil
}

func readMemory(pid int) (memory, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return memory{}, fmt.Errorf("read memory of pid %d: %w", pid, err)
	}
	return parseStatus(b)
}

// parseCPUTicks returns utime+stime from the text of /proc/PID/stat.
func parseCPUTicks(b []byte) (int64, error) {
	// The command name (field 2) is in parentheses and may hold spaces or
	// parentheses itself; everything after the last ')' is space separated.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("malformed /proc stat: no command name")
	}
	fields := strings.Fields(string(b[i+1:]))
	// fields[0] is field 3 (state); utime and stime are fields 14 and 15.
	const utime, stime = 14 - 3, 15 - 3
	if len(fields) <= stime {
		return 0, fmt.Errorf("malformed /proc stat: %d fields after the command name", len(fields))
	}
	u, err := strconv.ParseInt(fields[utime], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("utime in /proc stat: %w", err)
	}
	s, err := strconv.ParseInt(fields[stime], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("stime in /proc stat: %w", err)
	}
	return u + s, nil
}

func readCPUTicks(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("read cpu time of pid %d: %w", pid, err)
	}
	return parseCPUTicks(b)
}

// idleCost is a process's footprint while nobody calls it.
type idleCost struct {
	PID            int
	Seconds        float64
	CPUTicks       int64
	CPUPercentCore float64 // of one core
	Start, End     memory
}

// measureIdle samples pid's memory and CPU time, waits d (or until ctx ends),
// and samples again.
func measureIdle(ctx context.Context, pid int, d time.Duration) (idleCost, error) {
	c := idleCost{PID: pid}
	var err error
	if c.Start, err = readMemory(pid); err != nil {
		return c, err
	}
	t0, err := readCPUTicks(pid)
	if err != nil {
		return c, err
	}
	start := time.Now()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return c, fmt.Errorf("idle measurement interrupted: %w", ctx.Err())
	case <-timer.C:
	}
	t1, err := readCPUTicks(pid)
	if err != nil {
		return c, err
	}
	c.Seconds = time.Since(start).Seconds()
	if c.End, err = readMemory(pid); err != nil {
		return c, err
	}
	c.CPUTicks = t1 - t0
	c.CPUPercentCore = 100 * float64(c.CPUTicks) / userHZ / c.Seconds
	return c, nil
}
