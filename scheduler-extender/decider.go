package extender

import (
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Demand is what one pod asks of a node, as filter and prioritize read it, with the
// reservations holding room for it. A caller deciding about many nodes computes it once per pod.
type Demand struct {
	d      demand
	claims claims
}

// Decider answers filter's and prioritize's questions about one pod and one node with the
// extender's rules and cache, for a caller inside kube-scheduler's process (the TandemLoadAware
// framework plugin, module scheduler-plugin) rather than over HTTP. Given the same cache it
// decides exactly as Handler does: TestDeciderAgreesWithHandler holds the two together.
type Decider struct {
	cfg   Config
	cache *NodeCache
	now   func() time.Time
}

// NewDecider decides from cache with the policy cfg; cfg must be valid (Config.Validate).
func NewDecider(cfg Config, cache *NodeCache) *Decider {
	return &Decider{cfg: cfg, cache: cache, now: time.Now}
}

// DemandOf is pod's demand, and the active reservations it owns.
func (d *Decider) DemandOf(pod *corev1.Pod) Demand {
	dem := demandOf(pod, d.cfg.DefaultEstimatedUsage)
	return Demand{d: dem, claims: d.cache.claimsOf(pod, dem, d.now())}
}

// Ready reports whether the cache has seen the cluster's initial Nodes and Pods.
func (d *Decider) Ready() bool { return d.cache.Ready() }

func (d *Decider) state(node string) *nodeState {
	d.cache.mu.RLock()
	defer d.cache.mu.RUnlock()
	return d.cache.nodes[node]
}

// Rejection says why a node may not take a pod: Message is filter's message for the node
// (the same for every node with that Reason, so kube-scheduler's event groups them); Resolvable
// is whether preempting pods there could make room (filter's FailedNodes, not
// FailedAndUnresolvableNodes).
type Rejection struct {
	Reason     Reason
	Message    string
	Resolvable bool
}

// Filter returns nil when the pod may go to node, else why not.
func (d *Decider) Filter(dem Demand, node string) *Rejection {
	now := d.now()
	st := d.state(node)
	r := d.cfg.filterNode(st, node, dem.d, dem.claims, now)
	if r == "" {
		return nil
	}
	return &Rejection{Reason: r, Message: rejectMessage(r, st, dem.claims, now), Resolvable: r.resolvable()}
}

// Explain gives the node's figures behind a rejection for reason r, for a log line. It is kept
// apart from Filter because a full cluster rejects most nodes for every pod, and formatting
// thousands of explanations per pod nobody logs would cost more than deciding.
func (d *Decider) Explain(dem Demand, node string, r Reason) string {
	st := d.state(node)
	if r == ReasonReservedElsewhere {
		return dem.claims.elsewhereMessage(d.now())
	}
	if st == nil {
		return r.message()
	}
	return d.cfg.explain(r, st, dem.d, dem.claims, d.now())
}

// Score is prioritize's score of node for the pod, from MinExtenderPriority to
// MaxExtenderPriority (0-10).
func (d *Decider) Score(dem Demand, node string) int64 {
	return d.cfg.scoreNode(d.state(node), node, dem.d, dem.claims, d.now())
}
