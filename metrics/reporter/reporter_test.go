package reporter

// These tests use client-go's fake clientset: unit tests have no API server, and the edge cases
// here (a conflict on one request, an outage of a given length) cannot be produced on demand with
// a real one. The fake applies patches like the API server does, but it does not keep the status
// subresource apart from the main resource, so the harness also checks that every request is a
// strategic merge patch of the status subresource. The tier-2 cluster tests run the reporter
// against a real API server.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/tandemkit/tandem/config/batchwindow"
	"github.com/tandemkit/tandem/config/slo"
	"github.com/tandemkit/tandem/internal/polltest"
	"github.com/tandemkit/tandem/kubeclient/kubeclienttest"
	"github.com/tandemkit/tandem/metrics/nodemetric"
	"github.com/tandemkit/tandem/metrics/reclaim"
	"github.com/tandemkit/tandem/resource/qos"
)

const (
	gi       = int64(1) << 30
	nodeName = "n1"
)

var t0 = time.Date(2026, 11, 21, 6, 0, 0, 0, time.UTC)

// seed004 is the colocation-config an operator runs under Koordinator (config/slo/testdata), with
// colocation switched on or off as enable says (the operator ships it off), so the reporter is tested
// on the numbers a real cluster publishes with: thresholds 60% cpu and 65% memory, usage policy, degrade after 15 minutes,
// refresh after 300 s, 10% diff threshold, 300 s aggregation, 60 s report interval.
func seed004(t testing.TB, enable bool) slo.ColocationSettings {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "config", "slo", "testdata", "seed004.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := slo.ParseFile(raw)
	if err != nil {
		t.Fatal(err)
	}
	r, err := cfg.ForNode(nil)
	if err != nil {
		t.Fatal(err)
	}
	r.Colocation.Enable = enable
	return r.Colocation
}

// testNode is 32 cores and 128 GiB, of which kubelet reserves 1 core and 4 GiB, with status and
// metadata that other writers own and that the reporter must leave alone.
func testNode() *corev1.Node {
	rl := func(cpu, mem string) corev1.ResourceList {
		return corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem),
			corev1.ResourcePods: resource.MustParse("110"), "example.com/dongle": resource.MustParse("4"),
		}
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: nodeName, Annotations: map[string]string{"owner.example.com/keep": "me"}},
		Status: corev1.NodeStatus{
			Capacity:    rl("32", "128Gi"),
			Allocatable: rl("31", "124Gi"),
			Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
		},
	}
}

// load is the node's usage: two service pods, one BE pod, 1.5 cores and 3 GiB of system use.
type load struct{ aCPU, bCPU int64 }

var steady = load{aCPU: 4000, bCPU: 3000}

func (l load) sample(at time.Time) *Sample {
	pods := []PodUsage{
		{UID: "a", QoS: qos.LS, Usage: reclaim.Resources{CPUMilli: l.aCPU / 2, MemoryBytes: 10 * gi}},
		{UID: "a", QoS: qos.LS, Usage: reclaim.Resources{CPUMilli: l.aCPU - l.aCPU/2, MemoryBytes: 10 * gi}}, // a second container
		{UID: "b", QoS: qos.LSR, Usage: reclaim.Resources{CPUMilli: l.bCPU, MemoryBytes: 10 * gi}},
		{UID: "c", QoS: qos.BE, Usage: reclaim.Resources{CPUMilli: 5000, MemoryBytes: 8 * gi}},
	}
	return &Sample{
		Time:     at,
		Capacity: reclaim.Resources{CPUMilli: 32000, MemoryBytes: 128 * gi},
		Node:     reclaim.Resources{CPUMilli: 1500 + l.aCPU + l.bCPU + 5000, MemoryBytes: 41 * gi},
		System:   reclaim.Resources{CPUMilli: 1500, MemoryBytes: 3 * gi},
		Pods:     pods,
	}
}

// With the steady load, the operator's thresholds and usage policy:
//
//	cpu:    32000 − 12800 (40%) − max(1500, 1000) − (4000 + 3000) = 10700
//	memory: 128Gi − 48103633715 (35%) − max(3Gi, 4Gi) − 30Gi = 52828097741
const (
	steadyBatchCPU    = 10700
	steadyBatchMemory = 52828097741
)

type harness struct {
	t        testing.TB
	client   *fake.Clientset
	clock    *clocktesting.FakeClock
	reg      *prometheus.Registry
	r        *Reporter
	mu       sync.Mutex
	sample   *Sample
	settings slo.ColocationSettings
	// ceiling is the steal headroom's BE ceiling, 0 for none.
	ceiling int64
	// window is the node's batch windows, nil for none; offset the API server's clock minus the node's.
	window *batchwindow.Schedule
	offset time.Duration
	seen   int
	ctx    context.Context // logs into the test's output
}

func newHarness(t testing.TB, settings slo.ColocationSettings, node *corev1.Node) *harness {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	h := &harness{t: t, ctx: ctx, client: fake.NewClientset(node), clock: clocktesting.NewFakeClock(t0), reg: prometheus.NewPedanticRegistry(), settings: settings}
	// No warm-up and no jitter, so that each test's first sample publishes and retries are exact;
	// TestWarmup covers the warm-up.
	r, err := New(Config{NodeName: nodeName, BackoffJitter: -1, Warmup: -1}, Deps{
		Client:     kubeclienttest.Clientset{Interface: h.client},
		Samples:    h.latest,
		Settings:   func() slo.ColocationSettings { h.mu.Lock(); defer h.mu.Unlock(); return h.settings },
		Clock:      h.clock,
		Registerer: h.reg,
		BECeiling: func() (int64, bool) {
			h.mu.Lock()
			defer h.mu.Unlock()
			return h.ceiling, h.ceiling > 0
		},
		Window: func(now time.Time) batchwindow.State {
			h.mu.Lock()
			defer h.mu.Unlock()
			if h.window == nil {
				return batchwindow.State{}
			}
			return h.window.State(now)
		},
		ClockOffset: func() (time.Duration, bool) { h.mu.Lock(); defer h.mu.Unlock(); return h.offset, true },
	})
	if err != nil {
		t.Fatal(err)
	}
	h.r = r
	return h
}

