package hooks

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/containerd/errdefs"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"
)

// FailurePolicy says what a failed, timed-out or conflicting hook call does to the CRI call.
type FailurePolicy string

const (
	// Fail returns the hook's error to kubelet; nothing is forwarded.
	Fail FailurePolicy = "Fail"
	// Ignore drops the hook's adjustment, records the failure in a log line and a metric, and goes on.
	Ignore FailurePolicy = "Ignore"
)

// DefaultTimeout bounds each hook call unless its registration says otherwise.
const DefaultTimeout = 2 * time.Second

// ErrSkip is what a Registration's New wraps to leave the hook out without failing the others: the
// kernel lacks what it needs, say. One log line says so.
var ErrSkip = errors.New("hook not available here")

// Registration describes one hook: built-in ones come from policy.Builtin, remote ones from hooks.d.
type Registration struct {
	Name string
	// Order sets the execution order: lower runs first. Names and orders must be unique.
	Order int
	New   func() (Hook, error)
	// Stages restricts the hook to these stages; nil means every stage it implements.
	Stages        []Stage
	FailurePolicy FailurePolicy
	Timeout       time.Duration
	// Remote hooks are skipped for pods labelled to skip them: a hook server running as a pod must not
	// be asked about its own pod.
	Remote bool
}

// entry is a built registration.
type entry struct {
	name    string
	order   int
	policy  FailurePolicy
	timeout time.Duration
	remote  bool
	calls   map[Stage]call
	// rollback is the hook's Rollback, or nil.
	rollback func(ctx context.Context, stage Stage, pod *PodInfo, ctr *ContainerInfo)
}

// build constructs the hooks of regs. A hook whose New wraps ErrSkip is left out with a log line.
func build(ctx context.Context, regs []Registration) ([]*entry, error) {
	logger := klog.FromContext(ctx)
	var out []*entry
	var errs []error
	for _, r := range regs {
		if r.Name == "" || r.New == nil {
			errs = append(errs, fmt.Errorf("hook registration at order %d needs a name and a constructor: %w", r.Order, errdefs.ErrInvalidArgument))
			continue
		}
		policy := r.FailurePolicy
		switch policy {
		case "":
			policy = Fail
		case Fail, Ignore:
		default:
			errs = append(errs, fmt.Errorf("hook %s: failure policy %q: want Fail or Ignore: %w", r.Name, policy, errdefs.ErrInvalidArgument))
			continue
		}
		timeout := r.Timeout
		if timeout == 0 {
			timeout = DefaultTimeout
		}
		if timeout < 0 {
			errs = append(errs, fmt.Errorf("hook %s: negative timeout %v: %w", r.Name, timeout, errdefs.ErrInvalidArgument))
			continue
		}
		h, err := r.New()
		if errors.Is(err, ErrSkip) {
			logger.Info("Hook off", "hook", r.Name, "reason", err)
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("hook %s: %w", r.Name, err))
			continue
		}
		e := &entry{name: r.Name, order: r.Order, policy: policy, timeout: timeout, remote: r.Remote, calls: map[Stage]call{}}
		if rb, ok := h.(RollbackHook); ok {
			e.rollback = rb.Rollback
		}
		stages := r.Stages
		if stages == nil {
			stages = Stages()
		}
		for _, s := range stages {
			c := bind(h, s)
			if c == nil {
				if r.Stages != nil {
					errs = append(errs, fmt.Errorf("hook %s: registered for %s but does not implement it: %w", r.Name, s, errdefs.ErrInvalidArgument))
				}
				continue
			}
			e.calls[s] = c
		}
		if len(e.calls) == 0 {
			errs = append(errs, fmt.Errorf("hook %s implements no stage: %w", r.Name, errdefs.ErrInvalidArgument))
			continue
		}
		out = append(out, e)
	}
	return out, errors.Join(errs...)
}

// hookSet is an immutable, ordered set of hooks indexed by stage. A reload builds a new one and swaps it in.
type hookSet struct {
	entries []*entry
	byStage map[Stage][]binding
}

type binding struct {
	*entry
	call  call
	stage Stage
	// Metric children resolved once, so a call does not hash label values.
	calls    prometheus.Counter
	duration prometheus.Observer
}

// newHookSet orders entries and rejects duplicate names and orders.
func newHookSet(entries []*entry, m *metrics) (*hookSet, error) {
	sorted := slices.Clone(entries)
	slices.SortStableFunc(sorted, func(a, b *entry) int { return a.order - b.order })
	var errs []error
	names := map[string]bool{}
	for i, e := range sorted {
		if names[e.name] {
			errs = append(errs, fmt.Errorf("hook name %q is registered twice: %w", e.name, errdefs.ErrAlreadyExists))
		}
		names[e.name] = true
		if i > 0 && sorted[i-1].order == e.order {
			errs = append(errs, fmt.Errorf("hooks %s and %s share order %d; give each its own: %w", sorted[i-1].name, e.name, e.order, errdefs.ErrAlreadyExists))
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	hs := &hookSet{entries: sorted, byStage: map[Stage][]binding{}}
	for _, e := range sorted {
		for _, s := range Stages() {
			if c, ok := e.calls[s]; ok {
				hs.byStage[s] = append(hs.byStage[s], binding{entry: e, call: c, stage: s,
					calls: m.calls.WithLabelValues(e.name, string(s)), duration: m.duration.WithLabelValues(e.name, string(s))})
			}
		}
	}
	return hs, nil
}
