// Package reporter publishes a node's reclaimable (batch) capacity and measured load to the API
// server, for kube-scheduler and tandem-extender.
//
// After every collector sample the reporter feeds it to a reclaim.Estimator; every tick it computes
// batch capacity with the colocation-config knobs and decides whether the Node needs a write. It writes two things, with two PATCH requests:
//
//   - status.capacity and status.allocatable get kubernetes.io/batch-cpu (milli-cores) and
//     kubernetes.io/batch-memory (bytes), through the status subresource, as a strategic merge
//     patch that names only these two keys. kubelet rewrites the rest of the status every few
//     seconds; a patch without a resourceVersion precondition never conflicts with it, and merging
//     keys of the resource maps leaves every key kubelet (or a device plugin) owns as it is. A
//     read-modify-write Update, in contrast, would race kubelet and could write back an old
//     condition or capacity. Removal sends the keys with null, which a merge deletes and which is
//     a no-op when they are already gone (a JSON patch "remove" would fail then).
//   - metadata.annotations gets tandem.io/node-metric (see metrics/nodemetric), through the
//     main resource, as a JSON merge patch of that one key: the status subresource ignores
//     metadata, and this patch too leaves kubelet's and other writers' keys alone.
//
// Every write of a Node is an event for each watcher of Nodes in the cluster, so the reporter
// writes only when something moved: batch capacity or usage by more than resourceDiffThreshold
// (relative), or updateTimeThresholdSeconds passed since the last write. Without fresh samples
// for degradeTimeMinutes batch capacity drops to 0 (the node's load is unknown) and the
// annotation is left to age, so the extender sees it is stale. With colocation disabled the batch
// resources are removed, as Koordinator does.
//
// The reporter runs in its own goroutine and touches nothing on the CRI path: it reads the
// collector's latest sample and the proxy's view of requests. When the API server is down it keeps
// computing and retries with a capped exponential backoff.
package reporter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

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

	status     statusState
	annotation annotationState

	failures  int
	nextRetry time.Time
	backoff   wait.Backoff
}

// statusState is what the last successful status patch wrote.
type statusState struct {
	valid   bool
	at      time.Time
	present bool
	batch   reclaim.Resources
}

// annotationState is what the last successful annotation patch wrote.
type annotationState struct {
	valid  bool
	at     time.Time
	metric nodemetric.NodeMetric
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

	refresh := time.Duration(settings.UpdateTimeThresholdSeconds) * time.Second
	statusDue := r.statusDue(now, want, settings.ResourceDiffThreshold, refresh)
	if statusDue {
		if err := r.patchStatus(ctx, want); err != nil {
			r.failed(ctx, now, "patch node status", err, true)
			return
		}
		r.status = statusState{valid: true, at: now, present: want.present, batch: want.batch}
		r.succeeded(now)
	}
	if want.metric == nil {
		return
	}
	// Readers take the annotation's reclaimable for what the status says, which moves only past
	// the threshold; the value just computed may differ from it by less.
	want.metric.Reclaimable = reclaim.Resources{}
	if r.status.present {
		want.metric.Reclaimable = r.status.batch
	}
	interval := time.Duration(want.metric.ReportIntervalSeconds) * time.Second
	if r.annotationDue(now, *want.metric, settings.ResourceDiffThreshold, r.annotationRefresh(refresh), interval) {
		if err := r.patchAnnotation(ctx, want.metric); err != nil {
			r.failed(ctx, now, "patch node-metric annotation", err, true)
			return
		}
		r.annotation = annotationState{valid: true, at: now, metric: *want.metric}
		r.succeeded(now)
	}
}