func (h *harness) latest() *Sample { h.mu.Lock(); defer h.mu.Unlock(); return h.sample }

func (h *harness) setSample(s *Sample) { h.mu.Lock(); defer h.mu.Unlock(); h.sample = s }

// step runs the reporter at the clock's now and returns the patches it sent.
func (h *harness) step() []k8stesting.PatchAction {
	h.r.Step(h.ctx)
	return h.newPatches()
}

// newPatches returns the patches sent since the last call, each checked to be what the reporter
// sends: a strategic merge patch of the Node's status subresource.
func (h *harness) newPatches() []k8stesting.PatchAction {
	h.t.Helper()
	actions := h.client.Actions()
	var out []k8stesting.PatchAction
	for _, a := range actions[h.seen:] {
		if p, ok := a.(k8stesting.PatchAction); ok {
			if p.GetSubresource() != "status" || p.GetPatchType() != types.StrategicMergePatchType {
				h.t.Errorf("%v: patch of subresource %q as %s, want a strategic merge patch of status", h.clock.Now().Sub(t0), p.GetSubresource(), p.GetPatchType())
			}
			out = append(out, p)
		}
	}
	h.seen = len(actions)
	return out
}

// run samples l once a second for d, stepping after every sample, and returns the time of each
// patch.
func (h *harness) run(d time.Duration, l load) []time.Duration {
	var got []time.Duration
	for end := h.clock.Now().Add(d); h.clock.Now().Before(end); h.clock.Step(time.Second) {
		h.setSample(l.sample(h.clock.Now()))
		for range h.step() {
			got = append(got, h.clock.Now().Sub(t0))
		}
	}
	return got
}

// body is a patch the reporter sent, decoded.
type body struct {
	Metadata struct {
		Annotations map[string]*string `json:"annotations"`
	} `json:"metadata"`
	Status struct {
		Capacity    map[corev1.ResourceName]*string `json:"capacity"`
		Allocatable map[corev1.ResourceName]*string `json:"allocatable"`
	} `json:"status"`
}

func decode(t testing.TB, p k8stesting.PatchAction) body {
	t.Helper()
	var b body
	if err := json.Unmarshal(p.GetPatch(), &b); err != nil {
		t.Fatalf("patch %s: %v", p.GetPatch(), err)
	}
	return b
}

// annotation returns the node-metric annotation the patch sets, "" when it sets none.
func (b body) annotation() string {
	if v := b.Metadata.Annotations[nodemetric.AnnotationKey]; v != nil {
		return *v
	}
	return ""
}

// batchKeys reports whether the patch names both batch resources in both capacity and allocatable.
func (b body) batchKeys() bool {
	for _, l := range []map[corev1.ResourceName]*string{b.Status.Capacity, b.Status.Allocatable} {
		for _, r := range []corev1.ResourceName{nodemetric.ResourceBatchCPU, nodemetric.ResourceBatchMemory} {
			if _, ok := l[r]; !ok {
				return false
			}
		}
	}
	return true
}

