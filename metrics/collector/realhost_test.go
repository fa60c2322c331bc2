//go:build linux

package collector

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2/ktesting"

	"github.com/tandemkit/tandem/internal/polltest"
)

// The tests in this file read the machine they run on: /proc, /sys/fs/cgroup, tracefs and the perf
// subsystem. Each one skips, saying why, where the machine lacks what it needs.

func TestRealHostUsage(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	u := newUsageSource("/proc", "/sys/fs/cgroup")
	if err := u.detect(ctx); err != nil {
		t.Fatalf("detect on this machine: %v", err)
	}
	time.Sleep(50 * time.Millisecond) // CPU use is a rate since detect's first read: some time must pass
	s := u.sample(ctx, nil)
	if s == nil {
		t.Fatal("no snapshot of this machine")
	}
	if s.Capacity.CPUMilli < 1000 || s.Capacity.CPUMilli%1000 != 0 {
		t.Errorf("capacity %d milli-CPUs is not a whole number of CPUs", s.Capacity.CPUMilli)
	}
	if s.Node.MemoryBytes <= 0 || s.Node.MemoryBytes > s.Capacity.MemoryBytes {
		t.Errorf("node memory %d outside (0, MemTotal %d]", s.Node.MemoryBytes, s.Capacity.MemoryBytes)
	}
	if s.Node.CPUMilli < 0 || s.Node.CPUMilli > s.Capacity.CPUMilli {
		t.Errorf("node CPU %d outside [0, %d]", s.Node.CPUMilli, s.Capacity.CPUMilli)
	}

	// A container cgroup of our own, with a process that allocates 32 MiB and spins.
	if os.Geteuid() != 0 {
		t.Skip("container part needs root to create cgroups")
	}
	if _, ok := u.reader.(*v1Reader); !ok {
		t.Skip("container part creates cgroup v1 directories; this machine is not v1/hybrid")
	}
	parent := fmt.Sprintf("/tandem-collector-test-%d", os.Getpid())
	rel := filepath.Join(parent, "ctr")
	var dirs []string
	for _, ctrl := range []string{"cpu", "cpuacct", "memory"} {
		d := filepath.Join("/sys/fs/cgroup", ctrl, rel)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatalf("create test cgroup: %v", err)
		}
		dirs = append(dirs, d)
	}
	cmd := exec.Command("sh", "-c", `read go; v=$(head -c 33554432 /dev/zero | tr '\000' a); while :; do :; done`)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		// The kernel may still hold the exited process in the cgroup for a moment (EBUSY): one CI run
		// left the three directories behind when the removal was tried once.
		for _, d := range dirs {
			for _, dir := range []string{d, filepath.Dir(d)} {
				err := os.Remove(dir)
				for deadline := time.Now().Add(5 * time.Second); err != nil && !os.IsNotExist(err) && time.Now().Before(deadline); {
					time.Sleep(50 * time.Millisecond) // not polltest: a failure must not stop the other removals
					err = os.Remove(dir)
				}
				if err != nil && !os.IsNotExist(err) {
					t.Errorf("remove the test cgroup %s: %v", dir, err)
				}
			}
		}
	})
	for _, d := range dirs {
		if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
			t.Fatalf("move the test process into %s: %v", d, err)
		}
	}
	// Only now does it allocate, so the memory is charged to the test cgroup.
	if _, err := io.WriteString(stdin, "go\n"); err != nil {
		t.Fatal(err)
	}
	tg := Target{Namespace: "test", Pod: "p", Container: "spin", ContainerID: "ctr", CgroupParent: parent}
	var last ContainerUsage
	// Samples 200 ms apart: CPU use is a rate over the time between two samples.
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		s := u.sample(ctx, []Target{tg})
		if s == nil || len(s.Containers) != 1 {
			t.Fatalf("snapshot %+v, want the test container", s)
		}
		last = s.Containers[0]
		if last.CPUMilli > 0 && last.MemoryBytes >= 32<<20 {
			break
		}
	}
	if last.CPUMilli <= 0 || last.MemoryBytes < 32<<20 {
		t.Fatalf("the spinning, allocating process reads as %+v; want CPU > 0 and working set ≥ 32 MiB", last)
	}

	// Once the process has exited the counters stand still, and the direct reader must read what
	// containerd/cgroups reads from the real kernel files.
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	polltest.Within(t, 2*time.Second, "the direct read of the test cgroup to match containerd/cgroups'", func() bool {
		ours, err1 := u.reader.stat(u.reader.files(rel))
		ref, err2 := libV1{root: "/sys/fs/cgroup"}.stat(rel)
		if err1 != nil || err2 != nil {
			t.Fatalf("read the test cgroup: direct %v, containerd/cgroups %v", err1, err2)
		}
		return ours == ref
	})
}

