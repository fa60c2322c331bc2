package main

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Steal attribution. A cell's total steal says the host took CPU time during it, not which requests
// paid for it: one 100 ms stall delays some 40 requests at 400 rps and none of the thousands outside
// it. So the bench samples each CPU's steal counter every stealEvery during the window, and a request
// whose [due, done] overlapped an interval in which steal advanced on a CPU it ran on counts as stalled;
// the figures over the others say what the guest did.

const (
	// stealEvery is the sampling period: /proc/stat counts steal in 10 ms units, so sampling faster
	// finds the same jumps, and the wake-ups are what the sampler costs. On this VM, idle, a sample
	// costs about 150 µs of the process's CPU: some 30 µs for the read (7.5 µs when warm,
	// BenchmarkStealRead), the rest in waking an idle vCPU and a thread. At 5 ms that was 2.5-3.6 %
	// of one CPU, at 10 ms 1.5-2.2 %, against 30-67 % for the LS side at 400-1200 rps. Each cell
	// records the sampler thread's own share (about half of the process's).
	stealEvery = 10 * time.Millisecond
	// userTick is the unit of /proc/stat's columns (USER_HZ, fixed at 100 by the kernel's ABI).
	userTick = 10 * time.Millisecond
	// stealLead widens each interval further back than the steal it saw. The kernel accounts a
	// vCPU's steal at its first tick after the stall, so a counter that advanced between two samples
	// may describe time stolen before the first of them: the interval starts the advance, plus one
	// tick of the slowest kernel (HZ=100) and one rounding unit of /proc/stat, before that sample.
	stealLead = 2 * userTick
)

// interval is a closed interval of wall-clock time, in Unix nanoseconds (the clients' timestamps are
// CLOCK_REALTIME too, so all of them compare on one host).
type interval struct{ from, to int64 }

// stealSample is every CPU's steal counter (in userTick units, -1 for a CPU /proc/stat did not
// list) read at one instant.
type stealSample struct {
	at    int64
	steal []int64
}

// appendIntervals adds to spans (indexed by CPU) one interval for each CPU whose steal advanced
// from prev to cur: from prev's time, less the advance and stealLead, to cur's.
func appendIntervals(spans [][]interval, prev, cur stealSample) [][]interval {
	for cpu := range min(len(prev.steal), len(cur.steal)) {
		p, c := prev.steal[cpu], cur.steal[cpu]
		if p < 0 || c <= p {
			continue
		}
		for len(spans) <= cpu {
			spans = append(spans, nil)
		}
		lead := time.Duration(c-p)*userTick + stealLead
		spans[cpu] = append(spans[cpu], interval{from: prev.at - int64(lead), to: cur.at})
	}
	return spans
}

// stalls are, per CPU, the intervals during which the host may have stalled that CPU, sorted and merged.
type stalls [][]interval

// newStalls sorts and merges each CPU's intervals.
func newStalls(spans [][]interval) stalls {
	st := make(stalls, len(spans))
	for cpu, ss := range spans {
		ss = slices.Clone(ss)
		slices.SortFunc(ss, func(a, b interval) int { return cmp.Compare(a.from, b.from) })
		var merged []interval
		for _, s := range ss {
			if n := len(merged); n > 0 && s.from <= merged[n-1].to {
				merged[n-1].to = max(merged[n-1].to, s.to)
				continue
			}
			merged = append(merged, s)
		}
		st[cpu] = merged
	}
	return st
}

// overlaps reports whether [from, to] meets a stall on one of cpus.
func (st stalls) overlaps(from, to int64, cpus cpuSet) bool {
	for cpu, ss := range st {
		if !cpus.has(cpu) {
			continue
		}
		// The first interval that ends at or after from; it overlaps if it starts by to.
		i, _ := slices.BinarySearchFunc(ss, from, func(s interval, t int64) int { return cmp.Compare(s.to, t) })
		if i < len(ss) && ss[i].from <= to {
			return true
		}
	}
	return false
}

// cpuSet is the CPUs a request ran on, as a bit per CPU below 64. The empty set means nothing is
// known (a request that got no answer), and so does allCPUs (a CPU number beyond the bits): either
// counts as every CPU, so that what cannot be attributed is never called clean.
type cpuSet uint64

const allCPUs = ^cpuSet(0)

func (s cpuSet) add(cpu int) cpuSet {
	if cpu < 0 || cpu >= 64 {
		return allCPUs
	}
	return s | 1<<cpu
}

func (s cpuSet) has(cpu int) bool {
	return s == 0 || s == allCPUs || (cpu >= 0 && cpu < 64 && s&(1<<cpu) != 0)
}

// stealReader reads per-CPU steal from /proc/stat into buffers it reuses. procfs's Stat would do
// (stealSeconds uses it), but it parses every line, interrupts included, into fresh values: 60 µs
// and 97 allocations a call on this VM against 7.5 µs and none, 100 times a second beside the
// service being measured.
type stealReader struct {
	f   *os.File
	buf []byte
}

func openStealReader(path string) (*stealReader, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open %s for steal sampling: %w", path, err)
	}
	return &stealReader{f: f, buf: make([]byte, 8192)}, nil
}

