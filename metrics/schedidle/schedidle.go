// Package schedidle is the node loop that runs best-effort (BE) work under the kernel's SCHED_IDLE
// policy: every thread in the BE pods' parent cgroup and below it, whichever runtime or tool started it.
//
// Why per thread and not cpu.idle alone: cpu.idle=1 on a BE pod's cgroup makes the pod yield to its
// siblings only. Through kubepods, BE work still competes at kubepods' full weight with every process
// outside it (kubelet, containerd, tandem-proxy, monitoring agents), and inside kubepods the
// besteffort cgroup competes with the LS pods' cgroups by plain weights, which lets a BE thread finish
// its slice before a waking LS thread runs. A SCHED_IDLE thread is preempted by any waking thread that
// is not SCHED_IDLE, wherever either lives, and a CPU running only SCHED_IDLE threads counts as idle
// when the kernel places a waking thread. It costs BE nothing while the CPU is otherwise idle; docs/
// colocation.md has the figures. resource/sched has the mechanics.
//
// The loop sweeps the subtree every Config.Interval and at once when Kick says a BE container started
// (the policy is inherited across fork, so a container swept right after its start stays idle; a
// thread that enters from outside, such as an exec, is caught by the next sweep). Disabling it moves
// the threads back to SCHED_OTHER at once. Stopping tandem-proxy leaves BE threads idle, as it leaves
// the cpu.idle it wrote into BE pod cgroups: that is the state BE pods were admitted to run in, and a
// restart must not let them compete at full weight meanwhile.
package schedidle

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"

	"github.com/tandemkit/tandem/resource/sched"
)

// Config is the loop's configuration.
type Config struct {
	// Enable runs BE threads SCHED_IDLE; switching it off moves them back to SCHED_OTHER.
	Enable bool `json:"enable"`
	// BECgroupDir is the BE pods' parent cgroup directory in the cpu hierarchy (v1:
	// /sys/fs/cgroup/cpu/kubepods/besteffort; v2: /sys/fs/cgroup/kubepods/besteffort).
	BECgroupDir string `json:"beCgroupDir"`
	// Interval is how often the subtree is swept besides the kicks.
	Interval time.Duration `json:"interval"`
}

// DefaultConfig is on, sweeping every second.
func DefaultConfig() Config {
	return Config{Enable: true, Interval: time.Second}
}

// Validate checks the configuration on its own.
func (c Config) Validate() error {
	if c.BECgroupDir == "" {
		return errors.New("schedidle: the BE cgroup directory is empty; set --kubelet-cgroup-root")
	}
	if c.Interval <= 0 {
		return fmt.Errorf("schedidle: interval %s, want a positive duration", c.Interval)
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
}

// New returns the loop; Run starts it.
func New(cfg Config, deps Deps) (*Loop, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	l := &Loop{deps: deps, cfg: cfg, wake: make(chan struct{}, 1),
		moved: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "tandem", Subsystem: "schedidle", Name: "threads_moved_total",
			Help: "BE threads the loop moved to a scheduling policy, by policy."}, []string{"policy"}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "tandem", Subsystem: "schedidle", Name: "sweep_errors_total",
			Help: "Sweeps of the BE cgroup that failed for at least one thread."}),
	}
	if deps.Registerer != nil {
		for _, c := range []prometheus.Collector{l.moved, l.errors} {
			if err := deps.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("schedidle metrics: %w", err)
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
	logger.Info("BE SCHED_IDLE loop running", "enable", cfg.Enable, "beCgroup", cfg.BECgroupDir, "interval", cfg.Interval)
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
			logger.Info("BE threads scheduling policy", "policy", want(cfg), "beCgroup", cfg.BECgroupDir)
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

func want(cfg Config) sched.Policy {
	if cfg.Enable {
		return sched.Idle
	}
	return sched.Other
}

// sweep applies cfg to the BE subtree once and returns what it did; only Run calls it.
func (l *Loop) sweep(ctx context.Context, cfg Config) sched.Result {
	p := want(cfg)
	res, err := sched.Sweep(cfg.BECgroupDir, p)
	if res.Moved > 0 {
		l.moved.WithLabelValues(p.String()).Add(float64(res.Moved))
		klog.FromContext(ctx).V(2).Info("Moved BE threads", "policy", p, "moved", res.Moved, "threads", res.Threads)
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
