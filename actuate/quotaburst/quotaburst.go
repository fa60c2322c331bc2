// Package quotaburst is the node loop of Koordinator's CFS quota burst (cpu-burst-config,
// policies cfsQuotaBurstOnly and auto): a latency-sensitive (LS) container with a CPU limit that is
// throttled while the shared CPU pool is idle gets its CFS quota raised, step by step, up to
// cfsQuotaBurstPercent of the quota its limit gives, for at most cfsQuotaBurstPeriodSeconds; the quota
// goes back to that base when the pool gets busy (sharePoolThresholdPercent), when the period ends, when
// the policy stops raising quotas, when the container stops being LS, and when the loop stops.
//
// The decisions are hooks/policy/cpuburst's QuotaBurst, one per container per usage snapshot; this
// package measures what they need and writes the cgroups. It is a loop and not a policy because it acts
// on running containers between lifecycle calls, as actuate/suppress does.
//
// # What it reads
//
//   - The shared pool's usage, from each collector snapshot, as koordlet's getNodeStateForBurst computes
//     it: the node's CPU use less what LSE, LSR and BE containers use (the system's own use counts, to err
//     on the safe side), over the shared pool's CPUs (the LS pool of the cpuset allocator: all CPUs less
//     LSE, LSR and reserved ones; all CPUs without an allocator). Koordinator subtracts LSE/LSR pods'
//     requests from all CPUs; the allocator's pool is that, without the reserved CPUs either.
//   - "Throttled", as koordlet reads it: the container's nr_throttled grew since the last snapshot.
//   - The base: the quota and period the runtime was given for the container (the front end's store,
//     kubelet's values after the policies). When kubelet or the proxy updates the container's resources,
//     the new quota is the base and the raise in progress is forgotten.
//   - The quota now in the container's cgroup, read before each change: a write by someone else (the
//     proxy moving containers to new pools sends the base again) is taken as it is.
//
// # What it writes
//
// The container's cpu.cfs_quota_us (cpu.max on cgroup v2) and, when the pod cgroup has a quota (kubelet
// sets the sum of the containers' limits), the pod's, raised by the same amount: a raise stops at the
// pod otherwise. cgroup v1 refuses a child quota above its parent's (EINVAL), so the pod is raised before
// the container and lowered after it. The kernel refuses a quota below the CFS burst (cpu.cfs_burst_us,
// cpu.max.burst), so before a quota is lowered a burst above the new quota is lowered to it; raising
// leaves the burst the cpuburst policy set.
//
// A raise left by an earlier run that could not undo it (SIGKILL) is adopted when the container is first
// seen: a quota above the base is taken as raised, and goes back to the base as any other.
//
// # Dry run
//
// With SetDryRun(true) (dry-run-config's cfsQuotaBurst) each container's quota is decided as above, one
// step at a time from the quota decided at the last step, and written nowhere: no container's or pod's
// quota is raised. Each change of a container's decided quota (a raise by a fifth, a hold that lowers
// it, the way back to its base) is reported through Deps.Dry: a log line, a WouldBurstQuota Event on
// the pod, tandem_dry_run_actions_total{action="cfsQuotaBurst"}; tandem_cpu_quota_burst_raises_total
// does not move. A raise in force when dry run is switched on (or adopted from an earlier run) is put
// back to its base, as when the policy stops raising quotas (resets_total{reason="dryRun"}); Restore
// then has nothing else to put back.
package quotaburst

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/containerd/errdefs"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"

	"github.com/tandemkit/tandem/actuate/dryrun"
	"github.com/tandemkit/tandem/hooks/policy/cpuburst"
	"github.com/tandemkit/tandem/metrics/collector"
	"github.com/tandemkit/tandem/resource/cgroup"
	"github.com/tandemkit/tandem/resource/qos"
)

// Container is what the loop needs to know of a container, from the front end's store.
type Container struct {
	ID, Name string
	// PodID is the sandbox id; Namespace and Pod name it in logs.
	PodID, Namespace, Pod string
	// Class is the QoS class the qos policy recorded.
	Class qos.Class
	// PodCgroupParent is the pod's cgroup, as kubelet named it.
	PodCgroupParent string
	// Quota and Period are the CFS limit the runtime was given: the base. Quota 0 or less: no limit.
	Quota, Period int64
	// Running says the container runs (its cgroup exists).
	Running bool
}

