// Package yield is the node loop that makes best-effort (BE) threads yield to every other thread
// on the node, kubelet, containerd and the node's other daemons included: every thread in the BE pods'
// parent cgroup and below it, whichever runtime or tool started it.
//
// # Why threads, and why a long slice
//
// kubelet puts every pod under kubepods, whose weight (cpu.shares, cpu.weight) is the node's
// allocatable CPU: 2048 on a 2-CPU node against 1024 for a daemon in the root cgroup. The kernel picks
// between the daemon and kubepods as a whole, whatever BE weighs below kubepods; on EEVDF (Linux 6.6+) a
// waking daemon that is not picked at once waits for the next tick. cpu.idle on BE pod cgroups (the
// cpuidle policy) ranks BE below its siblings only. In one bench/colocation run, a host daemon's p99
// next to BE was 7-11x its solo value with cpu.idle alone and 2-3x with this loop on, in the same
// rounds; a second, noisier run did not separate them (docs/colocation.md).
//
// The slice is the lever EEVDF offers: a group's slice is the shortest among what it runs, and its
// virtual deadline its vruntime plus that slice over its weight, so BE threads asking for a long slice
// put kubepods' deadline, while it runs only BE, behind a waking thread's. The slice also bounds how long
// a thread that arrives without a wakeup preemption (migrated, or not yet eligible) may wait behind BE,
// which is why BESlice is 20 ms and not the kernel's 100 ms maximum. SCHED_BATCH keeps BE threads from
// preempting anything when they wake. Where the kernel does not honour slice requests (before 6.12) the
// loop does not run: the other candidate, SCHED_IDLE on BE threads, made an LS pod's thread wake late
// 7-12 times a second instead of under once in bench/wakeup. Whatever the CPU leaves idle, BE still uses
// in full: neither attribute caps it.
//
// # The loop
//
// It sweeps the subtree every Config.Interval and at once when Kick says a BE container started (the
// attributes are inherited across fork, so a container swept right after its start keeps them; a thread
// that enters from outside, such as an exec, is caught by the next sweep). Disabling it gives the
// threads it changed the kernel's default back at once. Stopping tandem-proxy leaves BE threads as they
// are, as it leaves the cpu.idle it wrote into BE pod cgroups: that is the state BE pods were admitted
// to run in, and a restart must not let them compete at full weight meanwhile.
package yield

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"

	"github.com/tandemkit/tandem/resource/sched"
)

// Config is the loop's configuration.
type Config struct {
	// Enable gives BE threads Want; switching it off gives the threads that have Want the kernel's
	// default back.
	Enable bool `json:"enable"`
	// Want is what BE threads get (Mechanism).
	Want sched.Attr `json:"want"`
	// BECgroupDir is the BE pods' parent cgroup directory in the cpu hierarchy (v1:
	// /sys/fs/cgroup/cpu/kubepods/besteffort; v2: /sys/fs/cgroup/kubepods/besteffort).
	BECgroupDir string `json:"beCgroupDir"`
	// Interval is how often the subtree is swept besides the kicks.
	Interval time.Duration `json:"interval"`
}

// DefaultConfig is on, sweeping every second.
func DefaultConfig() Config {
	want, _ := Mechanism()
	return Config{Enable: true, Want: want, Interval: time.Second}
}

// BESlice is the slice BE threads ask for. Longer pushes a busy BE subtree's deadline further behind a
// waking thread's, but is also how long a thread that arrives without a wakeup preemption (migrated,
// or not yet eligible) can wait behind BE. bench/wakeup measures 20 ms and 100 ms alike; a
// bench/colocation run with 100 ms had host-daemon stalls of 84-100 ms in both rounds, so the shorter.
const BESlice = 20 * time.Millisecond

// Mechanism is what BE threads get, SCHED_BATCH with BESlice, and whether this kernel honours slice
// requests (Linux 6.12+). Where it does not, the loop must not run: SCHED_BATCH alone is unmeasured and
// SCHED_IDLE measured worse than nothing for LS pods (the package doc).
func Mechanism() (sched.Attr, bool) {
	ok, err := sched.CustomSlices()
	return sched.Attr{Policy: sched.Batch, Slice: BESlice}, err == nil && ok
}

// Validate checks the configuration on its own.
func (c Config) Validate() error {
	if c.BECgroupDir == "" {
		return errors.New("yield: the BE cgroup directory is empty; set --kubelet-cgroup-root")
	}
	if c.Want == sched.Default {
		return fmt.Errorf("yield: BE threads would get %s, the default; want SCHED_BATCH or SCHED_IDLE", c.Want)
	}
	if c.Interval <= 0 {
		return fmt.Errorf("yield: interval %s, want a positive duration", c.Interval)
	}
	return nil
}