func (h *harness) node() *corev1.Node {
	n, err := h.client.CoreV1().Nodes().Get(context.Background(), nodeName, metav1.GetOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	return n
}

func (h *harness) counter(result string) float64 {
	return testutil.ToFloat64(h.r.metrics.patches.WithLabelValues(result))
}

// batch returns the node's batch capacity and allocatable, -1 where absent.
func batch(n *corev1.Node) (capCPU, capMem, allocCPU, allocMem int64) {
	v := func(l corev1.ResourceList, name corev1.ResourceName) int64 {
		q, ok := l[name]
		if !ok {
			return -1
		}
		return q.Value()
	}
	return v(n.Status.Capacity, nodemetric.ResourceBatchCPU), v(n.Status.Capacity, nodemetric.ResourceBatchMemory),
		v(n.Status.Allocatable, nodemetric.ResourceBatchCPU), v(n.Status.Allocatable, nodemetric.ResourceBatchMemory)
}

func TestFirstPublish(t *testing.T) {
	t.Parallel()
	h := newHarness(t, seed004(t, true), testNode())
	h.setSample(steady.sample(t0))
	patches := h.step()
	if len(patches) != 1 {
		t.Fatalf("first step sent %d patches, want one with the status and the annotation", len(patches))
	}
	want := `{"metadata":{"annotations":{"tandem.io/batch-capacity":"{\"cpu\":\"safety margin (100 − reclaimThresholdPercent) 12.80 cores\",` +
		`\"memory\":\"safety margin (100 − reclaimThresholdPercent) 44.80 GiB\",\"cpuTerm\":\"safety\",\"memoryTerm\":\"safety\"}",` +
		`"tandem.io/node-metric":"{\"updateTime\":\"2026-11-21T06:00:00Z\",` +
		`\"reportIntervalSeconds\":60,\"nodeUsage\":{\"cpuMilli\":13500,\"memoryBytes\":44023414784},` +
		`\"hpUsage\":{\"cpuMilli\":7000,\"memoryBytes\":32212254720},` +
		`\"reclaimable\":{\"cpuMilli\":10700,\"memoryBytes\":52828097741}}"}},` +
		`"status":{"allocatable":{"kubernetes.io/batch-cpu":"10700","kubernetes.io/batch-memory":"52828097741"},` +
		`"capacity":{"kubernetes.io/batch-cpu":"10700","kubernetes.io/batch-memory":"52828097741"}}}`
	if got := string(patches[0].GetPatch()); got != want {
		t.Errorf("patch =\n%s\nwant\n%s", got, want)
	}

	n := h.node()
	if c, m, ac, am := batch(n); c != steadyBatchCPU || m != steadyBatchMemory || ac != c || am != m {
		t.Errorf("node batch capacity %d/%d allocatable %d/%d, want %d/%d", c, m, ac, am, steadyBatchCPU, steadyBatchMemory)
	}
	// What kubelet and others own is untouched.
	if q := n.Status.Capacity[corev1.ResourcePods]; q.Value() != 110 || len(n.Status.Conditions) != 1 ||
		n.Status.Allocatable.Cpu().MilliValue() != 31000 || n.Annotations["owner.example.com/keep"] != "me" {
		t.Errorf("the reporter changed what it does not own: %+v %+v", n.Status, n.Annotations)
	}
	m, err := nodemetric.FromNode(n)
	if err != nil {
		t.Fatal(err)
	}
	if m.Reclaimable != (reclaim.Resources{CPUMilli: steadyBatchCPU, MemoryBytes: steadyBatchMemory}) {
		t.Errorf("annotation reclaimable = %+v", m.Reclaimable)
	}

	if got := h.counter(resultSuccess); got != 1 {
		t.Errorf("patches_total{result=success} = %v, want 1", got)
	}
	if got := testutil.ToFloat64(h.r.metrics.reclaimableCPU); got != 10.7 {
		t.Errorf("reclaimable cpu cores = %v, want 10.7", got)
	}
	if got := testutil.ToFloat64(h.r.metrics.reclaimableMemory); got != steadyBatchMemory {
		t.Errorf("reclaimable memory bytes = %v", got)
	}
	if got := testutil.ToFloat64(h.r.metrics.lastSuccess); got != float64(t0.Unix()) {
		t.Errorf("last success = %v, want %d", got, t0.Unix())
	}
	// The formula's terms: 8 for CPU, 7 for memory (no steal headroom), and the deciding term of
	// each resource among five; the clock offset; no window phase without batch-window-config.
	if n, err := testutil.GatherAndCount(h.reg); err != nil || n != 6+8+7+10+1 {
		t.Errorf("registry has %d series (%v), want %d", n, err, 6+8+7+10+1)
	}
	if got := testutil.ToFloat64(h.r.metrics.cpuTerms.WithLabelValues("batch")); got != 10.7 {
		t.Errorf("cpu term batch = %v, want the published 10.7", got)
	}
	terms := map[string]float64{}
	for _, term := range []string{"capacity", "safety", "system", "hp", "batch"} {
		terms[term] = testutil.ToFloat64(h.r.metrics.cpuTerms.WithLabelValues(term))
	}
	if diff := terms["capacity"] - terms["safety"] - terms["system"] - terms["hp"] - terms["batch"]; diff > 1e-9 || diff < -1e-9 {
		t.Errorf("cpu terms %v do not add up: capacity − safety − system − hp − batch = %v", terms, diff)
	}
	var note CapacityNote
	if err := json.Unmarshal([]byte(n.Annotations[CapacityAnnotation]), &note); err != nil || note.CPUTerm == "" || note.CPU == "" || note.Memory == "" {
		t.Errorf("%s = %q (%v): want the deciding term of each resource", CapacityAnnotation, n.Annotations[CapacityAnnotation], err)
	}
	st := h.r.CapacityStatus()
	if !st.Computed || st.CPU == nil || st.CPU.Batch != steadyBatchCPU || st.Memory.Batch != steadyBatchMemory ||
		st.Published == nil || st.Published.CPUMilli != steadyBatchCPU || st.CPU.Bound == "" || st.CPU.BoundText == "" {
		t.Errorf("CapacityStatus = %+v (cpu %+v): want this step's terms, the published figure and the deciding term", st, st.CPU)
	}
	if st.CPU.Capacity-st.CPU.Safety-st.CPU.System-st.CPU.HP != st.CPU.Batch {
		t.Errorf("status terms %+v do not add up to batch", st.CPU)
	}
	for _, resource := range []string{"cpu", "memory"} {
		var ones float64
		for _, term := range boundTerms {
			ones += testutil.ToFloat64(h.r.metrics.bound.WithLabelValues(resource, string(term)))
		}
		if ones != 1 {
			t.Errorf("%s: %v terms marked as deciding, want exactly 1", resource, ones)
		}
	}
}

// TestPublishOnlyWhenMoved: a load that does not move past the tolerance costs no request between
// the refreshes after updateTimeThresholdSeconds, and a load that does costs one a report interval
// at most.
func TestPublishOnlyWhenMoved(t *testing.T) {
	t.Parallel()
	noisy := func(h *harness, d time.Duration) []time.Duration {
		var got []time.Duration
		for i := 0; i < int(d/time.Second); i++ {
			// ±3% on pod a, well within the 10% threshold.
			l := load{aCPU: 4000 + int64(i%7-3)*40, bCPU: 3000}
			got = append(got, h.run(time.Second, l)...)
		}
		return got
	}
	tests := []struct {
		name string
		// drive runs after the first publish at t0 and returns the request times.
		drive func(h *harness) []time.Duration
		want  []time.Duration
	}{
		{
			name:  "flat load: nothing until updateTimeThresholdSeconds",
			drive: func(h *harness) []time.Duration { return h.run(299*time.Second, steady) },
		},
		{
			name:  "noise below the threshold: nothing",
			drive: func(h *harness) []time.Duration { return noisy(h, 299*time.Second) },
		},
		{
			name:  "flat load: the refreshes after updateTimeThresholdSeconds and nothing between",
			drive: func(h *harness) []time.Duration { return h.run(899*time.Second, steady) },
			want:  []time.Duration{300 * time.Second, 600 * time.Second},
		},
		{
			name:  "noise below the threshold: the refreshes and nothing between",
			drive: func(h *harness) []time.Duration { return noisy(h, 899*time.Second) },
			want:  []time.Duration{300 * time.Second, 600 * time.Second},
		},
		{
			// Pod a goes from 4 to 7 cores at 101 s: batch cpu 10700 → 7700. The predicted peak
			// flips once the new level holds 5% of the decayed weight (4 samples), and batch
			// capacity is written once, with the annotation. The annotation's 60 s means are then
			// still on their way up; they are written once more a report interval later, settled.
			name: "step change: one write, and one more when the means have settled",
			drive: func(h *harness) []time.Duration {
				if quiet := h.run(100*time.Second, steady); len(quiet) != 0 {
					h.t.Fatalf("patches before the step: %v", quiet)
				}
				return h.run(100*time.Second, load{aCPU: 7000, bCPU: 3000})
			},
			want: []time.Duration{104 * time.Second, 164 * time.Second},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, seed004(t, true), testNode())
			h.setSample(steady.sample(t0))
			if n := len(h.step()); n != 1 {
				t.Fatalf("first publish sent %d patches", n)
			}
			h.clock.Step(time.Second)
			if got := tt.drive(h); !slices.Equal(got, tt.want) {
				t.Errorf("patches at %v, want at %v", got, tt.want)
			}
		})
	}
}