func TestRealHostRunQueueProbe(t *testing.T) {
	tracefs := tracefsForTest(t)
	off, err := readSchedOffsets(tracefs)
	if err != nil {
		t.Fatal(err)
	}
	p, err := loadRunQueueProbe(tracefs, off)
	if errors.Is(err, unix.EPERM) {
		t.Skipf("BPF not allowed here: %v", err)
	}
	if err != nil {
		// Anything else (the verifier refusing the program) is a bug in the program.
		t.Fatalf("load the run-queue probe: %v", err)
	}
	defer p.close()

	// More spinning threads than CPUs: each gets preempted while runnable and waits in the run
	// queue, which the program must record under our own thread ids.
	var stop atomic.Bool
	defer stop.Store(true)
	for range runtime.NumCPU() + 2 {
		go func() {
			runtime.LockOSThread()
			for !stop.Load() {
			}
		}()
	}
	own := func() map[uint32]bool {
		tids := map[uint32]bool{}
		entries, _ := os.ReadDir("/proc/self/task")
		for _, e := range entries {
			if n, err := strconv.ParseUint(e.Name(), 10, 32); err == nil {
				tids[uint32(n)] = true
			}
		}
		return tids
	}
	var waits, sum, lower, upper uint64
	open := false
	polltest.Within(t, 60*time.Second, "a run-queue wait recorded for our spinning threads", func() bool {
		got, err := p.drain()
		if err != nil {
			t.Fatalf("drain: %v", err)
		}
		tids := own()
		waits, sum, lower, upper, open = 0, 0, 0, 0, false
		for k, v := range got {
			if !tids[k.TID] {
				continue
			}
			switch {
			case k.Slot == rqSumSlot:
				sum += v
			default:
				waits += v
				// Slot b holds waits of [2^(b-1), 2^b) µs; the last slot is open-ended.
				if k.Slot > 0 {
					lower += v * (uint64(1) << (k.Slot - 1)) * 1000
				}
				if k.Slot == rqSlots-1 {
					open = true
				}
				upper += v * (uint64(1) << k.Slot) * 1000
			}
		}
		return waits > 0 && sum > 0
	})
	// The program's buckets must agree with the waits it summed.
	if sum < lower || (!open && sum >= upper) {
		t.Errorf("%d waits summing to %d ns do not fit their buckets' bounds [%d, %d) ns", waits, sum, lower, upper)
	}
}