// Deps are what the loop reads besides its configuration.
type Deps struct {
	// Kick tells the loop a BE container started; optional.
	Kick <-chan struct{}
	// Registerer receives the loop's metrics; optional.
	Registerer prometheus.Registerer
}

// Loop is the node loop.
type Loop struct {
	deps   Deps
	wake   chan struct{}
	mu     sync.Mutex
	cfg    Config
	moved  *prometheus.CounterVec
	errors prometheus.Counter
	// lastErr keeps a failure that repeats every sweep (a thread the proxy may not touch) to one log line.
	lastErr string
	// missing is set while the BE cgroup does not exist, so that is said once.
	missing bool
}

// New returns the loop; Run starts it.
func New(cfg Config, deps Deps) (*Loop, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	l := &Loop{deps: deps, cfg: cfg, wake: make(chan struct{}, 1),
		moved: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "tandem", Subsystem: "yield", Name: "threads_moved_total",
			Help: "BE threads the loop moved to a scheduling policy, by policy."}, []string{"policy"}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "tandem", Subsystem: "yield", Name: "sweep_errors_total",
			Help: "Sweeps of the BE cgroup that failed for at least one thread."}),
	}
	if deps.Registerer != nil {
		for _, c := range []prometheus.Collector{l.moved, l.errors} {
			if err := deps.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("yield metrics: %w", err)
			}
		}
	}
	return l, nil
}

// Reconfigure swaps the configuration; the loop applies it at once.
func (l *Loop) Reconfigure(cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	l.mu.Lock()
	l.cfg = cfg
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
	return nil
}

func (l *Loop) config() Config {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cfg
}

// Run sweeps until ctx ends.
func (l *Loop) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	cfg := l.config()
	logger.Info("BE thread scheduling loop running", "enable", cfg.Enable, "want", cfg.Want.String(), "beCgroup", cfg.BECgroupDir, "interval", cfg.Interval)
	// enabled is what the last sweep applied; nil before the first, so that a loop started disabled
	// moves back whatever an earlier run left idle.
	var enabled *bool
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-l.wake:
		case <-l.deps.Kick:
		}
		cfg = l.config()
		if enabled == nil || *enabled != cfg.Enable {
			w, _ := target(cfg)
			logger.Info("BE threads' scheduling", "attr", w.String(), "beCgroup", cfg.BECgroupDir)
		}
		if cfg.Enable || enabled == nil || *enabled {
			l.sweep(ctx, cfg)
		}
		on := cfg.Enable
		enabled = &on
		if !t.Stop() {
			select {
			case <-t.C:
			default:
			}
		}
		t.Reset(cfg.Interval)
	}
}

// target is what a sweep gives BE threads, and which threads it changes (nil: all).
func target(cfg Config) (sched.Attr, *sched.Attr) {
	if cfg.Enable {
		return cfg.Want, nil
	}
	return sched.Default, &cfg.Want
}

// sweep applies cfg to the BE subtree once and returns what it did; only Run calls it.
func (l *Loop) sweep(ctx context.Context, cfg Config) sched.Result {
	w, from := target(cfg)
	// kubelet creates its QoS cgroups at start, so a BE cgroup that does not exist is a wrong
	// --kubelet-cgroup-root (or kubelet's systemd driver, whose layout differs) more often than a node
	// without BE pods: say it once rather than sweep nothing in silence.
	if _, err := os.Stat(cfg.BECgroupDir); errors.Is(err, fs.ErrNotExist) {
		if !l.missing {
			klog.FromContext(ctx).Info("BE cgroup not found; BE threads keep their scheduling until it appears: check --kubelet-cgroup-root",
				"beCgroup", cfg.BECgroupDir)
		}
		l.missing = true
		return sched.Result{}
	}
	l.missing = false
	res, err := sched.Sweep(cfg.BECgroupDir, w, from)
	p := w.Policy
	if res.Moved > 0 {
		l.moved.WithLabelValues(p.String()).Add(float64(res.Moved))
		klog.FromContext(ctx).V(2).Info("Moved BE threads", "attr", w.String(), "moved", res.Moved, "threads", res.Threads)
	}
	if err != nil {
		l.errors.Inc()
		if err.Error() != l.lastErr {
			klog.FromContext(ctx).Error(err, "Some BE threads keep their scheduling policy; retrying every sweep", "policy", p, "beCgroup", cfg.BECgroupDir)
		}
		l.lastErr = err.Error()
	} else {
		l.lastErr = ""
	}
	return res
}
