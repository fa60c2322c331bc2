package main

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func msDur(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }

func TestNewSample(t *testing.T) {
	t.Parallel()
	due := time.Unix(100, 0)
	o := outcome{due: due, sent: due.Add(2 * time.Millisecond), created: due.Add(30 * time.Millisecond), started: due.Add(130 * time.Millisecond)}
	s := newSample(o, pathNRI, classBE, 3)
	// Create counts from the due time, the dispatcher's lag included; Start from Create's answer.
	if s.create != 30*time.Millisecond || s.start != 100*time.Millisecond || s.lag != 2*time.Millisecond {
		t.Fatalf("sample = %+v", s)
	}
	for call, want := range map[string]time.Duration{callCreate: 30 * time.Millisecond, callStart: 100 * time.Millisecond, callBoth: 130 * time.Millisecond} {
		if got := s.of(call); got != want {
			t.Errorf("of(%s) = %s, want %s", call, got, want)
		}
	}
}

// samples makes n samples of path whose create takes base+i ms in round i%rounds.
func samples(path string, n, rounds int, base float64) []sample {
	var out []sample
	for i := range n {
		out = append(out, sample{path: path, round: i % rounds, create: msDur(base + float64(i)), start: msDur(100)})
	}
	return out
}

func TestSummarize(t *testing.T) {
	t.Parallel()
	s := append(samples(pathNone, 100, 2, 1), samples(pathProxy, 10, 1, 500)...)
	q := summarize(s, pathNone, callCreate)
	// 1..100 ms: nearest-rank p50 is 50, p99 is 99.
	if q.N != 100 || q.P50 != msDur(50) || q.P99 != msDur(99) {
		t.Fatalf("none = %+v", q)
	}
	// Even rounds hold 1, 3, .., 99 (p50 49, p99 99) and odd ones 2, .., 100 (p50 50, p99 100).
	if q.HalfGapP50 != msDur(1) || q.HalfGapP99 != msDur(1) {
		t.Errorf("half-run gaps = %s, %s, want 1ms, 1ms", q.HalfGapP50, q.HalfGapP99)
	}
	if got := summarize(s, pathNone, callBoth); got.P50 != msDur(150) {
		t.Errorf("Create+Start p50 = %s, want 150ms", got.P50)
	}
	// One round only: no halves to compare, so no gap rather than a made-up one.
	if p := summarize(s, pathProxy, callCreate); p.N != 10 || p.HalfGapP50 != 0 || p.P50 != msDur(504) {
		t.Errorf("proxy = %+v", p)
	}
	if n := summarize(s, pathNRI, callCreate); n.N != 0 || n.P50 != 0 {
		t.Errorf("a path without samples = %+v", n)
	}
}

func TestCompare(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name              string
		path, none, noise time.Duration
		wantAdded         time.Duration
		wantRatio         float64
		wantWithin        bool
	}{
		{name: "slower than none", path: msDur(130), none: msDur(100), noise: msDur(5), wantAdded: msDur(30), wantRatio: 1.3},
		{name: "within noise", path: msDur(103), none: msDur(100), noise: msDur(5), wantAdded: msDur(3), wantRatio: 1.03, wantWithin: true},
		{name: "faster than none, within noise", path: msDur(96), none: msDur(100), noise: msDur(5), wantAdded: msDur(-4), wantRatio: 0.96, wantWithin: true},
		{name: "faster than none beyond noise", path: msDur(80), none: msDur(100), noise: msDur(5), wantAdded: msDur(-20), wantRatio: 0.8},
		{name: "none zero", path: msDur(1), none: 0, noise: 0, wantAdded: msDur(1), wantRatio: math.NaN()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a := compare(tt.path, tt.none, tt.noise)
			if a.Added != tt.wantAdded || a.WithinNoise != tt.wantWithin {
				t.Errorf("compare = %+v, want added %s within %v", a, tt.wantAdded, tt.wantWithin)
			}
			if math.IsNaN(tt.wantRatio) != math.IsNaN(a.Ratio) || (!math.IsNaN(a.Ratio) && math.Abs(a.Ratio-tt.wantRatio) > 1e-9) {
				t.Errorf("ratio = %v, want %v", a.Ratio, tt.wantRatio)
			}
		})
	}
}

