// Package evict takes best-effort (BE) pods off the node when suppression is not enough, following
// Koordinator's resource-threshold-config:
//
//   - Memory: when node memory use reaches memoryEvictThresholdPercent of the node, BE pods are evicted,
//     lowest priority first and then the largest memory user, until their working sets add up to what
//     brings the node down to memoryEvictLowerPercent.
//   - CPU satisfaction: BE's satisfaction is the CPU BE may use after suppression over the CPU BE pods
//     requested (Koordinator's "real limit / request"). When it stays below
//     cpuEvictBESatisfactionLowerPercent for cpuEvictTimeWindowSeconds while BE uses at least
//     cpuEvictBEUsageThresholdPercent of what it may use (BE really wants the CPU it is denied), BE pods
//     are evicted, lowest priority first and then the largest CPU user, until the remaining requests
//     would be satisfied to cpuEvictBESatisfactionUpperPercent.
//
// Only pods whose every container is BE are candidates: nothing else is ever evicted. Eviction goes
// through an Evictor: the Kubernetes Eviction API when the node agent is connected (controllers
// reschedule, PodDisruptionBudgets are honoured) or the runtime's StopPodSandbox when it runs
// standalone. After a round that evicted something the loop waits Config.CoolDown before evicting
// again, because freed memory and CPU show in the usage only a sample or more later; without the pause
// the same pressure would evict pod after pod. A pod whose eviction was refused (a PodDisruptionBudget)
// is not asked again for Config.CoolDown either, but a round that evicted nothing holds no other pod
// back: the next sample tries the next candidate, such as a BE pod that started a moment too late to be
// in this one.
//
// # Dry run
//
// With Config.DryRun (dry-run-config's evict) the loop chooses exactly the pods it would evict, in the
// same order and for the same reasons, and instead of asking the Evictor records each through
// Deps.Dry: a log line, a WouldEvict Event on the pod, tandem_dry_run_actions_total{action="evict"};
// tandem_evictions_total does not move. The pods chosen are then treated as evicted: each is reported
// once while it stays, its usage counts as freed, and the cool-down follows the round, so what the
// next rounds report is what the real loop would do next if those pods were still stopping. Switched
// off, dry run leaves nothing behind: the pods it reported are candidates again and its cool-down ends.
// A dry run cannot tell which evictions a PodDisruptionBudget would refuse.
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
	"github.com/tandemkit/tandem/config/slo"
	"github.com/tandemkit/tandem/metrics/collector"
)

// Reason is why a pod was evicted; it is the reason label of tandem_evictions_total.
type Reason string

// The reasons.
const (
	ReasonMemory          Reason = "memory"
	ReasonCPUSatisfaction Reason = "cpuSatisfaction"
)

// Pod names a pod to evict.
type Pod struct {
	Namespace, Name, UID string
	// SandboxID is the runtime's pod sandbox id, for StopPodSandbox; empty when unknown.
	SandboxID string
}

// Evictor takes a pod off the node. An error wrapping ErrRefused means "not now" (a
// PodDisruptionBudget): the loop moves on to the next candidate.
type Evictor interface {
	Evict(ctx context.Context, pod Pod, reason Reason, message string) error
}

// ErrRefused marks an eviction the cluster refused for now, such as one a PodDisruptionBudget blocks.
var ErrRefused = errors.New("eviction refused")

// PodMeta is what a usage snapshot does not say about a pod.
type PodMeta struct {
	SandboxID string
	// Priority is the pod spec's priority; nil when unknown. Unknown counts as 0.
	Priority *int32
	// CPURequestMilli is what the pod's containers requested (batch-cpu for BE pods), milli-cores.
	CPURequestMilli int64
}

