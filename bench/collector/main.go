// Command collector measures what Tandem's collectors cost a node: every source (usage, PSI, CPI,
// run-queue latency) at a 1 s interval over 100 container cgroups, against the target of 2% of one
// CPU for all of them together.
//
// By default (root, cgroup v1 or hybrid host) it creates 100 real container cgroups under
// /sys/fs/cgroup/{cpu,cpuacct,memory}/tandem-bench/pod<i>/<id>, puts a few sleeping processes in
// them, and removes everything afterwards. -fake builds a fake tree in a temporary directory instead
// (no root needed; the files are static, so only the reading cost is measured).
//
// The collector runs in goroutines of this process, so its cost is the process's CPU time
// (getrusage RUSAGE_SELF) over the measuring window with the collector running, minus the same
// process's CPU over an idle window of the same length in the same run. The run-queue source's BPF
// programs run in the kernel in the context of whatever task the scheduler is switching, so they
// are not in that figure; with kernel BPF statistics on, their run time is reported separately.
//
//	go run ./bench/collector                  # real cgroups, 30 s idle + 30 s measured
//	go run ./bench/collector -fake -duration 10s
//
// It exits non-zero when the collector's cost is above -target percent of one core.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"syscall"
	"time"

	"github.com/cilium/ebpf"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/tandemkit/tandem/metrics/collector"
	"github.com/tandemkit/tandem/resource/qos"
)

type options struct {
	containers int
	sleepers   int
	duration   time.Duration
	interval   time.Duration
	fake       bool
	cgroupRoot string
	target     float64
	cpuProfile string
}

func main() {
	var o options
	flag.IntVar(&o.containers, "containers", 100, "container cgroups to sample")
	flag.IntVar(&o.sleepers, "sleepers", 5, "sleeping processes, one in each of the first N container cgroups")
	flag.DurationVar(&o.duration, "duration", 30*time.Second, "length of the idle window and of the measured window")
	flag.DurationVar(&o.interval, "interval", time.Second, "interval of every collector source")
	flag.BoolVar(&o.fake, "fake", false, "use a fake cgroup tree in a temporary directory instead of real cgroups")
	flag.StringVar(&o.cgroupRoot, "cgroup-root", "/sys/fs/cgroup", "cgroup mount of the host (real mode)")
	flag.Float64Var(&o.target, "target", 2, "target: percent of one core for all collectors together")
	flag.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the measured window to this file")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "collector bench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) (retErr error) {
	root := o.cgroupRoot
	var targets []collector.Target
	var cleanup func()
	var err error
	if o.fake {
		root, err = os.MkdirTemp("", "tandem-bench-cgroup")
		if err != nil {
			return err
		}
		defer os.RemoveAll(root)
		targets, err = fakeTree(root, o.containers)
	} else {
		targets, cleanup, err = realTree(root, o.containers, o.sleepers)
		if cleanup != nil {
			defer cleanup()
		}
	}
	if err != nil {
		return err
	}

	cfg := collector.DefaultConfig()
	cfg.NodeName = "bench"
	for _, s := range []*collector.Source{&cfg.Usage, &cfg.PSI, &cfg.CPI, &cfg.RunQueue} {
		s.Enabled, s.Interval = true, o.interval
	}
	reg := prometheus.NewRegistry()
	c, err := collector.New(cfg, collector.Deps{ProcRoot: "/proc", CgroupRoot: root, Targets: func() []collector.Target { return targets }, Registerer: reg})
	if err != nil {
		return err
	}

	fmt.Printf("collector bench: %d containers (%s), every source at %v, %v idle then %v measured\n",
		len(targets), map[bool]string{true: "fake tree " + root, false: "real cgroups under " + root + "/*/tandem-bench"}[o.fake],
		o.interval, o.duration, o.duration)

	idle, err := window(ctx, o.duration)
	if err != nil {
		return err
	}

	bpfStats := enableBPFStats()
	defer bpfStats.Close()
	cctx, cancel := context.WithCancel(klog.NewContext(ctx, klog.Background()))
	done := make(chan error, 1)
	go func() { done <- c.Run(cctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil && retErr == nil {
			retErr = err
		}
	}()
	// Let every source detect and take its first sample before measuring.
	select {
	case <-c.Updates():
	case <-ctx.Done():
		return ctx.Err()
	}
	time.Sleep(o.interval)
	bpfBefore := bpfRuntime()
	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
	}
	busy, err := window(ctx, o.duration)
	if o.cpuProfile != "" {
		pprof.StopCPUProfile()
	}
	if err != nil {
		return err
	}
	bpfAfter := bpfRuntime()

	snap := c.Latest()
	if snap == nil || len(snap.Containers) != len(targets) {
		n := 0
		if snap != nil {
			n = len(snap.Containers)
		}
		return fmt.Errorf("the collector saw %d of %d containers; the measurement would be of less work", n, len(targets))
	}
	mfs, err := reg.Gather()
	if err != nil {
		return fmt.Errorf("scrape: %w", err)
	}
	series := 0
	for _, mf := range mfs {
		series += len(mf.GetMetric())
	}

	pct := func(d time.Duration) float64 { return 100 * d.Seconds() / o.duration.Seconds() }
	cost := busy - idle
	fmt.Printf("  idle process CPU:      %8v  (%.3f%% of one core)\n", idle.Round(time.Microsecond), pct(idle))
	fmt.Printf("  with collector:        %8v  (%.3f%% of one core)\n", busy.Round(time.Microsecond), pct(busy))
	fmt.Printf("  collector cost:        %8v  = %.3f%% of one core (target ≤ %.1f%%)\n", cost.Round(time.Microsecond), pct(cost), o.target)
	fmt.Printf("  per sample of %d containers: %v\n", len(targets), (cost / time.Duration(max(1, int(o.duration/o.interval)))).Round(time.Microsecond))
	if bpfBefore.ok && bpfAfter.ok {
		d := bpfAfter.runtime - bpfBefore.runtime
		fmt.Printf("  run-queue BPF programs: %v in %d runs over the window = %.3f%% of one core (in-kernel, outside the figure above)\n",
			d.Round(time.Microsecond), bpfAfter.runs-bpfBefore.runs, pct(d))
	} else {
		fmt.Println("  run-queue BPF programs: not loaded or no kernel BPF statistics")
	}
	fmt.Printf("  /metrics: %d series\n", series)
	if pct(cost) > o.target {
		return fmt.Errorf("collector cost %.3f%% of one core is above the %.1f%% target", pct(cost), o.target)
	}
	return nil
}