func (r *Reporter) setGauges(want desired) {
	r.metrics.reclaimableCPU.Set(float64(want.batch.CPUMilli) / 1000)
	r.metrics.reclaimableMemory.Set(float64(want.batch.MemoryBytes))
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

// desired is what the Node should say now.
type desired struct {
	present bool              // batch resources on the Node at all
	batch   reclaim.Resources // their value
	// warming is set while the predictor has less history than Config.Warmup: nothing is
	// written yet, since a peak predicted from a few samples moves with every new one.
	warming bool
	// metric is the annotation to publish, nil while samples are stale.
	metric *nodemetric.NodeMetric
}

func (r *Reporter) desire(now time.Time, settings slo.ColocationSettings) desired {
	newest := r.est.Newest()
	degrade := time.Duration(settings.DegradeTimeMinutes) * time.Minute
	fresh := !newest.IsZero() && now.Sub(newest) <= degrade
	want := desired{present: settings.Enable}
	if newest.IsZero() {
		// No sample since this process started: nothing is known, so what the Node says (an earlier
		// run's figures, which the extender ages by their updateTime) stays until the warm-up has
		// passed, instead of batch 0 taking the capacity off the Node at every restart. Removing batch
		// resources needs no history.
		want.warming = settings.Enable
		return want
	}
	if !fresh {
		return want // batch 0 if enabled, absent if not; the annotation ages
	}
	interval := time.Duration(settings.MetricReportIntervalSeconds) * time.Second
	if interval <= 0 {
		interval = time.Minute
	}
	est := r.est.Estimate(newest, interval)
	warmup := r.cfg.Warmup
	if warmup == 0 {
		warmup = interval
	}
	// The estimator keeps only the aggregation window's samples, so its history never spans the whole
	// window: a warm-up as long as the window (metricAggregateDurationSeconds equal to
	// metricReportIntervalSeconds, 60 s each) would never end and batch capacity would never be published.
	warmup = min(warmup, r.estConfig.Window/2)
	// Removing batch resources needs no history; publishing them does.
	want.warming = settings.Enable && r.est.Span() < warmup
	if settings.Enable {
		var requests map[string]reclaim.Resources
		if r.deps.Requests != nil {
			requests = map[string]reclaim.Resources{}
			for _, p := range r.deps.Requests() {
				if p.QoS != qos.BE {
					requests[p.UID] = p.Request
				}
			}
		}
		in := reclaim.Input{
			Capacity:    r.lastCapacity,
			SystemUsage: est.SystemPeak,
			Reserved:    r.reserved,
			HP:          reclaim.HPPods(est.PodPeaks, requests),
		}
		if r.deps.BECeiling != nil {
			if m, ok := r.deps.BECeiling(); ok {
				in.BECeilingMilli = m
			}
		}
		res := reclaim.Compute(reclaim.SettingsFrom(settings), in)
		want.batch = res.Batch
	}
	want.metric = &nodemetric.NodeMetric{
		UpdateTime:            newest.UTC().Truncate(time.Second),
		ReportIntervalSeconds: int64(interval / time.Second),
		NodeUsage:             est.NodeMean,
		HPUsage:               est.HPMean,
		Reclaimable:           want.batch,
	}
	return want
}

func (r *Reporter) statusDue(now time.Time, want desired, threshold float64, refresh time.Duration) bool {
	last := r.status
	switch {
	case !last.valid, last.present != want.present:
		return true
	case refresh > 0 && now.Sub(last.at) >= refresh:
		return true
	case !want.present:
		return false
	}
	return r.moved(last.batch, want.batch, threshold)
}

// annotationDue decides whether to rewrite the node-metric annotation. Its usage figures are means
// over the report interval, which take a whole interval to settle after a change in load; a write
// for moved usage alone therefore waits at least one report interval after the previous write, so
// that a step in load costs one write when it is seen and at most one more when the mean has
// caught up, instead of one per threshold crossing on the way.
func (r *Reporter) annotationDue(now time.Time, m nodemetric.NodeMetric, threshold float64, refresh, interval time.Duration) bool {
	last := r.annotation
	switch {
	case !last.valid:
		return true
	case m == last.metric:
		// No newer sample: rewriting the same updateTime tells readers nothing, and letting it
		// age is how they learn that the collector stalled.
		return false
	case last.metric.Reclaimable != m.Reclaimable:
		// The annotation's reclaimable mirrors the status written just before.
		return true
	case refresh > 0 && now.Sub(last.at) >= refresh:
		return true
	case now.Sub(last.at) < interval:
		return false
	}
	return r.moved(last.metric.NodeUsage, m.NodeUsage, threshold) || r.moved(last.metric.HPUsage, m.HPUsage, threshold)
}

// moved reports whether a value changed by more than threshold relative to the old one, as
// Koordinator's resourceDiffThreshold does, and by more than MinChangePercent of the node's
// capacity: near zero a relative threshold alone would republish noise (50m → 60m is 20%) on
// every busy node. Reaching zero from non-zero always counts, since it tells the scheduler that
// no batch pod fits any more.
func (r *Reporter) moved(old, cur reclaim.Resources, threshold float64) bool {
	floor := func(capacity int64) float64 { return r.cfg.MinChangePercent / 100 * float64(capacity) }
	return movedBy(old.CPUMilli, cur.CPUMilli, threshold, floor(r.lastCapacity.CPUMilli)) ||
		movedBy(old.MemoryBytes, cur.MemoryBytes, threshold, floor(r.lastCapacity.MemoryBytes))
}

func movedBy(old, cur int64, threshold, floor float64) bool {
	if old == cur {
		return false
	}
	if cur == 0 || old == 0 {
		return cur == 0 || float64(cur) > floor
	}
	diff := math.Abs(float64(cur - old))
	return diff > threshold*math.Abs(float64(old)) && diff > floor
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

// StatusPatch is the strategic merge patch that sets (present) or removes the batch resources.
func StatusPatch(present bool, batch reclaim.Resources) ([]byte, error) {
	values := map[corev1.ResourceName]any{
		nodemetric.ResourceBatchCPU:    nil,
		nodemetric.ResourceBatchMemory: nil,
	}
	if present {
		// batch-cpu counts milli-cores as whole units, as Koordinator publishes it.
		values[nodemetric.ResourceBatchCPU] = resource.NewQuantity(batch.CPUMilli, resource.DecimalSI).String()
		values[nodemetric.ResourceBatchMemory] = resource.NewQuantity(batch.MemoryBytes, resource.BinarySI).String()
	}
	return json.Marshal(map[string]any{"status": map[string]any{"capacity": values, "allocatable": values}})
}

// AnnotationPatch is the merge patch that sets the node-metric annotation.
func AnnotationPatch(m *nodemetric.NodeMetric) ([]byte, error) {
	value, err := nodemetric.Marshal(m)
	if err != nil {
		return nil, err
	}
	return json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{nodemetric.AnnotationKey: value}}})
}