// TestOneWritePerInterval: inputs that move batch capacity past resourceDiffThreshold at every tick
// (each of which the reporter once wrote, with two requests) cost at most one request per report
// interval: at most 11 in 10 intervals, the first included, never two within one.
func TestOneWritePerInterval(t *testing.T) {
	t.Parallel()
	const (
		tick      = 5 * time.Second
		intervals = 10
	)
	// withPod is the steady load with one more service pod, of 3 cores: batch cpu 7700 instead of
	// 10700.
	withPod := func(at time.Time) *Sample {
		s := steady.sample(at)
		s.Pods = append(s.Pods, PodUsage{UID: "d", QoS: qos.LS, Usage: reclaim.Resources{CPUMilli: 3000, MemoryBytes: gi}})
		s.Node.CPUMilli += 3000
		s.Node.MemoryBytes += gi
		return s
	}
	tests := []struct {
		name string
		// at sets what the node looks like in the k-th second.
		at func(h *harness, k int, now time.Time)
	}{
		{
			// A short-lived service pod (a cron job, a canary) every other tick: the estimator forgets a
			// pod that is gone, so its peak leaves batch capacity at once.
			name: "a service pod comes and goes every tick",
			at: func(h *harness, k int, now time.Time) {
				if k/int(tick/time.Second)%2 == 0 {
					h.setSample(withPod(now))
				} else {
					h.setSample(steady.sample(now))
				}
			},
		},
		{
			name: "the steal headroom's BE ceiling moves every tick",
			at: func(h *harness, k int, now time.Time) {
				h.mu.Lock()
				h.ceiling = 0
				if k/int(tick/time.Second)%2 == 0 {
					h.ceiling = 4000
				}
				h.mu.Unlock()
				h.setSample(steady.sample(now))
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			settings := seed004(t, true)
			interval := time.Duration(settings.MetricReportIntervalSeconds) * time.Second
			h := newHarness(t, settings, testNode())
			var writes []time.Duration
			moves, ticks := 0, 0
			var prev float64
			for k := 0; k < int(intervals*interval/time.Second); k++ {
				now := h.clock.Now()
				tt.at(h, k, now)
				if now.Sub(t0)%tick != 0 {
					// Run takes every sample in as it comes and decides on the tick.
					h.r.observe(settings)
				} else {
					for range h.step() {
						writes = append(writes, now.Sub(t0))
					}
					cur := testutil.ToFloat64(h.r.metrics.reclaimableCPU) * 1000
					if ticks > 0 && math.Abs(cur-prev) > settings.ResourceDiffThreshold*prev && math.Abs(cur-prev) > 320 {
						moves++
					}
					prev = cur
					ticks++
				}
				h.clock.Step(time.Second)
			}
			if moves != ticks-1 {
				t.Fatalf("batch cpu moved past the threshold at %d of %d ticks, want every one", moves, ticks-1)
			}
			if len(writes) > intervals+1 {
				t.Errorf("%d requests in %d report intervals, want at most %d: %v", len(writes), intervals, intervals+1, writes)
			}
			for i := 1; i < len(writes); i++ {
				if gap := writes[i] - writes[i-1]; gap < interval {
					t.Errorf("requests at %v and %v, %v apart: two within one report interval (%v)", writes[i-1], writes[i], gap, interval)
				}
			}
			t.Logf("%d ticks moved batch capacity past the threshold; requests at %v", moves, writes)
			// Limited, not silenced: the node still publishes in every interval.
			if len(writes) < intervals {
				t.Errorf("%d requests in %d report intervals of moving load, want one in each: %v", len(writes), intervals, writes)
			}
		})
	}
}

// TestOneRequestPerStep: a step where both the batch resources and the annotation are due writes
// them in one request, to the status subresource, and the Node ends with both.
func TestOneRequestPerStep(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		enable bool
		// drive brings the reporter to the step under test, which is the last one it runs.
		drive func(h *harness)
		// wantCPU is the batch cpu the Node must carry afterwards, -1 for none.
		wantCPU int64
	}{
		{
			name:    "first publish",
			enable:  true,
			drive:   func(h *harness) { h.setSample(steady.sample(h.clock.Now())) },
			wantCPU: steadyBatchCPU,
		},
		{
			name:   "batch capacity moved",
			enable: true,
			drive: func(h *harness) {
				h.run(100*time.Second, steady)
				h.run(3*time.Second, load{aCPU: 7000, bCPU: 3000}) // the peak flips at the 4th sample
				h.setSample(load{aCPU: 7000, bCPU: 3000}.sample(h.clock.Now()))
			},
			wantCPU: steadyBatchCPU - 3000,
		},
		{
			name:   "colocation switched off",
			enable: true,
			drive: func(h *harness) {
				h.run(10*time.Second, steady)
				h.mu.Lock()
				h.settings.Enable = false
				h.mu.Unlock()
				h.setSample(steady.sample(h.clock.Now()))
			},
			wantCPU: -1,
		},
		{
			name:   "refresh after updateTimeThresholdSeconds",
			enable: true,
			drive: func(h *harness) {
				h.run(300*time.Second, steady)
				h.setSample(steady.sample(h.clock.Now()))
			},
			wantCPU: steadyBatchCPU,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, seed004(t, tt.enable), testNode())
			tt.drive(h)
			h.newPatches()
			patches := h.step()
			if len(patches) != 1 {
				t.Fatalf("%v: %d requests, want 1", h.clock.Now().Sub(t0), len(patches))
			}
			b := decode(t, patches[0])
			if b.annotation() == "" || !b.batchKeys() {
				t.Fatalf("request %s, want the annotation and both batch resources", patches[0].GetPatch())
			}
			n := h.node()
			if got := n.Annotations[nodemetric.AnnotationKey]; got != b.annotation() {
				t.Errorf("Node annotation %q, want the patch's %q", got, b.annotation())
			}
			c, m, ac, am := batch(n)
			if c != tt.wantCPU || ac != c || (tt.wantCPU < 0) != (m < 0) || am != m {
				t.Errorf("Node batch capacity %d/%d allocatable %d/%d, want cpu %d", c, m, ac, am, tt.wantCPU)
			}
			metric, err := nodemetric.FromNode(n)
			if err != nil {
				t.Fatal(err)
			}
			if want := max(tt.wantCPU, 0); metric.Reclaimable.CPUMilli != want || !metric.UpdateTime.Equal(h.clock.Now()) {
				t.Errorf("annotation %+v, want reclaimable cpu %d of the sample at %v", metric, want, h.clock.Now().Sub(t0))
			}
		})
	}
}

