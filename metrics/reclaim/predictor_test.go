package reclaim

import (
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 21, 6, 0, 0, 0, time.UTC)

// series feeds one sample a second from start for as many seconds as values has entries.
func feed(p *Predictor, start time.Time, values ...int64) time.Time {
	t := start
	for _, v := range values {
		p.Add(t, v)
		t = t.Add(time.Second)
	}
	return t.Add(-time.Second)
}

func repeat(v int64, n int) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = v
	}
	return out
}

// noisy is a steady 1000 with ±10 of noise in a fixed pattern.
func noisy(n int) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = 1000 + int64(i*8%21) - 10
	}
	return out
}

func TestPredictorPeak(t *testing.T) {
	t.Parallel()
	seed := PredictorConfig{Window: 300 * time.Second} // an operator's metricAggregateDurationSeconds, half-life 60s
	tests := []struct {
		name    string
		cfg     PredictorConfig
		values  []int64
		after   time.Duration // asked this long after the last sample
		lo, hi  int64
		comment string
	}{
		{name: "steady load: the top of the noise", cfg: seed, values: noisy(300), lo: 1005, hi: 1010},
		{name: "spike just ended: still the spike", cfg: seed, values: append(repeat(1000, 240), repeat(4000, 60)...), lo: 4000, hi: 4000},
		{
			name: "spike then 30s calm: a dip does not drop the peak", cfg: seed,
			values: append(append(repeat(1000, 210), repeat(4000, 60)...), repeat(1000, 30)...), lo: 4000, hi: 4000,
		},
		{
			// The spike's weight is (2^-3 − 2^-4)/(1 − 2^-5) ≈ 6.5% > 5% after 180 s of calm …
			name: "spike then 180s calm: spike still within the top 5%", cfg: seed,
			values: append(append(repeat(1000, 60), repeat(4000, 60)...), repeat(1000, 180)...), lo: 4000, hi: 4000,
		},
		{
			// … and ≈ 3.2% after 240 s, so calm load is the peak again.
			name: "spike then 240s calm: calm again", cfg: seed,
			values: append(repeat(4000, 60), repeat(1000, 240)...), lo: 1000, hi: 1000,
		},
		{
			name: "a fresh spike shows within 10 samples", cfg: seed,
			values: append(repeat(1000, 290), repeat(3000, 10)...), lo: 3000, hi: 3000,
		},
		{
			name: "without decay a spike holds until it leaves the window",
			cfg:  PredictorConfig{Window: 300 * time.Second, HalfLife: 1000 * time.Hour},
			// 20 of 300 samples (6.7%) are the spike, 240 s ago.
			values: append(repeat(4000, 20), repeat(1000, 280)...), lo: 4000, hi: 4000,
		},
		{
			name:   "without decay, the spike left the window",
			cfg:    PredictorConfig{Window: 300 * time.Second, HalfLife: 1000 * time.Hour},
			values: append(repeat(4000, 20), repeat(1000, 280)...), after: 20 * time.Second, lo: 1000, hi: 1000,
		},
		{name: "one sample", cfg: seed, values: []int64{42}, lo: 42, hi: 42},
		{name: "p50 of a ramp", cfg: PredictorConfig{Window: time.Hour, HalfLife: 1000 * time.Hour, Quantile: 0.5}, values: []int64{4, 3, 2, 1}, lo: 2, hi: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if err := tt.cfg.Validate(); err != nil {
				t.Fatal(err)
			}
			p := NewPredictor(tt.cfg)
			last := feed(p, t0, tt.values...)
			got, ok := p.Peak(last.Add(tt.after))
			if !ok || got < tt.lo || got > tt.hi {
				t.Fatalf("Peak() = %d, %v; want within [%d, %d]", got, ok, tt.lo, tt.hi)
			}
		})
	}
}

func TestPredictorEmptyAndOutOfOrder(t *testing.T) {
	t.Parallel()
	p := NewPredictor(PredictorConfig{Window: time.Minute})
	if _, ok := p.Peak(t0); ok {
		t.Fatal("Peak() of an empty predictor is ok")
	}
	p.Add(t0, 10)
	p.Add(t0.Add(-time.Second), 1000) // late: dropped
	if got, _ := p.Peak(t0); got != 10 {
		t.Fatalf("Peak() = %d after a late sample, want 10", got)
	}
	if _, ok := p.Peak(t0.Add(2 * time.Minute)); ok || p.Len() != 0 {
		t.Fatalf("samples outlived the window: ok %v, len %d", ok, p.Len())
	}
}

