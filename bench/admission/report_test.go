package main

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tandemkit/tandem/admission"
)

const sampleMetrics = `# HELP tandem_webhook_admission_duration_seconds Time from a review's arrival to its answer, by webhook path.
# TYPE tandem_webhook_admission_duration_seconds histogram
tandem_webhook_admission_duration_seconds_bucket{webhook="/mutate-pod",le="0.0001"} 0
tandem_webhook_admission_duration_seconds_bucket{webhook="/mutate-pod",le="0.00025"} 10
tandem_webhook_admission_duration_seconds_bucket{webhook="/mutate-pod",le="0.0005"} 90
tandem_webhook_admission_duration_seconds_bucket{webhook="/mutate-pod",le="0.001"} 100
tandem_webhook_admission_duration_seconds_bucket{webhook="/mutate-pod",le="+Inf"} 100
tandem_webhook_admission_duration_seconds_sum{webhook="/mutate-pod"} 0.04
tandem_webhook_admission_duration_seconds_count{webhook="/mutate-pod"} 100
tandem_webhook_admission_duration_seconds_bucket{webhook="/validate-pod",le="0.0001"} 5
tandem_webhook_admission_duration_seconds_bucket{webhook="/validate-pod",le="+Inf"} 5
tandem_webhook_admission_duration_seconds_sum{webhook="/validate-pod"} 0.0003
tandem_webhook_admission_duration_seconds_count{webhook="/validate-pod"} 5
tandem_webhook_admission_requests_total{decision="patched",webhook="/mutate-pod"} 100
tandem_webhook_admission_requests_total{decision="allowed",webhook="/validate-pod"} 5
tandem_webhook_admission_requests_total{decision="allowed",webhook="/validate-profile"} 20
tandem_webhook_profiles 20
apiserver_admission_webhook_admission_duration_seconds_bucket{name="pods.mutate.tandem.io",operation="CREATE",rejected="false",type="admit",le="0.005"} 7
apiserver_admission_webhook_admission_duration_seconds_bucket{name="pods.mutate.tandem.io",operation="CREATE",rejected="false",type="admit",le="+Inf"} 8
apiserver_admission_webhook_admission_duration_seconds_bucket{name="pods.mutate.tandem.io",operation="CREATE",rejected="true",type="admit",le="0.005"} 1
apiserver_admission_webhook_admission_duration_seconds_bucket{name="pods.mutate.tandem.io",operation="CREATE",rejected="true",type="admit",le="+Inf"} 2
apiserver_admission_webhook_admission_duration_seconds_sum{name="pods.mutate.tandem.io",operation="CREATE",rejected="false",type="admit"} 0.02
apiserver_admission_webhook_admission_duration_seconds_sum{name="pods.mutate.tandem.io",operation="CREATE",rejected="true",type="admit"} 0.03
apiserver_admission_webhook_admission_duration_seconds_count{name="pods.mutate.tandem.io",operation="CREATE",rejected="false",type="admit"} 8
apiserver_admission_webhook_admission_duration_seconds_count{name="pods.mutate.tandem.io",operation="CREATE",rejected="true",type="admit"} 2
weird_metric{path="a \"quoted\", {brace}"} 3
`

func TestParseHistograms(t *testing.T) {
	t.Parallel()
	hs, err := parseHistograms([]byte(sampleMetrics), "tandem_webhook_admission_duration_seconds", "webhook")
	if err != nil {
		t.Fatal(err)
	}
	m := hs["/mutate-pod"]
	if m == nil || m.count != 100 || m.sum != 0.04 || len(m.bounds) != 5 || m.cum[2] != 90 || !math.IsInf(m.bounds[4], 1) {
		t.Fatalf("/mutate-pod = %+v", m)
	}
	if v := hs["/validate-pod"]; v == nil || v.count != 5 {
		t.Fatalf("/validate-pod = %+v", v)
	}
	// Summed over the labels other than name.
	api, err := parseHistograms([]byte(sampleMetrics), "apiserver_admission_webhook_admission_duration_seconds", "name")
	if err != nil {
		t.Fatal(err)
	}
	if a := api["pods.mutate.tandem.io"]; a == nil || a.count != 10 || math.Abs(a.sum-0.05) > 1e-12 || a.cum[0] != 8 || a.cum[1] != 10 || len(api) != 1 {
		t.Fatalf("apiserver = %+v (%d series)", a, len(api))
	}
	reqs, err := parseCounters([]byte(sampleMetrics), "tandem_webhook_admission_requests_total", "decision")
	if err != nil || reqs["patched"] != 100 || reqs["allowed"] != 25 {
		t.Fatalf("counters = %v, %v", reqs, err)
	}
	if v, ok := gaugeValue([]byte(sampleMetrics), "tandem_webhook_profiles"); !ok || v != 20 {
		t.Fatalf("gauge = %v, %v", v, ok)
	}
	_, labels, v, err := parseSample(`weird_metric{path="a \"quoted\", {brace}"} 3`)
	if err != nil || labels["path"] != `a "quoted", {brace}` || v != 3 {
		t.Fatalf("parseSample = %q %v %v", labels, v, err)
	}
	for _, bad := range []string{`x{a="b} 1`, `x{a} 1`, `x`, `x{a="b"}`} {
		if _, _, _, err := parseSample(bad); err == nil {
			t.Errorf("parseSample(%q) succeeded", bad)
		}
	}
}

