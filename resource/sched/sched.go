// Package sched sets the scheduling attributes of the threads of a cgroup subtree: a policy of the fair
// class (SCHED_OTHER, SCHED_BATCH, SCHED_IDLE) and the slice the thread asks EEVDF for
// (sched_attr.sched_runtime, honoured since Linux 6.12).
//
// actuate/yield uses it to make batch work yield to every other thread on the node; its package doc
// says which attributes and why. The attributes are inherited across fork and clone, so once a
// container's threads have them, what they start has them too; threads that enter the cgroup from
// outside (an exec into the container) or were forked while a sweep ran are caught by the next sweep.
package sched

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tandemkit/tandem/resource/cgroup"
)

// Policy is a Linux scheduling policy for normal (non-realtime) threads.
type Policy uint32

// The policies of the fair scheduling class.
const (
	Other Policy = unix.SCHED_NORMAL
	Batch Policy = unix.SCHED_BATCH
	Idle  Policy = unix.SCHED_IDLE
)

func (p Policy) String() string {
	switch p {
	case Other:
		return "SCHED_OTHER"
	case Batch:
		return "SCHED_BATCH"
	case Idle:
		return "SCHED_IDLE"
	}
	return "policy " + strconv.FormatUint(uint64(p), 10)
}

func (p Policy) fair() bool { return p == Other || p == Batch || p == Idle }

// Attr is what a sweep gives a thread: a policy of the fair class and the slice the thread asks EEVDF
// for (sched_attr.sched_runtime, Linux 6.12+); Slice 0 is the kernel's default.
type Attr struct {
	Policy Policy
	Slice  time.Duration
}

func (a Attr) String() string {
	if a.Slice == 0 {
		return a.Policy.String()
	}
	return a.Policy.String() + " slice " + a.Slice.String()
}

// Default is what the kernel gives a thread nobody configured.
var Default = Attr{Policy: Other}

// MaxSlice is the longest slice the kernel accepts; it clamps longer requests to it.
const MaxSlice = 100 * time.Millisecond

// CustomSlices reports whether the kernel honours a thread's slice request: Linux 6.12 and later report
// the slice of every fair thread (the default one too) through sched_getattr, older kernels report 0 and
// ignore the request.
func CustomSlices() (bool, error) {
	attr, err := unix.SchedGetAttr(0, 0)
	if err != nil {
		return false, fmt.Errorf("sched_getattr: %w", err)
	}
	return !Policy(attr.Policy).fair() || attr.Runtime != 0, nil
}

// Result counts what one sweep saw.
type Result struct {
	// Threads is how many threads the subtree held.
	Threads int
	// Moved is how many of them the sweep changed.
	Moved int
	// Skipped is how many it left alone: realtime and deadline threads (an operator chose those on
	// purpose) and threads that exited while it ran.
	Skipped int
}

// Sweep gives every thread in the cgroup directory root and below it the attributes want, and leaves
// threads that already have them alone. With from set, only threads that have exactly from are changed:
// that is how a sweep is undone without touching a thread its owner configured. A missing root is an
// empty subtree, not an error: on a node without BE pods the BE cgroup may not exist yet. Errors on
// single threads are joined into the returned error; the sweep goes on with the others.
func Sweep(root string, want Attr, from *Attr) (Result, error) {
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
		tids, err := cgroup.Threads(path)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			errs = append(errs, err)
			return nil
		}
		for _, tid := range tids {
			res.Threads++
			moved, err := set(tid, want, from)
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

var errSkip = errors.New("realtime or deadline thread left alone")

// Of returns thread tid's attributes. Slice is 0 where the kernel does not report slices (before 6.12).
func Of(tid int) (Attr, error) {
	attr, err := unix.SchedGetAttr(tid, 0)
	if err != nil {
		return Attr{}, fmt.Errorf("sched_getattr of thread %d: %w", tid, err)
	}
	return Attr{Policy: Policy(attr.Policy), Slice: time.Duration(attr.Runtime)}, nil
}

// Set gives thread tid the attributes want, keeping its nice value, and reports whether it changed.
// Realtime and deadline threads are left alone (an error wrapping errSkip).
func Set(tid int, want Attr) (bool, error) { return set(tid, want, nil) }

func set(tid int, want Attr, from *Attr) (bool, error) {
	attr, err := unix.SchedGetAttr(tid, 0)
	if err != nil {
		return false, fmt.Errorf("sched_getattr: %w", err)
	}
	have := Attr{Policy: Policy(attr.Policy), Slice: time.Duration(attr.Runtime)}
	if !have.Policy.fair() {
		return false, fmt.Errorf("thread %d runs under %s: %w", tid, have.Policy, errSkip)
	}
	if from != nil {
		if have != *from {
			return false, nil
		}
	} else if have.Policy == want.Policy && (want.Slice == 0 || have.Slice == want.Slice || have.Slice == 0) {
		// A kernel that reports no slice (before 6.12) ignores the request: asking again changes nothing.
		return false, nil
	}
	// Only the policy and the slice change: the nice value (which SCHED_OTHER and SCHED_BATCH weigh
	// by) stays.
	next := unix.SchedAttr{Policy: uint32(want.Policy), Nice: attr.Nice, Runtime: uint64(want.Slice)}
	if err := unix.SchedSetAttr(tid, &next, 0); err != nil {
		return false, fmt.Errorf("sched_setattr %s: %w", want, err)
	}
	return true, nil
}