// Config is resource-threshold-config's eviction part plus how the loop behaves.
type Config struct {
	Enable                      bool  `json:"enable"`
	MemoryEvictThresholdPercent int64 `json:"memoryEvictThresholdPercent"`
	MemoryEvictLowerPercent     int64 `json:"memoryEvictLowerPercent"`
	// CPUEvictBySatisfaction switches CPU eviction on; Koordinator runs it only when both satisfaction
	// bounds are set.
	CPUEvictBySatisfaction             bool  `json:"cpuEvictBySatisfaction"`
	CPUEvictBESatisfactionLowerPercent int64 `json:"cpuEvictBESatisfactionLowerPercent"`
	CPUEvictBESatisfactionUpperPercent int64 `json:"cpuEvictBESatisfactionUpperPercent"`
	CPUEvictBEUsageThresholdPercent    int64 `json:"cpuEvictBEUsageThresholdPercent"`
	// CPUEvictTimeWindow is how long the CPU condition must hold in every sample; 0 means two
	// intervals, as koordlet does when cpuEvictTimeWindowSeconds is unset.
	CPUEvictTimeWindow time.Duration `json:"cpuEvictTimeWindow"`
	// CoolDown is the pause after a round that evicted something.
	CoolDown time.Duration `json:"coolDown"`
	// Interval is how often the loop looks when no snapshot wakes it.
	Interval time.Duration `json:"interval"`
	// DryRun chooses the pods as for real and records them through Deps.Dry instead of evicting them
	// (dry-run-config's evict; FromSLO leaves it as base has it).
	DryRun bool `json:"dryRun"`
}

// DefaultConfig is Koordinator's defaults (off, memory 70%, lower 68%) with a 60 s cool-down.
func DefaultConfig() Config {
	return Config{
		MemoryEvictThresholdPercent:     70,
		MemoryEvictLowerPercent:         68,
		CPUEvictBEUsageThresholdPercent: 90,
		CoolDown:                        time.Minute,
		Interval:                        time.Second,
	}
}

// FromSLO returns base with resource-threshold-config resolved for this node.
func FromSLO(base Config, r slo.ResourceThresholdSettings) Config {
	out := base
	out.Enable = r.Enable
	out.MemoryEvictThresholdPercent = r.MemoryEvictThresholdPercent
	out.MemoryEvictLowerPercent = r.MemoryEvictLowerPercent
	out.CPUEvictBySatisfaction = r.CPUEvictBySatisfaction
	out.CPUEvictBESatisfactionLowerPercent = r.CPUEvictBESatisfactionLowerPercent
	out.CPUEvictBESatisfactionUpperPercent = r.CPUEvictBESatisfactionUpperPercent
	out.CPUEvictBEUsageThresholdPercent = r.CPUEvictBEUsageThresholdPercent
	out.CPUEvictTimeWindow = time.Duration(r.CPUEvictTimeWindowSeconds) * time.Second
	return out
}

// Validate reports every bad field by its name.
func (c Config) Validate() error {
	var errs []error
	pct := func(name string, v int64) {
		if v < 0 || v > 100 {
			errs = append(errs, fmt.Errorf("%s: %d is not a percentage (0-100)", name, v))
		}
	}
	pct("memoryEvictThresholdPercent", c.MemoryEvictThresholdPercent)
	pct("memoryEvictLowerPercent", c.MemoryEvictLowerPercent)
	pct("cpuEvictBESatisfactionLowerPercent", c.CPUEvictBESatisfactionLowerPercent)
	pct("cpuEvictBESatisfactionUpperPercent", c.CPUEvictBESatisfactionUpperPercent)
	pct("cpuEvictBEUsageThresholdPercent", c.CPUEvictBEUsageThresholdPercent)
	if c.MemoryEvictLowerPercent > c.MemoryEvictThresholdPercent {
		errs = append(errs, fmt.Errorf("memoryEvictLowerPercent: %d is above memoryEvictThresholdPercent %d", c.MemoryEvictLowerPercent, c.MemoryEvictThresholdPercent))
	}
	if c.CPUEvictBySatisfaction && c.CPUEvictBESatisfactionLowerPercent > c.CPUEvictBESatisfactionUpperPercent {
		errs = append(errs, fmt.Errorf("cpuEvictBESatisfactionLowerPercent: %d is above cpuEvictBESatisfactionUpperPercent %d", c.CPUEvictBESatisfactionLowerPercent, c.CPUEvictBESatisfactionUpperPercent))
	}
	if c.CPUEvictBySatisfaction && c.CPUEvictBESatisfactionUpperPercent == 0 {
		errs = append(errs, errors.New("cpuEvictBESatisfactionUpperPercent: 0; set it above the lower bound"))
	}
	if c.CPUEvictTimeWindow < 0 {
		errs = append(errs, fmt.Errorf("cpuEvictTimeWindow: %v is negative", c.CPUEvictTimeWindow))
	}
	if c.CoolDown < 0 {
		errs = append(errs, fmt.Errorf("coolDown: %v is negative", c.CoolDown))
	}
	if c.Interval <= 0 {
		errs = append(errs, fmt.Errorf("interval: %v, want more than 0", c.Interval))
	}
	return errors.Join(errs...)
}

