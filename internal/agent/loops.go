package agent

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/tandemkit/tandem/metrics/reporter"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"

	"github.com/tandemkit/tandem/actuate/dryrun"
	"github.com/tandemkit/tandem/actuate/evict"
	"github.com/tandemkit/tandem/actuate/suppress"
	"github.com/tandemkit/tandem/actuate/yield"
	"github.com/tandemkit/tandem/config/slo"
	"github.com/tandemkit/tandem/hooks/policy"
	"github.com/tandemkit/tandem/metrics/collector"
	"github.com/tandemkit/tandem/metrics/headroom"
	"github.com/tandemkit/tandem/metrics/interference"
	"github.com/tandemkit/tandem/resource/cgroup"
	alloc "github.com/tandemkit/tandem/resource/cpuset"
)

// nodeParts are what the node loops are built from: the node's settings and facts, and the parts the
// front end and the policies share with them. Each constructor reads what it needs, and the loops that
// later ones depend on (suppress, the two limiters) are kept here as they are built.
type nodeParts struct {
	st      settings
	reg     prometheus.Registerer
	cgroups cgroup.Writer // nil: no cgroup hierarchy
	cpus    *alloc.Allocator
	fe      FrontEnd
	col     *collector.Collector
	evictor evict.Evictor
	// poolsChanged asks the front end to refresh and the host application loop to pass; poolsKick is
	// that pass's notice and beStarted a BE container's start, each with one pending slot.
	poolsChanged func()
	poolsKick    <-chan struct{}
	beStarted    <-chan struct{}
	// vm and vmWhy are whether the node is a virtual machine, which stealHeadroom "auto" decides on.
	vm    bool
	vmWhy string

	sup *suppress.Loop // nil when CPU suppression cannot run here
	el  *evict.Loop
	hr  *headroom.Controller
	lw  *interference.Controller
	// dry records the actions dry-run-config holds back.
	dry *dryrun.Recorder
	// windows is the node's batch windows, for the reporter and the batch-window eviction loop.
	windows windows
	// reporter is the node reporter once the API server answered (startAPI); /debug/capacity reads it.
	reporter atomic.Pointer[reporter.Reporter]
}

// components builds the node loops in the order they start. The order matters in two places: the
// limiters come before suppress, which holds BE under them; suppress comes before evict, which reads
// its allowance, and before the host applications, which follow its BE ceiling.
func (n *nodeParts) components(ctx context.Context, cons *consumers) ([]component, error) {
	var out []component
	out = append(out, n.collector())
	hr, err := n.headroom(ctx)
	if err != nil {
		return nil, err
	}
	lw, err := n.lsWaitGuard(ctx)
	if err != nil {
		return nil, err
	}
	out = append(out, hr, lw, n.suppress(ctx, cons))
	ev, err := n.evict(ctx)
	if err != nil {
		return nil, err
	}
	out = append(out, ev)
	bw, err := n.batchWindows(ctx)
	if err != nil {
		return nil, err
	}
	out = append(out, bw)
	yl, err := n.yield(ctx)
	if err != nil {
		return nil, err
	}
	hostApps, err := n.hostApps(ctx)
	if err != nil {
		return nil, err
	}
	// The loops that must not act on the defaults wait for the first configuration, when one will come.
	first := cons.first(sloConfigExpected(n.st))
	sys, err := n.sysConfig(ctx, first)
	if err != nil {
		return nil, err
	}
	out = append(out, yl, hostApps, n.quotaBurst(ctx), newMemoryQoS(cons, n.cgroups), sys, n.blkIO(ctx, first))
	return out, nil
}

// suppressInterval is how often usage is sampled while resource-threshold-config is enabled: CPU
// suppression reacts on each sample and must react within a second. Sampling that fast always would cost
// a node with 100 containers 0.98 % of a core instead of 0.52 % (docs/node-loops.md), so the default
// second applies while suppression and eviction are off.
const suppressInterval = 500 * time.Millisecond

// collector samples the node; resource-threshold-config sets how often it samples usage.
func (n *nodeParts) collector() component {
	col := n.col
	return &loop{name: "collector", run: col.Run, configure: func(_ context.Context, r slo.Resolved) error {
		every := collector.DefaultConfig().Usage.Interval
		if r.ResourceThreshold.Enable {
			every = suppressInterval
		}
		if err := col.SetUsageInterval(every); err != nil {
			return fmt.Errorf("usage sampling interval: %w", err)
		}
		return nil
	}}
}

