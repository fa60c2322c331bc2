// Command suppress measures CPU suppression's reaction time: from the moment an LS workload starts to
// spin a CPU to the moment the BE cpuset is narrowed, and back when it stops.
//
// Everything but the container runtime is real and in-process: the load is a real spinning thread, the
// usage comes from /proc (node from /proc/stat, the "LS container" is this process, from getrusage),
// sampled every -interval like the collector's usage source, and the decision is actuate/suppress's
// Loop on the real cpuset allocator of this machine's topology. Where the proxy would run its refresh
// (PreUpdateContainerResources → UpdateContainerResources), a stub runtime writes the new BE pool into
// a real cgroup v1 cpuset (/sys/fs/cgroup/cpuset/tandem-bench-<pid>, when this is a cgroup v1 host and
// we are root); the time stops when that write is done. What the stub leaves out is the CRI round trip
// to containerd, about a millisecond (see bench/crilatency).
//
//	go run ./bench/suppress                    # 20 load steps, 250 ms samples
//	go run ./bench/suppress -interval 1s       # at the collector's default interval
//	go run ./bench/suppress -node self         # on a shared, busy machine: see -node
//
// The target is p99 ≤ 1 s from the load step to the narrowed cpuset. The sampling interval bounds it:
// a sample is the average over its interval, so a step shows fully only in the sample after the one it
// falls into.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tandemkit/tandem/actuate/suppress"
	"github.com/tandemkit/tandem/metrics/collector"
	alloc "github.com/tandemkit/tandem/resource/cpuset"
	"github.com/tandemkit/tandem/resource/qos"
	"github.com/tandemkit/tandem/resource/topology"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "suppress bench:", err)
		os.Exit(1)
	}
}

func run() error {
	steps := flag.Int("steps", 20, "load steps to time")
	interval := flag.Duration("interval", 250*time.Millisecond, "usage sampling interval")
	threshold := flag.Int64("threshold", 55, "cpuSuppressThresholdPercent (55: on 2 CPUs the spinning thread crosses it with 100m, even on a busy machine where it gets a fraction of a CPU)")
	widenAfter := flag.Int("widen-after", 2, "samples asking for more before BE widens")
	sysfs := flag.String("sysfs", "/sys", "sysfs root, for the CPU topology")
	node := flag.String("node", "proc", "what the node's CPU use is: proc (/proc/stat: everything on the machine counts as system use) "+
		"or self (only this bench's load, system 0: on a machine busy with other work, which would otherwise keep BE suppressed)")
	flag.Parse()
	if *node != "proc" && *node != "self" {
		return fmt.Errorf("-node %q: want proc or self", *node)
	}

	topo, err := topology.Discover(*sysfs)
	if err != nil {
		return err
	}
	a, err := alloc.New(topo, alloc.DefaultConfig())
	if err != nil {
		return err
	}
	full := a.Pools().BE
	if full.Size() < 2 {
		return errors.New("this machine has one usable CPU: there is nothing to suppress")
	}
	rt := newStubRuntime(full.String())
	defer rt.close()

	// An interrupt must still remove the bench's cgroup.
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	s := newSampler(int64(runtime.NumCPU()), *node == "self")
	refresh := make(chan struct{}, 1)
	cfg := suppress.DefaultConfig()
	cfg.Enable, cfg.CPUSuppressThresholdPercent, cfg.WidenAfterSamples = true, *threshold, *widenAfter
	cfg.Interval = *interval
	loop, err := suppress.New(cfg, suppress.Deps{
		Latest: s.latest, Updates: s.updates, CPUs: a,
		PoolsChanged: func() {
			select {
			case refresh <- struct{}{}:
			default:
			}
		},
	})
	if err != nil {
		return err
	}
	go s.run(ctx, *interval)
	go func() { _ = loop.Run(ctx) }()
	// The proxy's refresh loop, with the stub in place of the runtime.
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-refresh:
				rt.update(a.Pools().BE.String())
			}
		}
	}()

	fmt.Printf("suppress reaction: %d load steps, %v samples, threshold %d%%, %d CPUs, node use from %s, cgroup %s\n",
		*steps, *interval, *threshold, full.Size(), *node, rt.where())
	var shrink, widen []time.Duration
	skipped := 0
	for i := range *steps {
		if ctx.Err() != nil {
			return errors.New("interrupted")
		}
		// Other load on the machine can hold BE narrowed; such a step is skipped, not timed.
		if _, err := rt.waitFor(full.String(), 30*time.Second); err != nil {
			skipped++
			fmt.Fprintf(os.Stderr, "step %d skipped: BE did not widen back to %s with the load off (is the machine busy?)\n", i, full.String())
			continue
		}
		// Let a sample or more pass, so the steps fall at spread-out points of an interval.
		time.Sleep(*interval + time.Duration(i)*(*interval)/time.Duration(*steps))
		stop := spin()
		start := time.Now()
		at, err := rt.waitForChange(full.String(), 10*time.Second)
		if err != nil {
			stop()
			return fmt.Errorf("step %d: BE cpuset never narrowed: %w", i, err)
		}
		shrink = append(shrink, at.Sub(start))
		time.Sleep(*interval)
		stop()
		start = time.Now()
		if at, err = rt.waitFor(full.String(), 30*time.Second); err == nil {
			widen = append(widen, at.Sub(start))
		}
	}
	if len(shrink) == 0 {
		return errors.New("no step could be timed: the machine never left BE its full cpuset")
	}
	if skipped > 0 {
		fmt.Printf("%d of %d steps skipped: the machine was too busy to start them from an unsuppressed BE\n", skipped, *steps)
	}
	report("LS load step → BE cpuset narrowed", shrink, time.Second)
	if len(widen) > 0 {
		report("LS load gone → BE cpuset widened (hysteresis: by design slower)", widen, 0)
	}
	return nil
}