// Deps are the loop's collaborators.
type Deps struct {
	// Latest returns the newest usage snapshot, nil before the first.
	Latest func() *collector.Snapshot
	// Updates wakes the loop after each new snapshot; nil leaves it to Interval.
	Updates <-chan struct{}
	// Containers lists the node's containers; called once per step.
	Containers func() []Container
	// SharePoolMilli is the shared pool's size in milli-CPUs (the cpuset allocator's LS pool); nil: the
	// whole node.
	SharePoolMilli func() int64
	// Cgroups writes the quotas; it must also be a cgroup.Tree (cgroup.New's writers are) to read them.
	Cgroups cgroup.Writer
	// Registerer receives tandem_cpu_quota_burst_* metrics; nil keeps them unexported.
	Registerer prometheus.Registerer
	// Interval is how often the loop looks for a new snapshot; 0 is a second.
	Interval time.Duration
	// Dry records the quota changes dry run holds back (SetDryRun); nil: nothing is recorded of them.
	Dry *dryrun.Recorder
}

// ctrState is what the loop keeps of a container it has seen.
type ctrState struct {
	id, name, podID, ns, pod string
	// cgroup is the container's cgroup, named so Write and CPUMax take it.
	cgroup string
	// base and basePeriod are the store's quota and period; period is the cgroup's own.
	base, basePeriod, period int64
	// cur is the quota in the cgroup as last written or read.
	cur int64
	// would is the quota dry run decided at the last step; 0 when not in dry run or at the base.
	would int64
	// since is when the raise in progress started; after a raise ran out its period it stays set until
	// the container runs a sample unthrottled at its base. Zero otherwise.
	since time.Time
	// throttled and periods are the cumulative CFS counters at the last snapshot.
	throttled, periods int64
	counted            bool
	// snapshot is the time of the last snapshot whose counters were taken.
	snapshot time.Time
}

// podState is what the loop added to a pod cgroup's quota.
type podState struct {
	parent string
	// wrote is the pod quota the loop last wrote and added what of it is the loop's, in the pod's period.
	wrote, added int64
}

// Loop is the CFS quota burst loop. Step is not safe for concurrent use; Run serialises it with the
// resets a reconfiguration or the stop asks for.
type Loop struct {
	deps      Deps
	tree      cgroup.Tree
	burstFile string
	hasBurst  bool

	mu      sync.Mutex
	cfg     cpuburst.Config
	refused error
	dry     bool

	stepMu sync.Mutex
	// stepDry is whether the last step ran in dry run.
	stepDry bool
	wake    chan struct{}
	ctrs    map[string]*ctrState
	pods    map[string]*podState

	raised    prometheus.Gauge
	poolUsage prometheus.Gauge
	raises    prometheus.Counter
	resets    *prometheus.CounterVec
}

// New checks cfg and deps and returns a loop that has changed nothing yet.
func New(cfg cpuburst.Config, deps Deps) (*Loop, error) {
	if deps.Latest == nil || deps.Containers == nil {
		return nil, errors.New("the CFS quota burst needs snapshots (Deps.Latest) and the containers (Deps.Containers)")
	}
	tree, ok := deps.Cgroups.(cgroup.Tree)
	if deps.Cgroups == nil || !ok {
		return nil, errors.New("the CFS quota burst needs a cgroup writer that reads quotas too (cgroup.New); check --cgroup-root")
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("cpu-burst-config: %w", err)
	}
	if deps.Interval <= 0 {
		deps.Interval = time.Second
	}
	l := &Loop{
		deps: deps, tree: tree, cfg: cfg,
		wake: make(chan struct{}, 1),
		ctrs: map[string]*ctrState{}, pods: map[string]*podState{},
		raised: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "tandem", Subsystem: "cpu_quota_burst", Name: "containers_raised",
			Help: "LS containers whose CFS quota is above the one their limit gives (cpu-burst-config's CFS quota burst).",
		}),
		poolUsage: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "tandem", Subsystem: "cpu_quota_burst", Name: "share_pool_usage_ratio",
			Help: "The shared CPU pool's usage as the CFS quota burst sees it (node use less LSE, LSR and BE containers', over the pool's CPUs); compared with sharePoolThresholdPercent/100.",
		}),
		raises: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "tandem", Subsystem: "cpu_quota_burst", Name: "raises_total",
			Help: "CFS quota raises of throttled LS containers (each step of a fifth counts).",
		}),
		resets: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "tandem", Subsystem: "cpu_quota_burst", Name: "resets_total",
			Help: "Raised CFS quotas put back to the container's base, by reason (poolBusy, period, off, dryRun, stop).",
		}, []string{"reason"}),
	}
	l.burstFile, l.hasBurst = cpuburst.BurstFile(deps.Cgroups)
	if deps.Registerer != nil {
		for _, c := range []prometheus.Collector{l.raised, l.poolUsage, l.raises, l.resets} {
			if err := deps.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("register CFS quota burst metrics: %w", err)
			}
		}
	}
	return l, nil
}

