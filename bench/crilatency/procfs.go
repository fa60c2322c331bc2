package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tandemkit/tandem/bench/internal/exepages"
	"github.com/tandemkit/tandem/bench/internal/procstat"
)

// memory is what /proc/PID/status says about a process's resident set.
type memory struct {
	VmRSSKiB, VmHWMKiB int64
}

// statusValues returns the values, trimmed, of the named lines of a /proc status text, in the order
// asked; a name the text lacks is an error.
func statusValues(b []byte, names ...string) ([]string, error) {
	vals := make([]string, len(names))
	found := 0
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() && found < len(names) {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if i := slices.Index(names, name); ok && i >= 0 && vals[i] == "" {
			vals[i] = strings.TrimSpace(rest)
			found++
		}
	}
	if found != len(names) {
		return nil, fmt.Errorf("/proc status lacks one of %v", names)
	}
	return vals, nil
}

func parseStatus(b []byte) (memory, error) {
	vals, err := statusValues(b, "VmRSS", "VmHWM")
	if err != nil {
		return memory{}, fmt.Errorf("%w: is the process a zombie?", err)
	}
	var kib [2]int64
	for i, v := range vals {
		fields := strings.Fields(v)
		if len(fields) != 2 || fields[1] != "kB" {
			return memory{}, fmt.Errorf("unexpected value %q in /proc status", v)
		}
		if kib[i], err = strconv.ParseInt(fields[0], 10, 64); err != nil {
			return memory{}, fmt.Errorf("memory size in /proc status: %w", err)
		}
	}
	return memory{VmRSSKiB: kib[0], VmHWMKiB: kib[1]}, nil
}

func readMemory(pid int) (memory, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return memory{}, fmt.Errorf("read memory of pid %d: %w", pid, err)
	}
	return parseStatus(b)
}

// idleCost is a process's footprint while nobody calls it.
type idleCost struct {
	PID            int
	Seconds        float64
	CPUTicks       int64
	CPUPercentCore float64 // of one core
	Switches       switches
	Start, End     memory
	// Used is what the process touched in the window, from smaps; nil where the kernel would not
	// clear its pages' referenced bits.
	Used *workingSet
	// Executable splits the resident pages of the process's executable by Go module at the end of the
	// window; nil when they could not be read, and ExecutableErr says why.
	Executable    *exepages.Report
	ExecutableErr string
}

// workingSet splits a process's resident set by what it needs at rest. VmRSS counts every page of the
// executable the kernel has mapped, and it maps whole blocks of them around each page a program touches
// (fault-around): most were touched once, at start, and are clean page cache the kernel takes back
// under memory pressure. What the process needs is its anonymous memory, which has nowhere else to
// go, and the pages it actually touches while at rest.
type workingSet struct {
	// AnonKiB is the anonymous resident memory (heap, stacks, the runtime's own).
	AnonKiB int64
	// FileKiB is the file-backed resident memory (the executable's pages).
	FileKiB int64
	// FileUsedKiB is the part of FileKiB referenced during the window.
	FileUsedKiB int64
}

// KiB is the working set: anonymous memory plus the file pages used in the window.
func (w workingSet) KiB() int64 { return w.AnonKiB + w.FileUsedKiB }

// parseSmaps sums /proc/PID/smaps: per mapping, its anonymous pages, and of its other resident pages
// those referenced since the referenced bits were last cleared.
func parseSmaps(b []byte) (workingSet, error) {
	var ws workingSet
	var rss, anon, ref int64
	mappings := 0
	flush := func() {
		ws.AnonKiB += anon
		ws.FileKiB += rss - anon
		// A private file mapping's written pages are anonymous and counted there.
		ws.FileUsedKiB += max(0, min(ref, rss)-anon)
		rss, anon, ref = 0, 0, 0
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		if !strings.HasSuffix(fields[0], ":") {
			// A mapping's header: "start-end perms offset dev inode [path]".
			if mappings > 0 {
				flush()
			}
			mappings++
			continue
		}
		var dst *int64
		switch fields[0] {
		case "Rss:":
			dst = &rss
		case "Anonymous:":
			dst = &anon
		case "Referenced:":
			dst = &ref
		default:
			continue
		}
		if len(fields) != 3 || fields[2] != "kB" {
			return ws, fmt.Errorf("unexpected smaps line %q", sc.Text())
		}
		v, err := strconv.ParseInt(fields[1], 10, 64)
		if err != nil {
			return ws, fmt.Errorf("smaps line %q: %w", sc.Text(), err)
		}
		*dst = v
	}
	if mappings == 0 {
		return ws, fmt.Errorf("smaps lists no mappings: is the process a zombie?")
	}
	flush()
	return ws, sc.Err()
}

