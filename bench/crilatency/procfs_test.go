package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tandemkit/tandem/bench/internal/procstat"
)

func TestParseStatus(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		in      string
		want    memory
		wantErr bool
	}{
		{
			name: "kernel 6 layout",
			in: "Name:\ttandem-proxy\nUmask:\t0022\nState:\tS (sleeping)\nVmPeak:\t 1262916 kB\nVmSize:\t 1262916 kB\n" +
				"VmLck:\t       0 kB\nVmHWM:\t   22364 kB\nVmRSS:\t   21992 kB\nRssAnon:\t    9120 kB\nThreads:\t9\n",
			want: memory{VmRSSKiB: 21992, VmHWMKiB: 22364},
		},
		{name: "zombie has no Vm lines", in: "Name:\tx\nState:\tZ (zombie)\n", wantErr: true},
		{name: "unexpected unit", in: "VmHWM:\t 1 MB\nVmRSS:\t 1 kB\n", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := parseStatus([]byte(tt.in))
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if !tt.wantErr && got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestSwitchesAdd(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		in      []string // one status text per thread
		want    switches
		wantErr bool
	}{
		{
			name: "two threads are summed",
			in: []string{
				"Name:\ttandem-proxy\nThreads:\t9\nvoluntary_ctxt_switches:\t120\nnonvoluntary_ctxt_switches:\t7\n",
				"Name:\ttandem-proxy\nvoluntary_ctxt_switches:\t30\nnonvoluntary_ctxt_switches:\t3\n",
			},
			want: switches{Voluntary: 150, Involuntary: 10},
		},
		{name: "missing counts", in: []string{"Name:\tx\nvoluntary_ctxt_switches:\t1\n"}, wantErr: true},
		{name: "not a number", in: []string{"voluntary_ctxt_switches:\tx\nnonvoluntary_ctxt_switches:\t1\n"}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var got switches
			var err error
			for _, b := range tt.in {
				if err = got.add([]byte(b)); err != nil {
					break
				}
			}
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if !tt.wantErr && got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

// The count is over every thread, not the main thread's alone: sleeps on another thread must all show
// in it.
func TestReadSwitchesCountsEveryThread(t *testing.T) {
	type counts struct{ process, thread switches }
	read := func(tid int) (counts, error) {
		var c counts
		var err error
		if c.process, err = readSwitches(os.Getpid()); err != nil {
			return c, err
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/status", os.Getpid(), tid))
		if err != nil {
			return c, err
		}
		return c, c.thread.add(b)
	}
	type result struct {
		tid           int
		before, after counts
		err           error
	}
	done := make(chan result, 1)
	var sleepOnOwnThread func()
	sleepOnOwnThread = func() {
		// Locked, the goroutine's thread sleeps in the kernel at each time.Sleep instead of running others.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		r := result{tid: unix.Gettid()}
		if r.tid == os.Getpid() {
			// The main thread: holding it keeps the next goroutine off it.
			inner := make(chan struct{})
			go func() { sleepOnOwnThread(); close(inner) }()
			<-inner
			return
		}
		if r.before, r.err = read(r.tid); r.err == nil {
			for range 20 {
				time.Sleep(time.Millisecond)
			}
			r.after, r.err = read(r.tid)
		}
		done <- r
	}
	go sleepOnOwnThread()
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	thread, process := r.after.thread.since(r.before.thread), r.after.process.since(r.before.process)
	// A sleep whose timer ran out while the thread was preempted (a busy machine) wakes without
	// blocking: the sum still counts every sleep, and most must be voluntary.
	if thread.Voluntary < 10 || thread.Voluntary+thread.Involuntary < 20 {
		t.Errorf("20 sleeps on thread %d gave it %d voluntary and %d involuntary switches, want at least 10 voluntary and 20 in all", r.tid, thread.Voluntary, thread.Involuntary)
	}
	if process.Voluntary < thread.Voluntary || process.Involuntary < thread.Involuntary {
		t.Errorf("process counted %+v over the sleeps, less than the sleeping thread's own %+v", process, thread)
	}
}

// The test process itself is a real process to measure: busy-looping for a
// while must show up as CPU time, and its memory must be non-zero.
func TestMeasureIdleSeesOwnCPU(t *testing.T) {
	t.Parallel()
	var done atomic.Bool
	go func() {
		for !done.Load() {
		}
	}()
	const window = 500 * time.Millisecond
	var before, after syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &before)
	c, err := measureIdle(t.Context(), os.Getpid(), window)
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &after)
	done.Store(true)
	if err != nil {
		t.Fatalf("measureIdle: %v", err)
	}
	// The kernel's own account of the same window is the reference: how much CPU the spinner got depends
	// on how busy the machine is, but /proc and getrusage must agree, to within the ticks /proc counts in.
	cpu := func(r syscall.Rusage) time.Duration {
		return time.Duration(r.Utime.Nano() + r.Stime.Nano())
	}
	// CPU time, not a percentage: the window measureIdle divides by includes its own reads at the end, and
	// parallel tests spend CPU in this process too, so only the times are comparable.
	want := cpu(after) - cpu(before)
	got := time.Duration(c.CPUTicks) * time.Second / procstat.UserHZ
	const slack = 30 * time.Millisecond // three 10 ms ticks
	if c.CPUPercentCore <= 0 || got < want-slack || got > want+slack {
		t.Errorf("measured %v of CPU (%.1f%% of a core), getrusage says %v (±%v)", got, c.CPUPercentCore, want, slack)
	}
	if c.Start.VmRSSKiB <= 0 || c.End.VmHWMKiB < c.End.VmRSSKiB {
		t.Errorf("memory %+v: want a positive RSS and a peak no lower than it", c)
	}
	if os.Geteuid() != 0 {
		return
	}
	// The test's own process: its executable is resident, and the spinner touched some of it.
	u := c.Used
	if u == nil {
		t.Fatal("no working set measured as root")
	}
	if u.FileKiB <= 0 || u.FileUsedKiB <= 0 || u.FileUsedKiB > u.FileKiB || u.AnonKiB <= 0 {
		t.Errorf("working set %+v: want anonymous and file-backed memory, and no more used than resident", *u)
	}
	// Measured at the same moment, smaps and status count the same pages (give or take what the
	// runtime mapped between the two reads).
	if total := u.AnonKiB + u.FileKiB; total < c.End.VmRSSKiB*9/10 || total > c.End.VmRSSKiB*11/10 {
		t.Errorf("smaps counts %d KiB resident, status %d KiB", total, c.End.VmRSSKiB)
	}
}

func TestParseSmaps(t *testing.T) {
	t.Parallel()
	text := "00400000-01000000 r-xp 00000000 fe:00 12 /usr/local/bin/tandem-proxy\n" +
		"Size:              12288 kB\nRss:                9800 kB\nAnonymous:             0 kB\nReferenced:         2100 kB\n" +
		"01000000-01100000 rw-p 00c00000 fe:00 12 /usr/local/bin/tandem-proxy\n" +
		"Rss:                 300 kB\nReferenced:          250 kB\nAnonymous:           200 kB\n" +
		"c000000000-c000800000 rw-p 00000000 00:00 0 \n" +
		"Rss:                6000 kB\nReferenced:         1000 kB\nAnonymous:          6000 kB\nVmFlags: rd wr mr mw me ac\n"
	tests := []struct {
		name    string
		in      string
		want    workingSet
		wantErr bool
	}{
		// Text: 2100 of 9800 used. Data: 200 anonymous (written), 100 file pages of which 50 used.
		// Heap: all 6000 anonymous count, referenced or not.
		{name: "text, data and heap", in: text, want: workingSet{AnonKiB: 6200, FileKiB: 9900, FileUsedKiB: 2150}},
		{name: "zombie", in: "", wantErr: true},
		{name: "unexpected unit", in: "00400000-00401000 r-xp 0 0:0 0\nRss: 4 MB\n", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := parseSmaps([]byte(tt.in))
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if !tt.wantErr && got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestBuildOf(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	notGo := filepath.Join(t.TempDir(), "script")
	if err := os.WriteFile(notGo, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path string
		want []string
	}{
		// The test binary carries its build settings as any `go build` output does.
		{exe, []string{"MB executable", "CGO_ENABLED=", "build tags: "}},
		{notGo, []string{"0.0 MB executable", "no build information"}},
		{filepath.Join(t.TempDir(), "missing"), []string{"no such file"}},
	} {
		got := buildOf(tc.path)
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("buildOf(%s) = %q, want it to say %q", tc.path, got, w)
			}
		}
	}
}