// Deps are the loop's collaborators.
type Deps struct {
	// Latest returns the newest usage snapshot, nil before the first.
	Latest func() *collector.Snapshot
	// Updates wakes the loop after each new snapshot; nil leaves it to Config.Interval.
	Updates <-chan struct{}
	// Pods tells what the snapshot does not (sandbox id, priority, requests), by pod UID; nil knows
	// nothing, which leaves CPU eviction without requests and so off.
	Pods func(podUID string) (PodMeta, bool)
	// BEAllowedMilli is what BE may use after suppression (suppress.Loop.AllowedMilli); nil or 0 means
	// the node's capacity.
	BEAllowedMilli func() int64
	// Evictor takes pods off the node.
	Evictor Evictor
	// Now is the clock for the cool-down and the CPU window; nil means time.Now.
	Now func() time.Time
	// Registerer receives tandem_evictions_total; nil keeps it unexported.
	Registerer prometheus.Registerer
	// Dry records the evictions Config.DryRun holds back; nil: they are only logged as a round.
	Dry *dryrun.Recorder
}

// Loop is the eviction loop. Step is not safe for concurrent use; Run calls it from one goroutine.
type Loop struct {
	cfg  atomic.Pointer[Config]
	deps Deps

	// coolUntil is when the next round may evict.
	coolUntil time.Time
	// cpuSince is when the CPU condition started to hold without a break; zero when it does not hold.
	cpuSince time.Time
	// evicted remembers pods already evicted, until they leave the snapshots: a pod that takes a while
	// to stop must not be evicted again, nor its usage counted as still to be freed.
	evicted map[string]bool
	// refusedUntil holds pods whose eviction was refused or failed, until they may be asked again.
	refusedUntil map[string]time.Time
	// dryEvicted are the pods in evicted that dry run only reported, and dryCool says the cool-down
	// followed a dry-run round: neither holds the real loop back once dry run is switched off.
	dryEvicted map[string]bool
	dryCool    bool

	evictions *prometheus.CounterVec
	refusals  *prometheus.CounterVec
}

// New checks cfg and deps and returns a loop that has evicted nothing.
func New(cfg Config, deps Deps) (*Loop, error) {
	if deps.Latest == nil || deps.Evictor == nil {
		return nil, errors.New("evict needs a snapshot source (Deps.Latest) and an Evictor")
	}
	if deps.Now == nil {
		deps.Now = time.Now
	}
	if deps.Pods == nil {
		deps.Pods = func(string) (PodMeta, bool) { return PodMeta{}, false }
	}
	l := &Loop{
		deps: deps, evicted: map[string]bool{}, refusedUntil: map[string]time.Time{}, dryEvicted: map[string]bool{},
		evictions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "tandem", Name: "evictions_total",
			Help: "BE pods evicted, by reason (memory, cpuSatisfaction).",
		}, []string{"reason"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "tandem", Name: "eviction_refusals_total",
			Help: "Evictions the cluster refused (PodDisruptionBudget) or that failed, by reason.",
		}, []string{"reason"}),
	}
	if err := l.Reconfigure(cfg); err != nil {
		return nil, err
	}
	if deps.Registerer != nil {
		for _, c := range []prometheus.Collector{l.evictions, l.refusals} {
			if err := deps.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("register evict metrics: %w", err)
			}
		}
	}
	return l, nil
}