func TestWarmup(t *testing.T) {
	t.Parallel()
	h := newHarness(t, seed004(t, true), testNode())
	h.r.cfg.Warmup = 0 // the default: metricReportIntervalSeconds, 60 s in the operator's config
	if got, want := h.run(90*time.Second, steady), []time.Duration{60 * time.Second}; !slices.Equal(got, want) {
		t.Errorf("patches at %v, want at %v", got, want)
	}
	// The gauges show the estimate while it warms up.
	if v := testutil.ToFloat64(h.r.metrics.reclaimableCPU); v != 10.7 {
		t.Errorf("reclaimable cpu gauge = %v", v)
	}

	// An aggregation window no longer than the warm-up: the estimator never holds a whole window of
	// history, so the warm-up is cut to half the window instead of never ending.
	short := seed004(t, true)
	short.MetricAggregateDurationSeconds = short.MetricReportIntervalSeconds
	h3 := newHarness(t, short, testNode())
	h3.r.cfg.Warmup = 0
	got := h3.run(90*time.Second, steady)
	if want := time.Duration(short.MetricAggregateDurationSeconds) * time.Second / 2; !slices.Equal(got, []time.Duration{want}) {
		t.Errorf("window %ds: patched at %v, want once, at %v", short.MetricAggregateDurationSeconds, got, want)
	}

	// Disabled colocation is applied at once: removing needs no history.
	h2 := newHarness(t, seed004(t, false), testNode())
	h2.r.cfg.Warmup = 0
	h2.setSample(steady.sample(t0))
	if p := h2.step(); len(p) != 1 {
		t.Errorf("disabled: %d patches at the first sample, want 1", len(p))
	}
}

// TestRestartKeepsPublishedCapacity: a reporter that has no sample yet (tandem-proxy just restarted)
// leaves the batch capacity an earlier run published on the Node, instead of taking it off until its
// warm-up has passed; BE pods keep being placed meanwhile.
func TestRestartKeepsPublishedCapacity(t *testing.T) {
	t.Parallel()
	h := newHarness(t, seed004(t, true), testNode())
	h.run(10*time.Second, steady)
	if c, _, _, _ := batch(h.node()); c != steadyBatchCPU {
		t.Fatalf("first run published batch cpu %d, want %d", c, steadyBatchCPU)
	}

	// The restarted process: same Node, same settings, no sample for a while.
	h2 := newHarness(t, seed004(t, true), h.node())
	for i := 0; i < 30; i++ {
		if p := h2.step(); len(p) != 0 {
			t.Fatalf("%v without a sample: %d patches (%s), want none", h2.clock.Now().Sub(t0), len(p), p[0].GetPatch())
		}
		h2.clock.Step(time.Second)
	}
	if c, _, ac, _ := batch(h2.node()); c != steadyBatchCPU || ac != steadyBatchCPU {
		t.Fatalf("batch cpu %d, allocatable %d on the Node before the first sample, want the earlier %d kept", c, ac, steadyBatchCPU)
	}
	h2.run(5*time.Second, steady)
	if c, _, _, _ := batch(h2.node()); c != steadyBatchCPU {
		t.Fatalf("batch cpu %d after samples came, want %d", c, steadyBatchCPU)
	}
}

func TestStepChangeValue(t *testing.T) {
	t.Parallel()
	h := newHarness(t, seed004(t, true), testNode())
	h.run(100*time.Second, steady)
	h.run(100*time.Second, load{aCPU: 7000, bCPU: 3000})
	if c, _, _, _ := batch(h.node()); c != steadyBatchCPU-3000 {
		t.Fatalf("batch cpu after the step = %d, want %d", c, steadyBatchCPU-3000)
	}
}

func TestDegradeWithoutFreshSamples(t *testing.T) {
	t.Parallel()
	h := newHarness(t, seed004(t, true), testNode())
	h.run(10*time.Second, steady)
	// The collector stalls: Samples keeps returning the sample of t0+9s.
	var got []string
	for h.clock.Now().Before(t0.Add(10*time.Second + 20*time.Minute)) {
		for _, p := range h.step() {
			what := "status"
			if decode(t, p).annotation() != "" {
				what += "+annotation"
			}
			got = append(got, h.clock.Now().Sub(t0).String()+":"+what)
		}
		h.clock.Step(time.Second)
	}
	// The refreshes every 300 s rewrite the status (the sample is still within
	// degradeTimeMinutes); the annotation is rewritten once, with the last sample's figures, and
	// then left to age. 15 minutes after the last sample (9 s) batch drops to 0, at the first
	// step a report interval after the refresh at 15m.
	want := []string{"5m0s:status+annotation", "10m0s:status", "15m0s:status", "16m0s:status"}
	if !slices.Equal(got, want) {
		t.Fatalf("patches %v, want %v", got, want)
	}
	n := h.node()
	if c, m, ac, am := batch(n); c != 0 || m != 0 || ac != 0 || am != 0 {
		t.Errorf("batch after degrade = %d/%d/%d/%d, want all 0", c, m, ac, am)
	}
	// The annotation still carries the last sample's time, which is how the extender tells it
	// is stale (and ignores its reclaimable figure along with its usage).
	if m, err := nodemetric.FromNode(n); err != nil || !m.UpdateTime.Equal(t0.Add(9*time.Second)) {
		t.Errorf("annotation while degraded = %+v, %v; want updateTime of the last sample", m, err)
	}
	if got := testutil.ToFloat64(h.r.metrics.reclaimableCPU); got != 0 {
		t.Errorf("reclaimable cpu gauge = %v, want 0", got)
	}
	if n := testutil.CollectAndCount(h.r.metrics.cpuTerms) + testutil.CollectAndCount(h.r.metrics.bound); n != 0 {
		t.Errorf("%d term series while degraded: nothing was computed, want none", n)
	}
	if v := n.Annotations[CapacityAnnotation]; !strings.Contains(v, "degradeTimeMinutes") {
		t.Errorf("%s while degraded = %q, want the reason", CapacityAnnotation, v)
	}
	if st := h.r.CapacityStatus(); st.Computed || !strings.Contains(st.Why, "degradeTimeMinutes") || st.Published == nil || st.Published.CPUMilli != 0 {
		t.Errorf("CapacityStatus while degraded = %+v: want not computed, why naming degradeTimeMinutes, 0 published", st)
	}

	// The collector is back: batch capacity returns at once.
	h.setSample(steady.sample(h.clock.Now()))
	if p := h.step(); len(p) != 1 || decode(t, p[0]).annotation() == "" {
		t.Fatalf("recovery sent %d patches, want 1 with the annotation", len(p))
	}
	if c, _, _, _ := batch(h.node()); c != steadyBatchCPU {
		t.Errorf("batch cpu after recovery = %d", c)
	}
}

