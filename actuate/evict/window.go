package evict

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"

	"github.com/tandemkit/tandem/actuate/dryrun"
	"github.com/tandemkit/tandem/config/batchwindow"
	"github.com/tandemkit/tandem/metrics/collector"
)

// ReasonBatchWindow is the reason of an eviction because a batch window closed.
const ReasonBatchWindow Reason = "batchWindow"

// WindowConfig is how the batch-window eviction loop behaves; the windows themselves come through
// WindowDeps.State.
type WindowConfig struct {
	// DryRun chooses the pods but only reports them (dry-run-config windowEvict).
	DryRun bool
	// Interval is how often the loop looks when no snapshot wakes it.
	Interval time.Duration
	// RetryAfter is how long a pod whose eviction was refused (a PodDisruptionBudget) or failed waits
	// before it is asked again.
	RetryAfter time.Duration
}

// DefaultWindowConfig looks every second and asks a refused pod again after 10 s: past the grace the
// window is a deadline, so a pod a PodDisruptionBudget protects is asked as soon as a replica is back.
func DefaultWindowConfig() WindowConfig {
	return WindowConfig{Interval: time.Second, RetryAfter: 10 * time.Second}
}

// WindowDeps are the batch-window eviction loop's collaborators.
type WindowDeps struct {
	// Latest returns the newest usage snapshot, nil before the first; its BE pods are the candidates.
	Latest func() *collector.Snapshot
	// Updates wakes the loop after each new snapshot; nil leaves it to WindowConfig.Interval.
	Updates <-chan struct{}
	// Pods tells what the snapshot does not (sandbox id, priority, requests), by pod UID.
	Pods func(podUID string) (PodMeta, bool)
	// State is where the node stands against its windows at an instant.
	State func(now time.Time) batchwindow.State
	// Allowance is the batch CPU the node publishes now (outsideCapacityPercent of its capacity), in
	// milli-cores; ok false while it is not known. Only consulted when the outside share is above 0.
	Allowance func() (milli int64, ok bool)
	Evictor   Evictor
	// Dry reports pods a dry run would evict; nil reports nothing.
	Dry *dryrun.Recorder
	// Now defaults to time.Now.
	Now        func() time.Time
	Registerer prometheus.Registerer
}

// WindowLoop evicts the batch (BE) pods that no longer fit once a batch window has closed and its
// grace period has passed: all of them when the node keeps no batch capacity outside its windows,
// otherwise the lowest priority first, then the largest CPU request, until the batch-cpu requests of
// those left fit what the node publishes. Evictions go through the Evictor (the Eviction API:
// PodDisruptionBudgets are honoured; a refused pod is asked again after RetryAfter) with a message
// naming the window.
type WindowLoop struct {
	cfg  atomic.Pointer[WindowConfig]
	deps WindowDeps

	// handled holds pods evicted (or reported, in a dry run) until they leave the snapshots;
	// refusedUntil pods to ask again later.
	handled      map[string]bool
	refusedUntil map[string]time.Time
	// phase is the last phase seen, to log changes once.
	phase batchwindow.Phase
	// dry is the last step's dry-run switch: pods a dry run reported are forgotten when it goes off,
	// or the real run would take them for already evicted.
	dry bool

	results *prometheus.CounterVec
}

// NewWindowLoop checks cfg and deps.
func NewWindowLoop(cfg WindowConfig, deps WindowDeps) (*WindowLoop, error) {
	if deps.Latest == nil || deps.Evictor == nil || deps.State == nil {
		return nil, errors.New("batch-window eviction needs a snapshot source, an Evictor and the window state")
	}
	if deps.Now == nil {
		deps.Now = time.Now
	}
	if deps.Pods == nil {
		deps.Pods = func(string) (PodMeta, bool) { return PodMeta{}, false }
	}
	l := &WindowLoop{deps: deps, handled: map[string]bool{}, refusedUntil: map[string]time.Time{},
		results: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "tandem", Name: "batch_window_evictions_total",
			Help: "Batch pods the close of a batch window took off the node, by result: evicted, refused (PodDisruptionBudget), failed, dryRun (reported only).",
		}, []string{"result"})}
	for _, r := range []string{"evicted", "refused", "failed", "dryRun"} {
		l.results.WithLabelValues(r)
	}
	if err := l.Reconfigure(cfg); err != nil {
		return nil, err
	}
	if deps.Registerer != nil {
		if err := deps.Registerer.Register(l.results); err != nil {
			return nil, fmt.Errorf("register batch-window eviction metrics: %w", err)
		}
	}
	return l, nil
}

// Reconfigure swaps cfg in; safe for concurrent use with Run.
func (l *WindowLoop) Reconfigure(cfg WindowConfig) error {
	if cfg.Interval <= 0 || cfg.RetryAfter < 0 {
		return fmt.Errorf("batch-window eviction: interval %v must be positive and retry %v not negative", cfg.Interval, cfg.RetryAfter)
	}
	l.cfg.Store(&cfg)
	return nil
}

