package extender

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/tandemkit/tandem/metrics/nodemetric"
)

// assignedPods selects pods bound to a node that still hold resources there. The apiserver filters,
// so the extender never receives the pending pods of a large cluster.
const assignedPods = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"

// nodeState is everything filter and prioritize need about one node, computed on informer
// events. It is never modified after it is stored: an event builds a new one and swaps it in, so
// a request may read it without holding the cache lock.
type nodeState struct {
	name            string
	resourceVersion string

	allocCPU, allocMemory int64 // milli-cores, bytes
	// allocBatch* is the kubernetes.io/batch-* allocatable, or -1 when the node has none.
	allocBatchCPU, allocBatchMemory int64

	metric    *nodemetric.NodeMetric // nil when missing or invalid; metricErr says which
	metricErr string
	// staleAfter is the Unix time in nanoseconds after which metric is stale, precomputed
	// because a request asks about thousands of nodes.
	staleAfter int64
	// thresholds are the cluster usage thresholds with this node's annotation applied.
	thresholds ResourcePercents

	// From the pods assigned to the node.
	batchCPU, batchMemory int64 // Σ kubernetes.io/batch-* requests
	unreportedPods        int   // pods the metric does not count yet
	unreportedCPU         int64 // Σ their estimated usage
	unreportedMemory      int64
	unreportedHPCPU       int64 // the part of it from non-BE pods, which lowers reclaimable capacity
	unreportedHPMemory    int64

	// held are the reservations on the node that still hold room (no owner bound there yet),
	// by name; whether each is active is checked when deciding.
	held []*heldRoom
}

// podEntry is one assigned pod as the cache remembers it.
type podEntry struct {
	demand
	running time.Time // see runningSince
	// pod is the (trimmed) pod, for telling whether it took a reservation.
	pod *corev1.Pod
}

// NodeCache keeps a nodeState per node, fed by shared informers on Nodes and assigned Pods.
type NodeCache struct {
	cfg Config

	mu      sync.RWMutex
	nodes   map[string]*nodeState
	pods    map[string]map[types.UID]podEntry // by node name; may exist before the node does
	podNode map[types.UID]string

	// Reservations that may hold room: by name, by node and name, and those per node no bound
	// pod took yet (see refreshHeldLocked). Empty unless WithReservations.
	rooms   map[string]*heldRoom
	roomsOn map[string]map[string]*heldRoom
	held    map[string][]*heldRoom
	// reservationsOn is set while the cache is built, when reservations are watched.
	reservationsOn bool

	synced []cache.InformerSynced
	ready  atomic.Bool // latched: informers never become unsynced
}

// NewNodeCache starts informers on client that run until ctx ends. The cache answers at once,
// but only knows the cluster once Ready reports true. opts add Reservations (WithReservations).
func NewNodeCache(ctx context.Context, client kubernetes.Interface, cfg Config, opts ...CacheOption) (*NodeCache, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid extender config: %w", err)
	}
	logger := klog.FromContext(ctx)
	c := newNodeCache(cfg)

	// Two factories because the transform and the field selector differ per resource; a resync
	// period of 0 because every derived figure is recomputed on the event that changes it.
	nodeFactory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTransform(trimNode))
	podFactory := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithTransform(trimPod),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = assignedPods }))

	if err := c.watch(logger, nodeFactory.Core().V1().Nodes().Informer(), podFactory.Core().V1().Pods().Informer()); err != nil {
		return nil, err
	}
	if err := c.applyOptions(ctx, opts); err != nil {
		return nil, err
	}
	nodeFactory.Start(ctx.Done())
	podFactory.Start(ctx.Done())
	return c, nil
}

// NewNodeCacheOn is NewNodeCache fed by informers the caller owns and starts: those of the
// process it runs in (kube-scheduler's, for the scheduler plugin), so that the cluster's Nodes
// and Pods are watched and held once, not twice. It tolerates informers without the extender's
// transforms and field selector: pending and finished pods are ignored as they arrive. A
// Reservations informer (WithReservations) is the cache's own, started here.
func NewNodeCacheOn(ctx context.Context, cfg Config, nodes, pods cache.SharedInformer, opts ...CacheOption) (*NodeCache, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid extender config: %w", err)
	}
	c := newNodeCache(cfg)
	if err := c.watch(klog.FromContext(ctx), nodes, pods); err != nil {
		return nil, err
	}
	if err := c.applyOptions(ctx, opts); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *NodeCache) applyOptions(ctx context.Context, opts []CacheOption) error {
	var o cacheOptions
	for _, opt := range opts {
		opt(&o)
	}
	if o.reservations != nil {
		return c.watchReservations(ctx, o.reservations)
	}
	return nil
}

