package collector

import (
	"errors"
	"math"
	"path/filepath"
	"testing"

	"k8s.io/klog/v2/ktesting"
)

func TestComputeCPI(t *testing.T) {
	t.Parallel()
	r := func(v, e, run uint64) counterReading { return counterReading{value: v, enabled: e, running: run} }
	tests := []struct {
		name      string
		prev, cur counterSample
		want      cpiResult
		ok        bool
	}{
		{
			name: "counted the whole time",
			prev: counterSample{cycles: r(1000, 100, 100), instructions: r(500, 100, 100)},
			cur:  counterSample{cycles: r(4000, 200, 200), instructions: r(2500, 200, 200)},
			want: cpiResult{cycles: 3000, instructions: 2000, cpi: 1.5}, ok: true,
		},
		{
			// cycles counted half of the interval (multiplexed with other events): scaled ×2.
			name: "multiplexed counter is scaled",
			prev: counterSample{cycles: r(0, 0, 0), instructions: r(0, 0, 0)},
			cur:  counterSample{cycles: r(1000, 100, 50), instructions: r(1000, 100, 100)},
			want: cpiResult{cycles: 2000, instructions: 1000, cpi: 2}, ok: true,
		},
		{
			name: "container did not run",
			prev: counterSample{cycles: r(10, 10, 10), instructions: r(10, 10, 10)},
			cur:  counterSample{cycles: r(10, 20, 10), instructions: r(10, 20, 10)},
		},
		{
			name: "no instructions retired",
			prev: counterSample{cycles: r(10, 10, 10), instructions: r(10, 10, 10)},
			cur:  counterSample{cycles: r(20, 20, 20), instructions: r(10, 20, 20)},
		},
		{
			name: "counter went backwards",
			prev: counterSample{cycles: r(100, 10, 10), instructions: r(100, 10, 10)},
			cur:  counterSample{cycles: r(50, 20, 20), instructions: r(150, 20, 20)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, ok := computeCPI(tt.prev, tt.cur)
			if ok != tt.ok {
				t.Fatalf("ok = %v, want %v", ok, tt.ok)
			}
			if math.Abs(got.cpi-tt.want.cpi) > 1e-9 || got.cycles != tt.want.cycles || got.instructions != tt.want.instructions {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestCounterSampleAddsCPUs(t *testing.T) {
	t.Parallel()
	cpu0 := counterSample{cycles: counterReading{1, 2, 3}, instructions: counterReading{4, 5, 6}}
	cpu1 := counterSample{cycles: counterReading{10, 20, 30}, instructions: counterReading{40, 50, 60}}
	want := counterSample{cycles: counterReading{11, 22, 33}, instructions: counterReading{44, 55, 66}}
	if got := cpu0.add(cpu1); got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

// replayOpener replays recorded counter samples, because this project's machines (VMs) have no
// hardware counters: perf_event_open fails with ENOENT there.
type replayOpener struct {
	probeErr error
	samples  map[string][]counterSample // by cgroup dir
	opened   map[string]*replayGroup
}

type replayGroup struct {
	samples []counterSample
	closed  bool
}

func (r *replayOpener) probe() error { return r.probeErr }

func (r *replayOpener) openCgroup(dir string) (counterGroup, error) {
	s, ok := r.samples[dir]
	if !ok {
		return nil, errors.New("no such cgroup")
	}
	g := &replayGroup{samples: s}
	r.opened[dir] = g
	return g, nil
}

func (g *replayGroup) read() (counterSample, error) {
	if len(g.samples) == 0 {
		return counterSample{}, errors.New("exhausted")
	}
	s := g.samples[0]
	g.samples = g.samples[1:]
	return s, nil
}

func (g *replayGroup) close() { g.closed = true }

func TestCPISourceReplay(t *testing.T) {
	t.Parallel()
	_, ctx := ktesting.NewTestContext(t)
	cg := t.TempDir()
	fakeV1Root(t, cg)
	rel := "kubepods/poda/aaa"
	writeFiles(t, filepath.Join(cg, "perf_event", rel), nil)
	writeFiles(t, filepath.Join(cg, "cpuacct", rel), nil)
	dir := filepath.Join(cg, "perf_event", rel)
	r := func(v uint64) counterReading { return counterReading{value: v, enabled: v, running: v} }
	op := &replayOpener{opened: map[string]*replayGroup{}, samples: map[string][]counterSample{dir: {
		{cycles: r(100), instructions: r(100)},
		{cycles: r(400), instructions: r(200)}, // 300 cycles / 100 instructions
		{cycles: r(600), instructions: r(400)}, // 200 / 200
	}}}
	src := newCPISource(cg)
	src.opener = op
	if err := src.detect(ctx); err != nil {
		t.Fatal(err)
	}
	tg := Target{Namespace: "ns", Pod: "a", Container: "c", ContainerID: "aaa", CgroupParent: "/kubepods/poda"}
	wantCPI := []struct {
		has bool
		cpi float64
		cyc float64
	}{{false, 0, 0}, {true, 3, 300}, {true, 1, 500}}
	for i, w := range wantCPI {
		src.sample(ctx, []Target{tg})
		got := *src.latest.Load()
		if len(got) != 1 || got[0].hasCPI != w.has || got[0].cpi != w.cpi || got[0].cycles != w.cyc {
			t.Fatalf("sample %d = %+v, want hasCPI %v cpi %v cycles %v", i, got, w.has, w.cpi, w.cyc)
		}
	}
	src.sample(ctx, nil)
	if !op.opened[dir].closed {
		t.Error("counters of a container the store dropped are still open")
	}
}

func TestCPIDetect(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		probeErr  error
		perfEvent bool // the v1 perf_event hierarchy is mounted
		wantOn    bool
	}{
		{"no hardware counters (VM)", errors.New("no such file or directory"), true, false},
		{"counters but no perf_event hierarchy", nil, false, false},
		{"counters and hierarchy", nil, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cg := t.TempDir()
			fakeV1Root(t, cg)
			if tt.perfEvent {
				writeFiles(t, filepath.Join(cg, "perf_event"), nil)
			}
			src := newCPISource(cg)
			src.opener = &replayOpener{probeErr: tt.probeErr}
			_, ctx := ktesting.NewTestContext(t)
			if err := src.detect(ctx); (err == nil) != tt.wantOn {
				t.Errorf("detect = %v, want on=%v", err, tt.wantOn)
			}
		})
	}
}
