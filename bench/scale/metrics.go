package main

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"net/http"
	"sort"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/procfs"

	"github.com/tandemkit/tandem/bench/internal/controlplane"
)

// histogram is a Prometheus histogram's cumulative buckets, summed over the series asked for.
type histogram struct {
	bounds []float64 // upper bounds, ascending, +Inf last
	counts []float64 // cumulative
}

// scrapeHistogram sums the buckets of metric name over the series whose labels match want.
func scrapeHistogram(ctx context.Context, url, name string, want map[string]string) (histogram, error) {
	body, err := controlplane.Fetch(ctx, &http.Client{}, url, "")
	if err != nil {
		return histogram{}, err
	}
	return parseHistogram(body, name, want)
}

func parseHistogram(body []byte, name string, want map[string]string) (histogram, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return histogram{}, fmt.Errorf("parse metrics: %w", err)
	}
	fam, ok := fams[name]
	if !ok {
		return histogram{}, nil
	}
	sums := map[float64]float64{}
	for _, m := range fam.GetMetric() {
		if !labelsMatch(m, want) || m.GetHistogram() == nil {
			continue
		}
		inf := false
		for _, b := range m.GetHistogram().GetBucket() {
			sums[b.GetUpperBound()] += float64(b.GetCumulativeCount())
			inf = inf || math.IsInf(b.GetUpperBound(), 1)
		}
		if !inf {
			sums[math.Inf(1)] += float64(m.GetHistogram().GetSampleCount())
		}
	}
	var h histogram
	for b := range sums {
		h.bounds = append(h.bounds, b)
	}
	sort.Float64s(h.bounds)
	for _, b := range h.bounds {
		h.counts = append(h.counts, sums[b])
	}
	return h, nil
}

func labelsMatch(m *dto.Metric, want map[string]string) bool {
	for k, v := range want {
		found := false
		for _, l := range m.GetLabel() {
			if l.GetName() == k && l.GetValue() == v {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// minus is h − before: the observations of a window.
func (h histogram) minus(before histogram) histogram {
	out := histogram{bounds: h.bounds, counts: make([]float64, len(h.counts))}
	for i, b := range h.bounds {
		out.counts[i] = h.counts[i]
		for j, bb := range before.bounds {
			if bb == b {
				out.counts[i] -= before.counts[j]
			}
		}
	}
	return out
}

func (h histogram) total() float64 {
	if len(h.counts) == 0 {
		return 0
	}
	return h.counts[len(h.counts)-1]
}

// quantile interpolates linearly within the bucket holding the q-quantile, as histogram_quantile
// does; in the +Inf bucket it answers the highest finite bound.
func (h histogram) quantile(q float64) float64 {
	n := h.total()
	if n == 0 {
		return math.NaN()
	}
	rank := q * n
	prevBound, prevCount := 0.0, 0.0
	for i, b := range h.bounds {
		c := h.counts[i]
		if c >= rank {
			if math.IsInf(b, 1) {
				return prevBound
			}
			if c == prevCount {
				return b
			}
			return prevBound + (b-prevBound)*(rank-prevCount)/(c-prevCount)
		}
		prevBound, prevCount = b, c
	}
	return prevBound
}

// peakRSS is the most resident memory process pid has held (VmHWM), in bytes.
func peakRSS(pid int) (int64, error) {
	proc, err := procfs.NewProc(pid)
	if err != nil {
		return 0, err
	}
	st, err := proc.NewStatus()
	if err != nil {
		return 0, fmt.Errorf("read /proc/%d/status: %w", pid, err)
	}
	return int64(st.VmHWM), nil
}

// sumMetric is the sum of the counter or gauge name over its series in a /metrics body; found is
// false when the body has no such metric.
func sumMetric(body []byte, name string, labels ...string) (sum float64, found bool, err error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return 0, false, fmt.Errorf("parse metrics: %w", err)
	}
	fam, ok := fams[name]
	if !ok {
		return 0, false, nil
	}
	for _, m := range fam.GetMetric() {
		if !hasLabels(m, labels) {
			continue
		}
		sum += m.GetCounter().GetValue() + m.GetGauge().GetValue() + m.GetUntyped().GetValue()
	}
	return sum, true, nil
}

// hasLabels reports whether m carries every name, value pair of labels.
func hasLabels(m *dto.Metric, labels []string) bool {
	for i := 0; i+1 < len(labels); i += 2 {
		var ok bool
		for _, l := range m.GetLabel() {
			if l.GetName() == labels[i] && l.GetValue() == labels[i+1] {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	return true
}