// Reconfigure swaps cpu-burst-config's settings in; a policy without the quota burst puts every raised
// quota back at once (Run does it). A bad config is refused and the old one stays. Safe for concurrent
// use, and never blocks.
func (l *Loop) Reconfigure(cfg cpuburst.Config) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := cfg.Validate(); err != nil {
		l.refused = fmt.Errorf("cpu-burst-config: %w", err)
		return l.refused
	}
	l.cfg, l.refused = cfg, nil
	select {
	case l.wake <- struct{}{}:
	default:
	}
	return nil
}

func (l *Loop) config() (cpuburst.Config, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cfg, l.refused
}

// SetDryRun switches dry run (dry-run-config's cfsQuotaBurst) on or off; switched on, every raised quota
// goes back at once (Run does it). It reports whether that changed anything. Safe for concurrent use,
// and never blocks.
func (l *Loop) SetDryRun(on bool) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.dry == on {
		return false
	}
	l.dry = on
	select {
	case l.wake <- struct{}{}:
	default:
	}
	return true
}

// DryRun reports whether the loop decides quotas without writing them. Safe for concurrent use.
func (l *Loop) DryRun() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.dry
}

// Run steps on every new snapshot until ctx is done; the quotas raised then stay until Restore.
func (l *Loop) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithName("quota-burst")
	ctx = klog.NewContext(ctx, logger)
	followed := make(chan struct{})
	go func() {
		defer close(followed)
		collector.Follow(ctx, l.deps.Interval, l.deps.Updates, l.deps.Latest, func(snap *collector.Snapshot) {
			l.stepMu.Lock()
			defer l.stepMu.Unlock()
			l.Step(ctx, snap)
		})
	}()
	for {
		select {
		case <-l.wake:
			cfg, _ := l.config()
			reason := ""
			switch {
			case !cfg.RaisesQuota():
				reason = "off"
			case l.DryRun():
				reason = "dryRun"
			}
			if reason != "" {
				l.stepMu.Lock()
				_ = l.ResetAll(ctx, reason)
				l.stepMu.Unlock()
			}
		case <-ctx.Done():
			<-followed
			return nil
		}
	}
}

// Restore puts every raised quota back to its base, as the agent stops.
func (l *Loop) Restore(ctx context.Context) error {
	l.stepMu.Lock()
	defer l.stepMu.Unlock()
	if err := l.ResetAll(ctx, "stop"); err != nil {
		klog.FromContext(ctx).Error(err, "Raised CFS quotas not all put back on stop; the next start puts back what is left")
		return err
	}
	return nil
}

// change is one container quota to write.
type change struct {
	st     *ctrState
	target int64
	reason string // the cpuburst.Step, or "stop"
}