func report(what string, d []time.Duration, target time.Duration) {
	slices.Sort(d)
	q := func(p float64) time.Duration { return d[min(len(d)-1, int(p*float64(len(d))))] }
	line := fmt.Sprintf("%-66s n=%d p50=%v p90=%v p99=%v max=%v", what, len(d),
		q(0.50).Round(time.Millisecond), q(0.90).Round(time.Millisecond), q(0.99).Round(time.Millisecond), d[len(d)-1].Round(time.Millisecond))
	if target > 0 {
		verdict := "MEETS"
		if q(0.99) > target {
			verdict = "MISSES"
		}
		line += fmt.Sprintf("  target p99 ≤ %v: %s", target, verdict)
	}
	fmt.Println(line)
}

// spin starts a thread that keeps one CPU busy, the LS load step; the returned func stops it.
func spin() func() {
	var stop atomic.Bool
	done := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		defer close(done)
		for !stop.Load() {
		}
	}()
	return func() { stop.Store(true); <-done }
}

// sampler is a minimal stand-in for the collector's usage source: node CPU from /proc/stat, this
// process as the one LS container.
type sampler struct {
	cpus    int64
	self    bool // node = this process, system 0
	mu      sync.Mutex
	snap    *collector.Snapshot
	updates chan struct{}
}

func newSampler(cpus int64, self bool) *sampler {
	return &sampler{cpus: cpus, self: self, updates: make(chan struct{}, 1)}
}

func (s *sampler) latest() *collector.Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.snap
}

