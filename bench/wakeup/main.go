// Command wakeup measures how long a thread of the bench's own cgroup (the root cgroup from a root
// shell, where kubelet, containerd and the node's other daemons live) waits to run when it wakes while
// BE threads spin, for each way of placing and scheduling the BE threads: below a kubepods-like cgroup
// that weighs the node's capacity, as kubelet places BE pods, with and without cpu.idle, SCHED_IDLE
// and actuate/yield's SCHED_BATCH with a long slice; and at the top level. It is the experiment
// behind docs/colocation.md.
//
// The measuring thread sleeps 1 ms (clock_nanosleep) in a loop for -duration per variant; the figure
// is how much later than asked it woke. Variants run in -rounds rounds, and the ratio is to solo (no BE)
// in the same round. With about 7,500 wakeups per 8 s, p99.9 is the eighth-latest one, so it jumps
// between "no stall" and "a tick" with the stall rate; ">1ms late/s", how often a wakeup came more than
// a millisecond late, is the steadier figure. Every cgroup it creates (/tdm-wakeup-<pid>...) and every spinner is removed at the
// end, also on Ctrl-C.
//
//	go run ./bench/wakeup [-duration 8s] [-rounds 2] [-spinners 3]
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tandemkit/tandem/bench/internal/figures"
	"github.com/tandemkit/tandem/resource/cgroup"
	"github.com/tandemkit/tandem/resource/sched"
)

// variant is one way of placing and scheduling the BE threads.
type variant struct {
	name string
	// topLevel puts the BE cgroup directly under the hierarchy's root instead of below kubepods.
	topLevel bool
	podIdle  bool
	attr     *sched.Attr
	spin     bool
	// quotaMilli, when above 0, is the CFS quota of the besteffort cgroup, as cfsQuota suppression and
	// the steal headroom (metrics/headroom) hold BE: whether a quota on BE costs what wakes beside it.
	quotaMilli int64
	// periodMicros is the CFS period of that quota; 0 is the kernel's default, 100 ms.
	periodMicros int64
}

func variants() []variant {
	idle := sched.Attr{Policy: sched.Idle}
	batch20 := sched.Attr{Policy: sched.Batch, Slice: 20 * time.Millisecond}
	batch100 := sched.Attr{Policy: sched.Batch, Slice: sched.MaxSlice}
	return []variant{
		{name: "solo"},
		{name: "kubepods/besteffort/pod (kubelet)", spin: true},
		{name: "  + pod cpu.idle 1", spin: true, podIdle: true},
		{name: "  + SCHED_IDLE threads", spin: true, attr: &idle},
		// What Tandem does: the cpuidle policy's pod cpu.idle, and actuate/yield's threads (SCHED_IDLE
		// before Linux 6.12, SCHED_BATCH with a 20 ms slice from then on).
		{name: "  + pod cpu.idle 1, SCHED_IDLE threads", spin: true, podIdle: true, attr: &idle},
		{name: "  + pod cpu.idle 1, SCHED_BATCH 20 ms", spin: true, podIdle: true, attr: &batch20},
		{name: "  + pod cpu.idle 1, SCHED_BATCH 100 ms", spin: true, podIdle: true, attr: &batch100},
		{name: "top level, cpu.idle 1", spin: true, topLevel: true, podIdle: true},
		// BE held by its parent's CFS quota (cfsQuota suppression, the steal headroom): 65 % of the node.
		{name: "kubepods/besteffort quota 65%", spin: true, quotaMilli: int64(runtime.NumCPU()) * 650},
		{name: "  + pod cpu.idle 1", spin: true, podIdle: true, quotaMilli: int64(runtime.NumCPU()) * 650},
		{name: "  + pod cpu.idle 1, period 10 ms", spin: true, podIdle: true, quotaMilli: int64(runtime.NumCPU()) * 650, periodMicros: 10000},
		{name: "  + pod cpu.idle 1, period 1 s", spin: true, podIdle: true, quotaMilli: int64(runtime.NumCPU()) * 650, periodMicros: 1000000},
	}
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "spin" {
		runtime.GOMAXPROCS(1)
		for { //nolint:staticcheck // SA5002: spinning a CPU is this process's job: it is the best-effort load the benchmark measures wakeups against
		}
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "wakeup bench:", err)
		os.Exit(1)
	}
}

