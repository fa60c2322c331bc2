package reporter

import (
	"fmt"
	"math"
	"time"

	"github.com/tandemkit/tandem/config/batchwindow"
	"github.com/tandemkit/tandem/config/slo"
	"github.com/tandemkit/tandem/metrics/nodemetric"
	"github.com/tandemkit/tandem/metrics/reclaim"
	"github.com/tandemkit/tandem/resource/qos"
)

// desired is what the Node should say now.
type desired struct {
	present bool              // batch resources on the Node at all
	batch   reclaim.Resources // their value
	// warming is set while the predictor has less history than Config.Warmup: nothing is
	// written yet, since a peak predicted from a few samples moves with every new one.
	warming bool
	// metric is the annotation to publish, nil while samples are stale.
	metric *nodemetric.NodeMetric
	// terms is the formula's result with every term, nil when batch capacity was not computed
	// (colocation off, samples stale or none yet).
	terms *reclaim.Result
	// why says why terms is nil, or why it is not published yet.
	why string
	// window is where the node stands against its batch windows; while window.Phase.Limits(),
	// batch is outsideCapacityPercent of computed.
	window   batchwindow.State
	computed reclaim.Resources
	// clock says the node's clock is far from the API server's, "" when it is not or is not known.
	clock string
}

func (r *Reporter) desire(now time.Time, settings slo.ColocationSettings) desired {
	want := r.desireCapacity(now, settings)
	want.clock = r.clockNote()
	return want
}

// ClockTolerance is how far the node's clock may be from the API server's before the reporter says
// so: batch windows follow the node's clock, and a minute off moves every window by a minute.
const ClockTolerance = 30 * time.Second

// clockNote says how far off the node's clock is, when it is beyond ClockTolerance.
func (r *Reporter) clockNote() string {
	if r.deps.ClockOffset == nil {
		return ""
	}
	off, ok := r.deps.ClockOffset()
	if !ok {
		return ""
	}
	r.metrics.clockOffset.Set(off.Seconds())
	if off.Abs() <= ClockTolerance {
		return ""
	}
	dir := "behind"
	if off < 0 {
		dir = "ahead of"
	}
	return fmt.Sprintf("the node's clock is %s %s the API server's; batch windows follow the node's clock: fix its time synchronisation (chrony, systemd-timesyncd)",
		off.Abs().Round(time.Second), dir)
}

func (r *Reporter) desireCapacity(now time.Time, settings slo.ColocationSettings) desired {
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
		want.why = "no usage sample yet since this agent started"
		return want
	}
	if !fresh {
		want.why = fmt.Sprintf("the newest usage sample is older than degradeTimeMinutes (%d): batch capacity 0", settings.DegradeTimeMinutes)
		return want // batch 0 if enabled, absent if not; the annotation ages
	}
	interval := reportInterval(settings)
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
	switch {
	case !settings.Enable:
		want.why = "colocation is off for this node (colocation-config enable): no batch resources"
	case want.warming:
		want.why = fmt.Sprintf("warming up: %s of usage history, %s needed before batch capacity is published", r.est.Span().Round(time.Second), warmup)
	}
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
		want.batch, want.terms, want.computed = res.Batch, &res, res.Batch
		if r.deps.Window != nil {
			want.window = r.deps.Window(now)
			if want.window.Phase.Limits() {
				pct := want.window.OutsidePercent
				want.batch = reclaim.Resources{CPUMilli: res.Batch.CPUMilli * pct / 100, MemoryBytes: res.Batch.MemoryBytes * pct / 100}
			}
		}
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

// reportInterval is metricReportIntervalSeconds: the window of the annotation's means, and the
// least time between two writes.
func reportInterval(settings slo.ColocationSettings) time.Duration {
	if interval := time.Duration(settings.MetricReportIntervalSeconds) * time.Second; interval > 0 {
		return interval
	}
	return time.Minute
}

// due decides whether this step writes the Node. Every write of a Node is an event for each watcher
// of Nodes in the cluster, so the reporter writes at most once per report interval, and only when
// batch capacity or usage moved past the tolerance. Usage figures are means over the report
// interval, which take a whole interval to settle after a change in load, so a step in load costs
// one write when it is seen and at most one more when the mean has caught up.
//
// Three writes do not wait for the interval: the first of this run, colocation switched on or off
// (an operator's decision, expected within a tick: with colocation off the batch resources must
// go), and the refreshes, which tell readers that the node is alive (the annotation's updateTime)
// and put back batch resources that something else took off the Node.
func (r *Reporter) due(now time.Time, want desired, settings slo.ColocationSettings) bool {
	last := r.last
	refresh := time.Duration(settings.UpdateTimeThresholdSeconds) * time.Second
	annotationRefresh := r.annotationRefresh(refresh)
	threshold := settings.ResourceDiffThreshold
	newer := r.newerMetric(want) != nil
	switch {
	case !last.valid, last.present != want.present:
		return true
	case last.phase != want.window.Phase:
		// A window opening or closing is the operator's schedule, expected on the minute: placement
		// stops or resumes with this write.
		return true
	case refresh > 0 && now.Sub(last.at) >= refresh:
		return true
	case newer && last.metricValid && annotationRefresh > 0 && now.Sub(last.metricAt) >= annotationRefresh:
		return true
	case now.Sub(last.at) < reportInterval(settings):
		return false
	case want.present && r.moved(last.batch, want.batch, threshold):
		return true
	case !newer:
		return false
	case !last.metricValid:
		return true
	}
	return r.moved(last.metric.NodeUsage, want.metric.NodeUsage, threshold) || r.moved(last.metric.HPUsage, want.metric.HPUsage, threshold)
}

// newerMetric is the annotation to write with this step, nil when the Node already has it or there
// is none: rewriting the same updateTime tells readers nothing, and letting it age is how they learn
// that the collector stalled.
func (r *Reporter) newerMetric(want desired) *nodemetric.NodeMetric {
	if want.metric == nil || r.last.metricValid && *want.metric == r.last.metric {
		return nil
	}
	return want.metric
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