// watch feeds the cache from the informers' events and records when their initial lists are in.
func (c *NodeCache) watch(logger klog.Logger, nodes, pods cache.SharedInformer) error {
	nodeReg, err := nodes.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.onNode(logger, obj) },
		UpdateFunc: func(_, obj any) { c.onNode(logger, obj) },
		DeleteFunc: func(obj any) { c.onNodeDelete(obj) },
	})
	if err != nil {
		return fmt.Errorf("watch nodes: %w", err)
	}
	podReg, err := pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.onPod(obj) },
		UpdateFunc: func(_, obj any) { c.onPod(obj) },
		DeleteFunc: func(obj any) { c.onPodDelete(obj) },
	})
	if err != nil {
		return fmt.Errorf("watch pods: %w", err)
	}
	// The registrations, not the informers, are synced once the handlers above have seen the
	// initial list, which is what readiness means here.
	c.synced = []cache.InformerSynced{nodeReg.HasSynced, podReg.HasSynced}
	return nil
}

func newNodeCache(cfg Config) *NodeCache {
	return &NodeCache{
		cfg:     cfg,
		nodes:   map[string]*nodeState{},
		pods:    map[string]map[types.UID]podEntry{},
		podNode: map[types.UID]string{},
		rooms:   map[string]*heldRoom{},
		roomsOn: map[string]map[string]*heldRoom{},
		held:    map[string][]*heldRoom{},
	}
}

// Ready reports whether the initial list of nodes and pods has been processed.
func (c *NodeCache) Ready() bool {
	if c.ready.Load() {
		return true
	}
	for _, s := range c.synced {
		if !s() {
			return false
		}
	}
	c.ready.Store(true)
	return true
}

// WaitForSync blocks until Ready or ctx ends, and reports Ready.
func (c *NodeCache) WaitForSync(ctx context.Context) bool {
	return cache.WaitForCacheSync(ctx.Done(), c.synced...)
}

// lookup fills out[i] with the state of names[i], nil for nodes the cache does not know.
func (c *NodeCache) lookup(names []string, out []*nodeState) {
	c.mu.RLock()
	for i, n := range names {
		out[i] = c.nodes[n]
	}
	c.mu.RUnlock()
}

// stateFor returns the state of a node sent in full by kube-scheduler. The cached state is reused
// when it was built from the same version of the node; otherwise the request's copy is the newer
// truth and a state is built from it.
func (c *NodeCache) stateFor(node *corev1.Node) *nodeState {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if st := c.nodes[node.Name]; st != nil && st.resourceVersion == node.ResourceVersion {
		return st
	}
	st, _ := c.buildNode(node)
	c.aggregate(st)
	return st
}

func (c *NodeCache) onNode(logger klog.Logger, obj any) {
	node, ok := obj.(*corev1.Node)
	if !ok {
		return
	}
	st, thresholdErr := c.buildNode(node)
	if thresholdErr != nil {
		logger.V(2).Info("Ignoring node usage thresholds annotation", "node", klog.KObj(node), "err", thresholdErr)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.aggregate(st)
	c.nodes[node.Name] = st
}

func (c *NodeCache) onNodeDelete(obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	node, ok := obj.(*corev1.Node)
	if !ok {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.nodes, node.Name)
}

func (c *NodeCache) onPod(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	// The fake clientset of the tests and older apiservers may ignore the field selector.
	if pod.Spec.NodeName == "" || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		c.onPodDelete(pod)
		return
	}
	entry := podEntry{demand: demandOf(pod, c.cfg.DefaultEstimatedUsage), running: runningSince(pod), pod: pod}
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.podNode[pod.UID]; ok && old != pod.Spec.NodeName {
		c.removePodLocked(pod.UID)
	}
	byUID := c.pods[pod.Spec.NodeName]
	if byUID == nil {
		byUID = map[types.UID]podEntry{}
		c.pods[pod.Spec.NodeName] = byUID
	}
	byUID[pod.UID] = entry
	c.podNode[pod.UID] = pod.Spec.NodeName
	c.refreshLocked(pod.Spec.NodeName)
}

func (c *NodeCache) onPodDelete(obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.removePodLocked(pod.UID)
}

func (c *NodeCache) removePodLocked(uid types.UID) {
	node, ok := c.podNode[uid]
	if !ok {
		return
	}
	delete(c.podNode, uid)
	delete(c.pods[node], uid)
	if len(c.pods[node]) == 0 {
		delete(c.pods, node)
	}
	c.refreshLocked(node)
}

// refreshLocked rebuilds the pod-derived figures of a node after its pods or its reservations
// changed.
func (c *NodeCache) refreshLocked(nodeName string) {
	c.refreshHeldLocked(nodeName)
	old := c.nodes[nodeName]
	if old == nil {
		return
	}
	st := *old
	c.aggregate(&st)
	c.nodes[nodeName] = &st
}

// buildNode derives the node-only part of a state. The error is about the thresholds annotation,
// which is then ignored; a broken metric is part of the state instead, since filter reports it.
func (c *NodeCache) buildNode(node *corev1.Node) (*nodeState, error) {
	alloc := node.Status.Allocatable
	st := &nodeState{
		name:             node.Name,
		resourceVersion:  node.ResourceVersion,
		allocCPU:         alloc.Cpu().MilliValue(),
		allocMemory:      alloc.Memory().Value(),
		allocBatchCPU:    -1,
		allocBatchMemory: -1,
		thresholds:       c.cfg.UsageThresholds,
	}
	if q, ok := alloc[nodemetric.ResourceBatchCPU]; ok {
		st.allocBatchCPU = q.Value()
	}
	if q, ok := alloc[nodemetric.ResourceBatchMemory]; ok {
		st.allocBatchMemory = q.Value()
	}
	m, err := nodemetric.FromNode(node)
	if err != nil {
		st.metricErr = err.Error()
	} else {
		st.metric = m
		st.staleAfter = m.UpdateTime.Add(time.Duration(c.cfg.NodeMetricExpirationSeconds) * time.Second).UnixNano()
	}
	var thresholdErr error
	if v, ok := node.Annotations[UsageThresholdsAnnotation]; ok {
		st.thresholds, thresholdErr = overrideThresholds(c.cfg.UsageThresholds, v)
	}
	return st, thresholdErr
}

// overrideThresholds applies a node's annotation to the cluster thresholds; on any error the
// cluster thresholds stand, since a typo on one node must not make it take every pod.
func overrideThresholds(cluster ResourcePercents, value string) (ResourcePercents, error) {
	var o struct {
		CPU    *int64 `json:"cpu"`
		Memory *int64 `json:"memory"`
	}
	if err := json.Unmarshal([]byte(value), &o); err != nil {
		return cluster, fmt.Errorf("annotation %s: want {\"cpu\":65,\"memory\":95}: %w", UsageThresholdsAnnotation, err)
	}
	out := cluster
	for _, f := range []struct {
		name string
		in   *int64
		out  *int64
	}{{"cpu", o.CPU, &out.CPU}, {"memory", o.Memory, &out.Memory}} {
		if f.in == nil {
			continue
		}
		if *f.in < 0 || *f.in > 100 {
			return cluster, fmt.Errorf("annotation %s: %s must be within 0..100, got %d", UsageThresholdsAnnotation, f.name, *f.in)
		}
		*f.out = *f.in
	}
	return out, nil
}

// aggregate sums the pods assigned to st's node into st. A pod counts as unreported unless it
// has been running since before the metric's sample window began: until then the averaged usage
// shows none or only part of it. Callers hold c.mu.
func (c *NodeCache) aggregate(st *nodeState) {
	st.batchCPU, st.batchMemory = 0, 0
	st.unreportedPods, st.unreportedCPU, st.unreportedMemory = 0, 0, 0
	st.unreportedHPCPU, st.unreportedHPMemory = 0, 0
	st.held = c.held[st.name]
	var windowStart time.Time
	if st.metric != nil {
		windowStart = st.metric.UpdateTime.Add(-time.Duration(st.metric.ReportIntervalSeconds) * time.Second)
	}
	for _, p := range c.pods[st.name] {
		st.batchCPU += p.batchCPU
		st.batchMemory += p.batchMemory
		if st.metric != nil && !p.running.IsZero() && !p.running.After(windowStart) {
			continue
		}
		st.unreportedPods++
		st.unreportedCPU += p.estCPU
		st.unreportedMemory += p.estMemory
		if !p.be {
			st.unreportedHPCPU += p.estCPU
			st.unreportedHPMemory += p.estMemory
		}
	}
}