func (r *Reporter) patchStatus(ctx context.Context, want desired) error {
	body, err := StatusPatch(want.present, want.batch)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, r.cfg.RequestTimeout)
	defer cancel()
	node, err := r.deps.Client.PatchNode(ctx, r.cfg.NodeName, types.StrategicMergePatchType, body, "status")
	if err != nil {
		return err
	}
	r.learn(node)
	klog.FromContext(ctx).V(2).Info("Published batch capacity", "present", want.present,
		"batchCPUMilli", want.batch.CPUMilli, "batchMemoryBytes", want.batch.MemoryBytes)
	return nil
}

func (r *Reporter) patchAnnotation(ctx context.Context, m *nodemetric.NodeMetric) error {
	body, err := AnnotationPatch(m)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, r.cfg.RequestTimeout)
	defer cancel()
	node, err := r.deps.Client.PatchNode(ctx, r.cfg.NodeName, types.MergePatchType, body)
	if err != nil {
		return err
	}
	r.learn(node)
	return nil
}

func (r *Reporter) succeeded(now time.Time) {
	r.failures = 0
	r.nextRetry = time.Time{}
	r.backoff = r.newBackoff()
	r.metrics.patches.WithLabelValues(resultSuccess).Inc()
	r.metrics.lastSuccess.Set(float64(now.UnixNano()) / 1e9)
}

// failed counts the error and schedules the retry. Every request is idempotent (it carries the
// whole desired value, not a change), so a retry after a conflict or a timeout is always right.
func (r *Reporter) failed(ctx context.Context, now time.Time, what string, err error, patch bool) {
	if ctx.Err() != nil {
		return // shutting down: not the API server's fault
	}
	if patch {
		result := resultError
		if apierrors.IsConflict(err) {
			result = resultConflict
		}
		r.metrics.patches.WithLabelValues(result).Inc()
	}
	delay := r.backoff.Step()
	r.failures++
	r.nextRetry = now.Add(delay)
	klog.FromContext(ctx).Error(err, "Node reporter request failed; retrying", "request", what, "retryIn", delay, "failures", r.failures)
}

// newBackoff starts the retry delays over; only the cap, never Steps, ends the doubling.
func (r *Reporter) newBackoff() wait.Backoff {
	return wait.Backoff{Duration: min(r.cfg.BackoffInitial, r.cfg.BackoffMax), Factor: 2,
		Jitter: max(r.cfg.BackoffJitter, 0), Steps: math.MaxInt, Cap: r.cfg.BackoffMax}
}
