// Package sched moves the threads of a cgroup subtree between the kernel's SCHED_OTHER and SCHED_IDLE
// scheduling policies.
//
// A SCHED_IDLE thread is preempted at once by any waking thread that is not SCHED_IDLE, whatever cgroup
// either lives in (kernel/sched/fair.c: "Idle tasks are by definition preempted by non-idle tasks"),
// and a CPU that runs only SCHED_IDLE threads counts as idle when the kernel places a waking thread
// (sched_idle_cpu). cpu.idle on a cgroup gives the first only against the cgroup's siblings: BE pods
// marked idle still compete at full weight, through kubepods, with kubelet, containerd and every other
// process outside kubepods. The per-thread policy is what makes batch work yield to all of them.
//
// The policy is inherited across fork and clone, so once a container's threads are idle, what they
// start is idle too. Threads that enter the cgroup from outside (an exec into the container) or were
// forked while a sweep ran are caught by the next sweep.
package sched

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Policy is a Linux scheduling policy for normal (non-realtime) threads.
type Policy uint32

// The policies a sweep moves threads between.
const (
	Other Policy = unix.SCHED_NORMAL
	Idle  Policy = unix.SCHED_IDLE
)

func (p Policy) String() string {
	switch p {
	case Other:
		return "SCHED_OTHER"
	case Idle:
		return "SCHED_IDLE"
	}
	return "policy " + strconv.FormatUint(uint64(p), 10)
}

// Result counts what one sweep saw.
type Result struct {
	// Threads is how many threads the subtree held.
	Threads int
	// Moved is how many of them the sweep moved to the wanted policy.
	Moved int
	// Skipped is how many it left alone: realtime and deadline threads (an operator chose those on
	// purpose) and threads that exited while it ran.
	Skipped int
}

// Sweep moves every thread in the cgroup directory root and below it to policy want, and leaves
// threads already there alone. A missing root is an empty subtree, not an error: on a node without BE
// pods the BE cgroup may not exist yet. Errors on single threads are joined into the returned error;
// the sweep goes on with the others.
func Sweep(root string, want Policy) (Result, error) {
	var res Result
	var errs []error
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				// The root, or a pod's cgroup removed while the sweep walked.
				return nil
			}
			return err
		}
		if !d.IsDir() {
			return nil
		}
		tids, err := Threads(path)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			errs = append(errs, err)
			return nil
		}
		for _, tid := range tids {
			res.Threads++
			moved, err := Set(tid, want)
			switch {
			case errors.Is(err, unix.ESRCH), errors.Is(err, errSkip):
				res.Skipped++
			case err != nil:
				errs = append(errs, fmt.Errorf("thread %d in %s: %w", tid, path, err))
			case moved:
				res.Moved++
			}
		}
		return nil
	})
	if err != nil {
		errs = append(errs, fmt.Errorf("walk %s: %w", root, err))
	}
	return res, errors.Join(errs...)
}

// Threads lists the thread IDs in one cgroup directory (not below it): "cgroup.threads" on cgroup v2,
// "tasks" on v1.
func Threads(dir string) ([]int, error) {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.threads"))
	if errors.Is(err, fs.ErrNotExist) {
		b, err = os.ReadFile(filepath.Join(dir, "tasks"))
	}
	if err != nil {
		return nil, fmt.Errorf("list the threads of cgroup %s: %w", dir, err)
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		tid, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("cgroup %s: thread id %q: %w", dir, f, err)
		}
		out = append(out, tid)
	}
	return out, nil
}

var errSkip = errors.New("realtime or deadline thread left alone")

// Set moves thread tid to policy want, keeping its nice value, and reports whether it moved. Moving to
// Idle takes SCHED_OTHER and SCHED_BATCH threads; moving to Other takes only SCHED_IDLE ones, so that
// undoing a sweep leaves a thread its owner made SCHED_BATCH as it was. Realtime and deadline threads are
// never touched (an error wrapping errSkip).
func Set(tid int, want Policy) (bool, error) {
	attr, err := unix.SchedGetAttr(tid, 0)
	if err != nil {
		return false, fmt.Errorf("sched_getattr: %w", err)
	}
	have := Policy(attr.Policy)
	switch {
	case have == want:
		return false, nil
	case have != Other && have != Idle && have != unix.SCHED_BATCH:
		return false, fmt.Errorf("thread %d runs under %s: %w", tid, have, errSkip)
	case want == Other && have != Idle:
		return false, nil
	}
	// Only the policy changes: the nice value (which SCHED_OTHER weighs by) stays for when the thread
	// goes back.
	next := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: uint32(want), Nice: attr.Nice}
	if err := unix.SchedSetAttr(tid, &next, 0); err != nil {
		return false, fmt.Errorf("sched_setattr %s: %w", want, err)
	}
	return true, nil
}

// Of returns the policy thread tid runs under.
func Of(tid int) (Policy, error) {
	attr, err := unix.SchedGetAttr(tid, 0)
	if err != nil {
		return 0, fmt.Errorf("sched_getattr of thread %d: %w", tid, err)
	}
	return Policy(attr.Policy), nil
}