// Step applies one snapshot: every LS container's quota decided and written, pods first or last.
func (l *Loop) Step(ctx context.Context, snap *collector.Snapshot) {
	logger := klog.FromContext(ctx)
	cfg, _ := l.config()
	dry := l.DryRun()
	if dry != l.stepDry {
		// A raise decided in dry run was never written, and one written is put back below: either way
		// the other mode starts at the base.
		for _, st := range l.ctrs {
			st.since, st.would = time.Time{}, 0
		}
		l.stepDry = dry
	}
	pool := cpuburst.PoolUnknown
	if snap != nil {
		poolMilli := snap.Capacity.CPUMilli
		if l.deps.SharePoolMilli != nil {
			poolMilli = l.deps.SharePoolMilli()
		}
		usage := PoolUsagePercent(snap, poolMilli)
		l.poolUsage.Set(usage / 100)
		pool = cfg.Pool(usage)
	}
	byID := map[string]*collector.ContainerUsage{}
	if snap != nil {
		for i := range snap.Containers {
			byID[snap.Containers[i].ContainerID] = &snap.Containers[i]
		}
	}
	live := map[string]bool{}
	dirty := map[string]bool{}
	var changes []change
	for _, c := range l.deps.Containers() {
		if !c.Running || c.ID == "" {
			continue
		}
		st := l.ctrs[c.ID]
		if st == nil {
			if c.Class != qos.LS || c.Quota <= 0 {
				continue
			}
			if st = l.track(ctx, c); st == nil {
				continue
			}
		}
		live[c.ID] = true
		if st.base != c.Quota || st.basePeriod != c.Period {
			// Kubelet (a resize) or the proxy gave the container new resources: the new quota is the base.
			logger.V(2).Info("Container's CFS quota changed by its limit; the new one is the base", "pod", klog.KRef(st.ns, st.pod), "container", st.name, "base", c.Quota, "was", st.base)
			st.base, st.basePeriod, st.since, st.would = c.Quota, c.Period, time.Time{}, 0
			if m, err := l.tree.CPUMax(st.cgroup); err == nil {
				st.cur, st.period = m.Quota, m.Period
			}
			dirty[st.podID] = true
		}
		throttled := false
		if u := byID[c.ID]; u != nil && snap != nil && snap.Time.After(st.snapshot) {
			throttled = st.counted && u.ThrottledPeriods > st.throttled
			st.throttled, st.periods, st.counted, st.snapshot = u.ThrottledPeriods, u.Periods, true, snap.Time
		}
		eligible := cfg.RaisesQuota() && c.Class == qos.LS && st.base > 0
		if st.cur > st.base || (eligible && throttled) {
			// Read what is there now: the proxy may have sent the base again (a pool change).
			if m, err := l.tree.CPUMax(st.cgroup); err == nil {
				if m.Quota != st.cur {
					dirty[st.podID] = true
				}
				st.cur, st.period = m.Quota, m.Period
			} else if errdefs.IsNotFound(err) {
				delete(live, c.ID)
				continue
			}
		}
		// cur is the quota the decision starts from: the cgroup's, or in dry run the one decided last.
		cur := st.cur
		if dry {
			cur = st.base
			if st.would > 0 {
				cur = st.would
			}
		} else {
			st.would = 0
		}
		if !st.since.IsZero() && cur <= st.base && !throttled {
			st.since = time.Time{} // the spent raise is over: the container no longer needs one
		}
		target, step := st.base, cpuburst.StepOff
		if eligible {
			var bursting time.Duration
			if !st.since.IsZero() && snap != nil {
				bursting = snap.Time.Sub(st.since)
			}
			target, step = cpuburst.QuotaBurst(cfg, cpuburst.QuotaInput{Base: st.base, Current: cur, Pool: pool, Throttled: throttled, BurstingFor: bursting})
		}
		switch {
		case target > st.base && st.since.IsZero() && snap != nil:
			st.since = snap.Time
		case target <= st.base && step != cpuburst.StepPeriod:
			st.since = time.Time{}
		}
		if dry {
			if st.cur > st.base && st.base > 0 {
				// Raised before dry run was switched on, or by an earlier run: dry run raises nothing.
				changes = append(changes, change{st: st, target: st.base, reason: "dryRun"})
			}
			if cur > 0 && target != cur && !(cur < st.base && target == st.base) {
				l.wouldChange(ctx, cfg, st, cur, target, step)
				st.would = target
			}
			continue
		}
		if st.cur > 0 && target != st.cur && !(st.cur < st.base && target == st.base) {
			changes = append(changes, change{st: st, target: target, reason: string(step)})
		}
	}
	// Containers gone (stopped, removed) leave their pod's share behind: the pod is lowered by it.
	for id, st := range l.ctrs {
		if !live[id] {
			delete(l.ctrs, id)
			dirty[st.podID] = true
		}
	}
	// Each failure is logged where it happens; the next step decides the quotas again.
	_ = l.apply(ctx, changes, dirty)
}

