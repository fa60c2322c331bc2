package reclaim

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// DefaultQuantile is the share of recent load the predicted peak covers.
const DefaultQuantile = 0.95

// PredictorConfig shapes every Predictor of a node.
type PredictorConfig struct {
	// Window is how far back samples count: colocation-config's metricAggregateDurationSeconds.
	Window time.Duration
	// HalfLife is the age at which a sample weighs half as much as a fresh one. It decides how
	// fast a past spike stops holding the peak up once load calms down; a fresh spike shows within
	// a few samples whatever it is. Zero means Window / 5.
	HalfLife time.Duration
	// Quantile is the weighted quantile reported as the peak. Zero means DefaultQuantile.
	Quantile float64
}

func (c PredictorConfig) withDefaults() PredictorConfig {
	if c.HalfLife == 0 {
		c.HalfLife = c.Window / 5
	}
	if c.Quantile == 0 {
		c.Quantile = DefaultQuantile
	}
	return c
}

// Validate reports a configuration no predictor can use.
func (c PredictorConfig) Validate() error {
	if c.Window <= 0 {
		return fmt.Errorf("predictor window must be positive, got %s: set metricAggregateDurationSeconds", c.Window)
	}
	if c.HalfLife < 0 {
		return fmt.Errorf("predictor half-life must not be negative, got %s", c.HalfLife)
	}
	if c.Quantile < 0 || c.Quantile > 1 {
		return fmt.Errorf("predictor quantile must be within 0..1, got %v", c.Quantile)
	}
	return nil
}

type sample struct {
	t time.Time
	v int64
	// w is the sample's weight relative to the predictor's reference time:
	// 2^((t − ref)/halfLife). Only ratios of weights matter for a quantile, and the age-based
	// weight 2^(−(now − t)/halfLife) is this times a factor common to all samples, so it is
	// computed once per sample instead of once per sample per query.
	w float64
}

// rebaseExponent bounds the exponent of a stored weight, far below float64's range of 2^1023.
const rebaseExponent = 400

// Predictor estimates the peak of one series (a pod's CPU, the system's memory, …) from its
// recent history: the weighted quantile of the samples inside the window, where each sample
// weighs 2^(−age/halfLife). This is a decaying histogram whose buckets are the samples
// themselves; at one sample a second over a five-minute window that is 300 values, cheaper to keep
// exactly than to bucket and more precise.
//
// A Predictor keeps no clock: the caller passes sample times and the time it asks at. It is not
// safe for concurrent use.
type Predictor struct {
	cfg     PredictorConfig
	samples []sample // in time order
	ref     time.Time
	scratch []weighted
}

type weighted struct {
	v int64
	w float64
}

// NewPredictor returns an empty predictor; cfg must be valid.
func NewPredictor(cfg PredictorConfig) *Predictor {
	return &Predictor{cfg: cfg.withDefaults()}
}

// Add records a sample taken at t. A sample older than the newest one is dropped: the collector
// samples in order, and a reordered one would only blur the window.
func (p *Predictor) Add(t time.Time, v int64) {
	if n := len(p.samples); n > 0 && t.Before(p.samples[n-1].t) {
		return
	}
	if p.ref.IsZero() {
		p.ref = t
	}
	e := p.exponent(t)
	if e > rebaseExponent {
		p.rebase(t)
		e = 0
	}
	p.samples = append(p.samples, sample{t: t, v: v, w: math.Exp2(e)})
}

// exponent is (t − ref)/halfLife, or 0 without decay.
func (p *Predictor) exponent(t time.Time) float64 {
	if p.cfg.HalfLife <= 0 {
		return 0
	}
	return t.Sub(p.ref).Seconds() / p.cfg.HalfLife.Seconds()
}

// rebase moves the reference time to t and rescales stored weights; weights of samples far older
// than t underflow to 0, and such samples have left any sensible window anyway.
func (p *Predictor) rebase(t time.Time) {
	shift := math.Exp2(-p.exponent(t))
	for i := range p.samples {
		p.samples[i].w *= shift
	}
	p.ref = t
}

// prune drops samples that left the window ending at now.
func (p *Predictor) prune(now time.Time) {
	cut := now.Add(-p.cfg.Window)
	i := 0
	for i < len(p.samples) && !p.samples[i].t.After(cut) {
		i++
	}
	if i > 0 {
		p.samples = append(p.samples[:0], p.samples[i:]...)
	}
}

// Len is the number of samples inside the window after the last Peak or Mean.
func (p *Predictor) Len() int { return len(p.samples) }

// Newest is the time of the newest sample, zero when there is none.
func (p *Predictor) Newest() time.Time {
	if len(p.samples) == 0 {
		return time.Time{}
	}
	return p.samples[len(p.samples)-1].t
}

// Peak is the predicted peak at now; ok is false when no sample is inside the window.
func (p *Predictor) Peak(now time.Time) (peak int64, ok bool) {
	p.prune(now)
	if len(p.samples) == 0 {
		return 0, false
	}
	p.scratch = p.scratch[:0]
	var total float64
	for _, s := range p.samples {
		p.scratch = append(p.scratch, weighted{s.v, s.w})
		total += s.w
	}
	slices.SortFunc(p.scratch, func(a, b weighted) int {
		switch {
		case a.v < b.v:
			return -1
		case a.v > b.v:
			return 1
		}
		return 0
	})
	// The smallest value whose cumulative weight reaches the quantile: a value only counts as the
	// peak once load at or below it covers that share of the (decayed) recent past.
	want := p.cfg.Quantile * total
	var acc float64
	for _, s := range p.scratch {
		acc += s.w
		if acc >= want*(1-1e-12) {
			return s.v, true
		}
	}
	return p.scratch[len(p.scratch)-1].v, true
}

// Mean is the plain average of the samples taken in (now − d, now]; ok is false when there is
// none. It answers "what did the node use over the report interval" for the node-metric
// annotation, which promises averages, not peaks.
func (p *Predictor) Mean(now time.Time, d time.Duration) (mean int64, ok bool) {
	p.prune(now)
	cut := now.Add(-d)
	var sum, n int64
	for i := len(p.samples) - 1; i >= 0 && p.samples[i].t.After(cut); i-- {
		sum += p.samples[i].v
		n++
	}
	if n == 0 {
		return 0, false
	}
	return sum / n, true
}