func run() error {
	d := flag.Duration("duration", 8*time.Second, "measured time per variant")
	rounds := flag.Int("rounds", 2, "rounds; the ratio is to solo in the same round")
	spinners := flag.Int("spinners", 3, "BE processes, each spinning one thread")
	root := flag.String("cgroup-root", "/sys/fs/cgroup", "cgroup mount")
	inPod := flag.Bool("ls-pod", false, "measure from an LS pod's cgroup (kubepods/burstable/pod, 512 shares) instead of the bench's own")
	flag.Parse()
	if os.Geteuid() != 0 {
		return errors.New("needs root: it creates cgroups and moves processes into them")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	h, err := newHierarchy(*root)
	if err != nil {
		return err
	}
	h.inPod = *inPod
	defer h.cleanup()
	if ok, _ := sched.CustomSlices(); !ok {
		fmt.Println("note: this kernel ignores slice requests (before Linux 6.12): the slice variants measure SCHED_BATCH alone")
	}
	self, _ := os.ReadFile("/proc/self/cgroup")
	fmt.Printf("wakeup bench: %d CPUs, %s, %d BE spinners, %s per variant; kubepods stand-in weighs %d shares\nmachine: %s\n",
		runtime.NumCPU(), h.kind(), *spinners, *d, runtime.NumCPU()*1024, figures.ReadMachine().Line())
	if *inPod {
		fmt.Println("measuring thread's cgroup: an LS pod's, kubepods/burstable/pod (512 shares), beside BE in the kubelet variants")
	} else {
		fmt.Printf("measuring thread's cgroup: %s", self)
	}
	for r := 1; r <= *rounds; r++ {
		fmt.Printf("\nround %d\n%-36s %8s %8s %8s %8s %8s %11s %12s\n", r, "BE threads", "wakeups", "p50 ms", "p99 ms", "p99.9 ms", "max ms", "p99.9/solo", ">1ms late/s")
		var solo time.Duration
		for _, v := range variants() {
			lat, err := h.measure(ctx, v, *spinners, *d)
			if err != nil {
				return err
			}
			p999 := figures.Nearest(lat, 0.999)
			ratio := "-"
			if v.name == "solo" {
				solo = p999
			} else if solo > 0 {
				ratio = fmt.Sprintf("%.2f", float64(p999)/float64(solo))
			}
			late := 0
			for _, l := range lat {
				if l > time.Millisecond {
					late++
				}
			}
			fmt.Printf("%-40s %8d %8.3f %8.3f %8.3f %8.3f %11s %12.1f\n", v.name, len(lat), figures.In(figures.Nearest(lat, 0.5), time.Millisecond),
				figures.In(figures.Nearest(lat, 0.99), time.Millisecond), figures.In(p999, time.Millisecond), figures.In(figures.Nearest(lat, 1), time.Millisecond), ratio, float64(late)/d.Seconds())
		}
	}
	return nil
}

// hierarchy creates the cgroups of one variant in the cpu controller's hierarchy, v1 or v2.
type hierarchy struct {
	cpu     string // the cpu controller's mount: <root>/cpu on v1, <root> on v2
	v2      bool
	inPod   bool // the bench measures from an LS pod's cgroup below the kubepods stand-in
	home    string
	created []string
}

func newHierarchy(root string) (*hierarchy, error) {
	if _, err := os.Stat(filepath.Join(root, "cgroup.controllers")); err == nil {
		return &hierarchy{cpu: root, v2: true}, nil
	}
	if _, err := os.Stat(filepath.Join(root, "cpu", "cpu.shares")); err == nil {
		return &hierarchy{cpu: filepath.Join(root, "cpu")}, nil
	}
	return nil, fmt.Errorf("no cpu controller under %s", root)
}

func (h *hierarchy) kind() string {
	if h.v2 {
		return "cgroup v2"
	}
	return "cgroup v1"
}

// mkdir creates a cgroup with a weight given in v1 shares (converted on v2 as Tandem and the runtimes do).
func (h *hierarchy) mkdir(rel string, shares int) (string, error) {
	dir := filepath.Join(h.cpu, rel)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", err
	}
	h.created = append(h.created, dir)
	file, value := "cpu.shares", strconv.Itoa(shares)
	if h.v2 {
		file, value = "cpu.weight", strconv.FormatInt(cgroup.SharesToWeight(int64(shares)), 10)
	}
	return dir, os.WriteFile(filepath.Join(dir, file), []byte(value), 0o644)
}