func TestHistogramQuantile(t *testing.T) {
	t.Parallel()
	inf := math.Inf(1)
	h := histogram{bounds: []float64{0.001, 0.002, 0.005, inf}, cum: []float64{50, 90, 99, 100}, count: 100, sum: 0.15}
	tests := []struct {
		name          string
		h             histogram
		q             float64
		est, lo, hi   float64
		wantNaN, near bool
	}{
		{name: "median in the first bucket, from 0", h: h, q: 0.5, est: 0.001, lo: 0, hi: 0.001},
		{name: "interpolated", h: h, q: 0.7, est: 0.0015, lo: 0.001, hi: 0.002},
		{name: "p99 at a bucket's top", h: h, q: 0.99, est: 0.005, lo: 0.002, hi: 0.005},
		{name: "in +Inf: the largest finite bound", h: h, q: 0.999, est: 0.005, lo: 0.005, hi: inf},
		{name: "empty", h: histogram{bounds: []float64{1, inf}, cum: []float64{0, 0}}, q: 0.5, wantNaN: true},
		{name: "empty buckets skipped", h: histogram{bounds: []float64{0.001, 0.002, inf}, cum: []float64{0, 4, 4}, count: 4}, q: 0.5, est: 0.0015, lo: 0.001, hi: 0.002},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			est, lo, hi := tt.h.quantile(tt.q)
			if tt.wantNaN {
				if !math.IsNaN(est) {
					t.Fatalf("quantile = %v, want NaN", est)
				}
				return
			}
			if math.Abs(est-tt.est) > 1e-12 || lo != tt.lo || hi != tt.hi {
				t.Fatalf("quantile(%v) = %v in (%v, %v], want %v in (%v, %v]", tt.q, est, lo, hi, tt.est, tt.lo, tt.hi)
			}
		})
	}
	before := &histogram{bounds: []float64{0.001, 0.002, 0.005, inf}, cum: []float64{40, 80, 80, 80}, count: 80, sum: 0.1}
	d := h.sub(before)
	if d.count != 20 || math.Abs(d.sum-0.05) > 1e-12 || d.cum[0] != 10 || d.cum[2] != 19 || h.cum[0] != 50 {
		t.Fatalf("sub = %+v (h now %+v)", d, h)
	}
	if math.Abs(d.mean()-0.0025) > 1e-12 {
		t.Fatalf("mean = %v", d.mean())
	}
	if got := h.sub(nil); got.count != h.count {
		t.Fatalf("sub(nil) = %+v", got)
	}
}

func TestSummarizeAndJudge(t *testing.T) {
	t.Parallel()
	start := time.Unix(1000, 0)
	var outs []outcome
	for i := range 200 {
		k := i % 2
		lat := time.Duration(1+i/2) * time.Millisecond // 1..100 ms per kind
		if k == kindWebhook {
			lat += time.Millisecond
		}
		due := start.Add(time.Duration(i) * 10 * time.Millisecond)
		o := outcome{slot: slot{kind: k, seq: i / 2}, due: due, sent: due.Add(100 * time.Microsecond), done: due.Add(lat)}
		if k == kindWebhook && i == 199 {
			o.err = errors.New("boom")
		}
		outs = append(outs, o)
	}
	a := summarize(outs, func(o outcome) bool { return o.kind == kindPlain })
	b := summarize(outs, func(o outcome) bool { return o.kind == kindWebhook })
	if a.n != 100 || a.p50 != 50*time.Millisecond || a.p99 != 99*time.Millisecond || a.max != 100*time.Millisecond || a.failed != 0 || a.lagMax != 100*time.Microsecond {
		t.Fatalf("A = %+v", a)
	}
	if b.p99 != 100*time.Millisecond || b.failed != 1 || b.errors["boom"] != 1 {
		t.Fatalf("B = %+v", b)
	}
	if e := summarize(nil, func(outcome) bool { return true }); e.n != 0 || e.p99 != 0 {
		t.Fatalf("empty = %+v", e)
	}

	ms := func(p99 int) stats { return stats{n: 100, p99: time.Duration(p99) * time.Millisecond} }
	tests := []struct {
		name       string
		a, b       stats
		failed     int
		aa, ok     bool
		wantInLine []string
	}{
		{name: "within", a: ms(10), b: ms(11), ok: true, wantInLine: []string{"verdict: PASS", "+1.00ms", "within the 2.00ms target", "all 200"}},
		{name: "exactly the target", a: ms(10), b: ms(12), ok: true, wantInLine: []string{"PASS"}},
		{name: "over", a: ms(10), b: ms(13), wantInLine: []string{"verdict: FAIL", "+3.00ms", "over the 2.00ms target"}},
		{name: "webhook faster", a: ms(10), b: ms(9), ok: true, wantInLine: []string{"PASS", "-1.00ms"}},
		{name: "failures fail a fast run", a: ms(10), b: ms(10), failed: 2, wantInLine: []string{"FAIL", "within", "2 requests failed"}},
		{name: "A/A judges nothing", a: ms(10), b: ms(30), aa: true, ok: true, wantInLine: []string{"A/A", "+20.00ms", "noise floor"}},
		{name: "A/A with failures", a: ms(10), b: ms(10), aa: true, failed: 1},
	}
	for _, tt := range tests {
		j := judge(tt.a, tt.b, 2*time.Millisecond, tt.failed, tt.aa)
		if j.ok != tt.ok {
			t.Errorf("%s: ok = %v, want %v (%s)", tt.name, j.ok, tt.ok, j.line)
		}
		for _, w := range tt.wantInLine {
			if !strings.Contains(j.line, w) {
				t.Errorf("%s: %q lacks %q", tt.name, j.line, w)
			}
		}
	}
}