// wouldChange reports, in dry run, the quota change decided for a container.
func (l *Loop) wouldChange(ctx context.Context, cfg cpuburst.Config, st *ctrState, from, to int64, step cpuburst.Step) {
	ctr := fmt.Sprintf("container %s", st.name)
	var msg string
	switch {
	case to > from:
		msg = fmt.Sprintf("raise the CFS quota of %s from %d to %d µs per %d µs period (%d%% of its limit's %d; cfsQuotaBurstPercent %d%%): throttled while the shared pool is idle",
			ctr, from, to, st.period, cgroup.Scale(to, 100, max(st.base, 1)), st.base, cfg.CFSQuotaBurstPercent)
	case to == st.base:
		msg = fmt.Sprintf("put the CFS quota of %s back from %d to %d µs per %d µs period, its limit's: %s", ctr, from, to, st.period, stepWhy(cfg, step))
	default:
		msg = fmt.Sprintf("lower the CFS quota of %s from %d to %d µs per %d µs period (%d%% of its limit's %d; cfsQuotaBurstPercent %d%%)",
			ctr, from, to, st.period, cgroup.Scale(to, 100, max(st.base, 1)), st.base, cfg.CFSQuotaBurstPercent)
	}
	l.deps.Dry.Would(ctx, dryrun.CFSQuotaBurst, dryrun.Object{Namespace: st.ns, Name: st.pod}, msg)
}

// stepWhy says in words why a quota goes back to its base.
func stepWhy(cfg cpuburst.Config, step cpuburst.Step) string {
	switch step {
	case cpuburst.StepPoolBusy:
		return fmt.Sprintf("the shared pool is busy (sharePoolThresholdPercent %d%%)", cfg.SharePoolThresholdPercent)
	case cpuburst.StepPeriod:
		return fmt.Sprintf("the raise lasted cfsQuotaBurstPeriodSeconds %d s", cfg.CFSQuotaBurstPeriodSeconds)
	case cpuburst.StepOff:
		return fmt.Sprintf("policy %s raises no quota, or the container is no longer LS", cfg.Policy)
	}
	return string(step)
}

// track starts keeping a container: its cgroup found, its quota read. A quota above the base is a raise
// an earlier run left, adopted so that it goes back like any other. Nil when the cgroup is not there.
func (l *Loop) track(ctx context.Context, c Container) *ctrState {
	for _, p := range cgroup.ContainerPaths(c.PodCgroupParent, c.ID) {
		m, err := l.tree.CPUMax(p)
		if err != nil {
			continue
		}
		st := &ctrState{id: c.ID, name: c.Name, podID: c.PodID, ns: c.Namespace, pod: c.Pod, cgroup: p,
			base: c.Quota, basePeriod: c.Period, period: m.Period, cur: m.Quota}
		l.ctrs[c.ID] = st
		ps := l.pods[c.PodID]
		if ps == nil {
			ps = &podState{parent: c.PodCgroupParent}
			l.pods[c.PodID] = ps
		}
		if m.Quota > c.Quota && c.Quota > 0 {
			klog.FromContext(ctx).Info("Raised CFS quota found (an earlier run did not put it back); it goes back to the base unless the burst goes on",
				"pod", klog.KRef(c.Namespace, c.Pod), "container", c.Name, "quota", m.Quota, "base", c.Quota)
			if pm, err := l.tree.CPUMax(c.PodCgroupParent); err == nil && !pm.Unlimited() && m.Period > 0 {
				ps.wrote = pm.Quota
				ps.added += cgroup.Scale(m.Quota-c.Quota, pm.Period, m.Period)
			}
		}
		return st
	}
	return nil
}

