package evict_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"

	"github.com/tandemkit/tandem/actuate/dryrun"
	"github.com/tandemkit/tandem/actuate/evict"
	"github.com/tandemkit/tandem/metrics/collector"
	"github.com/tandemkit/tandem/resource/qos"
)

const gib = int64(1) << 30

// ctr is one container of a hand-built snapshot.
type ctr struct {
	pod      string
	qos      qos.Class
	memGiB   int64
	cpuMilli int64
}

func snapshot(t time.Time, cpus, memGiB, usedGiB int64, ctrs ...ctr) *collector.Snapshot {
	s := &collector.Snapshot{
		Time:     t,
		Capacity: collector.Usage{CPUMilli: cpus * 1000, MemoryBytes: memGiB * gib},
		Node:     collector.Usage{MemoryBytes: usedGiB * gib},
	}
	for i, c := range ctrs {
		s.Containers = append(s.Containers, collector.ContainerUsage{
			Target: collector.Target{Namespace: "ns", Pod: c.pod, PodUID: "uid-" + c.pod, Container: fmt.Sprintf("c%d", i), QoS: c.qos},
			Usage:  collector.Usage{MemoryBytes: c.memGiB * gib, CPUMilli: c.cpuMilli},
		})
	}
	return s
}

// recorder is an Evictor that records what it was asked to evict and refuses the pods in refuse, as a
// PodDisruptionBudget would. The real evictors are tested below against a fake clientset (no apiserver
// runs in unit tests) and in e2e against real containerd.
type recorder struct {
	refuse  map[string]bool
	evicted []string
	reasons []evict.Reason
	asked   map[string]int // every request, refused or not
}

func (r *recorder) Evict(_ context.Context, p evict.Pod, reason evict.Reason, _ string) error {
	if r.asked == nil {
		r.asked = map[string]int{}
	}
	r.asked[p.Name]++
	if r.refuse[p.Name] {
		return fmt.Errorf("pdb: %w", evict.ErrRefused)
	}
	r.evicted = append(r.evicted, p.Name)
	r.reasons = append(r.reasons, reason)
	return nil
}

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func memConfig() evict.Config {
	c := evict.DefaultConfig()
	c.Enable = true
	c.MemoryEvictThresholdPercent, c.MemoryEvictLowerPercent = 70, 65
	c.CoolDown = time.Minute
	return c
}

func prio(v int32) *int32 { return &v }