// Reconfigure swaps the configuration in (an slo-config reload); the next sample uses it. A bad config
// is refused and the old one stays. Safe for concurrent use with Run.
func (l *Loop) Reconfigure(cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("evict config: %w", err)
	}
	l.cfg.Store(&cfg)
	return nil
}

// Run steps on every collector update and every Config.Interval until ctx is done.
func (l *Loop) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithName("evict")
	ctx = klog.NewContext(ctx, logger)
	cfg := l.cfg.Load()
	logger.Info("BE eviction running", "enable", cfg.Enable, "dryRun", cfg.DryRun, "memoryEvictThresholdPercent", cfg.MemoryEvictThresholdPercent,
		"memoryEvictLowerPercent", cfg.MemoryEvictLowerPercent, "cpuEvictBySatisfaction", cfg.CPUEvictBySatisfaction, "coolDown", cfg.CoolDown)
	// The interval is read once: a reload that changes it takes effect at the next start.
	collector.Follow(ctx, cfg.Interval, l.deps.Updates, l.deps.Latest, func(snap *collector.Snapshot) { l.Step(ctx, snap) })
	return nil
}

// candidate is a BE pod with its usage summed over its containers.
type candidate struct {
	pod      Pod
	priority int32
	memory   int64
	cpu      int64
	request  int64
}

// Evicted is what one eviction round did: the reason, and the pods it evicted in order (none when
// every attempt was refused; the cool-down then holds only the refused pods). DryRun says the pods were
// only reported, not evicted.
type Evicted struct {
	Reason Reason
	Pods   []Pod
	DryRun bool
}

// Step looks at one snapshot and evicts what it calls for. It returns the round it ran, nil when none
// was needed or the cool-down was on.
func (l *Loop) Step(ctx context.Context, snap *collector.Snapshot) *Evicted {
	cfg := *l.cfg.Load()
	if !cfg.DryRun && (len(l.dryEvicted) > 0 || l.dryCool) {
		// Dry run switched off: the pods it reported are still running, and its cool-down held nothing.
		for k := range l.dryEvicted {
			delete(l.evicted, k)
		}
		clear(l.dryEvicted)
		if l.dryCool {
			l.coolUntil, l.dryCool = time.Time{}, false
		}
	}
	if !cfg.Enable {
		return nil
	}
	now := l.deps.Now()
	memPressure := snap.Capacity.MemoryBytes > 0 && snap.Node.MemoryBytes*100 >= snap.Capacity.MemoryBytes*cfg.MemoryEvictThresholdPercent
	if !memPressure && !cfg.CPUEvictBySatisfaction {
		// The common case: no pod metadata is looked up while nothing is wrong.
		l.forgetGone(snap)
		return nil
	}
	cands := l.candidates(snap)
	if now.Before(l.coolUntil) {
		return nil
	}
	ev := l.memory(ctx, cfg, snap, cands, now)
	if ev == nil {
		ev = l.cpu(ctx, cfg, snap, cands, now)
	}
	if ev != nil && len(ev.Pods) > 0 {
		l.coolUntil, l.cpuSince, l.dryCool = now.Add(cfg.CoolDown), time.Time{}, cfg.DryRun
	}
	return ev
}

