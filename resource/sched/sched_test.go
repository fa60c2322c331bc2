package sched

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// child starts a real process that sleeps until the test ends.
func child(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("sleep", "300")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd.Process.Pid
}

// writeTasks lays out a cgroup directory as the kernel lists it; the threads in it are real.
func writeTasks(t *testing.T, dir, file string, tids ...int) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var b []byte
	for _, tid := range tids {
		b = strconv.AppendInt(b, int64(tid), 10)
		b = append(b, '\n')
	}
	if err := os.WriteFile(filepath.Join(dir, file), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func policyOf(t *testing.T, tid int) Policy {
	t.Helper()
	a, err := Of(tid)
	if err != nil {
		t.Fatal(err)
	}
	return a.Policy
}

// mechanism is what BE threads get on this kernel (actuate/yield.Mechanism without the import).
func mechanism(t *testing.T) Attr {
	t.Helper()
	ok, err := CustomSlices()
	if err != nil {
		t.Fatal(err)
	}
	if ok {
		return Attr{Policy: Batch, Slice: MaxSlice}
	}
	return Attr{Policy: Idle}
}

func TestSweep(t *testing.T) {
	root := t.TempDir()
	a, b, batch, gone := child(t), child(t), child(t), 1<<22-1
	if err := unix.SchedSetAttr(batch, &unix.SchedAttr{Policy: unix.SCHED_BATCH}, 0); err != nil {
		t.Fatal(err)
	}
	// A v1 pod with one container, a v2 container, and a thread that has exited.
	writeTasks(t, filepath.Join(root, "pod1"), "tasks")
	writeTasks(t, filepath.Join(root, "pod1", "ctr1"), "tasks", a, gone)
	writeTasks(t, filepath.Join(root, "pod2", "ctr2"), "cgroup.threads", b, batch)

	want := mechanism(t)
	res, err := Sweep(root, want, nil)
	if err != nil {
		t.Fatal(err)
	}
	if wantRes := (Result{Threads: 4, Moved: 3, Skipped: 1}); res != wantRes {
		t.Errorf("first sweep: %+v, want %+v", res, wantRes)
	}
	for _, tid := range []int{a, b, batch} {
		if got, err := Of(tid); err != nil || got != want {
			t.Errorf("thread %d has %v (%v) after the sweep, want %s", tid, got, err, want)
		}
	}
	// Threads that have it are left alone: a second sweep changes nothing.
	if res, err := Sweep(root, want, nil); err != nil || res.Moved != 0 {
		t.Errorf("second sweep: %+v, %v; want nothing moved", res, err)
	}
	// A thread its owner configured otherwise in between is not touched by the undo.
	if _, err := Set(b, Attr{Policy: Idle}); err != nil {
		t.Fatal(err)
	}
	if res, err := Sweep(root, Default, &want); err != nil || res.Moved != 2 {
		t.Errorf("undo: %+v, %v; want 2 moved", res, err)
	}
	for _, tid := range []int{a, batch} {
		if p := policyOf(t, tid); p != Other {
			t.Errorf("thread %d runs under %s after the undo, want SCHED_OTHER", tid, p)
		}
	}
	if p := policyOf(t, b); p != Idle {
		t.Errorf("thread made SCHED_IDLE by its owner runs under %s after the undo, want it left SCHED_IDLE", p)
	}
}

// TestCustomSlices: a slice request sticks where the kernel reports slices, so the long BE slice is real.
func TestCustomSlices(t *testing.T) {
	ok, err := CustomSlices()
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		t.Skip("kernel before 6.12: no slice requests (actuate/yield does not run there)")
	}
	tid := child(t)
	if _, err := Set(tid, Attr{Policy: Batch, Slice: MaxSlice}); err != nil {
		t.Fatal(err)
	}
	if got, _ := Of(tid); got != (Attr{Policy: Batch, Slice: MaxSlice}) {
		t.Fatalf("thread has %s, want SCHED_BATCH slice 100ms", got)
	}
}

func TestSweepKeepsNiceAndRealtime(t *testing.T) {
	root := t.TempDir()
	nice := child(t)
	if err := unix.Setpriority(unix.PRIO_PROCESS, nice, 5); err != nil {
		t.Fatal(err)
	}
	tids := []int{nice}
	rt := 0
	if os.Geteuid() == 0 {
		rt = child(t)
		if err := unix.SchedSetAttr(rt, &unix.SchedAttr{Policy: unix.SCHED_FIFO, Priority: 1}, 0); err != nil {
			t.Fatal(err)
		}
		tids = append(tids, rt)
	}
	writeTasks(t, root, "tasks", tids...)
	want := mechanism(t)
	if _, err := Sweep(root, want, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := Sweep(root, Default, &want); err != nil {
		t.Fatal(err)
	}
	attr, err := unix.SchedGetAttr(nice, 0)
	if err != nil {
		t.Fatal(err)
	}
	if attr.Nice != 5 || Policy(attr.Policy) != Other {
		t.Errorf("niced thread after %s and back: %s nice %d, want SCHED_OTHER nice 5", want, Policy(attr.Policy), attr.Nice)
	}
	if ok, _ := CustomSlices(); ok {
		if def, _ := Of(os.Getpid()); time.Duration(attr.Runtime) != def.Slice {
			t.Errorf("slice after the undo %v, want the kernel's default %v", time.Duration(attr.Runtime), def.Slice)
		}
	}
	if rt != 0 {
		if p := policyOf(t, rt); p != unix.SCHED_FIFO {
			t.Errorf("realtime thread moved to %s, want it left SCHED_FIFO", p)
		}
	}
}

func TestSweepMissingRoot(t *testing.T) {
	res, err := Sweep(filepath.Join(t.TempDir(), "besteffort"), Attr{Policy: Idle}, nil)
	if err != nil || res != (Result{}) {
		t.Fatalf("sweep of a missing cgroup: %+v, %v; want nothing and no error", res, err)
	}
}