// headroom is the steal headroom for resource-threshold-config's stealHeadroom, "auto" deciding on
// whether the node is a virtual machine.
func (n *nodeParts) headroom(ctx context.Context) (component, error) {
	base := headroom.DefaultConfig()
	cfg, why := headroom.Resolve(base, n.st.colocation.Load().ResourceThreshold, n.vm, n.vmWhy)
	hr, err := headroom.New(cfg, why, n.reg)
	if err != nil {
		return nil, err
	}
	n.hr = hr
	klog.FromContext(ctx).Info("Steal headroom", "enable", cfg.Enable, "why", why, "stealThresholdMilli", cfg.StealThresholdMilli)
	return &loop{name: "steal-headroom", configure: func(ctx context.Context, r slo.Resolved) error {
		cfg, why := headroom.Resolve(base, r.ResourceThreshold, n.vm, n.vmWhy)
		was := hr.Status().Enabled
		if err := hr.Reconfigure(cfg, why); err != nil {
			return fmt.Errorf("steal headroom: %w", err)
		}
		if was != cfg.Enable {
			klog.FromContext(ctx).Info("Steal headroom switched", "enable", cfg.Enable, "why", why, "stealThresholdMilli", cfg.StealThresholdMilli)
		}
		return nil
	}}, nil
}

// lsWaitGuard is the LS wait guard for resource-threshold-config's lsWaitGuard.
func (n *nodeParts) lsWaitGuard(ctx context.Context) (component, error) {
	base := interference.DefaultConfig()
	cfg := interference.Resolve(base, n.st.colocation.Load().ResourceThreshold)
	lw, err := interference.New(cfg, n.col.RunQueue, n.reg)
	if err != nil {
		return nil, err
	}
	n.lw = lw
	klog.FromContext(ctx).Info("LS wait guard", "enable", cfg.Enable, "waitThreshold", cfg.WaitThreshold, "runQueueSource", n.st.runQueue)
	return &loop{name: "ls-wait-guard", configure: func(ctx context.Context, r slo.Resolved) error {
		cfg := interference.Resolve(base, r.ResourceThreshold)
		was := lw.Status().Enabled
		if err := lw.Reconfigure(cfg); err != nil {
			return fmt.Errorf("LS wait guard: %w", err)
		}
		if was != cfg.Enable {
			klog.FromContext(ctx).Info("LS wait guard switched", "enable", cfg.Enable, "waitThreshold", cfg.WaitThreshold)
		}
		return nil
	}}, nil
}

// suppress is CPU suppression, configured by resource-threshold-config (off unless the operator enables
// it, as in Koordinator) and held under the limiters' ceilings.
func (n *nodeParts) suppress(ctx context.Context, cons *consumers) component {
	deps := suppress.Deps{Latest: n.col.Latest, Updates: n.col.Updates(), PoolsChanged: n.poolsChanged, Refresh: n.fe.Refresh,
		Cgroups: n.cgroups, Registerer: n.reg, Limiters: []suppress.Limiter{n.hr, n.lw}, Dry: n.dry}
	if n.cpus != nil {
		deps.CPUs = n.cpus
	}
	base := suppress.DefaultConfig()
	base.BECgroupParent = n.st.beParent
	// Switched off, it keeps a policy this node can apply, so that a later configuration can switch it on.
	off := func(c suppress.Config) suppress.Config {
		c.Enable = false
		if n.cgroups != nil {
			c.CPUSuppressPolicy = suppress.PolicyCFSQuota
		}
		return c
	}
	with := func(r slo.Resolved) suppress.Config {
		c := suppress.FromSLO(base, r.ResourceThreshold)
		c.DryRun = r.DryRun.Suppress
		return c
	}
	first := *n.st.colocation.Load()
	var last suppress.Config
	sup, err := startOrOff(ctx, "CPU suppression", with(first), off,
		func(c suppress.Config) (*suppress.Loop, error) {
			last = c
			return suppress.New(c, deps)
		})
	if err != nil {
		// A node with neither CPU topology nor cgroups has nothing to suppress with.
		klog.FromContext(ctx).Error(err, "CPU suppression off")
		return switchedOff("suppress", nil)
	}
	n.sup = sup
	// BE containers created while BE is clamped must fit under the clamp (cgroup v1).
	cons.setPodSpecs(ctx, func(d *policy.Deps) { d.BEQuotaCeiling = sup.QuotaCeiling })
	dry := newDryRunSwitch(ctx, dryrun.Suppress, first.DryRun.Suppress)
	return &loop{name: "suppress", run: sup.Run, restore: sup.Restore, configure: func(ctx context.Context, r slo.Resolved) error {
		next, err := reconfigure(sup.Reconfigure, with(r), last, func(c *suppress.Config) { c.DryRun = r.DryRun.Suppress })
		last = next
		dry.set(ctx, next.DryRun)
		return err
	}}
}

