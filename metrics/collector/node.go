package collector

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// cpuTimes is the aggregate "cpu" line of /proc/stat, in clock ticks.
type cpuTimes struct {
	total, idle uint64
	cpus        int // "cpuN" lines: the CPUs online now
}

// parseProcStat reads the aggregate cpu line and counts the per-CPU lines. Idle counts idle and
// iowait, as top and the kubelet's summary do; guest time is already inside user and nice, so it is
// left out of the total to avoid counting it twice.
func parseProcStat(b []byte) (cpuTimes, error) {
	var t cpuTimes
	found := false
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "cpu") {
			continue
		}
		fields := strings.Fields(line)
		if fields[0] != "cpu" {
			if _, err := strconv.Atoi(strings.TrimPrefix(fields[0], "cpu")); err == nil {
				t.cpus++
			}
			continue
		}
		if len(fields) < 5 {
			return cpuTimes{}, fmt.Errorf("proc stat: cpu line has %d fields, want at least 4 counters", len(fields)-1)
		}
		for i, f := range fields[1:] {
			if i >= 8 { // guest, guest_nice
				break
			}
			v, err := strconv.ParseUint(f, 10, 64)
			if err != nil {
				return cpuTimes{}, fmt.Errorf("proc stat: cpu field %d: %w", i+1, err)
			}
			t.total += v
			if i == 3 || i == 4 { // idle, iowait
				t.idle += v
			}
		}
		found = true
	}
	if err := sc.Err(); err != nil {
		return cpuTimes{}, fmt.Errorf("proc stat: %w", err)
	}
	if !found {
		return cpuTimes{}, errors.New("proc stat: no aggregate cpu line")
	}
	if t.cpus == 0 {
		return cpuTimes{}, errors.New("proc stat: no per-CPU lines")
	}
	return t, nil
}

// busyMilli is the node's average CPU use between two /proc/stat samples, in milli-cores.
func busyMilli(prev, cur cpuTimes) int64 {
	if cur.total <= prev.total {
		return 0
	}
	dTotal := cur.total - prev.total
	dIdle := uint64(0)
	if cur.idle > prev.idle {
		dIdle = cur.idle - prev.idle
	}
	if dIdle > dTotal {
		dIdle = dTotal
	}
	return int64((dTotal - dIdle) * uint64(cur.cpus) * 1000 / dTotal)
}

// memInfo is what /proc/meminfo says, in bytes.
type memInfo struct {
	total, available int64
}

// used is what the node cannot hand out without reclaiming: MemTotal − MemAvailable, the kernel's
// own estimate of what is free or cheaply reclaimable.
func (m memInfo) used() int64 {
	if m.available > m.total {
		return 0
	}
	return m.total - m.available
}

func parseMeminfo(b []byte) (memInfo, error) {
	var m memInfo
	var haveTotal, haveAvail bool
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		key, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok || (key != "MemTotal" && key != "MemAvailable") {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			return memInfo{}, fmt.Errorf("meminfo: %s has no value", key)
		}
		v, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil || v < 0 {
			return memInfo{}, fmt.Errorf("meminfo: %s: bad value %q", key, fields[0])
		}
		if len(fields) > 1 && fields[1] == "kB" {
			v *= 1024
		}
		if key == "MemTotal" {
			m.total, haveTotal = v, true
		} else {
			m.available, haveAvail = v, true
		}
	}
	if err := sc.Err(); err != nil {
		return memInfo{}, fmt.Errorf("meminfo: %w", err)
	}
	if !haveTotal || !haveAvail {
		return memInfo{}, errors.New("meminfo: MemTotal or MemAvailable missing (kernel older than 3.14?)")
	}
	return m, nil
}
