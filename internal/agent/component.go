package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/tandemkit/tandem/config/knob"
	"github.com/tandemkit/tandem/config/slo"
	"github.com/tandemkit/tandem/internal/supervise"
)

// component is one node loop as the agent runs it. Every part that measures or acts on the node between
// lifecycle calls is one, so the agent starts, reconfigures and stops them all the same way, as
// koordlet runs its QoS strategies: a new loop is one more entry in nodeParts.components, not one more
// way to be wired.
type component interface {
	// Name keys the component in logs and, for one that runs a loop, in /healthz.
	Name() string
	// Configure hands over the slo-config in force: once before Start, then on every change. It must not
	// block (the loop picks the change up at its next turn); an error leaves the previous settings in
	// force, and the caller logs it.
	Configure(ctx context.Context, r slo.Resolved) error
	// Start starts the component's loop in g, which restarts it if it fails and ends it with the agent.
	Start(ctx context.Context, g *supervise.Group)
	// Restore puts back on the node what the component changed. The agent calls it once, after every
	// loop has stopped and before the front end closes its runtime connection, under restoreTimeout.
	Restore(ctx context.Context) error
}

// restoreTimeout bounds all the components' restores together as the agent stops: long enough for the
// suppress loop to refresh every BE container through the runtime, short enough that a stuck runtime
// cannot hold a node's drain. What is not put back by then, the next start puts back (each loop finds
// what an earlier run left).
const restoreTimeout = 30 * time.Second

// loop is a component made of the functions its loop offers; a nil function is a step the loop does
// not take. Most node loops are one of these, so a new one is written as a value rather than a type.
type loop struct {
	name      string
	configure func(ctx context.Context, r slo.Resolved) error
	run       func(ctx context.Context) error
	restore   func(ctx context.Context) error
	// knobs says what each slo-config key the loop acts on does on this node (/debug/config).
	knobs knob.Reporter
}

var _ component = (*loop)(nil)

func (l *loop) Name() string { return l.name }

func (l *loop) Configure(ctx context.Context, r slo.Resolved) error {
	if l.configure == nil {
		return nil
	}
	return l.configure(ctx, r)
}

func (l *loop) Start(_ context.Context, g *supervise.Group) {
	if l.run != nil {
		g.Go(l.name, l.run)
	}
}

func (l *loop) Restore(ctx context.Context) error {
	if l.restore == nil {
		return nil
	}
	return l.restore(ctx)
}

// Knobs implements knob.Reporter; a loop without keys of its own reports none.
func (l *loop) Knobs() []knob.Status {
	if l.knobs == nil {
		return nil
	}
	return l.knobs.Knobs()
}

// switchedOff is the component a node loop becomes when this node cannot run it (no cgroup hierarchy,
// a kernel without the files, a configuration it refuses at start): it runs nothing and changes
// nothing, and its keys say why, for the configuration in force, so that tandemctl config explains
// the loop's absence instead of showing nothing. knobs may be nil.
func switchedOff(name string, knobs func(slo.Resolved) []knob.Status) *loop {
	if knobs == nil {
		return &loop{name: name}
	}
	var mu sync.Mutex
	var in slo.Resolved
	l := &loop{name: name, configure: func(_ context.Context, r slo.Resolved) error {
		mu.Lock()
		in = r
		mu.Unlock()
		return nil
	}}
	l.knobs = knob.ReporterFunc(func() []knob.Status {
		mu.Lock()
		defer mu.Unlock()
		return knobs(in)
	})
	return l
}

// startOrOff builds a loop with the configuration in force and, if it refuses it, with off (the same
// configuration switched off), so that a later slo-config can switch it on: the refusal is logged, and
// the loop's Reconfigure records it for tandemctl config. An error means the loop cannot run here at
// all.
func startOrOff[C, L any](ctx context.Context, what string, cfg C, off func(C) C, build func(C) (L, error)) (L, error) {
	l, err := build(cfg)
	if err == nil {
		return l, nil
	}
	klog.FromContext(ctx).Error(err, "Configuration refused; the loop starts switched off", "loop", what)
	l, offErr := build(off(cfg))
	if offErr != nil {
		return l, fmt.Errorf("%s cannot run on this node: %w", what, errors.Join(err, offErr))
	}
	return l, nil
}

// add registers c with the consumers and hands it the configuration in force.
func (c *consumers) add(ctx context.Context, comp component) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.comps = append(c.comps, comp)
	c.configure(ctx, comp)
}

// configure hands comp the configuration in force; the caller holds mu.
func (c *consumers) configure(ctx context.Context, comp component) {
	if err := comp.Configure(ctx, c.resolved); err != nil {
		klog.FromContext(ctx).Error(err, "Settings refused; the ones in force stay", "loop", comp.Name())
	}
}

// restore has every component put back what it changed, the last started first (as defers run), under
// one deadline, timeout from now. ctx's own end does not cut it short: the agent restores because it
// is stopping.
func (c *consumers) restore(ctx context.Context, timeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	c.mu.Lock()
	comps := slices.Clone(c.comps)
	c.mu.Unlock()
	logger := klog.FromContext(ctx)
	for _, comp := range slices.Backward(comps) {
		if ctx.Err() != nil {
			logger.Error(ctx.Err(), "Not restored before the deadline; the next start puts back what is left", "loop", comp.Name(), "timeout", timeout)
			continue
		}
		if err := comp.Restore(ctx); err != nil {
			logger.Error(err, "Not all restored; the next start puts back what is left", "loop", comp.Name())
		}
	}
}