func (s *sampler) run(ctx context.Context, interval time.Duration) {
	prevBusy, prevTotal, _ := procStat()
	prevSelf := selfCPU()
	prevAt := time.Now()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		busy, total, err := procStat()
		if err != nil {
			continue
		}
		self, now := selfCPU(), time.Now()
		node := int64(0)
		if total > prevTotal {
			node = s.cpus * 1000 * (busy - prevBusy) / (total - prevTotal)
		}
		ls := (self - prevSelf).Milliseconds() * 1000 / max(now.Sub(prevAt).Milliseconds(), 1)
		prevBusy, prevTotal, prevSelf, prevAt = busy, total, self, now
		if s.self {
			node = ls
		}
		snap := &collector.Snapshot{
			Time:     now,
			Capacity: collector.Usage{CPUMilli: s.cpus * 1000},
			Node:     collector.Usage{CPUMilli: node},
			System:   collector.Usage{CPUMilli: max(node-ls, 0)},
			Containers: []collector.ContainerUsage{
				{Target: collector.Target{Namespace: "bench", Pod: "ls", Container: "spin", QoS: qos.LS}, Usage: collector.Usage{CPUMilli: ls}},
			},
		}
		s.mu.Lock()
		s.snap = snap
		s.mu.Unlock()
		select {
		case s.updates <- struct{}{}:
		default:
		}
	}
}

// procStat returns the busy and total jiffies of the aggregate cpu line.
func procStat() (busy, total int64, err error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return 0, 0, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	for i, v := range f[1:] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, 0, err
		}
		total += n
		// idle and iowait are fields 4 and 5.
		if i != 3 && i != 4 {
			busy += n
		}
	}
	return busy, total, nil
}

func selfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// stubRuntime is where the proxy would send UpdateContainerResources: it writes the BE cpuset into a
// real cgroup when it can, and lets the bench wait for a value.
type stubRuntime struct {
	dir  string // cgroup v1 cpuset dir, "" when unavailable
	mu   sync.Mutex
	cond *sync.Cond
	cur  string
	at   time.Time
}

func newStubRuntime(initial string) *stubRuntime {
	r := &stubRuntime{cur: initial, at: time.Now()}
	r.cond = sync.NewCond(&r.mu)
	dir := filepath.Join("/sys/fs/cgroup/cpuset", fmt.Sprintf("tandem-bench-%d", os.Getpid()))
	mems, err := os.ReadFile("/sys/fs/cgroup/cpuset/cpuset.mems")
	if err == nil && os.Mkdir(dir, 0o755) == nil {
		if os.WriteFile(filepath.Join(dir, "cpuset.mems"), mems, 0o644) == nil &&
			os.WriteFile(filepath.Join(dir, "cpuset.cpus"), []byte(initial), 0o644) == nil {
			r.dir = dir
		} else {
			_ = os.Remove(dir)
		}
	}
	return r
}

func (r *stubRuntime) where() string {
	if r.dir == "" {
		return "none (not a cgroup v1 host, or not root): the stub only records"
	}
	return r.dir
}

func (r *stubRuntime) update(cpus string) {
	if r.dir != "" {
		if err := os.WriteFile(filepath.Join(r.dir, "cpuset.cpus"), []byte(cpus), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "write cpuset.cpus:", err)
		}
	}
	r.mu.Lock()
	r.cur, r.at = cpus, time.Now()
	r.mu.Unlock()
	r.cond.Broadcast()
}

func (r *stubRuntime) wait(ok func(string) bool, within time.Duration) (time.Time, error) {
	deadline := time.Now().Add(within)
	timer := time.AfterFunc(within, r.cond.Broadcast)
	defer timer.Stop()
	r.mu.Lock()
	defer r.mu.Unlock()
	for !ok(r.cur) {
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("BE cpuset still %s after %v", r.cur, within)
		}
		r.cond.Wait()
	}
	return r.at, nil
}

func (r *stubRuntime) waitFor(cpus string, within time.Duration) (time.Time, error) {
	return r.wait(func(c string) bool { return c == cpus }, within)
}

func (r *stubRuntime) waitForChange(from string, within time.Duration) (time.Time, error) {
	return r.wait(func(c string) bool { return c != from }, within)
}

func (r *stubRuntime) close() {
	if r.dir != "" {
		_ = os.Remove(r.dir)
	}
}