func TestColocationDisabled(t *testing.T) {
	t.Parallel()
	node := testNode()
	for _, l := range []corev1.ResourceList{node.Status.Capacity, node.Status.Allocatable} {
		l[nodemetric.ResourceBatchCPU] = resource.MustParse("9000")
		l[nodemetric.ResourceBatchMemory] = resource.MustParse("8Gi")
	}
	h := newHarness(t, seed004(t, false), node) // the operator's config as shipped: enable false
	h.setSample(steady.sample(t0))
	patches := h.step()
	if len(patches) != 1 {
		t.Fatalf("sent %d patches, want 1", len(patches))
	}
	b := decode(t, patches[0])
	for _, l := range []map[corev1.ResourceName]*string{b.Status.Capacity, b.Status.Allocatable} {
		for _, r := range []corev1.ResourceName{nodemetric.ResourceBatchCPU, nodemetric.ResourceBatchMemory} {
			if v, ok := l[r]; !ok || v != nil {
				t.Errorf("patch %s, want %s null in capacity and allocatable", patches[0].GetPatch(), r)
			}
		}
	}
	n := h.node()
	if c, m, ac, am := batch(n); c != -1 || m != -1 || ac != -1 || am != -1 {
		t.Errorf("batch resources still on the node: %d/%d/%d/%d", c, m, ac, am)
	}
	if n.Status.Capacity.Cpu().Value() != 32 {
		t.Errorf("removal touched cpu capacity: %v", n.Status.Capacity)
	}
	m, err := nodemetric.FromNode(n)
	if err != nil {
		t.Fatal(err)
	}
	if m.Reclaimable != (reclaim.Resources{}) || m.NodeUsage.CPUMilli != 13500 {
		t.Errorf("annotation while disabled = %+v, want usage and no reclaimable", m)
	}

	// Nothing more while disabled, until an operator turns colocation on.
	h.clock.Step(time.Second)
	if got := h.run(60*time.Second, steady); len(got) != 0 {
		t.Errorf("patches while disabled: %v", got)
	}
	h.mu.Lock()
	h.settings.Enable = true
	h.mu.Unlock()
	h.setSample(steady.sample(h.clock.Now()))
	if p := h.step(); len(p) != 1 {
		t.Fatalf("enabling sent %d patches, want 1", len(p))
	}
	if c, _, _, _ := batch(h.node()); c != steadyBatchCPU {
		t.Errorf("batch cpu after enabling = %d", c)
	}
}

// TestColocationSwitchedAtOnce: an operator's enable is written at the next step, though the
// reporter wrote a few seconds before, and then the report interval holds again.
func TestColocationSwitchedAtOnce(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		from, to bool
		wantCPU  int64 // on the Node after the switch, -1 for none
	}{
		{name: "enable flipped to false removes the batch resources at once", from: true, to: false, wantCPU: -1},
		{name: "enable flipped to true publishes them at once", from: false, to: true, wantCPU: steadyBatchCPU},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, seed004(t, tt.from), testNode())
			if got := h.run(10*time.Second, steady); !slices.Equal(got, []time.Duration{0}) {
				t.Fatalf("before the switch, patches at %v, want at 0s", got)
			}
			h.mu.Lock()
			h.settings.Enable = tt.to
			h.mu.Unlock()
			if got, want := h.run(50*time.Second, steady), []time.Duration{10 * time.Second}; !slices.Equal(got, want) {
				t.Errorf("after the switch at 10s, patches at %v, want at %v", got, want)
			}
			n := h.node()
			if c, m, ac, am := batch(n); c != tt.wantCPU || ac != c || (tt.wantCPU < 0) != (m < 0) || am != m {
				t.Errorf("Node batch capacity %d/%d allocatable %d/%d, want cpu %d", c, m, ac, am, tt.wantCPU)
			}
			if m, err := nodemetric.FromNode(n); err != nil || m.Reclaimable.CPUMilli != max(tt.wantCPU, 0) {
				t.Errorf("annotation %+v (%v), want reclaimable cpu %d", m, err, max(tt.wantCPU, 0))
			}
		})
	}
}

// failing makes the first n requests of verb on nodes fail with err.
func failing(client *fake.Clientset, verb string, n int, err error) *int {
	calls := new(int)
	client.PrependReactor(verb, "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		*calls++
		if *calls <= n {
			return true, nil, err
		}
		return false, nil, nil
	})
	return calls
}