// memLoop is a memory-eviction loop (memConfig) that evicts through rec, on a clock the test moves, starting
// at 1000 s.
func memLoop(t *testing.T, rec *recorder) (context.Context, *evict.Loop, *clock) {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	clk := &clock{t: time.Unix(1000, 0)}
	l, err := evict.New(memConfig(), evict.Deps{Latest: func() *collector.Snapshot { return nil }, Evictor: rec, Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	return ctx, l, clk
}

// TestMemoryEvict checks the order (lowest priority, then largest memory) and the stop condition (what
// the evicted pods use brings the node under memoryEvictLowerPercent), and that only all-BE pods go.
func TestMemoryEvict(t *testing.T) {
	t.Parallel()
	// 100 GiB node at 75 GiB: down to 65% means freeing 10 GiB.
	pods := []ctr{
		{"be-a", qos.BE, 6, 0}, {"be-b", qos.BE, 3, 0}, {"be-c", qos.BE, 5, 0},
		{"web", qos.LS, 50, 0}, {"mixed", qos.BE, 9, 0}, {"mixed", qos.LS, 1, 0},
	}
	tests := []struct {
		name     string
		used     int64
		ctrs     []ctr
		priority map[string]int32
		refuse   map[string]bool
		want     []string
	}{
		{name: "below the threshold", used: 69, ctrs: pods},
		{name: "largest first until under the lower bound", used: 75, ctrs: pods, want: []string{"be-a", "be-c"}},
		{name: "lowest priority first", used: 75, ctrs: pods, priority: map[string]int32{"be-b": -5, "be-a": 10}, want: []string{"be-b", "be-c", "be-a"}},
		{name: "refused pod skipped", used: 75, ctrs: pods, refuse: map[string]bool{"be-a": true}, want: []string{"be-c", "be-b"}},
		// 95 GiB: 30 GiB to free, but BE has only 14: every BE pod goes, never web nor the mixed pod.
		{name: "never anything but BE", used: 95, ctrs: pods, want: []string{"be-a", "be-c", "be-b"}},
		{name: "at the threshold exactly", used: 70, ctrs: pods, want: []string{"be-a"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, ctx := ktesting.NewTestContext(t)
			rec := &recorder{refuse: tt.refuse}
			reg := prometheus.NewRegistry()
			l, err := evict.New(memConfig(), evict.Deps{
				Latest:  func() *collector.Snapshot { return nil },
				Evictor: rec,
				Pods: func(uid string) (evict.PodMeta, bool) {
					name := strings.TrimPrefix(uid, "uid-")
					if p, ok := tt.priority[name]; ok {
						return evict.PodMeta{SandboxID: "sb-" + name, Priority: prio(p)}, true
					}
					return evict.PodMeta{SandboxID: "sb-" + name}, true
				},
				Now:        (&clock{t: time.Unix(1000, 0)}).now,
				Registerer: reg,
			})
			if err != nil {
				t.Fatal(err)
			}
			l.Step(ctx, snapshot(time.Unix(1000, 0), 16, 100, tt.used, tt.ctrs...))
			if !slices.Equal(rec.evicted, tt.want) {
				t.Errorf("evicted %v, want %v", rec.evicted, tt.want)
			}
			if got := counter(t, reg, "tandem_evictions_total", "memory"); got != float64(len(tt.want)) {
				t.Errorf("tandem_evictions_total{reason=memory} = %v, want %d", got, len(tt.want))
			}
		})
	}
}

func counter(t *testing.T, reg *prometheus.Registry, name, reason string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "reason" && lp.GetValue() == reason {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// TestCoolDown checks that a node still above the threshold right after an eviction does not evict
// again until the cool-down has passed, and that a pod already evicted is never evicted twice while it
// is still stopping.
func TestCoolDown(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	ctx, l, clk := memLoop(t, rec)
	pods := []ctr{{"be-a", qos.BE, 6, 0}, {"be-b", qos.BE, 3, 0}, {"be-c", qos.BE, 2, 0}}
	steps := []struct {
		after time.Duration
		used  int64
		want  []string
	}{
		// 71 GiB of 100: 6 GiB to free, be-a alone.
		{0, 71, []string{"be-a"}},
		// Higher a second later: be-a is still stopping; the cool-down holds everything.
		{time.Second, 72, []string{"be-a"}},
		{59 * time.Second, 72, []string{"be-a"}},
		// Cool-down over, still 72%: be-a (still listed, still stopping) is not evicted again, and its
		// 6 GiB count as freed already, so 72 − 6 = 66 GiB leaves 1 GiB to free: be-b.
		{61 * time.Second, 72, []string{"be-a", "be-b"}},
	}
	for i, s := range steps {
		clk.t = time.Unix(1000, 0).Add(s.after)
		l.Step(ctx, snapshot(clk.t, 16, 100, s.used, pods...))
		if !slices.Equal(rec.evicted, s.want) {
			t.Errorf("step %d (+%v): evicted %v, want %v", i, s.after, rec.evicted, s.want)
		}
	}
}

// TestCPUSatisfaction checks CPU eviction: BE may use 2 CPUs of the 8 it requested (25% < 60%) and uses
// 95% of them; the condition must hold in every sample for the 10 s window.
func TestCPUSatisfaction(t *testing.T) {
	t.Parallel()
	requests := map[string]int64{"be-a": 2000, "be-b": 4000, "be-c": 2000}
	pods := []ctr{{"be-a", qos.BE, 1, 900}, {"be-b", qos.BE, 1, 500}, {"be-c", qos.BE, 1, 500}, {"web", qos.LS, 1, 9000}}
	idle := []ctr{{"be-a", qos.BE, 1, 100}, {"be-b", qos.BE, 1, 100}, {"be-c", qos.BE, 1, 100}, {"web", qos.LS, 1, 9000}}
	type sample struct {
		at   time.Duration
		ctrs []ctr
	}
	tests := []struct {
		name    string
		allowed int64
		samples []sample
		want    []string
	}{
		{
			// Release 8000 − 2000/0.9 = 5778m of requests: be-a (900m, the largest user, 2000) and
			// be-b (500m but first of the 500s by name, 4000) free 6000.
			name: "held for the window", allowed: 2000,
			samples: []sample{{0, pods}, {5 * time.Second, pods}, {10 * time.Second, pods}},
			want:    []string{"be-a", "be-b"},
		},
		{
			name: "window not yet over", allowed: 2000,
			samples: []sample{{0, pods}, {9 * time.Second, pods}},
		},
		{
			name: "broken by a sample where BE did not use its CPU", allowed: 2000,
			samples: []sample{{0, pods}, {5 * time.Second, idle}, {10 * time.Second, pods}, {15 * time.Second, pods}},
		},
		{
			name: "satisfied enough", allowed: 5000,
			samples: []sample{{0, pods}, {10 * time.Second, pods}, {20 * time.Second, pods}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, ctx := ktesting.NewTestContext(t)
			cfg := evict.DefaultConfig()
			cfg.Enable, cfg.CPUEvictBySatisfaction = true, true
			cfg.MemoryEvictThresholdPercent, cfg.MemoryEvictLowerPercent = 100, 100
			cfg.CPUEvictBESatisfactionLowerPercent, cfg.CPUEvictBESatisfactionUpperPercent = 60, 90
			cfg.CPUEvictBEUsageThresholdPercent = 90
			cfg.CPUEvictTimeWindow = 10 * time.Second
			rec := &recorder{}
			clk := &clock{}
			l, err := evict.New(cfg, evict.Deps{
				Latest: func() *collector.Snapshot { return nil }, Evictor: rec, Now: clk.now,
				BEAllowedMilli: func() int64 { return tt.allowed },
				Pods: func(uid string) (evict.PodMeta, bool) {
					return evict.PodMeta{CPURequestMilli: requests[strings.TrimPrefix(uid, "uid-")]}, true
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range tt.samples {
				clk.t = time.Unix(1000, 0).Add(s.at)
				l.Step(ctx, snapshot(clk.t, 16, 100, 10, s.ctrs...))
			}
			if !slices.Equal(rec.evicted, tt.want) {
				t.Errorf("evicted %v, want %v", rec.evicted, tt.want)
			}
			for _, r := range rec.reasons {
				if r != evict.ReasonCPUSatisfaction {
					t.Errorf("reason %q, want cpuSatisfaction", r)
				}
			}
		})
	}
}

func TestDisabledEvictsNothing(t *testing.T) {
	t.Parallel()
	_, ctx := ktesting.NewTestContext(t)
	cfg := memConfig()
	cfg.Enable = false
	rec := &recorder{}
	l, err := evict.New(cfg, evict.Deps{Latest: func() *collector.Snapshot { return nil }, Evictor: rec})
	if err != nil {
		t.Fatal(err)
	}
	if ev := l.Step(ctx, snapshot(time.Unix(1, 0), 16, 100, 99, ctr{"be-a", qos.BE, 50, 0})); ev != nil || len(rec.evicted) > 0 {
		t.Errorf("disabled loop evicted %v", rec.evicted)
	}
	// A reload that enables eviction takes effect at the next sample; a bad one is refused.
	bad := memConfig()
	bad.MemoryEvictLowerPercent = 90
	if err := l.Reconfigure(bad); err == nil {
		t.Error("Reconfigure accepted a lower bound above the threshold")
	}
	if err := l.Reconfigure(memConfig()); err != nil {
		t.Fatal(err)
	}
	l.Step(ctx, snapshot(time.Unix(2, 0), 16, 100, 99, ctr{"be-a", qos.BE, 50, 0}))
	if !slices.Equal(rec.evicted, []string{"be-a"}) {
		t.Errorf("after enabling: evicted %v, want [be-a]", rec.evicted)
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		mutate  func(*evict.Config)
		wantErr string
	}{
		{"defaults", func(*evict.Config) {}, ""},
		{"lower above threshold", func(c *evict.Config) { c.MemoryEvictLowerPercent = 80 }, "memoryEvictLowerPercent"},
		{"percentage", func(c *evict.Config) { c.MemoryEvictThresholdPercent = 101 }, "memoryEvictThresholdPercent"},
		{"satisfaction bounds crossed", func(c *evict.Config) {
			c.CPUEvictBySatisfaction, c.CPUEvictBESatisfactionLowerPercent, c.CPUEvictBESatisfactionUpperPercent = true, 90, 60
		}, "cpuEvictBESatisfactionLowerPercent"},
		{"negative cool-down", func(c *evict.Config) { c.CoolDown = -time.Second }, "coolDown"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := evict.DefaultConfig()
			tt.mutate(&c)
			err := c.Validate()
			if (err == nil) != (tt.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("Validate() = %v, want an error naming %q", err, tt.wantErr)
			}
		})
	}
	if _, err := evict.New(evict.DefaultConfig(), evict.Deps{Latest: func() *collector.Snapshot { return nil }}); err == nil {
		t.Error("New without an Evictor succeeded")
	}
	if !errors.Is(fmt.Errorf("x: %w", evict.ErrRefused), evict.ErrRefused) {
		t.Error("ErrRefused does not survive wrapping")
	}
}

// TestNoCandidateNoCoolDown checks that pressure with no BE pod to evict does not start the cool-down:
// the BE pod that starts a moment later is evicted at once.
func TestNoCandidateNoCoolDown(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	ctx, l, clk := memLoop(t, rec)
	if ev := l.Step(ctx, snapshot(clk.t, 16, 100, 80, ctr{"web", qos.LS, 70, 0})); ev != nil || len(rec.evicted) > 0 {
		t.Fatalf("evicted %v with only an LS pod on the node", rec.evicted)
	}
	clk.t = clk.t.Add(time.Second)
	l.Step(ctx, snapshot(clk.t, 16, 100, 80, ctr{"web", qos.LS, 70, 0}, ctr{"be-a", qos.BE, 10, 0}))
	if !slices.Equal(rec.evicted, []string{"be-a"}) {
		t.Errorf("evicted %v a second later, want [be-a]", rec.evicted)
	}
}

// TestRefusalHoldsOnlyThatPod: a round whose only candidate a PodDisruptionBudget protects evicts
// nothing; a BE pod that shows up at the next sample is evicted then, not a cool-down later, and the
// protected pod is asked again only once the cool-down has passed.
func TestRefusalHoldsOnlyThatPod(t *testing.T) {
	t.Parallel()
	rec := &recorder{refuse: map[string]bool{"protected": true}}
	ctx, l, clk := memLoop(t, rec)
	protected := ctr{"protected", qos.BE, 10, 0}
	steps := []struct {
		after     time.Duration
		ctrs      []ctr
		want      []string
		protAsked int
	}{
		{0, []ctr{protected}, nil, 1},
		// The free pod is in the next sample: evicted at once; the protected one is not asked again.
		{time.Second, []ctr{protected, {"free", qos.BE, 2, 0}}, []string{"free"}, 1},
		// The free pod is gone; the cool-down after its eviction holds everything.
		{30 * time.Second, []ctr{protected}, []string{"free"}, 1},
		// Both cool-downs over: the protected pod is asked again (and refuses again).
		{62 * time.Second, []ctr{protected}, []string{"free"}, 2},
		// Within its new hold: not asked.
		{63 * time.Second, []ctr{protected}, []string{"free"}, 2},
	}
	for i, s := range steps {
		clk.t = time.Unix(1000, 0).Add(s.after)
		l.Step(ctx, snapshot(clk.t, 16, 100, 80, s.ctrs...))
		if !slices.Equal(rec.evicted, s.want) || rec.asked["protected"] != s.protAsked {
			t.Errorf("step %d (+%v): evicted %v, protected asked %d times; want %v, %d", i, s.after, rec.evicted, rec.asked["protected"], s.want, s.protAsked)
		}
	}
}

// TestHeldPodForgottenWhenGone: the hold on a refused pod goes with the pod, so the loop keeps nothing
// for pods that left the node.
func TestHeldPodForgottenWhenGone(t *testing.T) {
	t.Parallel()
	rec := &recorder{refuse: map[string]bool{"protected": true}}
	ctx, l, clk := memLoop(t, rec)
	pod := ctr{"protected", qos.BE, 10, 0}
	l.Step(ctx, snapshot(clk.t, 16, 100, 80, pod))
	// Gone, and no pressure: the sample that no longer lists it drops its hold.
	clk.t = clk.t.Add(time.Second)
	l.Step(ctx, snapshot(clk.t, 16, 100, 10))
	// A pod with the same identity under pressure again is a new question.
	clk.t = clk.t.Add(time.Second)
	l.Step(ctx, snapshot(clk.t, 16, 100, 80, pod))
	if rec.asked["protected"] != 2 {
		t.Errorf("asked %d times, want 2: the hold outlived the pod", rec.asked["protected"])
	}
}

// events is a dryrun.EventSink that keeps the Events.
type events struct {
	mu  sync.Mutex
	got []*corev1.Event
}

func (e *events) CreateEvent(_ context.Context, ev *corev1.Event) (*corev1.Event, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.got = append(e.got, ev)
	return ev, nil
}

// TestDryRun runs the same snapshots through a loop that evicts and one in dry run: the dry run asks
// the Evictor nothing, reports exactly the pods the real run evicts, at the same samples, each once with
// a WouldEvict Event on the pod, and counts them as dry-run actions, not evictions.
func TestDryRun(t *testing.T) {
	t.Parallel()
	type sample struct {
		after time.Duration
		used  int64
		ctrs  []ctr
	}
	pods := []ctr{{"be-a", qos.BE, 6, 900}, {"be-b", qos.BE, 3, 500}, {"be-c", qos.BE, 2, 500}, {"web", qos.LS, 50, 9000}}
	cpuCfg := func(c *evict.Config) {
		c.CPUEvictBySatisfaction = true
		c.MemoryEvictThresholdPercent, c.MemoryEvictLowerPercent = 100, 100
		c.CPUEvictBESatisfactionLowerPercent, c.CPUEvictBESatisfactionUpperPercent = 60, 90
		c.CPUEvictTimeWindow = 10 * time.Second
	}
	tests := []struct {
		name    string
		cfg     func(*evict.Config)
		samples []sample
		want    [][]string // the pods each sample evicts
	}{
		{
			// As TestCoolDown: be-a at once, nothing while it stays and the cool-down holds, be-b after.
			name:    "memory, across the cool-down",
			samples: []sample{{0, 71, pods}, {time.Second, 72, pods}, {59 * time.Second, 72, pods}, {61 * time.Second, 72, pods}, {62 * time.Second, 72, pods}},
			want:    [][]string{{"be-a"}, nil, nil, {"be-b"}, nil},
		},
		{
			name:    "memory, several pods in one round",
			samples: []sample{{0, 80, pods}, {time.Second, 80, pods}},
			want:    [][]string{{"be-a", "be-b", "be-c"}, nil},
		},
		{
			name:    "memory, a pod that left and came back is a new question",
			samples: []sample{{0, 71, pods}, {time.Second, 60, pods[1:]}, {2 * time.Minute, 71, pods}},
			want:    [][]string{{"be-a"}, nil, {"be-a"}},
		},
		{
			name: "CPU satisfaction after the window", cfg: cpuCfg,
			samples: []sample{{0, 10, pods}, {5 * time.Second, 10, pods}, {10 * time.Second, 10, pods}, {11 * time.Second, 10, pods}},
			want:    [][]string{nil, nil, {"be-a", "be-b"}, nil},
		},
		{name: "below every threshold", samples: []sample{{0, 50, pods}}, want: [][]string{nil}},
	}
	requests := map[string]int64{"be-a": 2000, "be-b": 4000, "be-c": 2000}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, ctx := ktesting.NewTestContext(t)
			cfg := memConfig()
			if tt.cfg != nil {
				tt.cfg(&cfg)
			}
			type run struct {
				l   *evict.Loop
				rec *recorder
				reg *prometheus.Registry
				clk *clock
			}
			sink := &events{}
			newRun := func(dry bool) run {
				r := run{rec: &recorder{}, reg: prometheus.NewRegistry(), clk: &clock{}}
				rec, err := dryrun.New("node-a", r.reg)
				if err != nil {
					t.Fatal(err)
				}
				rec.SetSink(sink)
				c := cfg
				c.DryRun = dry
				r.l, err = evict.New(c, evict.Deps{
					Latest: func() *collector.Snapshot { return nil }, Evictor: r.rec, Now: r.clk.now, Registerer: r.reg, Dry: rec,
					BEAllowedMilli: func() int64 { return 2000 },
					Pods: func(uid string) (evict.PodMeta, bool) {
						return evict.PodMeta{CPURequestMilli: requests[strings.TrimPrefix(uid, "uid-")]}, true
					},
				})
				if err != nil {
					t.Fatal(err)
				}
				return r
			}
			act, dry := newRun(false), newRun(true)
			var reported []string
			for i, s := range tt.samples {
				var got [2][]string
				for j, r := range []run{act, dry} {
					r.clk.t = time.Unix(1000, 0).Add(s.after)
					ev := r.l.Step(ctx, snapshot(r.clk.t, 16, 100, s.used, s.ctrs...))
					if ev != nil {
						if ev.DryRun != (j == 1) {
							t.Errorf("sample %d: round says dry run %v", i, ev.DryRun)
						}
						for _, p := range ev.Pods {
							got[j] = append(got[j], p.Name)
						}
					}
				}
				if !slices.Equal(got[0], tt.want[i]) || !slices.Equal(got[1], tt.want[i]) {
					t.Errorf("sample %d (+%v): evicted %v, dry run reported %v; want %v both", i, s.after, got[0], got[1], tt.want[i])
				}
				reported = append(reported, tt.want[i]...)
			}
			if len(dry.rec.asked) != 0 {
				t.Errorf("dry run asked the Evictor to evict %v", dry.rec.asked)
			}
			reasons := map[string]float64{}
			var named []string
			for _, ev := range sink.got {
				named = append(named, ev.InvolvedObject.Name)
				if ev.Reason != "WouldEvict" || ev.InvolvedObject.Kind != "Pod" || ev.InvolvedObject.UID != types.UID("uid-"+ev.InvolvedObject.Name) ||
					!strings.Contains(ev.Message, "would evict the pod") {
					t.Errorf("event %s %s/%s %q", ev.Reason, ev.InvolvedObject.Kind, ev.InvolvedObject.Name, ev.Message)
				}
				for _, r := range []evict.Reason{evict.ReasonMemory, evict.ReasonCPUSatisfaction} {
					if strings.Contains(ev.Message, "("+string(r)+")") {
						reasons[string(r)]++
					}
				}
			}
			if !slices.Equal(named, reported) {
				t.Errorf("Events on %v, want one each on %v", named, reported)
			}
			for _, r := range []evict.Reason{evict.ReasonMemory, evict.ReasonCPUSatisfaction} {
				if got := counter(t, dry.reg, "tandem_evictions_total", string(r)); got != 0 {
					t.Errorf("dry run counted %v evictions for %s", got, r)
				}
				if got, want := counter(t, act.reg, "tandem_evictions_total", string(r)), reasons[string(r)]; got != want {
					t.Errorf("real run counted %v evictions for %s, want %v", got, r, want)
				}
			}
			if got := dryCount(t, dry.reg); got != float64(len(reported)) {
				t.Errorf("tandem_dry_run_actions_total{action=evict} = %v, want %d", got, len(reported))
			}
		})
	}
}

func dryCount(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "tandem_dry_run_actions_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if m.GetLabel()[0].GetValue() == string(dryrun.Evict) {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatal("no tandem_dry_run_actions_total{action=evict}")
	return 0
}

// TestDryRunSwitchedOff: the pods a dry run reported are still running; once it is switched off they
// are evicted at the next sample, not held as if on their way out, nor by the dry round's cool-down.
// Pods the real loop evicted stay held when dry run is switched on.
func TestDryRunSwitchedOff(t *testing.T) {
	t.Parallel()
	pods := []ctr{{"be-a", qos.BE, 6, 0}, {"be-b", qos.BE, 3, 0}}
	tests := []struct {
		name string
		// dry is the switch at each of three samples a second apart, the node at 71 of 100 GiB.
		dry  []bool
		want []string
		// wantAsked is how often be-a was asked.
		wantAsked int
	}{
		{name: "dry, then live", dry: []bool{true, false, false}, want: []string{"be-a"}, wantAsked: 1},
		{name: "live, then dry: nothing evicted twice", dry: []bool{false, true, true}, want: []string{"be-a"}, wantAsked: 1},
		{name: "dry throughout", dry: []bool{true, true, true}, wantAsked: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rec := &recorder{}
			ctx, l, clk := memLoop(t, rec)
			for i, dry := range tt.dry {
				cfg := memConfig()
				cfg.DryRun = dry
				if err := l.Reconfigure(cfg); err != nil {
					t.Fatal(err)
				}
				clk.t = time.Unix(1000, 0).Add(time.Duration(i) * time.Second)
				l.Step(ctx, snapshot(clk.t, 16, 100, 71, pods...))
			}
			if !slices.Equal(rec.evicted, tt.want) || rec.asked["be-a"] != tt.wantAsked {
				t.Errorf("evicted %v, be-a asked %d times; want %v, %d", rec.evicted, rec.asked["be-a"], tt.want, tt.wantAsked)
			}
		})
	}
}