// ResetAll puts every raised quota back to its base, for reason ("off", "stop").
func (l *Loop) ResetAll(ctx context.Context, reason string) error {
	var changes []change
	for _, st := range l.ctrs {
		if st.cur > st.base && st.base > 0 {
			changes = append(changes, change{st: st, target: st.base, reason: reason})
		}
		st.since = time.Time{}
	}
	dirty := map[string]bool{}
	for id, ps := range l.pods {
		if ps.added != 0 {
			dirty[id] = true
		}
	}
	return l.apply(ctx, changes, dirty)
}

// apply writes changes, pod by pod: containers that go down, then the pod to its base plus what its
// containers are raised by, then containers that go up. dirty names pods to write even without a change.
func (l *Loop) apply(ctx context.Context, changes []change, dirty map[string]bool) error {
	byPod := map[string][]change{}
	for _, ch := range changes {
		byPod[ch.st.podID] = append(byPod[ch.st.podID], ch)
		dirty[ch.st.podID] = true
	}
	var errs []error
	for podID := range dirty {
		if err := l.applyPod(ctx, podID, byPod[podID]); err != nil {
			errs = append(errs, err)
		}
	}
	n := 0
	for _, st := range l.ctrs {
		if st.cur > st.base && st.base > 0 {
			n++
		}
	}
	l.raised.Set(float64(n))
	return errors.Join(errs...)
}

func (l *Loop) applyPod(ctx context.Context, podID string, changes []change) error {
	logger := klog.FromContext(ctx)
	ps := l.pods[podID]
	var errs []error
	for _, ch := range changes {
		if ch.target < ch.st.cur {
			if err := l.lower(ch.st, ch.target); errdefs.IsNotFound(err) {
				continue // the container is gone, and its quota with it
			} else if err != nil {
				errs = append(errs, err)
				logger.V(2).Info("CFS quota not put back", "pod", klog.KRef(ch.st.ns, ch.st.pod), "container", ch.st.name, "quota", ch.target, "err", err)
				continue
			}
			if ch.target == ch.st.base && ch.reason != string(cpuburst.StepHold) {
				l.resets.WithLabelValues(ch.reason).Inc()
				logger.V(2).Info("CFS quota back to the base", "pod", klog.KRef(ch.st.ns, ch.st.pod), "container", ch.st.name, "quota", ch.target, "was", ch.st.cur, "reason", ch.reason)
			}
			ch.st.cur = ch.target
		}
	}
	podOK := true
	if ps != nil {
		if err := l.writePod(podID, ps, changes); err != nil {
			errs = append(errs, err)
			podOK = false
			logger.V(2).Info("Pod CFS quota not written; its containers are not raised", "pod", podID, "err", err)
		}
	}
	for _, ch := range changes {
		if ch.target <= ch.st.cur {
			continue
		}
		if !podOK {
			continue
		}
		q := ch.target
		if err := l.deps.Cgroups.Write(ch.st.cgroup, l.quota(q, ch.st.period)); err != nil {
			errs = append(errs, fmt.Errorf("raise the CFS quota of %s: %w", ch.st.cgroup, err))
			logger.V(2).Info("CFS quota not raised", "pod", klog.KRef(ch.st.ns, ch.st.pod), "container", ch.st.name, "quota", q, "err", err)
			continue
		}
		l.raises.Inc()
		logger.V(2).Info("CFS quota raised", "pod", klog.KRef(ch.st.ns, ch.st.pod), "container", ch.st.name, "quota", q, "was", ch.st.cur, "base", ch.st.base)
		ch.st.cur = q
	}
	// A pod whose containers are all gone is forgotten once its share is taken back.
	if ps != nil && ps.added == 0 && !l.hasContainers(podID) {
		delete(l.pods, podID)
	}
	return errors.Join(errs...)
}

// lower writes a lower quota into a container's cgroup, lowering its burst first when it is above the
// new quota (the kernel refuses a quota below the burst).
func (l *Loop) lower(st *ctrState, q int64) error {
	if err := l.capBurst(st.cgroup, q); err != nil {
		return err
	}
	if err := l.deps.Cgroups.Write(st.cgroup, l.quota(q, st.period)); err != nil {
		return fmt.Errorf("put back the CFS quota of %s: %w", st.cgroup, err)
	}
	return nil
}

