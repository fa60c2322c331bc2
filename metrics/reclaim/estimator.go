package reclaim

import (
	"maps"
	"slices"
	"time"
)

// pair predicts CPU and memory of one subject together.
type pair struct{ cpu, mem *Predictor }

func newPair(cfg PredictorConfig) pair {
	return pair{cpu: NewPredictor(cfg), mem: NewPredictor(cfg)}
}

func (p pair) add(t time.Time, r Resources) {
	p.cpu.Add(t, r.CPUMilli)
	p.mem.Add(t, r.MemoryBytes)
}

func (p pair) peak(now time.Time) Resources {
	cpu, _ := p.cpu.Peak(now)
	mem, _ := p.mem.Peak(now)
	return Resources{CPUMilli: cpu, MemoryBytes: mem}
}

func (p pair) mean(now time.Time, d time.Duration) Resources {
	cpu, _ := p.cpu.Mean(now, d)
	mem, _ := p.mem.Mean(now, d)
	return Resources{CPUMilli: cpu, MemoryBytes: mem}
}

// Estimator keeps the history of one node, fed one observation per collector sample, and
// answers with predicted peaks for the formula and averages for the node-metric annotation.
// It is not safe for concurrent use; the reporter owns one.
type Estimator struct {
	cfg    PredictorConfig
	system pair
	node   pair
	hpSum  pair
	pods   map[string]pair
	newest time.Time
}

// NewEstimator returns an empty estimator; cfg must be valid.
func NewEstimator(cfg PredictorConfig) *Estimator {
	return &Estimator{
		cfg:    cfg,
		system: newPair(cfg),
		node:   newPair(cfg),
		hpSum:  newPair(cfg),
		pods:   map[string]pair{},
	}
}

// Observe records one sample taken at t: the whole node's usage, the system's (node minus pods)
// and each high-priority pod's, by pod UID. A pod absent from hp is gone (or turned BE) and
// stops counting at once: holding a deleted pod's peak for a whole window would only keep batch
// capacity low for nothing. Samples not newer than the last one are ignored, so feeding the
// same collector snapshot twice is harmless.
func (e *Estimator) Observe(t time.Time, node, system Resources, hp map[string]Resources) {
	if !t.After(e.newest) {
		return
	}
	e.newest = t
	e.node.add(t, node)
	e.system.add(t, system)
	var sum Resources
	for uid, u := range hp {
		p, ok := e.pods[uid]
		if !ok {
			p = newPair(e.cfg)
			e.pods[uid] = p
		}
		p.add(t, u)
		sum.CPUMilli += u.CPUMilli
		sum.MemoryBytes += u.MemoryBytes
	}
	e.hpSum.add(t, sum)
	for uid := range e.pods {
		if _, ok := hp[uid]; !ok {
			delete(e.pods, uid)
		}
	}
}

// Span is how much history the estimator holds: the time from its oldest sample still inside
// the window (as of the last Estimate) to its newest.
func (e *Estimator) Span() time.Duration {
	if len(e.system.cpu.samples) == 0 {
		return 0
	}
	return e.newest.Sub(e.system.cpu.samples[0].t)
}

// Newest is the time of the newest observation, zero before the first.
func (e *Estimator) Newest() time.Time { return e.newest }

// Estimate is what the estimator predicts at one instant.
type Estimate struct {
	// SystemPeak is the predicted peak of system usage.
	SystemPeak Resources
	// PodPeaks is each high-priority pod's predicted peak, by UID.
	PodPeaks map[string]Resources
	// NodeMean and HPMean average node and Σ HP usage over the requested interval.
	NodeMean, HPMean Resources
}

// Estimate predicts at now; mean is the interval the averages cover (the report interval).
func (e *Estimator) Estimate(now time.Time, mean time.Duration) Estimate {
	est := Estimate{
		SystemPeak: e.system.peak(now),
		PodPeaks:   make(map[string]Resources, len(e.pods)),
		NodeMean:   e.node.mean(now, mean),
		HPMean:     e.hpSum.mean(now, mean),
	}
	for uid, p := range e.pods {
		est.PodPeaks[uid] = p.peak(now)
	}
	return est
}

// HPPods joins predicted peaks with requests into the formula's HP list, sorted by UID. A pod
// with a request but no usage sample yet (it just started) still counts by its request, and a
// pod with usage but no known request counts a zero request.
func HPPods(peaks, requests map[string]Resources) []Pod {
	uids := slices.Collect(maps.Keys(peaks))
	for uid := range requests {
		if _, ok := peaks[uid]; !ok {
			uids = append(uids, uid)
		}
	}
	slices.Sort(uids)
	pods := make([]Pod, 0, len(uids))
	for _, uid := range uids {
		pods = append(pods, Pod{UID: uid, Usage: peaks[uid], Request: requests[uid]})
	}
	return pods
}
