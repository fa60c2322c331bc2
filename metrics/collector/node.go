package collector

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// cpuTimes is one cpu line of /proc/stat, in clock ticks.
type cpuTimes struct {
	total, idle uint64
	// steal is the time the hypervisor ran something else while this guest's CPU wanted to run: the
	// CPU the host took back. It is inside total and outside idle.
	steal uint64
	cpus  int // on the aggregate line: the "cpuN" lines, the CPUs online now
}

// procStat is what the collector reads from /proc/stat: the aggregate cpu line, and each CPU's own
// line by its number, for steal per CPU (a host that takes one CPU back hurts what runs there).
type procStat struct {
	all    cpuTimes
	perCPU map[int]cpuTimes
}

// parseProcStat reads the aggregate cpu line and the per-CPU lines. Idle counts idle and iowait, as top
// and the kubelet's summary do; guest time is already inside user and nice, so it is left out of the
// total to avoid counting it twice.
func parseProcStat(b []byte) (procStat, error) {
	st := procStat{perCPU: map[int]cpuTimes{}}
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
			n, err := strconv.Atoi(strings.TrimPrefix(fields[0], "cpu"))
			if err != nil {
				continue
			}
			st.all.cpus++
			// A per-CPU line that does not parse costs its steal figure, not the sample.
			if t, err := parseCPULine(fields); err == nil {
				st.perCPU[n] = t
			}
			continue
		}
		t, err := parseCPULine(fields)
		if err != nil {
			return procStat{}, err
		}
		st.all.total, st.all.idle, st.all.steal = t.total, t.idle, t.steal
		found = true
	}
	if err := sc.Err(); err != nil {
		return procStat{}, fmt.Errorf("proc stat: %w", err)
	}
	if !found {
		return procStat{}, errors.New("proc stat: no aggregate cpu line")
	}
	if st.all.cpus == 0 {
		return procStat{}, errors.New("proc stat: no per-CPU lines")
	}
	return st, nil
}

// parseCPULine sums one cpu line's counters.
func parseCPULine(fields []string) (cpuTimes, error) {
	var t cpuTimes
	if len(fields) < 5 {
		return cpuTimes{}, fmt.Errorf("proc stat: %s line has %d fields, want at least 4 counters", fields[0], len(fields)-1)
	}
	for i, f := range fields[1:] {
		if i >= 8 { // guest, guest_nice
			break
		}
		v, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			return cpuTimes{}, fmt.Errorf("proc stat: %s field %d: %w", fields[0], i+1, err)
		}
		t.total += v
		switch i {
		case 3, 4: // idle, iowait
			t.idle += v
		case 7:
			t.steal = v
		}
	}
	return t, nil
}

// delta is what happened between two readings of one line: total and idle ticks, and steal; a counter
// that went backwards (CPU hot-unplug) counts as no time.
func delta(prev, cur cpuTimes) (total, idle, steal uint64) {
	if cur.total <= prev.total {
		return 0, 0, 0
	}
	total = cur.total - prev.total
	if cur.idle > prev.idle {
		idle = cur.idle - prev.idle
	}
	if cur.steal > prev.steal {
		steal = cur.steal - prev.steal
	}
	idle = min(idle, total)
	steal = min(steal, total-idle)
	return total, idle, steal
}

// busyMilli is what the guest itself ran between two /proc/stat samples, in milli-cores: time neither
// idle nor stolen. Steal is the host running something else, not load of this node's: counting it as
// busy would read as system use and move the suppress and reclaim formulas by what the host did.
func busyMilli(prev, cur cpuTimes) int64 {
	total, idle, steal := delta(prev, cur)
	if total == 0 {
		return 0
	}
	return int64((total - idle - steal) * uint64(cur.cpus) * 1000 / total)
}

// stealMilli is the CPU the host took back between two samples, in milli-cores of the node.
func stealMilli(prev, cur cpuTimes) int64 {
	total, _, steal := delta(prev, cur)
	if total == 0 {
		return 0
	}
	return int64(steal * uint64(max(cur.cpus, 1)) * 1000 / total)
}

// perCPUSteal is each CPU's steal between two samples, in milli of that CPU (1000: the host ran
// something else the whole time), indexed by CPU number; CPUs missing from either sample are absent.
func perCPUSteal(prev, cur procStat) map[int]int64 {
	out := make(map[int]int64, len(cur.perCPU))
	for n, c := range cur.perCPU {
		p, ok := prev.perCPU[n]
		if !ok {
			continue
		}
		c.cpus = 1
		out[n] = stealMilli(p, c)
	}
	return out
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
