package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"

	"github.com/tandemkit/tandem/actuate/evict"
	"github.com/tandemkit/tandem/actuate/suppress"
	"github.com/tandemkit/tandem/actuate/yield"
	"github.com/tandemkit/tandem/config/knob"
	"github.com/tandemkit/tandem/config/slo"
	"github.com/tandemkit/tandem/config/slo/source"
	"github.com/tandemkit/tandem/hooks"
	"github.com/tandemkit/tandem/hooks/policy"
	"github.com/tandemkit/tandem/kubeclient"
	"github.com/tandemkit/tandem/metrics/collector"
	"github.com/tandemkit/tandem/metrics/headroom"
)

// consumers hands each new slo-config, and the API access when it comes, to everything that reads them:
// the built-in policies (rebuilt and swapped into the dispatcher), the reporter (through colocation), the
// suppress and evict loops (Reconfigure). Each applies the change at once; the loops at their next sample.
type consumers struct {
	dispatcher *hooks.Dispatcher
	colocation *atomic.Pointer[slo.Resolved]

	mu       sync.Mutex
	base     policy.Config
	deps     policy.Deps
	resolved slo.Resolved
	// configured is set by the first configuration a source hands over. Until then (a node with no
	// source, or one whose API access has not come yet) the policies run Tandem's defaults, base, as
	// they always did; from then on what the source says, where an absent section means Koordinator's.
	configured bool
	// firstApplied is closed when the first configuration arrives (nil: nobody waits for it). The
	// reporter waits for it: deciding on the defaults meanwhile (colocation off) would take batch
	// capacity off the Node at every restart until the ConfigMap's copy came in.
	firstApplied chan struct{}
	firstOnce    sync.Once
	// col is told how often to sample usage: suppression and eviction react on each sample.
	col     *collector.Collector
	sup     *suppress.Loop
	supBase suppress.Config
	el      *evict.Loop
	evBase  evict.Config
	yl      *yield.Loop
	ylBase  yield.Config
	// hr is the steal headroom; hrBase its configuration before resource-threshold-config, vm and vmWhy
	// what stealHeadroom "auto" decides on.
	hr     *headroom.Controller
	hrBase headroom.Config
	vm     bool
	vmWhy  string
	// followers are handed every configuration in force, the first when they register (see follow).
	followers []func(context.Context, slo.Resolved)
	// reporters say what each slo-config key they act on does on this node (/debug/config).
	reporters []knob.Reporter
	// refused are the sections the configuration in force refused (/debug/config says so).
	refused []slo.SectionError
}

// follow registers f to be handed the configuration in force now and every later one, under mu: f must
// not block (a loop it feeds picks the change up at its next turn).
func (c *consumers) follow(ctx context.Context, f func(context.Context, slo.Resolved)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.followers = append(c.followers, f)
	f(ctx, c.resolved)
}

// report registers r for /debug/config.
func (c *consumers) report(r knob.Reporter) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reporters = append(c.reporters, r)
}

// knobReports returns every registered reporter's keys.
func (c *consumers) knobReports() [][]knob.Status {
	c.mu.Lock()
	rs := slices.Clone(c.reporters)
	c.mu.Unlock()
	out := make([][]knob.Status, 0, len(rs))
	for _, r := range rs {
		out = append(out, r.Knobs())
	}
	return out
}

// builtin returns the built-in policies for the configuration in force; the caller holds mu, or owns c.
// A mapped configuration the policies refuse keeps base's knobs, so the policies still run.
func (c *consumers) builtin(ctx context.Context) []hooks.Registration {
	if !c.configured {
		return policy.Builtin(c.base, c.deps)
	}
	cfg := policy.FromSLO(c.base, c.resolved)
	if err := cfg.Validate(); err != nil {
		klog.FromContext(ctx).Error(err, "slo-config maps to policy settings the policies refuse; their defaults stay")
		cfg = c.base
	}
	return policy.Builtin(cfg, c.deps)
}

// rebuild swaps the policies in; the caller holds mu.
func (c *consumers) rebuild(ctx context.Context) {
	if c.dispatcher == nil {
		return
	}
	if err := c.dispatcher.SetBuiltin(ctx, c.builtin(ctx)); err != nil {
		klog.FromContext(ctx).Error(err, "Built-in policies not rebuilt; the ones in force stay")
	}
}

// releaseFirst lets those waiting for the first configuration go: it came, or none will.
func (c *consumers) releaseFirst() {
	c.firstOnce.Do(func() {
		if c.firstApplied != nil {
			close(c.firstApplied)
		}
	})
}

// apply is the config source's Apply.
func (c *consumers) apply(ctx context.Context, u source.Update) {
	logger := klog.FromContext(ctx)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.resolved, c.configured = u.Resolved, true
	c.refused = u.Config.Refused()
	c.colocation.Store(&u.Resolved)
	c.rebuild(ctx)
	c.reconfigureLoops(ctx)
	for _, f := range c.followers {
		f(ctx, u.Resolved)
	}
	// Only now: the reporter wakes on it and reads the colocation settings at once. Released earlier, a
	// restarted agent published Koordinator's defaults (colocation off) and took its node's batch
	// capacity away until the next report.
	c.releaseFirst()
	for _, m := range u.Resolved.Matches {
		if m.Applied != "" {
			logger.Info("Node strategy applies", "section", m.Section, "strategy", m.Applied, "ignoredLaterMatches", m.Ignored)
		}
	}
	th := u.Resolved.ResourceThreshold
	logger.Info("slo-config applied", "origin", u.Origin, "colocation", u.Resolved.Colocation.Enable,
		"resourceThreshold", th.Enable, "cpuSuppressPolicy", th.CPUSuppressPolicy, "cpuBurst", u.Resolved.CPUBurst.Policy)
}