// evict is eviction of BE pods, configured by resource-threshold-config and dry-run-config's evict.
func (n *nodeParts) evict(ctx context.Context) (component, error) {
	deps := evict.Deps{Latest: n.col.Latest, Evictor: n.evictor, Registerer: n.reg, Pods: podMeta(n.fe.Store()), Dry: n.dry}
	if n.sup != nil {
		deps.BEAllowedMilli = n.sup.AllowedMilli
	}
	base := evict.DefaultConfig()
	with := func(r slo.Resolved) evict.Config {
		c := evict.FromSLO(base, r.ResourceThreshold)
		c.DryRun = r.DryRun.Evict
		return c
	}
	first := *n.st.colocation.Load()
	el, err := evict.New(with(first), deps)
	if err != nil {
		return nil, fmt.Errorf("eviction: %w", err)
	}
	n.el = el
	dry := newDryRunSwitch(ctx, dryrun.Evict, first.DryRun.Evict)
	last := with(first)
	return &loop{name: "evict", run: el.Run, configure: func(ctx context.Context, r slo.Resolved) error {
		next, err := reconfigure(el.Reconfigure, with(r), last, func(c *evict.Config) { c.DryRun = r.DryRun.Evict })
		last = next
		dry.set(ctx, next.DryRun)
		return err
	}}, nil
}

// yield makes BE threads yield to every other thread (actuate/yield), switched by resource-qos-config's
// beClass.cpuQOS.yieldThreads. A node without a cgroup hierarchy has no BE cgroup to sweep.
func (n *nodeParts) yield(ctx context.Context) (component, error) {
	if n.cgroups == nil {
		klog.FromContext(ctx).Info("BE threads keep the default scheduling: no cgroup hierarchy to find them in", "cgroupRoot", n.st.cgroupRoot)
		return switchedOff("yield", nil), nil
	}
	if _, ok := yield.Mechanism(); !ok {
		klog.FromContext(ctx).Info("BE threads keep the default scheduling: the kernel does not honour slice requests (Linux 6.12+); BE pods still get cpu.idle (docs/colocation.md)")
		return switchedOff("yield", nil), nil
	}
	base := yield.DefaultConfig()
	// The pods' cpu cgroups: the cpu controller's hierarchy on v1, the unified one on v2.
	if n.cgroups.Version() == 2 {
		base.BECgroupDir = filepath.Join(n.st.cgroupRoot, cgroup.Path(n.st.beParent))
	} else {
		base.BECgroupDir = filepath.Join(n.st.cgroupRoot, "cpu", cgroup.Path(n.st.beParent))
	}
	return newYield(base, *n.st.colocation.Load(), yield.Deps{Kick: n.beStarted, Registerer: n.reg})
}

// newYield is the BE thread scheduling loop on base's BE cgroup, switched by yieldThreads in r and then
// in every configuration it is handed.
func newYield(base yield.Config, r slo.Resolved, deps yield.Deps) (component, error) {
	with := func(r slo.Resolved) yield.Config {
		cfg := base
		cfg.Enable = r.ResourceQOS.BE.CPUQOS.YieldThreads
		return cfg
	}
	l, err := yield.New(with(r), deps)
	if err != nil {
		return nil, fmt.Errorf("BE thread scheduling loop: %w", err)
	}
	return &loop{name: "yield", run: l.Run, configure: func(_ context.Context, r slo.Resolved) error {
		return l.Reconfigure(with(r))
	}}, nil
}

// dryRunSwitch is one action's dry-run-config switch as the agent last handed it to its loop; it logs
// each change once.
type dryRunSwitch struct {
	action dryrun.Action
	on     atomic.Bool
}

// newDryRunSwitch starts at on, and says so when it is on.
func newDryRunSwitch(ctx context.Context, action dryrun.Action, on bool) *dryRunSwitch {
	s := &dryRunSwitch{action: action}
	s.set(ctx, on)
	return s
}

// set records the switch handed to the loop and logs a change.
func (s *dryRunSwitch) set(ctx context.Context, on bool) {
	if s.on.Swap(on) != on {
		klog.FromContext(ctx).Info("Dry run switched", "action", s.action, "on", on)
	}
}

// reconfigure hands a loop next and returns the configuration in force after it. When the loop refuses
// next, the one in force (last) stays, but with dry-run-config's switch taken from next (dry sets it):
// dry-run-config is a section of its own, and a mistake in another must not keep an action live that
// the operator asked to run dry.
func reconfigure[C any](apply func(C) error, next, last C, dry func(*C)) (C, error) {
	err := apply(next)
	if err == nil {
		return next, nil
	}
	dry(&last)
	if err2 := apply(last); err2 != nil {
		return last, errors.Join(err, err2)
	}
	return last, err
}