func TestRows(t *testing.T) {
	t.Parallel()
	var s []sample
	s = append(s, samples(pathNone, 100, 2, 1)...)
	s = append(s, samples(pathProxy, 100, 2, 11)...)
	s = append(s, samples(pathNRI, 100, 2, 21)...)
	rs := rows(s, allPaths())
	if len(rs) != len(calls()) {
		t.Fatalf("%d rows, want %d", len(rs), len(calls()))
	}
	create := rs[0]
	if create.call != callCreate || !create.hasNone {
		t.Fatalf("first row = %+v", create)
	}
	if got := create.vs50[pathProxy].Added; got != msDur(10) {
		t.Errorf("proxy added at p50 = %s, want 10ms", got)
	}
	if got := create.vs99[pathNRI].Added; got != msDur(20) {
		t.Errorf("nri added at p99 = %s, want 20ms", got)
	}
	if _, ok := create.vs50[pathNone]; ok {
		t.Error("none compared with itself")
	}
	if create.maxGap50 != msDur(1) {
		t.Errorf("row noise = %s, want 1ms", create.maxGap50)
	}
	// Without none there is nothing to compare with.
	if rs := rows(s, []string{pathProxy, pathNRI}); rs[0].hasNone || len(rs[0].vs50) != 0 {
		t.Errorf("rows without none = %+v", rs[0])
	}
}

func BenchmarkRows(b *testing.B) {
	var s []sample
	for _, p := range allPaths() {
		s = append(s, samples(p, 100, 25, 20)...)
	}
	for b.Loop() {
		rows(s, allPaths())
	}
}

func TestReportPrintAndJSON(t *testing.T) {
	t.Parallel()
	var s []sample
	s = append(s, samples(pathNone, 100, 2, 1)...)
	s = append(s, samples(pathNRI, 100, 2, 11)...)
	r := &report{runtime: "containerd 2.4.2", opts: options{rounds: 25, perPod: 2, rate: 2, idle: 20 * time.Second}, paths: []string{pathNone, pathNRI},
		samples: s, perPath: 100, seconds: 200, cpu: []cpuUse{{Path: pathNRI, Process: "tandem-nri", Ticks: 50, IdleTicks: 2, IdleSeconds: 20}}}
	var out bytes.Buffer
	r.print(&out)
	for _, want := range []string{"Create+Start", "nri+ p50", "p99 is the 2nd largest value", "tandem-nri                  0.10               5.0  3.0"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	path := filepath.Join(t.TempDir(), "out.json")
	if err := r.writeJSON(path); err != nil {
		t.Fatal(err)
	}
	var j jsonReport
	if err := readJSONFile(path, &j); err != nil {
		t.Fatal(err)
	}
	if len(j.Rows) != 3 || j.Rows[0].VsP50[pathNRI].AddedMs != 10 || len(j.Rows[0].Sample[pathNone]) != 100 {
		t.Errorf("JSON rows = %+v", j.Rows[0])
	}
}

func TestCPUPerContainer(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name            string
		c               cpuUse
		containers      int
		seconds         float64
		total, net, pct float64
	}{
		// 5 s over 100 containers is 50 ms each; at rest 0.2 s in 20 s (1 % of a core) is 2 s of the 200 s
		// run, 20 ms each.
		{name: "with rest", c: cpuUse{Ticks: 500, IdleTicks: 20, IdleSeconds: 20}, containers: 100, seconds: 200, total: 50, net: 30, pct: 1},
		{name: "rest not measured", c: cpuUse{Ticks: 500}, containers: 100, seconds: 200, total: 50, net: 50},
		{name: "no containers", c: cpuUse{Ticks: 10}, seconds: 1, total: 100, net: 100},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			total, net := tt.c.perContainer(tt.containers, tt.seconds)
			if math.Abs(total-tt.total) > 1e-9 || math.Abs(net-tt.net) > 1e-9 || math.Abs(tt.c.restPercent()-tt.pct) > 1e-9 {
				t.Errorf("perContainer = %v, %v, rest %v%%; want %v, %v, %v%%", total, net, tt.c.restPercent(), tt.total, tt.net, tt.pct)
			}
		})
	}
}

func TestNthLargest(t *testing.T) {
	t.Parallel()
	for n, want := range map[int]string{1: "largest", 2: "2nd largest", 3: "3rd largest", 11: "11th largest"} {
		if got := nthLargest(n); got != want {
			t.Errorf("nthLargest(%d) = %q, want %q", n, got, want)
		}
	}
}

func readJSONFile(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}