func (h *hierarchy) cleanup() {
	if h.home != "" {
		// Back where it came from before its cgroup goes.
		if err := os.WriteFile(filepath.Join(h.home, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
			fmt.Fprintf(os.Stderr, "wakeup bench: move back to %s: %v\n", h.home, err)
		}
		h.home = ""
	}
	for i := len(h.created) - 1; i >= 0; i-- {
		_ = os.WriteFile(filepath.Join(h.created[i], "cpu.idle"), []byte("0"), 0o644)
		if err := os.Remove(h.created[i]); err != nil && !errors.Is(err, os.ErrNotExist) {
			fmt.Fprintf(os.Stderr, "wakeup bench: remove %s: %v\n", h.created[i], err)
		}
	}
	h.created = nil
}

// measure builds v's cgroups, starts the spinners in them, and samples wakeups for d.
func (h *hierarchy) measure(ctx context.Context, v variant, spinners int, d time.Duration) ([]time.Duration, error) {
	defer h.cleanup()
	base := fmt.Sprintf("tdm-wakeup-%d", os.Getpid())
	if h.inPod {
		// kubepods, with an LS pod below burstable, whatever BE does.
		if err := h.enterPod(base); err != nil {
			return nil, err
		}
	}
	var be string
	if v.spin {
		var err error
		switch {
		case v.topLevel:
			be, err = h.mkdir(base+"-be", 2)
		case h.inPod:
			if _, err = h.mkdir(filepath.Join(base, "besteffort"), 2); err == nil {
				be, err = h.mkdir(filepath.Join(base, "besteffort", "pod"), 2)
			}
		default:
			if _, err = h.mkdir(base, runtime.NumCPU()*1024); err == nil {
				if _, err = h.mkdir(filepath.Join(base, "besteffort"), 2); err == nil {
					be, err = h.mkdir(filepath.Join(base, "besteffort", "pod"), 2)
				}
			}
		}
		if err != nil {
			return nil, fmt.Errorf("create the BE cgroups: %w", err)
		}
		if v.quotaMilli > 0 {
			if err := h.setQuota(filepath.Dir(be), v.quotaMilli, cmp.Or(v.periodMicros, 100000)); err != nil {
				return nil, err
			}
		}
		if v.podIdle {
			if err := os.WriteFile(filepath.Join(be, "cpu.idle"), []byte("1"), 0o644); err != nil {
				return nil, fmt.Errorf("cpu.idle: %w (the kernel needs 5.15+)", err)
			}
		}
		self, err := os.Executable()
		if err != nil {
			return nil, err
		}
		// The spinners run until the sample is taken; they go before h.cleanup removes their cgroups.
		var started []*exec.Cmd
		defer func() {
			for _, cmd := range started {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
			}
		}()
		for range spinners {
			cmd := exec.CommandContext(ctx, self, "spin")
			if err := cmd.Start(); err != nil {
				return nil, err
			}
			started = append(started, cmd)
			if err := os.WriteFile(filepath.Join(be, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
				return nil, fmt.Errorf("move spinner into %s: %w", be, err)
			}
		}
		if v.attr != nil {
			if _, err := sched.Sweep(be, *v.attr, nil); err != nil {
				return nil, err
			}
		}
		time.Sleep(300 * time.Millisecond) // let the spinners settle on the CPUs
	}
	return sample(ctx, d)
}

// setQuota gives a cgroup a CFS quota of milli CPUs per period µs (cpu.max on v2).
func (h *hierarchy) setQuota(dir string, milli, period int64) error {
	quota := milli * period / 1000
	if h.v2 {
		return os.WriteFile(filepath.Join(dir, "cpu.max"), []byte(fmt.Sprintf("%d %d", quota, period)), 0o644)
	}
	if err := os.WriteFile(filepath.Join(dir, "cpu.cfs_period_us"), []byte(strconv.FormatInt(period, 10)), 0o644); err != nil {
		return fmt.Errorf("cfs period of %s: %w", dir, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cpu.cfs_quota_us"), []byte(strconv.FormatInt(quota, 10)), 0o644); err != nil {
		return fmt.Errorf("cfs quota of %s: %w", dir, err)
	}
	return nil
}

// enterPod creates the kubepods stand-in with an LS pod below burstable and moves the bench into it.
func (h *hierarchy) enterPod(base string) error {
	home, err := selfCgroup(h)
	if err != nil {
		return err
	}
	if _, err := h.mkdir(base, runtime.NumCPU()*1024); err != nil {
		return err
	}
	if _, err := h.mkdir(filepath.Join(base, "burstable"), 512); err != nil {
		return err
	}
	pod, err := h.mkdir(filepath.Join(base, "burstable", "pod"), 512)
	if err != nil {
		return err
	}
	h.home = home
	return os.WriteFile(filepath.Join(pod, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0o644)
}

// selfCgroup is the bench's cgroup directory in the cpu controller's hierarchy.
func selfCgroup(h *hierarchy) (string, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if (h.v2 && parts[0] == "0") || (!h.v2 && slices.Contains(strings.Split(parts[1], ","), "cpu")) {
			return filepath.Join(h.cpu, parts[2]), nil
		}
	}
	return "", fmt.Errorf("no cpu cgroup in /proc/self/cgroup: %s", b)
}

// sample sleeps 1 ms at a time on one OS thread for d and returns how late each wakeup came.
func sample(ctx context.Context, d time.Duration) ([]time.Duration, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	const nap = time.Millisecond
	ts := unix.NsecToTimespec(int64(nap))
	out := make([]time.Duration, 0, int(d/nap))
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		start := time.Now()
		if err := unix.ClockNanosleep(unix.CLOCK_MONOTONIC, 0, &ts, nil); err != nil && !errors.Is(err, unix.EINTR) {
			return nil, fmt.Errorf("clock_nanosleep: %w", err)
		}
		out = append(out, max(time.Since(start)-nap, 0))
	}
	return out, nil
}