// TestRealHostRunQueueSource runs the run-queue source as the agent does, on a cgroup of its own with
// three spinning processes pinned on one CPU: at any moment at least two of them wait, so the cgroup
// must gain 2 to 3 s of run-queue wait per second (3 if something else takes the CPU, never more
// than its three threads can wait), in waits of a scheduler slice rather than microseconds.
func TestRealHostRunQueueSource(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	tracefs := tracefsForTest(t)
	const root = "/sys/fs/cgroup"
	reader, err := detectReader(root)
	if err != nil {
		t.Skipf("no cgroup hierarchy here: %v", err)
	}
	parent := fmt.Sprintf("/tandem-runqueue-test-%d", os.Getpid())
	rel := filepath.Join(parent, "ctr")
	dirs := []string{filepath.Join(root, rel)}
	if reader.version() == 1 {
		dirs = []string{filepath.Join(root, "cpu", rel), filepath.Join(root, "cpuacct", rel)}
	}
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatalf("create test cgroup: %v", err)
		}
	}
	cmd := exec.Command("sh", "-c", `read go; while :; do :; done & while :; do :; done & while :; do :; done`)
	cmd.SysProcAttr = &unix.SysProcAttr{Setpgid: true}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = unix.Kill(-cmd.Process.Pid, unix.SIGKILL)
		_ = cmd.Wait()
		for _, d := range dirs {
			// The killed processes leave the cgroup a moment after Wait returns.
			for i := 0; i < 50 && os.Remove(d) != nil; i++ {
				time.Sleep(20 * time.Millisecond) // not polltest: cleanup goes on to the other directories
			}
			_ = os.Remove(filepath.Dir(d))
		}
	})
	var ours, one unix.CPUSet
	if err := unix.SchedGetaffinity(0, &ours); err != nil {
		t.Fatal(err)
	}
	for c := range 1024 {
		if ours.IsSet(c) {
			one.Zero()
			one.Set(c)
		}
	}
	if err := unix.SchedSetaffinity(cmd.Process.Pid, &one); err != nil {
		t.Fatalf("pin the test process: %v", err)
	}
	for _, d := range dirs {
		if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
			t.Fatalf("move the test process into %s: %v", d, err)
		}
	}
	// The spinners fork from here, inside the cgroup and on the one CPU.
	if _, err := io.WriteString(stdin, "go\n"); err != nil {
		t.Fatal(err)
	}

	src := newRunQueueSource(tracefs, "/proc", root)
	if err := src.detect(ctx); err != nil {
		t.Fatalf("the run-queue source does not start on this machine: %v", err)
	}
	defer src.close()
	tg := Target{Namespace: "test", Pod: "p", Container: "spin", ContainerID: "ctr", CgroupParent: parent}
	hist := func() rqHist {
		src.sample(ctx, []Target{tg}, time.Now)
		got := src.latest.Load().Containers
		if len(got) != 1 {
			t.Fatalf("the source sees %d containers, want the test cgroup", len(got))
		}
		return got[0].hist
	}
	time.Sleep(500 * time.Millisecond) // the spinners settle into sharing the CPU before the baseline
	h0, t0 := hist(), time.Now()
	time.Sleep(2 * time.Second) // the rate is measured over this much real time
	h1, t1 := hist(), time.Now()
	waits, sum := h1.count()-h0.count(), time.Duration(h1.sumNanos-h0.sumNanos)
	rate := sum.Seconds() / t1.Sub(t0).Seconds()
	t.Logf("3 spinners on one CPU: %d waits, %v in all (mean %v) over %v: %.2f s of wait per second", waits, sum, sum/time.Duration(max(waits, 1)), t1.Sub(t0).Round(time.Millisecond), rate)
	if rate < 1.5 || rate > 3.05 {
		t.Errorf("the cgroup waited %.2f s per second; three spinners on one CPU wait 2 to 3", rate)
	}
	if waits == 0 || sum/time.Duration(waits) < 100*time.Microsecond {
		t.Errorf("%d waits of %v in all: spinners sharing a CPU wait a scheduler slice at a time", waits, sum)
	}
}

func TestRealHostPerf(t *testing.T) {
	err := newPerfOpener().probe()
	if err != nil {
		// The project's VMs have no hardware counters (ENOENT); the source must then stay off.
		t.Skipf("no hardware counters here, CPI stays off: %v", err)
	}
	g, err := newPerfOpener().openCgroup("/sys/fs/cgroup/perf_event")
	if err != nil {
		t.Skipf("cgroup perf events not available: %v", err)
	}
	defer g.close()
	a, err := g.read()
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 50_000_000; i++ {
		_ = i * i
	}
	b, err := g.read()
	if err != nil {
		t.Fatal(err)
	}
	if r, ok := computeCPI(a, b); !ok || r.cpi <= 0 {
		t.Errorf("CPI over a busy loop = %+v (ok %v), want > 0", r, ok)
	}
}

