package hooks

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containerd/errdefs"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"
)

// Skip labels: pods carrying either skip remote hooks. The second is Koordinator's, so a hook server
// deployed for koord-runtime-proxy is recognised as it is.
const (
	LabelSkipHooks       = "tandem.io/skip-hooks"
	LabelSkipHookServer  = "runtimeproxy.koordinator.sh/skip-hookserver"
	labelSkipHooksEnable = "true"
)

// SkipsRemote reports whether a pod's labels ask to skip remote hooks.
func SkipsRemote(labels map[string]string) bool {
	return labels[LabelSkipHooks] == labelSkipHooksEnable || labels[LabelSkipHookServer] == labelSkipHooksEnable
}

// Dispatcher runs the hooks of a stage. The set of hooks is swapped atomically on reload, so a call in
// flight finishes with the set it started with.
type Dispatcher struct {
	set     atomic.Pointer[hookSet]
	limits  atomic.Pointer[Limits]
	metrics *metrics

	// mu serialises reloads; calls read set without it.
	mu      sync.Mutex
	builtin []*entry
	remote  []*entry
}

// NewDispatcher builds the in-process hooks. Remote hooks are added with SetRemote. reg receives the
// hook metrics; nil keeps them unexposed.
func NewDispatcher(ctx context.Context, builtin []Registration, reg prometheus.Registerer) (*Dispatcher, error) {
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("register hook metrics: %w", err)
	}
	entries, err := build(ctx, builtin)
	if err != nil {
		return nil, err
	}
	hs, err := newHookSet(entries, m)
	if err != nil {
		return nil, err
	}
	d := &Dispatcher{builtin: entries, metrics: m}
	d.set.Store(hs)
	limits := DefaultLimits()
	d.limits.Store(&limits)
	return d, nil
}

// SetLimits replaces the bounds on what hooks may add; calls in flight keep the limits they started
// with. Invalid limits are refused and the previous ones stay.
func (d *Dispatcher) SetLimits(l Limits) error {
	if err := l.Validate(); err != nil {
		return fmt.Errorf("hook limits: %w: %w", err, errdefs.ErrInvalidArgument)
	}
	d.limits.Store(&l)
	return nil
}

// SetRemote replaces the remote hooks. On error the previous set stays in force.
func (d *Dispatcher) SetRemote(ctx context.Context, remote []Registration) error {
	for i := range remote {
		remote[i].Remote = true
	}
	entries, err := build(ctx, remote)
	if err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.swap(d.builtin, entries); err != nil {
		return err
	}
	d.remote = entries
	return nil
}

// SetBuiltin replaces the in-process hooks, after a configuration reload: new hook values are built
// from the registrations and swapped in with the remote hooks kept. On error the previous set stays.
func (d *Dispatcher) SetBuiltin(ctx context.Context, builtin []Registration) error {
	entries, err := build(ctx, builtin)
	if err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.swap(entries, d.remote); err != nil {
		return err
	}
	d.builtin = entries
	return nil
}

func (d *Dispatcher) swap(builtin, remote []*entry) error {
	hs, err := newHookSet(append(append([]*entry(nil), builtin...), remote...), d.metrics)
	if err != nil {
		return err
	}
	d.set.Store(hs)
	return nil
}

// HookInfo describes a registered hook, for status output.
type HookInfo struct {
	Name          string        `json:"name"`
	Order         int           `json:"order"`
	Stages        []Stage       `json:"stages"`
	FailurePolicy FailurePolicy `json:"failurePolicy"`
	Timeout       time.Duration `json:"timeout"`
	Remote        bool          `json:"remote"`
}

// Hooks lists the hooks in force, in order.
func (d *Dispatcher) Hooks() []HookInfo {
	hs := d.set.Load()
	out := make([]HookInfo, 0, len(hs.entries))
	for _, e := range hs.entries {
		hi := HookInfo{Name: e.name, Order: e.order, FailurePolicy: e.policy, Timeout: e.timeout, Remote: e.remote}
		for _, s := range Stages() {
			if _, ok := e.calls[s]; ok {
				hi.Stages = append(hi.Stages, s)
			}
		}
		out = append(out, hi)
	}
	return out
}