// forgetGone drops pods evicted or held earlier that no longer show in the snapshot.
func (l *Loop) forgetGone(snap *collector.Snapshot) {
	if len(l.evicted) == 0 && len(l.refusedUntil) == 0 {
		return
	}
	seen := map[string]bool{}
	for _, c := range snap.Containers {
		seen[c.PodUID] = true
		seen[c.Namespace+"/"+c.Pod] = true
	}
	for k := range l.evicted {
		if !seen[k] {
			delete(l.evicted, k)
			delete(l.dryEvicted, k)
		}
	}
	for k := range l.refusedUntil {
		if !seen[k] {
			delete(l.refusedUntil, k)
		}
	}
}

// candidates is the snapshot's BE pods (see bePods), after forgetting pods that left it.
func (l *Loop) candidates(snap *collector.Snapshot) []*candidate {
	out := bePods(snap, l.deps.Pods)
	l.forgetGone(snap)
	return out
}

func key(p Pod) string {
	if p.UID != "" {
		return p.UID
	}
	return p.Namespace + "/" + p.Name
}

// memory evicts for node memory; see the package doc.
func (l *Loop) memory(ctx context.Context, cfg Config, snap *collector.Snapshot, cands []*candidate, now time.Time) *Evicted {
	total := snap.Capacity.MemoryBytes
	if total <= 0 || snap.Node.MemoryBytes*100 < total*cfg.MemoryEvictThresholdPercent {
		return nil
	}
	// Memory of pods already on their way out will be freed anyway.
	used := snap.Node.MemoryBytes
	for _, c := range cands {
		if l.evicted[key(c.pod)] {
			used -= c.memory
		}
	}
	release := used - total*cfg.MemoryEvictLowerPercent/100
	if release <= 0 {
		return nil
	}
	slices.SortStableFunc(cands, func(a, b *candidate) int {
		return cmp.Or(cmp.Compare(a.priority, b.priority), cmp.Compare(b.memory, a.memory), cmp.Compare(a.pod.Namespace+"/"+a.pod.Name, b.pod.Namespace+"/"+b.pod.Name))
	})
	msg := fmt.Sprintf("node memory use %d%% reached memoryEvictThresholdPercent %d%%; evicting BE pods to bring it under %d%%",
		snap.Node.MemoryBytes*100/total, cfg.MemoryEvictThresholdPercent, cfg.MemoryEvictLowerPercent)
	return l.evict(ctx, cfg, now, ReasonMemory, msg, cands, release, func(c *candidate) int64 { return c.memory },
		"nodeMemoryBytes", snap.Node.MemoryBytes, "capacityMemoryBytes", total, "releaseBytes", release)
}

// cpu evicts for low BE CPU satisfaction; see the package doc.
func (l *Loop) cpu(ctx context.Context, cfg Config, snap *collector.Snapshot, cands []*candidate, now time.Time) *Evicted {
	if !cfg.CPUEvictBySatisfaction {
		return nil
	}
	allowed := snap.Capacity.CPUMilli
	if l.deps.BEAllowedMilli != nil {
		if a := l.deps.BEAllowedMilli(); a > 0 {
			allowed = a
		}
	}
	var usage, request int64
	for _, c := range cands {
		if l.evicted[key(c.pod)] {
			continue
		}
		usage += c.cpu
		request += c.request
	}
	holds := request > 0 && allowed > 0 &&
		allowed*100 < request*cfg.CPUEvictBESatisfactionLowerPercent &&
		usage*100 >= allowed*cfg.CPUEvictBEUsageThresholdPercent
	if !holds {
		l.cpuSince = time.Time{}
		return nil
	}
	if l.cpuSince.IsZero() {
		l.cpuSince = now
	}
	window := cfg.CPUEvictTimeWindow
	if window == 0 {
		window = 2 * cfg.Interval
	}
	if now.Sub(l.cpuSince) < window {
		return nil
	}
	// Requests to take away so that allowed / remaining requests reaches the upper bound.
	release := request - allowed*100/cfg.CPUEvictBESatisfactionUpperPercent
	if release <= 0 {
		return nil
	}
	slices.SortStableFunc(cands, func(a, b *candidate) int {
		return cmp.Or(cmp.Compare(a.priority, b.priority), cmp.Compare(b.cpu, a.cpu), cmp.Compare(a.pod.Namespace+"/"+a.pod.Name, b.pod.Namespace+"/"+b.pod.Name))
	})
	msg := fmt.Sprintf("BE CPU satisfaction %d%% (allowed %dm of %dm requested) stayed below cpuEvictBESatisfactionLowerPercent %d%% for %v while BE used %d%% of it",
		allowed*100/request, allowed, request, cfg.CPUEvictBESatisfactionLowerPercent, window, usage*100/allowed)
	return l.evict(ctx, cfg, now, ReasonCPUSatisfaction, msg, cands, release, func(c *candidate) int64 { return c.request },
		"beAllowedMilli", allowed, "beRequestMilli", request, "beUsageMilli", usage, "releaseMilli", release)
}