func TestPredictorMean(t *testing.T) {
	t.Parallel()
	p := NewPredictor(PredictorConfig{Window: 300 * time.Second})
	last := feed(p, t0, append(repeat(100, 240), repeat(400, 60)...)...)
	if got, _ := p.Mean(last, 60*time.Second); got != 400 {
		t.Errorf("Mean(60s) = %d, want 400", got)
	}
	if got, _ := p.Mean(last, 120*time.Second); got != 250 {
		t.Errorf("Mean(120s) = %d, want 250", got)
	}
	if _, ok := p.Mean(last.Add(time.Hour), time.Minute); ok {
		t.Error("Mean() of an empty window is ok")
	}
}

func TestPredictorConfigValidate(t *testing.T) {
	t.Parallel()
	for _, c := range []PredictorConfig{{}, {Window: time.Minute, HalfLife: -1}, {Window: time.Minute, Quantile: 1.5}} {
		if c.Validate() == nil {
			t.Errorf("Validate(%+v) = nil, want an error", c)
		}
	}
}

func TestEstimator(t *testing.T) {
	t.Parallel()
	e := NewEstimator(PredictorConfig{Window: 300 * time.Second})
	node := Resources{CPUMilli: 5000, MemoryBytes: 10 * gi}
	sys := Resources{CPUMilli: 500, MemoryBytes: gi}
	for i := range 60 {
		ts := t0.Add(time.Duration(i) * time.Second)
		hp := map[string]Resources{"a": {CPUMilli: 1000, MemoryBytes: gi}}
		if i < 30 {
			hp["gone"] = Resources{CPUMilli: 3000, MemoryBytes: 3 * gi}
		}
		e.Observe(ts, node, sys, hp)
		e.Observe(ts, Resources{}, Resources{}, nil) // the same snapshot again is ignored
	}
	now := t0.Add(59 * time.Second)
	if !e.Newest().Equal(now) {
		t.Fatalf("Newest() = %v, want %v", e.Newest(), now)
	}
	est := e.Estimate(now, 20*time.Second)
	if est.SystemPeak != sys || est.NodeMean != node {
		t.Errorf("system peak %+v, node mean %+v", est.SystemPeak, est.NodeMean)
	}
	if _, ok := est.PodPeaks["gone"]; ok || len(est.PodPeaks) != 1 {
		t.Errorf("PodPeaks = %+v, want only pod a", est.PodPeaks)
	}
	if want := (Resources{CPUMilli: 1000, MemoryBytes: gi}); est.HPMean != want {
		t.Errorf("HPMean over the last 20s = %+v, want %+v", est.HPMean, want)
	}

	pods := HPPods(est.PodPeaks, map[string]Resources{"a": {CPUMilli: 2000}, "new": {CPUMilli: 500, MemoryBytes: gi}})
	want := []Pod{
		{UID: "a", Usage: Resources{CPUMilli: 1000, MemoryBytes: gi}, Request: Resources{CPUMilli: 2000}},
		{UID: "new", Request: Resources{CPUMilli: 500, MemoryBytes: gi}},
	}
	if len(pods) != len(want) || pods[0] != want[0] || pods[1] != want[1] {
		t.Errorf("HPPods() = %+v, want %+v", pods, want)
	}
}

// Stored weights are relative to a reference time that moves forward now and then; a day of
// samples must neither overflow them nor change the answers.
func TestPredictorLongRun(t *testing.T) {
	t.Parallel()
	p := NewPredictor(PredictorConfig{Window: 300 * time.Second, HalfLife: 10 * time.Second})
	last := feed(p, t0, noisy(24*3600)...)
	if got, ok := p.Peak(last); !ok || got < 1005 || got > 1010 {
		t.Fatalf("Peak() after a day = %d, %v; want within [1005, 1010]", got, ok)
	}
	last = feed(p, last.Add(time.Second), repeat(4000, 30)...)
	if got, _ := p.Peak(last); got != 4000 {
		t.Fatalf("Peak() after a spike = %d, want 4000", got)
	}
	last = feed(p, last.Add(time.Second), repeat(1000, 120)...)
	if got, _ := p.Peak(last); got != 1000 {
		t.Fatalf("Peak() after the spike decayed = %d, want 1000", got)
	}
}