// suppressInterval is how often usage is sampled while resource-threshold-config is enabled: CPU
// suppression reacts on each sample and must react within a second. Sampling that fast always would cost
// a node with 100 containers 0.98 % of a core instead of 0.52 % (docs/node-loops.md), so the default
// second applies while suppression and eviction are off.
const suppressInterval = 500 * time.Millisecond

// reconfigureLoops hands resource-threshold-config to the node loops; the caller holds mu.
func (c *consumers) reconfigureLoops(ctx context.Context) {
	logger := klog.FromContext(ctx)
	th := c.resolved.ResourceThreshold
	if c.col != nil {
		every := collector.DefaultConfig().Usage.Interval
		if th.Enable {
			every = suppressInterval
		}
		if err := c.col.SetUsageInterval(every); err != nil {
			logger.Error(err, "Usage sampling interval not changed")
		}
	}
	if c.sup != nil {
		if err := c.sup.Reconfigure(suppress.FromSLO(c.supBase, th)); err != nil {
			logger.Error(err, "CPU suppression settings refused; the ones in force stay")
		}
	}
	if c.el != nil {
		if err := c.el.Reconfigure(evict.FromSLO(c.evBase, th)); err != nil {
			logger.Error(err, "Eviction settings refused; the ones in force stay")
		}
	}
	if c.hr != nil {
		cfg, why := headroom.Resolve(c.hrBase, th, c.vm, c.vmWhy)
		was := c.hr.Status().Enabled
		if err := c.hr.Reconfigure(cfg, why); err != nil {
			logger.Error(err, "Steal headroom settings refused; the ones in force stay")
		} else if was != cfg.Enable {
			logger.Info("Steal headroom switched", "enable", cfg.Enable, "why", why, "stealThresholdMilli", cfg.StealThresholdMilli)
		}
	}
	if c.yl != nil {
		cfg := c.ylBase
		cfg.Enable = c.resolved.ResourceQOS.BE.CPUQOS.YieldThreads
		if err := c.yl.Reconfigure(cfg); err != nil {
			logger.Error(err, "BE thread scheduling settings refused; the ones in force stay")
		}
	}
}

// setHeadroom registers the steal headroom and gives it the configuration in force.
func (c *consumers) setHeadroom(ctx context.Context, hr *headroom.Controller, base headroom.Config, vm bool, vmWhy string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.hr, c.hrBase, c.vm, c.vmWhy = hr, base, vm, vmWhy
	c.reconfigureLoops(ctx)
}

// setYield registers the BE thread scheduling loop and gives it the configuration in force.
func (c *consumers) setYield(ctx context.Context, l *yield.Loop, base yield.Config) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.yl, c.ylBase = l, base
	c.reconfigureLoops(ctx)
}

// setLoops registers the node loops and gives them the configuration in force.
func (c *consumers) setLoops(ctx context.Context, col *collector.Collector, sup *suppress.Loop, supBase suppress.Config, el *evict.Loop, evBase evict.Config) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.col, c.sup, c.supBase, c.el, c.evBase = col, sup, supBase, el, evBase
	c.reconfigureLoops(ctx)
}

// setPodSpecs gives the policies the pod specs, once the API is reachable.
func (c *consumers) setPodSpecs(ctx context.Context, f func(*policy.Deps)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f(&c.deps)
	c.rebuild(ctx)
}

// switchEvictor stops sandboxes through the runtime until the API is reachable, then evicts through the
// Eviction API (PodDisruptionBudgets honoured).
type switchEvictor struct{ cur atomic.Pointer[evict.Evictor] }

func newSwitchEvictor(first evict.Evictor) *switchEvictor {
	s := &switchEvictor{}
	s.set(first)
	return s
}

func (s *switchEvictor) set(e evict.Evictor) { s.cur.Store(&e) }

func (s *switchEvictor) Evict(ctx context.Context, pod evict.Pod, reason evict.Reason, message string) error {
	return (*s.cur.Load()).Evict(ctx, pod, reason, message)
}

// connectAPI returns a client once the kubeconfig exists and the API server answers, polling every
// interval; nil when there is no configuration at all (standalone for good) or ctx ends. Until then the
// proxy serves CRI standalone: kubelet's kubeconfig appears only after its TLS bootstrap, and the API server
// may be down when the node boots.
func connectAPI(ctx context.Context, kubeconfig, nodeName string, interval time.Duration) *kubeclient.Client {
	logger := klog.FromContext(ctx)
	var last string
	wait := func(err error) bool {
		if msg := err.Error(); msg != last {
			logger.Info("No API access yet; serving CRI standalone and retrying", "kubeconfig", kubeconfig, "every", interval, "reason", msg)
			last = msg
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(interval):
			return true
		}
	}
	for {
		rc, err := kubeclient.Config(kubeconfig)
		if errors.Is(err, kubeclient.ErrNoConfig) {
			logger.Info("No kubeconfig and not in a cluster: standalone, without the node reporter, the slo-controller-config ConfigMap or API evictions; batch resources come from annotations only")
			return nil
		}
		var client *kubeclient.Client
		if err == nil {
			client, err = kubeclient.New(rc, "tandem-proxy")
		}
		if err == nil {
			// Any answer, even a refusal, says the server is there; only a transport error means wait.
			_, err = client.GetNode(ctx, nodeName)
			var status apierrors.APIStatus
			if err == nil || errors.As(err, &status) {
				logger.Info("Connected to the API server", "host", rc.Host, "node", nodeName)
				return client
			}
			err = fmt.Errorf("API server %s: %w", rc.Host, err)
		}
		if !wait(err) {
			return nil
		}
	}
}
