package sched

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

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
	p, err := Of(tid)
	if err != nil {
		t.Fatal(err)
	}
	return p
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

	res, err := Sweep(root, Idle)
	if err != nil {
		t.Fatal(err)
	}
	if want := (Result{Threads: 4, Moved: 3, Skipped: 1}); res != want {
		t.Errorf("first sweep: %+v, want %+v", res, want)
	}
	for _, tid := range []int{a, b, batch} {
		if p := policyOf(t, tid); p != Idle {
			t.Errorf("thread %d runs under %s after the sweep, want SCHED_IDLE", tid, p)
		}
	}
	// Idle threads are left alone: a second sweep moves nothing.
	if res, err := Sweep(root, Idle); err != nil || res.Moved != 0 {
		t.Errorf("second sweep: %+v, %v; want nothing moved", res, err)
	}
	// Undoing brings every idle thread back to SCHED_OTHER.
	if res, err := Sweep(root, Other); err != nil || res.Moved != 3 {
		t.Errorf("undo: %+v, %v; want 3 moved", res, err)
	}
	for _, tid := range []int{a, b, batch} {
		if p := policyOf(t, tid); p != Other {
			t.Errorf("thread %d runs under %s after the undo, want SCHED_OTHER", tid, p)
		}
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
	if _, err := Sweep(root, Idle); err != nil {
		t.Fatal(err)
	}
	if _, err := Sweep(root, Other); err != nil {
		t.Fatal(err)
	}
	attr, err := unix.SchedGetAttr(nice, 0)
	if err != nil {
		t.Fatal(err)
	}
	if attr.Nice != 5 || Policy(attr.Policy) != Other {
		t.Errorf("niced thread after idle and back: %s nice %d, want SCHED_OTHER nice 5", Policy(attr.Policy), attr.Nice)
	}
	if rt != 0 {
		if p := policyOf(t, rt); p != unix.SCHED_FIFO {
			t.Errorf("realtime thread moved to %s, want it left SCHED_FIFO", p)
		}
	}
}

func TestSweepMissingRoot(t *testing.T) {
	res, err := Sweep(filepath.Join(t.TempDir(), "besteffort"), Idle)
	if err != nil || res != (Result{}) {
		t.Fatalf("sweep of a missing cgroup: %+v, %v; want nothing and no error", res, err)
	}
}

func TestThreadsMalformed(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "tasks"), []byte("12\nx\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Threads(dir); err == nil {
		t.Fatal("a tasks file with a non-number was accepted")
	}
}