// Run runs the stage's hooks in order and returns their merged adjustment (nil when nothing changed).
// pod and ctr are not modified; ctr is nil for sandbox stages. A hook whose call fails, times out or
// conflicts with an earlier hook is handled by its failure policy: Fail returns the error, prefixed with
// the hook's name and carrying its class (DeadlineExceeded, Unavailable, Conflict…); Ignore drops its
// adjustment. Post stages never return an error: the runtime has already acted.
func (d *Dispatcher) Run(ctx context.Context, stage Stage, pod *PodInfo, ctr *ContainerInfo) (*Adjustment, error) {
	bs := d.set.Load().byStage[stage]
	if len(bs) == 0 {
		return nil, nil
	}
	logger := klog.FromContext(ctx)
	skipRemote := SkipsRemote(pod.Labels)
	m := newMerger(stage, pod, ctr, *d.limits.Load())
	// kept are the hooks whose adjustment is in the result: if the call fails later, they roll back.
	var kept []binding
	for _, b := range bs {
		if b.remote && skipRemote {
			logger.V(4).Info("Remote hook skipped: pod asks to skip hook servers", "hook", b.name, "stage", stage)
			continue
		}
		adj, err := d.call(ctx, stage, b, m.pod, m.ctr)
		if err == nil && !stage.post() {
			err = m.apply(b.name, adj)
			if err != nil {
				if _, ok := errors.AsType[*TooLargeError](err); ok {
					d.metrics.tooLarge.WithLabelValues(b.name, string(stage)).Inc()
				} else {
					d.metrics.conflicts.WithLabelValues(b.name, string(stage)).Inc()
				}
			}
		}
		if err == nil {
			if v := logger.V(4); v.Enabled() && !adj.Empty() {
				v.Info("Hook adjusted", "hook", b.name, "stage", stage, "fields", fieldsOf(adj))
			}
			if b.rollback != nil {
				kept = append(kept, b)
			}
			continue
		}
		// The hook may have reserved something before it failed or was dropped.
		if b.rollback != nil && !stage.post() {
			b.rollback(ctx, stage, pod, ctr)
		}
		err = fmt.Errorf("hook %s at %s: %w", b.name, stage, err)
		if b.policy == Fail && !stage.post() {
			d.metrics.errors.WithLabelValues(b.name, string(stage)).Inc()
			logger.Error(err, "Hook failed; the call fails (failure policy Fail)", "hook", b.name, "stage", stage)
			for i := len(kept) - 1; i >= 0; i-- {
				kept[i].rollback(ctx, stage, pod, ctr)
			}
			return nil, err
		}
		d.metrics.ignored.WithLabelValues(b.name, string(stage)).Inc()
		d.metrics.errors.WithLabelValues(b.name, string(stage)).Inc()
		logger.Error(err, "Hook failed; going on without its adjustment", "hook", b.name, "stage", stage, "failurePolicy", b.policy)
	}
	return m.result(), nil
}

// safeCall turns a hook's panic into an error, so one broken policy fails a call instead of the proxy,
// and with it every kubelet call on the node.
func safeCall(ctx context.Context, c call, pod *PodInfo, ctr *ContainerInfo) (adj *Adjustment, err error) {
	defer func() {
		if r := recover(); r != nil {
			adj, err = nil, fmt.Errorf("panicked: %v: %w", r, errdefs.ErrInternal)
		}
	}()
	return c(ctx, pod, ctr)
}

// Rollback tells the stage's hooks that the call did not go through (the runtime refused it), so they
// release what they reserved. Hooks run in reverse order; remote hooks are not told (the protocol has no
// such call).
func (d *Dispatcher) Rollback(ctx context.Context, stage Stage, pod *PodInfo, ctr *ContainerInfo) {
	bs := d.set.Load().byStage[stage]
	for i := len(bs) - 1; i >= 0; i-- {
		if bs[i].rollback != nil {
			bs[i].rollback(ctx, stage, pod, ctr)
		}
	}
}

// call runs one hook under its timeout. A hook that returns after its deadline counts as timed out even
// if it ignored ctx, so a slow in-process hook is visible; remote calls are cut off by gRPC at the deadline.
func (d *Dispatcher) call(ctx context.Context, stage Stage, b binding, pod *PodInfo, ctr *ContainerInfo) (*Adjustment, error) {
	start := time.Now()
	hctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	adj, err := safeCall(hctx, b.call, pod, ctr)
	took := time.Since(start)
	b.calls.Inc()
	b.duration.Observe(took.Seconds())
	// took covers a hook that ignored its context and returned late, before the timer fired.
	if took >= b.timeout || hctx.Err() == context.DeadlineExceeded || errors.Is(err, context.DeadlineExceeded) {
		d.metrics.timeouts.WithLabelValues(b.name, string(stage)).Inc()
		return nil, fmt.Errorf("no answer within %v (raise its timeout or fix the hook): %w", b.timeout, context.DeadlineExceeded)
	}
	return adj, err
}