// Run steps on every snapshot and every interval until ctx is done.
func (l *WindowLoop) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithName("batch-window-evict")
	ctx = klog.NewContext(ctx, logger)
	collector.Follow(ctx, l.cfg.Load().Interval, l.deps.Updates, l.deps.Latest, func(snap *collector.Snapshot) { l.Step(ctx, snap) })
	return nil
}

// Step looks at one snapshot and evicts (or, in a dry run, reports) what the window calls for; it
// returns the pods it evicted or reported.
func (l *WindowLoop) Step(ctx context.Context, snap *collector.Snapshot) []Pod {
	cfg := *l.cfg.Load()
	now := l.deps.Now()
	st := l.deps.State(now)
	logger := klog.FromContext(ctx)
	if l.dry && !cfg.DryRun {
		clear(l.handled)
	}
	l.dry = cfg.DryRun
	if st.Phase != l.phase {
		logger.Info("Batch window", "phase", st.Phase, "window", st.Window, "next", st.Next, "closedAt", st.ClosedAt,
			"outsideCapacityPercent", st.OutsidePercent, "windows", st.Describe)
		l.phase = st.Phase
	}
	cands := bePods(snap, l.deps.Pods)
	l.forget(cands)
	if st.Phase != batchwindow.PhaseEvicting || len(cands) == 0 {
		return nil
	}
	budget := int64(0)
	if st.OutsidePercent > 0 {
		a, ok := l.deps.Allowance()
		if !ok {
			logger.V(2).Info("Batch window closed, but the batch capacity left outside it is not known yet; evicting nothing")
			return nil
		}
		budget = a
	}
	var requested int64
	for _, c := range cands {
		if !l.handled[key(c.pod)] {
			requested += c.request
		}
	}
	// Lowest priority leaves first; among equals, the largest request frees the most per eviction.
	slices.SortStableFunc(cands, func(a, b *candidate) int {
		return cmp.Or(cmp.Compare(a.priority, b.priority), cmp.Compare(b.request, a.request), cmp.Compare(a.pod.Namespace+"/"+a.pod.Name, b.pod.Namespace+"/"+b.pod.Name))
	})
	msg := windowMessage(st)
	var done []Pod
	for _, c := range cands {
		k := key(c.pod)
		if l.handled[k] {
			continue
		}
		if st.OutsidePercent > 0 && requested <= budget {
			break
		}
		if until, ok := l.refusedUntil[k]; ok && now.Before(until) {
			continue
		}
		delete(l.refusedUntil, k)
		if cfg.DryRun {
			l.deps.Dry.Would(ctx, dryrun.WindowEvict, dryrun.Object{Namespace: c.pod.Namespace, Name: c.pod.Name, UID: c.pod.UID}, "evict the pod: "+msg)
			l.results.WithLabelValues("dryRun").Inc()
		} else if err := l.deps.Evictor.Evict(ctx, c.pod, ReasonBatchWindow, msg); err != nil {
			l.refusedUntil[k] = now.Add(cfg.RetryAfter)
			if errors.Is(err, ErrRefused) {
				l.results.WithLabelValues("refused").Inc()
				logger.Info("Batch pod eviction refused; asking again later", "pod", klog.KRef(c.pod.Namespace, c.pod.Name), "retryAfter", cfg.RetryAfter, "err", err)
			} else {
				l.results.WithLabelValues("failed").Inc()
				logger.Error(err, "Batch pod not evicted; asking again later", "pod", klog.KRef(c.pod.Namespace, c.pod.Name), "retryAfter", cfg.RetryAfter)
			}
			continue
		} else {
			l.results.WithLabelValues("evicted").Inc()
			logger.Info("Batch pod evicted: its batch window closed", "pod", klog.KRef(c.pod.Namespace, c.pod.Name), "podUID", c.pod.UID,
				"priority", c.priority, "cpuRequestMilli", c.request, "message", msg)
		}
		l.handled[k] = true
		requested -= c.request
		done = append(done, c.pod)
	}
	return done
}

// forget drops pods that left the node.
func (l *WindowLoop) forget(cands []*candidate) {
	if len(l.handled) == 0 && len(l.refusedUntil) == 0 {
		return
	}
	seen := make(map[string]bool, len(cands))
	for _, c := range cands {
		seen[key(c.pod)] = true
	}
	for k := range l.handled {
		if !seen[k] {
			delete(l.handled, k)
		}
	}
	for k := range l.refusedUntil {
		if !seen[k] {
			delete(l.refusedUntil, k)
		}
	}
}

// windowMessage names the window, when it closed and the grace, for the Event on the pod.
func windowMessage(st batchwindow.State) string {
	closed := "no batch window was open within the last week"
	if !st.ClosedAt.IsZero() {
		closed = fmt.Sprintf("batch window %q closed at %s", st.Window, st.ClosedAt.Format(time.RFC3339))
	}
	keep := "the node keeps no batch capacity outside its windows"
	if st.OutsidePercent > 0 {
		keep = fmt.Sprintf("the node keeps %d%% of its batch capacity outside its windows and this pod does not fit it", st.OutsidePercent)
	}
	return fmt.Sprintf("%s and its eviction grace has passed; %s (batch-window-config: %s)", closed, keep, st.Describe)
}
