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
	"github.com/tandemkit/tandem/config/knob"
	"github.com/tandemkit/tandem/config/slo"
	"github.com/tandemkit/tandem/config/slo/source"
	"github.com/tandemkit/tandem/hooks"
	"github.com/tandemkit/tandem/hooks/policy"
	"github.com/tandemkit/tandem/kubeclient"
)

// consumers hands each new slo-config, and the API access when it comes, to everything that reads them:
// the built-in policies (rebuilt and swapped into the dispatcher), the reporter (through colocation) and
// the node loops (components). Each applies the change at once; the loops at their next turn.
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
	// comps are the node loops, in the order they started; each is handed every configuration.
	comps []component
	// refused are the sections the configuration in force refused (/debug/config says so).
	refused []slo.SectionError
}

// knobReports returns what every node loop says of the keys it acts on.
func (c *consumers) knobReports() [][]knob.Status {
	c.mu.Lock()
	comps := slices.Clone(c.comps)
	c.mu.Unlock()
	out := make([][]knob.Status, 0, len(comps))
	for _, comp := range comps {
		if r, ok := comp.(knob.Reporter); ok {
			if ks := r.Knobs(); len(ks) > 0 {
				out = append(out, ks)
			}
		}
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

// first is what a loop that must not act on the defaults waits for: the first configuration, when a
// source will hand one over (expected); nil otherwise.
func (c *consumers) first(expected bool) <-chan struct{} {
	if !expected || c.firstApplied == nil {
		return nil
	}
	return c.firstApplied
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
	for _, comp := range c.comps {
		c.configure(ctx, comp)
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