// quota is the settings that write quota q: with its period on cgroup v2, where both are one file
// (cpu.max), and alone on v1, where rewriting the period would only cost a write.
func (l *Loop) quota(q, period int64) cgroup.Settings {
	s := cgroup.Settings{CPUQuota: &q}
	if l.deps.Cgroups.Version() == 2 {
		s.CPUPeriod = &period
	}
	return s
}

// capBurst lowers a cgroup's CFS burst to q when it is above it.
func (l *Loop) capBurst(parent string, q int64) error {
	if !l.hasBurst || q <= 0 {
		return nil
	}
	s, err := l.tree.ReadFile(parent, l.burstFile)
	if err != nil {
		return nil // no burst file on this cgroup: nothing to keep under the quota
	}
	b, err := strconv.ParseInt(s, 10, 64)
	if err != nil || b <= q {
		return nil
	}
	if err := l.deps.Cgroups.Write(parent, cgroup.Settings{Files: map[string]string{l.burstFile: strconv.FormatInt(q, 10)}}); err != nil {
		return fmt.Errorf("lower the CFS burst of %s to %d before its quota: %w", parent, q, err)
	}
	return nil
}

// writePod sets the pod cgroup's quota to its base plus what its containers are raised by (after the
// lowering of changes, before the raising), when the pod has a quota at all.
func (l *Loop) writePod(podID string, ps *podState, changes []change) error {
	m, err := l.tree.CPUMax(ps.parent)
	if err != nil {
		if errdefs.IsNotFound(err) {
			delete(l.pods, podID)
			return nil
		}
		return fmt.Errorf("read the pod's CFS quota: %w", err)
	}
	podBase := m.Quota
	if ps.wrote != 0 && m.Quota == ps.wrote {
		podBase = m.Quota - ps.added
	}
	if m.Unlimited() || podBase <= 0 || m.Period <= 0 {
		// Unlimited: nothing to raise; kubelet rewrote it meanwhile: its value is the base.
		ps.wrote, ps.added = 0, 0
		return nil
	}
	target := map[*ctrState]int64{}
	for _, ch := range changes {
		target[ch.st] = ch.target
	}
	var added int64
	for _, st := range l.ctrs {
		if st.podID != podID || st.base <= 0 || st.period <= 0 {
			continue
		}
		q, ok := target[st]
		if !ok || q < st.cur {
			q = st.cur // not changed, or a lowering that failed
		}
		if q > st.base {
			added = cgroup.Add(added, cgroup.Scale(q-st.base, m.Period, st.period))
		}
	}
	want := min(cgroup.Add(podBase, added), cgroup.MaxQuota)
	if want == m.Quota {
		ps.wrote, ps.added = want, added
		if added == 0 {
			ps.wrote = 0
		}
		return nil
	}
	if want < m.Quota {
		if err := l.capBurst(ps.parent, want); err != nil {
			return err
		}
	}
	if err := l.deps.Cgroups.Write(ps.parent, l.quota(want, m.Period)); err != nil {
		return fmt.Errorf("write the CFS quota of the pod cgroup %s: %w", ps.parent, err)
	}
	ps.wrote, ps.added = want, added
	if added == 0 {
		ps.wrote = 0
	}
	return nil
}

func (l *Loop) hasContainers(podID string) bool {
	for _, st := range l.ctrs {
		if st.podID == podID {
			return true
		}
	}
	return false
}

// PoolUsagePercent is the shared pool's usage in percent of poolMilli, as koordlet computes it: the node's
// CPU use less what LSE, LSR and BE containers use; the system's own use counts. A pool of no CPUs is
// full (100).
func PoolUsagePercent(snap *collector.Snapshot, poolMilli int64) float64 {
	if poolMilli <= 0 {
		return 100
	}
	used := snap.Node.CPUMilli
	for _, c := range snap.Containers {
		if c.QoS == qos.LSE || c.QoS == qos.LSR || c.QoS == qos.BE {
			used -= max(c.CPUMilli, 0)
		}
	}
	return float64(max(used, 0)) * 100 / float64(poolMilli)
}