// clearReferenced clears the referenced bits of pid's pages, so that smaps' Referenced counts only what
// the process touches from now on.
func clearReferenced(pid int) error {
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("1"), 0); err != nil {
		return fmt.Errorf("clear referenced bits of pid %d: %w", pid, err)
	}
	return nil
}

func readWorkingSet(pid int) (workingSet, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps", pid))
	if err != nil {
		return workingSet{}, fmt.Errorf("read smaps of pid %d: %w", pid, err)
	}
	return parseSmaps(b)
}

// measureIdle samples pid's memory and CPU time, waits d (or until ctx ends),
// and samples again. The CPU window spans everything measureIdle does in between, the end-of-window
// reads included: when pid is the caller itself (its test), that work is in both clocks alike.
func measureIdle(ctx context.Context, pid int, d time.Duration) (idleCost, error) {
	c := idleCost{PID: pid}
	var err error
	if c.Start, err = readMemory(pid); err != nil {
		return c, err
	}
	s0, err := readSwitches(pid)
	if err != nil {
		return c, err
	}
	start := time.Now()
	t0, err := procstat.CPUTicks(pid)
	if err != nil {
		return c, err
	}
	// Without the bits cleared the working set is not measured; the rest is.
	cleared := clearReferenced(pid) == nil
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return c, fmt.Errorf("idle measurement interrupted: %w", ctx.Err())
	case <-timer.C:
	}
	s1, err := readSwitches(pid)
	if err != nil {
		return c, err
	}
	c.Switches = s1.since(s0)
	if c.End, err = readMemory(pid); err != nil {
		return c, err
	}
	if cleared {
		ws, err := readWorkingSet(pid)
		if err != nil {
			return c, err
		}
		c.Used = &ws
	}
	t1, err := procstat.CPUTicks(pid)
	if err != nil {
		return c, err
	}
	c.Seconds = time.Since(start).Seconds()
	c.CPUTicks = t1 - t0
	c.CPUPercentCore = 100 * float64(c.CPUTicks) / procstat.UserHZ / c.Seconds
	return c, nil
}

// measureExecutable splits the resident pages of c's executable by module. Not worth losing the other
// figures for: a failure is reported beside them.
func (c *idleCost) measureExecutable() {
	if rep, err := exepages.Measure(c.PID); err != nil {
		c.ExecutableErr = err.Error()
	} else {
		c.Executable = &rep
	}
}

// switches counts a process's context switches: voluntary ones are a thread going to sleep (waiting on
// a socket, a futex), which on a call's path is a wake-up the call waits for.
type switches struct {
	Voluntary   int64 `json:"voluntary"`
	Involuntary int64 `json:"involuntary"`
}

// since is what was added to s after an earlier count of the same process.
func (s switches) since(earlier switches) switches {
	return switches{Voluntary: s.Voluntary - earlier.Voluntary, Involuntary: s.Involuntary - earlier.Involuntary}
}

// add adds the switch counts of one /proc/PID/task/TID/status text to s.
func (s *switches) add(b []byte) error {
	vals, err := statusValues(b, "voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")
	if err != nil {
		return err
	}
	var n [2]int64
	for i, v := range vals {
		if n[i], err = strconv.ParseInt(v, 10, 64); err != nil {
			return fmt.Errorf("context switch count in /proc status: %w", err)
		}
	}
	s.Voluntary += n[0]
	s.Involuntary += n[1]
	return nil
}

// readSwitches sums the context switches of every thread of pid. /proc/PID/status counts the main
// thread's alone, and a Go process does its work on the others.
func readSwitches(pid int) (switches, error) {
	var s switches
	dir := fmt.Sprintf("/proc/%d/task", pid)
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return s, fmt.Errorf("list threads of pid %d: %w", pid, err)
	}
	for _, t := range tasks {
		b, err := os.ReadFile(dir + "/" + t.Name() + "/status")
		if err != nil {
			if os.IsNotExist(err) {
				continue // the thread exited meanwhile
			}
			return s, fmt.Errorf("read thread %s of pid %d: %w", t.Name(), pid, err)
		}
		if err := s.add(b); err != nil {
			return s, fmt.Errorf("thread %s of pid %d: %w", t.Name(), pid, err)
		}
	}
	return s, nil
}