// evict takes candidates in order until what they free reaches release. A refused or failed pod is held
// for cfg.CoolDown from now.
func (l *Loop) evict(ctx context.Context, cfg Config, now time.Time, reason Reason, msg string, cands []*candidate, release int64, frees func(*candidate) int64, kv ...any) *Evicted {
	logger := klog.FromContext(ctx)
	var eligible []*candidate
	refused := 0
	for _, c := range cands {
		k := key(c.pod)
		if l.evicted[k] {
			continue
		}
		if until, ok := l.refusedUntil[k]; ok {
			if now.Before(until) {
				refused++
				continue
			}
			delete(l.refusedUntil, k)
		}
		eligible = append(eligible, c)
	}
	if len(eligible) == 0 {
		if refused > 0 {
			// Asking again within the cool-down would be refused again; the refusal was logged.
			logger.V(4).Info("BE eviction needed; every BE pod left refused it or failed recently", "reason", reason, "held", refused)
			return nil
		}
		// No BE pod to take: nothing to wait for, and one may start any moment.
		logger.Info("BE eviction needed but no BE pod left to evict", "reason", reason)
		return nil
	}
	logger.Info("BE eviction needed", append([]any{"reason", reason, "dryRun", cfg.DryRun}, kv...)...)
	var done []Pod
	var freed int64
	for _, c := range eligible {
		if freed >= release {
			break
		}
		k := key(c.pod)
		if cfg.DryRun {
			// Handled as if evicted: reported once while it stays, its usage counted as freed.
			l.deps.Dry.Would(ctx, dryrun.Evict, dryrun.Object{Namespace: c.pod.Namespace, Name: c.pod.Name, UID: c.pod.UID},
				fmt.Sprintf("evict the pod (%s): %s", reason, msg))
			l.evicted[k], l.dryEvicted[k] = true, true
			freed += frees(c)
			done = append(done, c.pod)
			continue
		}
		err := l.deps.Evictor.Evict(ctx, c.pod, reason, msg)
		if err != nil {
			l.refusals.WithLabelValues(string(reason)).Inc()
			// Asked again a second later, a PodDisruptionBudget would refuse again and an unreachable
			// API server would fail again.
			l.refusedUntil[k] = now.Add(cfg.CoolDown)
			if errors.Is(err, ErrRefused) {
				logger.Info("BE pod eviction refused; trying the next", "pod", klog.KRef(c.pod.Namespace, c.pod.Name), "reason", reason, "err", err)
			} else {
				logger.Error(err, "BE pod not evicted; trying the next", "pod", klog.KRef(c.pod.Namespace, c.pod.Name), "reason", reason)
			}
			continue
		}
		l.evicted[k] = true
		freed += frees(c)
		done = append(done, c.pod)
		l.evictions.WithLabelValues(string(reason)).Inc()
		logger.Info("BE pod evicted", "pod", klog.KRef(c.pod.Namespace, c.pod.Name), "podUID", c.pod.UID, "reason", reason,
			"priority", c.priority, "memoryBytes", c.memory, "cpuMilli", c.cpu, "message", msg)
	}
	return &Evicted{Reason: reason, Pods: done, DryRun: cfg.DryRun}
}
