package main

import (
	"math"
	"testing"
)

const webhookMetrics = `# HELP tandem_webhook_admission_duration_seconds Time to answer an admission review.
# TYPE tandem_webhook_admission_duration_seconds histogram
tandem_webhook_admission_duration_seconds_bucket{path="/mutate-pod",le="0.001"} 90
tandem_webhook_admission_duration_seconds_bucket{path="/mutate-pod",le="0.002"} 98
tandem_webhook_admission_duration_seconds_bucket{path="/mutate-pod",le="0.005"} 100
tandem_webhook_admission_duration_seconds_bucket{path="/mutate-pod",le="+Inf"} 100
tandem_webhook_admission_duration_seconds_sum{path="/mutate-pod"} 0.08
tandem_webhook_admission_duration_seconds_count{path="/mutate-pod"} 100
tandem_webhook_admission_duration_seconds_bucket{path="/validate-pod",le="0.001"} 100
tandem_webhook_admission_duration_seconds_bucket{path="/validate-pod",le="0.002"} 100
tandem_webhook_admission_duration_seconds_bucket{path="/validate-pod",le="0.005"} 100
tandem_webhook_admission_duration_seconds_bucket{path="/validate-pod",le="+Inf"} 100
tandem_webhook_admission_duration_seconds_sum{path="/validate-pod"} 0.03
tandem_webhook_admission_duration_seconds_count{path="/validate-pod"} 100
`

func TestHistogramQuantile(t *testing.T) {
	all, err := parseHistogram([]byte(webhookMetrics), "tandem_webhook_admission_duration_seconds", nil)
	if err != nil {
		t.Fatal(err)
	}
	mutate, err := parseHistogram([]byte(webhookMetrics), "tandem_webhook_admission_duration_seconds", map[string]string{"path": "/mutate-pod"})
	if err != nil {
		t.Fatal(err)
	}
	empty, err := parseHistogram([]byte(webhookMetrics), "no_such_metric", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		h    histogram
		q    float64
		want float64 // NaN: no observations
	}{
		{"both paths: 200 observations, the 198th in the 1-2 ms bucket", all, 0.99, 0.001 + 0.001*(198-190)/(198-190)},
		{"both paths, median", all, 0.5, 0.001 * 100 / 190},
		{"mutate alone: the 99th of 100 in the 2-5 ms bucket", mutate, 0.99, 0.002 + 0.003*(99-98)/(100-98)},
		{"a window with nothing", all.minus(all), 0.99, math.NaN()},
		{"a metric absent", empty, 0.99, math.NaN()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.h.quantile(tc.q)
			if math.IsNaN(tc.want) != math.IsNaN(got) || !math.IsNaN(got) && math.Abs(got-tc.want) > 1e-9 {
				t.Errorf("quantile(%g) = %g, want %g", tc.q, got, tc.want)
			}
		})
	}
}

func TestSumMetric(t *testing.T) {
	body := []byte(`# TYPE tandem_extender_requests_total counter
tandem_extender_requests_total{verb="filter",code="200"} 7
tandem_extender_requests_total{verb="prioritize",code="200"} 5
# TYPE tandem_webhook_profiles gauge
tandem_webhook_profiles 1
`)
	for _, tc := range []struct {
		name   string
		labels []string
		want   float64
		found  bool
	}{
		{"tandem_extender_requests_total", nil, 12, true},
		{"tandem_extender_requests_total", []string{"verb", "filter"}, 7, true},
		{"tandem_extender_requests_total", []string{"verb", "filter", "code", "500"}, 0, true},
		{"tandem_webhook_profiles", nil, 1, true},
		{"tandem_webhook_profiles_invalid", nil, 0, false},
	} {
		got, found, err := sumMetric(body, tc.name, tc.labels...)
		if err != nil || got != tc.want || found != tc.found {
			t.Errorf("sumMetric(%s) = %g, %v, %v; want %g, %v", tc.name, got, found, err, tc.want, tc.found)
		}
	}
	if _, _, err := sumMetric([]byte("not metrics {"), "x"); err == nil {
		t.Error("a body that is not the text format parsed")
	}
}