// window sleeps for d and returns the CPU time (user + system) the whole process used meanwhile.
func window(ctx context.Context, d time.Duration) (time.Duration, error) {
	before, err := processCPU()
	if err != nil {
		return 0, err
	}
	select {
	case <-time.After(d):
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	after, err := processCPU()
	if err != nil {
		return 0, err
	}
	return after - before, nil
}

func processCPU() (time.Duration, error) {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0, fmt.Errorf("getrusage: %w", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}

// fakeTree writes a cgroup v1 tree of static files that the collector reads like real cgroups.
func fakeTree(root string, n int) ([]collector.Target, error) {
	var targets []collector.Target
	write := func(dir string, files map[string]string) error {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		for name, content := range files {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
				return err
			}
		}
		return nil
	}
	for i := range n {
		t := target(i)
		rel := filepath.Join(t.CgroupParent, t.ContainerID)
		for _, f := range []struct {
			ctrl  string
			files map[string]string
		}{
			{"cpuacct", map[string]string{"cpuacct.usage": "123456789", "cpuacct.usage_percpu": "61728394 61728395", "cpuacct.stat": "user 10\nsystem 2\n"}},
			{"cpu", map[string]string{"cpu.stat": "nr_periods 100\nnr_throttled 3\nthrottled_time 999\n", "tasks": ""}},
			{"memory", map[string]string{"memory.usage_in_bytes": "10485760", "memory.stat": "cache 0\nrss 10485760\ntotal_inactive_file 1048576\n",
				"memory.oom_control": "oom_kill_disable 0\nunder_oom 0\n", "memory.max_usage_in_bytes": "10485760", "memory.limit_in_bytes": "9223372036854771712", "memory.failcnt": "0"}},
		} {
			if err := write(filepath.Join(root, f.ctrl, rel), f.files); err != nil {
				return nil, err
			}
		}
		targets = append(targets, t)
	}
	return targets, nil
}

func target(i int) collector.Target {
	return collector.Target{
		Namespace: "bench", Pod: fmt.Sprintf("pod%03d", i), PodUID: fmt.Sprintf("uid%03d", i),
		Container: "main", ContainerID: fmt.Sprintf("%064x", i+1),
		QoS:          []qos.Class{qos.LS, qos.BE, qos.LSR, qos.BE}[i%4],
		CgroupParent: fmt.Sprintf("/tandem-bench/pod%03d", i),
	}
}

// realTree creates the container cgroups in the cpu, cpuacct and memory hierarchies and starts the
// sleepers; cleanup kills them and removes every directory it made.
func realTree(root string, n, sleepers int) ([]collector.Target, func(), error) {
	if os.Geteuid() != 0 {
		return nil, nil, errors.New("real cgroups need root; run as root or pass -fake")
	}
	if _, err := os.Stat(filepath.Join(root, "cgroup.controllers")); err == nil {
		return nil, nil, errors.New("this host is cgroup v2; the real mode creates v1 directories, pass -fake")
	}
	ctrls := []string{"cpu", "cpuacct", "memory"}
	var dirs []string // in creation order; removed in reverse
	var procs []*exec.Cmd
	cleanup := func() {
		for _, p := range procs {
			_ = p.Process.Kill()
			_ = p.Wait()
		}
		for i := len(dirs) - 1; i >= 0; i-- {
			if err := os.Remove(dirs[i]); err != nil && !errors.Is(err, os.ErrNotExist) {
				fmt.Fprintln(os.Stderr, "collector bench: cleanup:", err)
			}
		}
	}
	mkdir := func(d string) error {
		if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
		dirs = append(dirs, d)
		return nil
	}
	for _, c := range ctrls {
		if err := mkdir(filepath.Join(root, c, "tandem-bench")); err != nil {
			return nil, cleanup, fmt.Errorf("create bench cgroup: %w", err)
		}
	}
	var targets []collector.Target
	for i := range n {
		t := target(i)
		for _, c := range ctrls {
			if err := mkdir(filepath.Join(root, c, t.CgroupParent)); err != nil {
				return nil, cleanup, fmt.Errorf("create pod cgroup: %w", err)
			}
			if err := mkdir(filepath.Join(root, c, t.CgroupParent, t.ContainerID)); err != nil {
				return nil, cleanup, fmt.Errorf("create container cgroup: %w", err)
			}
		}
		if i < sleepers {
			cmd := exec.Command("sleep", "infinity")
			if err := cmd.Start(); err != nil {
				return nil, cleanup, err
			}
			procs = append(procs, cmd)
			for _, c := range ctrls {
				p := filepath.Join(root, c, t.CgroupParent, t.ContainerID, "cgroup.procs")
				if err := os.WriteFile(p, []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
					return nil, cleanup, fmt.Errorf("move sleeper into %s: %w", p, err)
				}
			}
		}
		targets = append(targets, t)
	}
	return targets, cleanup, nil
}

type bpfTotals struct {
	runtime time.Duration
	runs    uint64
	ok      bool
}

type nopCloser struct{}

func (nopCloser) Close() error { return nil }

// enableBPFStats turns on the kernel's per-program run-time accounting for as long as it is open.
func enableBPFStats() interface{ Close() error } {
	c, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		return nopCloser{}
	}
	return c
}

// bpfRuntime sums the kernel's run time of the collector's run-queue programs.
func bpfRuntime() bpfTotals {
	var t bpfTotals
	id := ebpf.ProgramID(0)
	for {
		next, err := ebpf.ProgramGetNextID(id)
		if err != nil {
			return t
		}
		id = next
		p, err := ebpf.NewProgramFromID(id)
		if err != nil {
			continue
		}
		info, err := p.Info()
		if err == nil && info.Name == "tandem_rq" {
			if st, err := p.Stats(); err == nil {
				t.runtime += st.Runtime
				t.runs += st.RunCount
				t.ok = true
			}
		}
		_ = p.Close()
	}
}
