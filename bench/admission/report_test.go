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

func TestSummarize(t *testing.T) {
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
}

func TestMinus(t *testing.T) {
	t.Parallel()
	ms := func(v float64) time.Duration { return time.Duration(math.Round(v*1000)) * time.Microsecond }
	st := func(mean, p50, p90, p99, mx float64) stats {
		return stats{n: 100, mean: ms(mean), p50: ms(p50), p90: ms(p90), p99: ms(p99), max: ms(mx)}
	}
	a, b, c := st(10, 9, 12, 20, 40), st(18.2, 17, 22, 38, 45), st(17, 16, 21.5, 37, 60)
	tests := []struct {
		name string
		x, y stats
		want delta
	}{
		{"B − A", b, a, delta{mean: ms(8.2), p50: ms(8), p90: ms(10), p99: ms(18), max: ms(5)}},
		{"C − A", c, a, delta{mean: ms(7), p50: ms(7), p90: ms(9.5), p99: ms(17), max: ms(20)}},
		{"B − C, max negative", b, c, delta{mean: ms(1.2), p50: ms(1), p90: ms(0.5), p99: ms(1), max: ms(-15)}},
		{"itself", a, a, delta{}},
		{"empty kinds", stats{}, stats{}, delta{}},
	}
	for _, tt := range tests {
		if got := minus(tt.x, tt.y); got != tt.want {
			t.Errorf("%s: minus = %+v, want %+v", tt.name, got, tt.want)
		}
	}
	// The three comparisons the report prints, in its order, and that B − A = (B − C) + (C − A).
	want := [][2]int{{kindWebhook, kindPlain}, {kindFloor, kindPlain}, {kindWebhook, kindFloor}}
	if len(comparisons) != len(want) {
		t.Fatalf("%d comparisons", len(comparisons))
	}
	for i, c := range comparisons {
		if [2]int{c.x, c.y} != want[i] {
			t.Errorf("comparison %d is %c − %c, want %c − %c", i, 'A'+c.x, 'A'+c.y, 'A'+want[i][0], 'A'+want[i][1])
		}
	}
	if ba, bc, ca := minus(b, a), minus(b, c), minus(c, a); ba.p99 != bc.p99+ca.p99 || ba.p50 != bc.p50+ca.p50 {
		t.Errorf("B − A %+v is not (B − C) %+v + (C − A) %+v", ba, bc, ca)
	}
}

func TestJudge(t *testing.T) {
	t.Parallel()
	ms := func(p99 int) stats { return stats{n: 100, p99: time.Duration(p99) * time.Millisecond} }
	kinds3 := func(a, b, c int) [kinds]stats { return [kinds]stats{ms(a), ms(b), ms(c)} }
	tests := []struct {
		name       string
		st         [kinds]stats
		failed     int
		aa, ok     bool
		wantInLine []string
	}{
		{name: "within, judged on B − C though B − A is over", st: kinds3(10, 28, 27), ok: true, wantInLine: []string{
			"verdict: PASS", "adds +1.00ms at p99 over the leanest webhook", "B − C: bench-webhook 28.00ms − bench-floor 27.00ms",
			"within the 2.00ms target", "B − A (+18.00ms at p99", "reported too but not judged", "calling any webhook", "C − A = +17.00ms", "all 300"}},
		{name: "exactly the target", st: kinds3(10, 14, 12), ok: true, wantInLine: []string{"PASS", "+2.00ms at p99"}},
		{name: "over", st: kinds3(10, 30, 27), wantInLine: []string{"verdict: FAIL", "+3.00ms at p99", "over the 2.00ms target", "B − A (+20.00ms", "C − A = +17.00ms"}},
		{name: "tandem-webhook faster than the floor", st: kinds3(10, 26, 27), ok: true, wantInLine: []string{"PASS", "-1.00ms at p99"}},
		{name: "the floor faster than no webhook", st: kinds3(10, 10, 9), ok: true, wantInLine: []string{"PASS", "+1.00ms at p99", "C − A = -1.00ms"}},
		{name: "failures fail a fast run", st: kinds3(10, 10, 10), failed: 2, wantInLine: []string{"FAIL", "within", "2 requests failed"}},
		{name: "A/A judges nothing", st: kinds3(10, 30, 12), aa: true, ok: true, wantInLine: []string{
			"A/A", "all three kinds sent to bench-plain", "+18.00ms (B − C)", "+20.00ms (B − A)", "+2.00ms (C − A)", "noise floor", "all 300"}},
		{name: "A/A with failures", st: kinds3(10, 10, 10), aa: true, failed: 1, wantInLine: []string{"1 requests failed"}},
	}
	for _, tt := range tests {
		j := judge(tt.st, 2*time.Millisecond, tt.failed, tt.aa)
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

func TestCallPair(t *testing.T) {
	t.Parallel()
	inf := math.Inf(1)
	h := func(count, sum float64) *histogram {
		return &histogram{bounds: []float64{0.005, inf}, cum: []float64{count, count}, count: count, sum: sum}
	}
	after := map[string]*histogram{"m": h(110, 0.5), "v": h(110, 0.3), "empty": h(10, 0.01)}
	before := map[string]*histogram{"m": h(10, 0.06), "v": h(10, 0.02), "empty": h(10, 0.01)}
	tests := []struct {
		name          string
		mutate, valid string
		m, v, sum     float64
		ok            bool
	}{
		{"both in the window", "m", "v", 0.0044, 0.0028, 0.0072, true},
		{"one without samples in the window", "m", "empty", 0, 0, 0, false},
		{"one missing", "m", "absent", 0, 0, 0, false},
	}
	for _, tt := range tests {
		m, v, sum, ok := callPair(after, before, tt.mutate, tt.valid)
		if ok != tt.ok || math.Abs(m-tt.m) > 1e-12 || math.Abs(v-tt.v) > 1e-12 || math.Abs(sum-tt.sum) > 1e-12 {
			t.Errorf("%s: callPair = %v %v %v %v, want %v %v %v %v", tt.name, m, v, sum, ok, tt.m, tt.v, tt.sum, tt.ok)
		}
	}
	// Without a before (the first scrape of a series), the whole histogram counts.
	if _, _, sum, ok := callPair(after, nil, "m", "v"); !ok || math.Abs(sum-(0.5/110+0.3/110)) > 1e-12 {
		t.Errorf("callPair without before = %v %v", sum, ok)
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
		{"floor, as expected", mutated, nsFloor, true},
		{"floor, bypassed", pod(nil), nsFloor, false},
		{"floor, other profiles", pod(map[string]string{admission.AnnotationProfiles: "bench-02"}), nsFloor, false},
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
	h, err := inProcessHandler(ps)
	if err != nil {
		t.Fatal(err)
	}
	costs, err := handlerCosts(h, submitted, admitted, 5)
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