// The usage source keeps every container file open between samples. On the real kernel a removed
// cgroup must not be read through its old descriptors, a cgroup made again under the same name must
// be read anew, and a container that leaves must leave no descriptor behind.
func TestRealHostKeptFilesFollowTheCgroup(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create cgroups")
	}
	_, ctx := ktesting.NewTestContext(t)
	u := newUsageSource("/proc", "/sys/fs/cgroup")
	if err := u.detect(ctx); err != nil {
		t.Fatalf("detect on this machine: %v", err)
	}
	v1, ok := u.reader.(*v1Reader)
	if !ok {
		t.Skip("creates cgroup v1 directories; this machine is not v1/hybrid")
	}
	parent := fmt.Sprintf("/tandem-kept-files-test-%d", os.Getpid())
	rel := filepath.Join(parent, "ctr")
	var dirs []string
	for _, ctrl := range []string{"cpu", "cpuacct", "memory"} {
		dirs = append(dirs, filepath.Join("/sys/fs/cgroup", ctrl, rel))
	}
	mk := func() {
		for _, d := range dirs {
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatalf("create test cgroup: %v", err)
			}
		}
	}
	rm := func() {
		for _, d := range dirs {
			if err := os.Remove(d); err != nil && !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("remove test cgroup: %v", err)
			}
		}
	}
	t.Cleanup(func() {
		u.close()
		for _, d := range dirs {
			_ = os.Remove(d)
			_ = os.Remove(filepath.Dir(d))
		}
	})
	openFDs := func() int {
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatal(err)
		}
		return len(ents)
	}
	before := openFDs()
	tg := Target{Namespace: "test", Pod: "p", Container: "c", ContainerID: "ctr", CgroupParent: parent}
	count := func() int {
		s := u.sample(ctx, []Target{tg})
		if s == nil {
			t.Fatal("no snapshot of this machine")
		}
		return len(s.Containers)
	}

	mk()
	if n := count(); n != 1 {
		t.Fatalf("the test cgroup reads as %d containers, want 1", n)
	}
	if len(v1.r.open) != 4 {
		t.Fatalf("%d files kept open after a sample of one v1 container, want its 4", len(v1.r.open))
	}
	// Made again under the same name: the old descriptors fail (ENODEV), the new cgroup is read.
	rm()
	mk()
	if n := count(); n != 1 {
		t.Fatalf("after the cgroup was made again the container reads as %d containers, want 1", n)
	}
	rm()
	if n := count(); n != 0 {
		t.Fatalf("a removed cgroup reads as %d containers, want 0", n)
	}
	if len(v1.r.open) != 0 {
		t.Errorf("%d files still kept open after the container's cgroup went away", len(v1.r.open))
	}
	// A container that leaves the targets while its cgroup stays closes its files too.
	mk()
	count()
	u.sample(ctx, nil)
	if len(v1.r.open) != 0 {
		t.Errorf("%d files still kept open after the container left", len(v1.r.open))
	}
	if after := openFDs(); after != before {
		t.Errorf("%d descriptors open in the process after the container left, %d before", after, before)
	}
}

// Files are kept open only on a cgroup filesystem, where a removed cgroup's files fail to read.
func TestOnCgroupFS(t *testing.T) {
	cases := map[string]bool{t.TempDir(): false, "/nonexistent": false}
	for _, d := range []string{"/sys/fs/cgroup/cpuacct", "/sys/fs/cgroup/unified"} {
		if fi, err := os.Stat(d); err == nil && fi.IsDir() {
			cases[d] = true
		}
	}
	for dir, want := range cases {
		if got := onCgroupFS(dir); got != want {
			t.Errorf("onCgroupFS(%s) = %v, want %v", dir, got, want)
		}
	}
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }
