// Package reporter publishes a node's reclaimable (batch) capacity and measured load to the API
// server, for kube-scheduler and tandem-extender.
//
// After every collector sample the reporter feeds it to a reclaim.Estimator; every tick it computes
// batch capacity with the colocation-config knobs and decides whether the Node needs a write. A
// write is one PATCH request of the Node's status subresource, a strategic merge patch that names
// only what the reporter owns:
//
//   - status.capacity and status.allocatable get kubernetes.io/batch-cpu (milli-cores) and
//     kubernetes.io/batch-memory (bytes). kubelet rewrites the rest of the status every few
//     seconds; a patch without a resourceVersion precondition never conflicts with it, and merging
//     keys of the resource maps leaves every key kubelet (or a device plugin) owns as it is. A
//     read-modify-write Update, in contrast, would race kubelet and could write back an old
//     condition or capacity. Removal sends the keys with null, which a merge deletes and which is
//     a no-op when they are already gone (a JSON patch "remove" would fail then).
//   - metadata.annotations gets tandem.io/node-metric (see metrics/nodemetric), when there is a
//     newer one than the Node has. The status subresource resets only the spec of a Node, not its
//     metadata, and NodeRestriction lets a node change its own annotations, so the status patch
//     carries it; the merge leaves kubelet's and other writers' annotations alone.
//
// Every write of a Node is an event for each watcher of Nodes in the cluster, so the reporter
// writes at most once per report interval (metricReportIntervalSeconds), and only when something
// moved: batch capacity or usage by more than resourceDiffThreshold (relative). The first write,
// colocation switched on or off, and the refresh after updateTimeThresholdSeconds do not wait for
// the interval. Without fresh samples for degradeTimeMinutes batch capacity drops to 0 (the
// node's load is unknown) and the annotation is left to age, so the extender sees it is stale.
// With colocation disabled the batch resources are removed, as Koordinator does.
//
// The reporter runs in its own goroutine and touches nothing on the CRI path: it reads the
// collector's latest sample and the proxy's view of requests. When the API server is down it keeps
// computing and retries with a capped exponential backoff.
package reporter

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/tandemkit/tandem/config/batchwindow"
	"github.com/tandemkit/tandem/config/slo"
	"github.com/tandemkit/tandem/metrics/nodemetric"
	"github.com/tandemkit/tandem/metrics/reclaim"
	"github.com/tandemkit/tandem/resource/qos"
)

// PodUsage is one pod's usage in a Sample (its containers summed).
type PodUsage struct {
	UID string
	// QoS is the pod's class, "" when unknown; every class but BE counts as high-priority,
	// unknown included, which errs towards less batch capacity.
	QoS   qos.Class
	Usage reclaim.Resources
}

// Sample is one collector measurement of the node.
type Sample struct {
	Time     time.Time
	Capacity reclaim.Resources // CPUs × 1000 and MemTotal
	Node     reclaim.Resources // the whole node
	System   reclaim.Resources // node minus pods
	Pods     []PodUsage
}

// PodRequest is what a pod asked for, by UID; see reclaim.RequestFromLinux for pods whose spec is
// not at hand.
type PodRequest struct {
	UID     string
	QoS     qos.Class
	Request reclaim.Resources
}

// Config is the reporter's own configuration; the reclaim knobs come from colocation-config
// through Deps.Settings, so that a reload applies without a restart.
type Config struct {
	// NodeName is the Node to patch.
	NodeName string
	// Tick is how often the reporter re-evaluates when no sample arrives (staleness, refresh,
	// retries). Default 5s.
	Tick time.Duration
	// HalfLife is the peak predictor's half-life; zero means a fifth of
	// metricAggregateDurationSeconds (see reclaim.PredictorConfig).
	HalfLife time.Duration
	// AnnotationRefresh rewrites the node-metric annotation at least this often while samples are
	// fresh, so its updateTime stays within the extender's nodeMetricExpirationSeconds. Zero means
	// updateTimeThresholdSeconds.
	AnnotationRefresh time.Duration
	// Warmup is how much sample history the predictor needs before batch capacity is first
	// published (after a start or a collector outage). Zero means metricReportIntervalSeconds;
	// negative means none.
	Warmup time.Duration
	// RequestTimeout bounds each API request. Default 10s.
	RequestTimeout time.Duration
	// MinChangePercent is the smallest move, in percent of the node's capacity, that counts as a
	// change besides resourceDiffThreshold. Default 1; set a negative value for none.
	MinChangePercent float64
	// BackoffInitial and BackoffMax bound the retry delay after a failed request, which doubles
	// per failure. Defaults 1s and 2m.
	BackoffInitial, BackoffMax time.Duration
	// BackoffJitter adds up to this fraction of the delay at random, so that the nodes of a
	// cluster do not all retry in the same second after an API server outage. Default 0.1; set a
	// negative value for none.
	BackoffJitter float64
}

func (c Config) withDefaults() Config {
	if c.Tick == 0 {
		c.Tick = 5 * time.Second
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = 10 * time.Second
	}
	if c.BackoffInitial == 0 {
		c.BackoffInitial = time.Second
	}
	if c.BackoffMax == 0 {
		c.BackoffMax = 2 * time.Minute
	}
	if c.BackoffJitter == 0 {
		c.BackoffJitter = 0.1
	}
	if c.MinChangePercent == 0 {
		c.MinChangePercent = 1
	}
	return c
}

// Validate reports a configuration the reporter cannot run with.
func (c Config) Validate() error {
	var errs []error
	if c.NodeName == "" {
		errs = append(errs, errors.New("node name: must be set: pass --node-name"))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"tick", c.Tick}, {"half-life", c.HalfLife}, {"annotation refresh", c.AnnotationRefresh},
		{"request timeout", c.RequestTimeout}, {"backoff initial", c.BackoffInitial}, {"backoff max", c.BackoffMax},
	} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("%s: must not be negative, got %s", d.name, d.v))
		}
	}
	if c.BackoffMax > 0 && c.BackoffInitial > c.BackoffMax {
		errs = append(errs, fmt.Errorf("backoff initial %s: must not exceed backoff max %s", c.BackoffInitial, c.BackoffMax))
	}
	return errors.Join(errs...)
}

// NodeAPI is what the reporter needs of the API server; *kubeclient.Client has it.
type NodeAPI interface {
	GetNode(ctx context.Context, name string) (*corev1.Node, error)
	PatchNode(ctx context.Context, name string, pt types.PatchType, data []byte, subresources ...string) (*corev1.Node, error)
}

// Deps are the reporter's collaborators.
type Deps struct {
	// Client talks to the API server.
	Client NodeAPI
	// Samples returns the collector's latest sample, nil before the first. It must be cheap and
	// must not block.
	Samples func() *Sample
	// Updates, when set, is signalled after each new sample so the predictor sees every one.
	Updates <-chan struct{}
	// Requests returns the requests of the node's pods; nil means none known. Must not block.
	Requests func() []PodRequest
	// Settings returns the colocation-config that applies to this node.
	Settings func() slo.ColocationSettings
	// Clock defaults to the real clock; tests and the benchmark pass a fake one.
	Clock clock.WithTicker
	// Registerer receives the reporter's metrics; nil registers nowhere.
	Registerer prometheus.Registerer
	// BECeiling is the most CPU BE may use because of what the host of a virtual machine takes back
	// (metrics/headroom); limited false when there is no such ceiling. Nil: none. Must not block.
	BECeiling func() (milli int64, limited bool)
	// Window is where the node stands against its batch windows (config/batchwindow) at an instant;
	// nil: no windows. Must not block.
	Window func(now time.Time) batchwindow.State
	// ClockOffset is the API server's clock minus the node's, as last measured; ok false before a
	// measurement. Nil: not measured. Must not block.
	ClockOffset func() (offset time.Duration, ok bool)
}

// Reporter publishes one node's batch capacity and node metric. Run it once.
type Reporter struct {
	cfg     Config
	deps    Deps
	metrics *metrics

	est       *reclaim.Estimator
	estConfig reclaim.PredictorConfig

	// reserved is capacity − allocatable of the Node (kube-reserved + system-reserved), learned
	// from the first GET and from every patch response.
	reserved reclaim.Resources
	nodeSeen bool
	// lastCapacity is the node's capacity in the newest sample.
	lastCapacity reclaim.Resources

	// last is what the last successful write put on the Node.
	last published

	failures  int
	nextRetry time.Time
	backoff   wait.Backoff

	// lastClock is the clock note last published, to log it once.
	lastClock string

	// status is the last step's CapacityStatus, read from other goroutines.
	status atomic.Pointer[CapacityStatus]
}

// published is what the last successful write put on the Node.
type published struct {
	valid   bool
	at      time.Time
	present bool
	batch   reclaim.Resources
	// metric is the annotation last written, at metricAt; writes without a newer one leave it.
	metricValid bool
	metricAt    time.Time
	metric      nodemetric.NodeMetric
	// phase is the batch window phase the write was made in.
	phase batchwindow.Phase
}

// New checks cfg and deps and returns a reporter that has not started.
func New(cfg Config, deps Deps) (*Reporter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("node reporter config: %w", err)
	}
	cfg = cfg.withDefaults()
	if deps.Client == nil || deps.Samples == nil || deps.Settings == nil {
		return nil, errors.New("node reporter: Client, Samples and Settings are required")
	}
	if deps.Clock == nil {
		deps.Clock = clock.RealClock{}
	}
	m, err := newMetrics(deps.Registerer)
	if err != nil {
		return nil, fmt.Errorf("node reporter metrics: %w", err)
	}
	r := &Reporter{cfg: cfg, deps: deps, metrics: m}
	r.backoff = r.newBackoff()
	return r, nil
}

// Run reports until ctx is done, then returns nil. API errors never end it.
func (r *Reporter) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithValues("node", r.cfg.NodeName)
	ctx = klog.NewContext(ctx, logger)
	ticker := r.deps.Clock.NewTicker(r.cfg.Tick)
	defer ticker.Stop()
	logger.V(2).Info("Node reporter started", "tick", r.cfg.Tick)
	r.Step(ctx)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C():
			r.Step(ctx)
		case <-r.deps.Updates:
			// Every sample goes into the history at once; deciding (the costly part, a sort per
			// pod) waits for the tick. Batch capacity moves on a scale of minutes.
			r.observe(r.deps.Settings())
		}
	}
}

// Step runs one evaluation at the clock's now: take in the latest sample, compute, and write what
// is due. Run calls it; the benchmark and tests call it directly to step through simulated time.
// Not safe for concurrent use.
func (r *Reporter) Step(ctx context.Context) {
	now := r.deps.Clock.Now()
	settings := r.deps.Settings()
	r.observe(settings)
	want := r.desire(now, settings)
	r.setGauges(want)
	defer func() { r.recordStatus(now, want, settings, want.why) }()
	if want.warming || now.Before(r.nextRetry) {
		return
	}
	if !r.nodeSeen {
		// The formula needs the node's reservation; until one GET succeeds, nothing is published.
		if err := r.learnNode(ctx); err != nil {
			r.failed(ctx, now, "get node", err, false)
			return
		}
		want = r.desire(now, settings)
		r.setGauges(want)
	}

	if !r.due(now, want, settings) {
		return
	}
	metric := r.newerMetric(want)
	if err := r.patch(ctx, want, metric); err != nil {
		r.failed(ctx, now, "patch node status", err, true)
		return
	}
	r.last.valid, r.last.at, r.last.present, r.last.batch, r.last.phase = true, now, want.present, want.batch, want.window.Phase
	if want.clock != r.lastClock {
		if want.clock != "" {
			klog.FromContext(ctx).Info("Node clock far from the API server's", "note", want.clock)
		}
		r.lastClock = want.clock
	}
	if metric != nil {
		r.last.metricValid, r.last.metricAt, r.last.metric = true, now, *metric
	}
	r.succeeded(now)
}

func (r *Reporter) setGauges(want desired) {
	r.metrics.reclaimableCPU.Set(float64(want.batch.CPUMilli) / 1000)
	r.metrics.reclaimableMemory.Set(float64(want.batch.MemoryBytes))
	r.metrics.setTerms(want.terms)
	r.metrics.setWindow(want.window)
}

func (r *Reporter) annotationRefresh(updateTime time.Duration) time.Duration {
	if r.cfg.AnnotationRefresh > 0 {
		return r.cfg.AnnotationRefresh
	}
	return updateTime
}

// observe feeds the latest sample to the estimator, rebuilding it when the aggregation window
// changed in a reload.
func (r *Reporter) observe(settings slo.ColocationSettings) {
	pc := reclaim.PredictorConfig{
		Window:   time.Duration(settings.MetricAggregateDurationSeconds) * time.Second,
		HalfLife: r.cfg.HalfLife,
	}
	if pc.Validate() != nil {
		pc.Window = 5 * time.Minute // Koordinator's default; config/slo rejects a non-positive one anyway
	}
	if r.est == nil || pc != r.estConfig {
		r.est, r.estConfig = reclaim.NewEstimator(pc), pc
	}
	s := r.deps.Samples()
	if s == nil {
		return
	}
	hp := make(map[string]reclaim.Resources, len(s.Pods))
	for _, p := range s.Pods {
		if p.QoS == qos.BE {
			continue
		}
		u := hp[p.UID]
		u.CPUMilli += p.Usage.CPUMilli
		u.MemoryBytes += p.Usage.MemoryBytes
		hp[p.UID] = u
	}
	r.lastCapacity = s.Capacity
	r.est.Observe(s.Time, s.Node, s.System, hp)
}

func (r *Reporter) learnNode(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.RequestTimeout)
	defer cancel()
	node, err := r.deps.Client.GetNode(ctx, r.cfg.NodeName)
	if err != nil {
		return err
	}
	r.learn(node)
	return nil
}

// learn takes kube-reserved + system-reserved from a Node as capacity − allocatable.
func (r *Reporter) learn(node *corev1.Node) {
	reserved := func(name corev1.ResourceName, milli bool) int64 {
		c, okc := node.Status.Capacity[name]
		a, oka := node.Status.Allocatable[name]
		if !okc || !oka {
			return 0
		}
		if milli {
			return max(c.MilliValue()-a.MilliValue(), 0)
		}
		return max(c.Value()-a.Value(), 0)
	}
	r.reserved = reclaim.Resources{
		CPUMilli:    reserved(corev1.ResourceCPU, true),
		MemoryBytes: reserved(corev1.ResourceMemory, false),
	}
	r.nodeSeen = true
}