// read fills s from one fresh read of the file (a read at offset 0 of a proc file regenerates it).
func (r *stealReader) read(s *stealSample) error {
	for {
		n, err := r.f.ReadAt(r.buf, 0)
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("read %s: %w", r.f.Name(), err)
		}
		if n == len(r.buf) {
			// Possibly cut short: a machine with many CPUs or interrupts.
			r.buf = make([]byte, 2*len(r.buf))
			continue
		}
		s.at = time.Now().UnixNano()
		s.steal = parseSteal(r.buf[:n], s.steal[:0])
		if len(s.steal) == 0 {
			return fmt.Errorf("%s lists no cpuN line with a steal column", r.f.Name())
		}
		return nil
	}
}

func (r *stealReader) close() { _ = r.f.Close() }

// parseSteal appends to dst, indexed by CPU, the steal column (the 8th number) of each cpuN line of
// /proc/stat, and -1 for CPUs it does not list (offline ones) or lists without a steal column.
func parseSteal(b []byte, dst []int64) []int64 {
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		rest, ok := bytes.CutPrefix(line, []byte("cpu"))
		if !ok || len(rest) == 0 || rest[0] < '0' || rest[0] > '9' {
			continue
		}
		cpu, rest, ok := parseUint(rest)
		if !ok || cpu > 1<<16 {
			continue
		}
		steal := int64(-1)
		for i := 1; i <= 8; i++ {
			rest = bytes.TrimLeft(rest, " ")
			var v int64
			if v, rest, ok = parseUint(rest); !ok {
				break
			}
			if i == 8 {
				steal = v
			}
		}
		for int64(len(dst)) <= cpu {
			dst = append(dst, -1)
		}
		dst[cpu] = steal
	}
	return dst
}

// parseUint reads the decimal digits at the start of b.
func parseUint(b []byte) (v int64, rest []byte, ok bool) {
	i := 0
	for ; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
		if v > (1<<62)/10 {
			return 0, b, false
		}
		v = v*10 + int64(b[i]-'0')
	}
	return v, b[i:], i > 0
}

// stealSampler samples steal every stealEvery from a goroutine of the bench, from start to end.
type stealSampler struct {
	r     *stealReader
	every time.Duration
	stop  atomic.Bool
	done  chan struct{}
	once  sync.Once

	// Owned by run until done is closed.
	prev   stealSample
	spans  [][]interval
	cpu    time.Duration // the sampler thread's own CPU time
	maxGap time.Duration // the longest time between two samples: the attribution's real resolution
	err    error
}

// startStealSampler takes the first sample before it returns, so that the window is covered from
// its start.
func startStealSampler(path string, every time.Duration) (*stealSampler, error) {
	r, err := openStealReader(path)
	if err != nil {
		return nil, err
	}
	s := &stealSampler{r: r, every: every, done: make(chan struct{})}
	if err := r.read(&s.prev); err != nil {
		r.close()
		return nil, err
	}
	go s.run()
	return s, nil
}

func (s *stealSampler) run() {
	defer close(s.done)
	// Locked, not pinned: the thread's CPU clock is then the sampler's own cost, and the scheduler
	// still puts it wherever it likes.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	// A Go timer wakes the goroutine through the runtime's other threads, which compete with the BE
	// pods like any process of the bench's cgroup: colocated cells saw 320-407 ms between samples that
	// way, against 12 ms solo. The thread sleeps in the kernel instead, on SCHED_FIFO where it may (root),
	// so it runs at each wake-up whatever the CFS tasks do; 7.5 µs of work every 10 ms takes nothing from
	// them. The thread goes back to SCHED_OTHER before it is unlocked (an unlocked thread is reused).
	fifo := unix.SchedSetAttr(0, &unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_FIFO, Priority: 1}, 0) == nil
	if fifo {
		defer func() {
			_ = unix.SchedSetAttr(0, &unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_NORMAL}, 0)
		}()
	}
	start := threadCPU()
	defer func() { s.cpu = threadCPU() - start }()
	cur := stealSample{steal: make([]int64, 0, len(s.prev.steal))}
	ts := unix.NsecToTimespec(s.every.Nanoseconds())
	for {
		// One more sample after the stop, so that the window is covered to its end.
		last := s.stop.Load()
		if !last {
			_ = unix.Nanosleep(&ts, nil) // EINTR only shortens one interval
		}
		if err := s.r.read(&cur); err != nil {
			s.err = err
			return
		}
		s.spans = appendIntervals(s.spans, s.prev, cur)
		s.maxGap = max(s.maxGap, time.Duration(cur.at-s.prev.at))
		s.prev, cur = cur, s.prev
		if last {
			return
		}
	}
}

// end stops the sampler and returns the stalls it saw, how many sample intervals of a CPU saw
// steal advance, and its own CPU time and longest gap. Later calls return nothing.
func (s *stealSampler) end() (st stalls, count int, cpu, maxGap time.Duration, err error) {
	ended := false
	s.once.Do(func() {
		s.stop.Store(true)
		<-s.done
		s.r.close()
		ended = true
	})
	if !ended {
		return nil, 0, 0, 0, nil
	}
	if s.err != nil {
		return nil, 0, 0, 0, s.err
	}
	for _, ss := range s.spans {
		count += len(ss)
	}
	return newStalls(s.spans), count, s.cpu, s.maxGap, nil
}