func TestAPIServerDownThenBack(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		cfg        Config
		failures   int
		wantTries  []time.Duration // when the patch was tried
		wantErrors float64
	}{
		{
			name: "exponential backoff", failures: 3,
			wantTries: []time.Duration{0, 1 * time.Second, 3 * time.Second, 7 * time.Second}, wantErrors: 3,
		},
		{
			name: "capped at BackoffMax", cfg: Config{BackoffMax: 4 * time.Second}, failures: 5,
			// delays 1, 2, 4, 4, 4
			wantTries: []time.Duration{0, 1 * time.Second, 3 * time.Second, 7 * time.Second, 11 * time.Second, 15 * time.Second}, wantErrors: 5,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, seed004(t, true), testNode())
			if tt.cfg.BackoffMax != 0 {
				h.r.cfg.BackoffMax = tt.cfg.BackoffMax
				h.r.backoff = h.r.newBackoff()
			}
			unavailable := apierrors.NewServiceUnavailable("apiserver is restarting")
			failing(h.client, "patch", tt.failures, unavailable)
			var tries []time.Duration
			for range 30 {
				h.setSample(steady.sample(h.clock.Now()))
				for range h.step() {
					tries = append(tries, h.clock.Now().Sub(t0))
				}
				h.clock.Step(time.Second)
			}
			if !slices.Equal(tries, tt.wantTries) {
				t.Errorf("patch tried at %v, want %v", tries, tt.wantTries)
			}
			if got := h.counter(resultError); got != tt.wantErrors {
				t.Errorf("patches_total{result=error} = %v, want %v", got, tt.wantErrors)
			}
			if got := h.counter(resultSuccess); got != 1 {
				t.Errorf("patches_total{result=success} = %v, want 1 once the API server is back", got)
			}
			if c, _, _, _ := batch(h.node()); c != steadyBatchCPU {
				t.Errorf("batch cpu after recovery = %d", c)
			}
		})
	}
}

// TestBackoffJitter: each retry waits its doubled, capped delay plus up to BackoffJitter of it, so
// that nodes do not retry in step; a success starts the delays over.
func TestBackoffJitter(t *testing.T) {
	t.Parallel()
	h := newHarness(t, seed004(t, true), testNode())
	h.r.cfg.BackoffMax, h.r.cfg.BackoffJitter = 4*time.Second, 0.5
	h.r.backoff = h.r.newBackoff()
	unavailable := apierrors.NewServiceUnavailable("apiserver is restarting")
	retryIn := func() time.Duration {
		now := h.clock.Now()
		h.r.failed(h.ctx, now, "patch", unavailable, true)
		return h.r.nextRetry.Sub(now)
	}
	jittered := false
	for i, base := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 4 * time.Second, 4 * time.Second, 4 * time.Second} {
		d := retryIn()
		if d < base || d > base+base/2 {
			t.Fatalf("retry %d in %s, want within [%s, %s]", i+1, d, base, base+base/2)
		}
		jittered = jittered || d != base
	}
	if !jittered {
		t.Error("no retry delay carried jitter")
	}
	h.r.succeeded(h.clock.Now())
	if d := retryIn(); d < time.Second || d > 1500*time.Millisecond {
		t.Errorf("first retry after a success in %s, want the initial 1s plus jitter", d)
	}
}

func TestNodeGetFailsFirst(t *testing.T) {
	t.Parallel()
	h := newHarness(t, seed004(t, true), testNode())
	failing(h.client, "get", 1, errors.New("dial tcp: connection refused"))
	h.setSample(steady.sample(t0))
	if p := h.step(); len(p) != 0 {
		t.Fatalf("patched %d times without knowing the node's reservation", len(p))
	}
	h.clock.Step(time.Second)
	h.setSample(steady.sample(h.clock.Now()))
	if p := h.step(); len(p) != 1 {
		t.Fatalf("after the node was read, %d patches, want 1", len(p))
	}
	if got := h.counter(resultError); got != 0 {
		t.Errorf("a failed GET counted as a failed patch: %v", got)
	}
}

func TestReservationFromNode(t *testing.T) {
	t.Parallel()
	node := testNode()
	// kubelet reserves 3 cores and 8Gi, more than the system uses.
	node.Status.Allocatable[corev1.ResourceCPU] = resource.MustParse("29")
	node.Status.Allocatable[corev1.ResourceMemory] = resource.MustParse("120Gi")
	h := newHarness(t, seed004(t, true), node)
	h.setSample(steady.sample(t0))
	h.step()
	c, m, _, _ := batch(h.node())
	if c != steadyBatchCPU-1500 || m != steadyBatchMemory-4*gi {
		t.Errorf("batch = %d/%d, want %d/%d", c, m, steadyBatchCPU-1500, steadyBatchMemory-4*gi)
	}
}