func TestCheckAdmitted(t *testing.T) {
	t.Parallel()
	pod := func(ann map[string]string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: ann}}
	}
	mutated := pod(map[string]string{admission.AnnotationProfiles: "bench-00,bench-02"})
	tests := []struct {
		name string
		pod  *corev1.Pod
		ns   string
		ok   bool
	}{
		{"webhook, as expected", mutated, nsWebhook, true},
		{"webhook, bypassed", pod(nil), nsWebhook, false},
		{"webhook, other profiles", pod(map[string]string{admission.AnnotationProfiles: "bench-00"}), nsWebhook, false},
		{"plain, untouched", pod(map[string]string{"x": "y"}), nsPlain, true},
		{"plain, mutated", mutated, nsPlain, false},
	}
	for _, tt := range tests {
		if err := checkAdmitted(tt.pod, tt.ns, "bench-00,bench-02"); (err == nil) != tt.ok {
			t.Errorf("%s: err = %v", tt.name, err)
		}
	}
}

// TestProfilesTakeWhatTheTableSays runs the benchmark's profiles through the admission package's
// own Mutator, so a mistake in the table shows here rather than as a failed setup against a
// cluster; and checks the in-process handler allows both pods.
func TestProfilesTakeWhatTheTableSays(t *testing.T) {
	t.Parallel()
	ps := benchProfiles()
	if len(ps) != 20 {
		t.Fatalf("%d profiles, the issue asks for 20", len(ps))
	}
	compiled, err := compiledProfiles(ps)
	if err != nil {
		t.Fatal(err)
	}
	m := admission.NewMutator(staticCluster{}, func() []*admission.Profile { return compiled }, rand.IntN)
	want := expectedAnnotations(ps)
	pods := benchPods()
	for v := range variants {
		raw, err := json.Marshal(pods[v])
		if err != nil {
			t.Fatal(err)
		}
		got, err := m.Mutate(context.Background(), nsWebhook, raw)
		if err != nil {
			t.Fatalf("%s: %v", variantNames[v], err)
		}
		if strings.Join(got.Applied, ",") != want[v] || (v == variantBatch) != got.Batch {
			t.Errorf("%s: applied %v (batch %v), the table says %q", variantNames[v], got.Applied, got.Batch, want[v])
		}
	}
	var submitted, admitted [variants]*corev1.Pod
	for v := range variants {
		submitted[v] = pods[v].DeepCopy()
		submitted[v].Namespace = nsWebhook
		admitted[v] = submitted[v].DeepCopy()
		admitted[v].Annotations = map[string]string{admission.AnnotationProfiles: want[v]}
	}
	costs, err := handlerCosts(ps, submitted, admitted, 5)
	if err != nil {
		t.Fatal(err)
	}
	if len(costs) != 2*variants || perPod(costs) <= 0 {
		t.Fatalf("costs = %+v", costs)
	}
}

func TestBusyNote(t *testing.T) {
	t.Parallel()
	tests := []struct {
		load string
		lag  time.Duration
		want []string // substrings; none means no note
	}{
		{"0.50 0.40 0.30", time.Millisecond, nil},
		{"1.00 0.40 0.30", 10 * time.Millisecond, nil},
		{"1.01 0.40 0.30", 0, []string{"load average 1.01 on 2 CPUs"}},
		{"0.20 0.40 0.30", 50 * time.Millisecond, []string{"50.00ms late"}},
		{"4.00 3 2", 50 * time.Millisecond, []string{"load average 4.00", "50.00ms late", "-aa"}},
		{"unknown", 0, nil},
	}
	for _, tt := range tests {
		got := busyNote(tt.load, 2, tt.lag)
		if (got == "") != (tt.want == nil) {
			t.Errorf("busyNote(%q, %s) = %q", tt.load, tt.lag, got)
		}
		for _, w := range tt.want {
			if !strings.Contains(got, w) {
				t.Errorf("busyNote(%q, %s) = %q, lacks %q", tt.load, tt.lag, got, w)
			}
		}
	}
}