// kubelet rewrites the node status on its own schedule; a conflict on our patch is retried, and
// neither writer loses what it wrote.
func TestPatchConflict(t *testing.T) {
	t.Parallel()
	h := newHarness(t, seed004(t, true), testNode())
	conflict := apierrors.NewConflict(schema.GroupResource{Resource: "nodes"}, nodeName, errors.New("the object has been modified"))
	failing(h.client, "patch", 1, conflict)
	h.setSample(steady.sample(t0))
	if p := h.step(); len(p) != 1 {
		t.Fatalf("first step sent %d patches, want the one that conflicted", len(p))
	}
	if got := h.counter(resultConflict); got != 1 {
		t.Errorf("patches_total{result=conflict} = %v, want 1", got)
	}

	// kubelet writes its status in between: a new condition and a changed pod capacity.
	n := h.node()
	n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse})
	n.Status.Capacity[corev1.ResourcePods] = resource.MustParse("250")
	if _, err := h.client.CoreV1().Nodes().UpdateStatus(context.Background(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	h.clock.Step(time.Second)
	h.setSample(steady.sample(h.clock.Now()))
	if p := h.step(); len(p) != 1 {
		t.Fatalf("retry sent %d patches, want 1", len(p))
	}
	n = h.node()
	if c, _, _, _ := batch(n); c != steadyBatchCPU {
		t.Errorf("batch cpu = %d after the retry", c)
	}
	if q := n.Status.Capacity[corev1.ResourcePods]; q.Value() != 250 || len(n.Status.Conditions) != 2 {
		t.Errorf("the retry clobbered kubelet's status: pods %v, conditions %d", q.String(), len(n.Status.Conditions))
	}
}

// Run keeps going while the API server fails and returns as soon as its context ends.
func TestRunSurvivesOutageAndStops(t *testing.T) {
	t.Parallel()
	h := newHarness(t, seed004(t, true), testNode())
	failing(h.client, "get", 1<<30, apierrors.NewServiceUnavailable("down"))
	h.setSample(steady.sample(t0))
	ctx, cancel := context.WithCancel(h.ctx)
	done := make(chan error, 1)
	go func() { done <- h.r.Run(ctx) }()
	// Let the loop take a few ticks of fake time; it must keep stepping, not give up.
	for !h.reachedTries(3) {
		if h.clock.HasWaiters() {
			h.clock.Step(time.Minute)
		}
		select {
		case err := <-done:
			t.Fatalf("Run returned %v during the outage", err)
		case <-time.After(time.Millisecond):
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run() = %v, want nil on cancellation", err)
		}
	case <-time.After(time.Minute): // generous: only a hang fails this
		t.Fatal("Run did not return after its context ended")
	}
}

// reachedTries reports whether the reporter asked for the node at least n times.
func (h *harness) reachedTries(n int) bool {
	gets := 0
	for _, a := range h.client.Actions() {
		if a.GetVerb() == "get" {
			gets++
		}
	}
	return gets >= n
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{name: "node name only", cfg: Config{NodeName: "n1"}, ok: true},
		{name: "no node name", cfg: Config{}},
		{name: "negative tick", cfg: Config{NodeName: "n1", Tick: -1}},
		{name: "initial above max", cfg: Config{NodeName: "n1", BackoffInitial: time.Minute, BackoffMax: time.Second}},
	}
	for _, tt := range tests {
		if err := tt.cfg.Validate(); (err == nil) != tt.ok {
			t.Errorf("%s: Validate() = %v, want ok %v", tt.name, err, tt.ok)
		}
	}
	if _, err := New(Config{NodeName: "n1"}, Deps{}); err == nil {
		t.Error("New() without a client succeeded")
	}
}

// BenchmarkStep is one evaluation of a node with 53 service pods and a full window of history:
// the cost of the reporter's loop besides API requests.
func BenchmarkStep(b *testing.B) {
	h := newHarness(b, seed004(b, true), testNode())
	sample := func(at time.Time) *Sample {
		s := steady.sample(at)
		for i := range 50 {
			s.Pods = append(s.Pods, PodUsage{UID: fmt.Sprint("ls-", i), QoS: qos.LS, Usage: reclaim.Resources{CPUMilli: int64(300 + i%7), MemoryBytes: gi}})
		}
		return s
	}
	for range 300 {
		h.setSample(sample(h.clock.Now()))
		h.r.Step(h.ctx)
		h.clock.Step(time.Second)
	}
	for b.Loop() {
		h.setSample(sample(h.clock.Now()))
		h.r.Step(h.ctx)
		h.clock.Step(time.Second)
	}
}

// Run publishes at start, takes samples from Updates, and evaluates on its tick.
func TestRunPublishes(t *testing.T) {
	t.Parallel()
	h := newHarness(t, seed004(t, true), testNode())
	updates := make(chan struct{}, 1)
	h.r.deps.Updates = updates
	h.setSample(steady.sample(t0))
	ctx, cancel := context.WithCancel(h.ctx)
	done := make(chan error, 1)
	go func() { done <- h.r.Run(ctx) }()
	patches := func() int {
		n := 0
		for _, a := range h.client.Actions() {
			if a.GetVerb() == "patch" {
				n++
			}
		}
		return n
	}
	// The waits below allow a minute, which is generous: only a hang fails them.
	polltest.Within(t, time.Minute, "the first publish", func() bool { return patches() == 1 })

	// Pod a jumps to 7 cores for a minute of samples, delivered through Updates; the next tick
	// publishes the new batch capacity.
	for i := 1; i <= 60; i++ {
		h.setSample(load{aCPU: 7000, bCPU: 3000}.sample(t0.Add(time.Duration(i) * time.Second)))
		updates <- struct{}{}
	}
	polltest.Within(t, time.Minute, "the ticker", h.clock.HasWaiters)
	h.clock.Step(time.Minute)
	polltest.Within(t, time.Minute, "the second publish", func() bool { return patches() == 2 })
	if c, _, _, _ := batch(h.node()); c != steadyBatchCPU-3000 {
		t.Errorf("batch cpu = %d, want %d", c, steadyBatchCPU-3000)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run() = %v", err)
	}
}

// With request-based policies the requests the proxy knows count, including a pod that has no
// usage sample yet; BE requests do not.
func TestRequestPolicies(t *testing.T) {
	t.Parallel()
	settings := seed004(t, true)
	settings.CPUCalculatePolicy = slo.CalculateByPodMaxUsageRequest
	settings.MemoryCalculatePolicy = slo.CalculateByPodRequest
	h := newHarness(t, settings, testNode())
	h.r.deps.Requests = func() []PodRequest {
		return []PodRequest{
			{UID: "a", QoS: qos.LS, Request: reclaim.Resources{CPUMilli: 8000, MemoryBytes: 24 * gi}},
			{UID: "b", QoS: qos.LSR, Request: reclaim.Resources{CPUMilli: 2000, MemoryBytes: 8 * gi}},
			{UID: "new", QoS: qos.LS, Request: reclaim.Resources{CPUMilli: 1000, MemoryBytes: 2 * gi}},
			{UID: "c", QoS: qos.BE, Request: reclaim.Resources{CPUMilli: 4000, MemoryBytes: 16 * gi}},
		}
	}
	h.setSample(steady.sample(t0))
	h.step()
	// cpu: max(4000, 8000) + max(3000, 2000) + max(0, 1000) = 12000 instead of 7000 by usage;
	// memory: 24 + 8 + 2 = 34Gi of requests instead of 30Gi of usage.
	c, m, _, _ := batch(h.node())
	if c != steadyBatchCPU-5000 || m != steadyBatchMemory-4*gi {
		t.Errorf("batch = %d/%d, want %d/%d", c, m, steadyBatchCPU-5000, steadyBatchMemory-4*gi)
	}
}
