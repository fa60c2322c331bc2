package main

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"
)

func TestIdleFilled(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		be, capacity, lsSolo float64
		want                 float64
	}{
		{"BE took all LS left", 1.8, 2, 0.2, 1},
		{"BE took 65% of the idle", 1.17, 2, 0.2, 0.65},
		{"LS's own slowdown does not count for BE: only solo's LS use sets the idle", 1.5, 2, 0.5, 1},
		{"no idle CPU at all", 0.5, 2, 2, 0},
		{"LS measured above capacity (noise)", 0.1, 2, 2.1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := idleFilled(tc.be, tc.capacity, tc.lsSolo); math.Abs(got-tc.want) > 1e-9 {
				t.Errorf("idleFilled(%v, %v, %v) = %v, want %v", tc.be, tc.capacity, tc.lsSolo, got, tc.want)
			}
		})
	}
}

func TestRelate(t *testing.T) {
	cells := []cell{
		{Round: 1, View: viewPod, Rate: 400, Setting: settingSolo, P99Ms: 2, P999Ms: 4, LSCores: 0.2, CleanP99Ms: 2, CleanP999Ms: 4},
		{Round: 1, View: viewPod, Rate: 1200, Setting: settingSolo, P99Ms: 5, P999Ms: 10, LSCores: 0.6},
		{Round: 2, View: viewPod, Rate: 400, Setting: settingSolo, P99Ms: 4, P999Ms: 8, LSCores: 0.4},
		{Round: 1, View: viewHost, Rate: 400, Setting: settingSolo, P99Ms: 1, P999Ms: 1, LSCores: 0.1},
		{Round: 1, View: viewPod, Rate: 400, Setting: settingPlain, P99Ms: 3, P999Ms: 8, BECores: 0.9, CleanP99Ms: 2.2, CleanP999Ms: 5},
		{Round: 1, View: viewPod, Rate: 1200, Setting: settingPlain, P99Ms: 5.5, P999Ms: 20, BECores: 0.7},
		{Round: 2, View: viewPod, Rate: 400, Setting: settingPlain, P99Ms: 4, P999Ms: 8, BECores: 1.6},
		{Round: 1, View: viewHost, Rate: 400, Setting: settingPlain, P99Ms: 10, P999Ms: 30, BECores: 1.9},
		{Round: 3, View: viewPod, Rate: 400, Setting: settingPlain, P99Ms: 10}, // no solo in round 3
	}
	starts := []podStarts{
		{Round: 1, Setting: settingSolo, P50Ms: 100},
		{Round: 1, Setting: settingPlain, P50Ms: 150},
		{Round: 2, Setting: settingPlain, P50Ms: 150},
	}
	relate(cells, starts, 2)
	for _, tc := range []struct {
		i                 int
		p99, p999, filled float64
	}{
		{4, 1.5, 2, 0.5}, // against round 1's solo at 400
		{5, 1.1, 2, 0.5}, // against round 1's solo at 1200: 0.7 / (2 − 0.6)
		{6, 1, 1, 1},     // against round 2's own solo
		{7, 10, 30, 1},   // the host view against the host solo: 1.9 / 1.9
		{8, 0, 0, 0},     // no baseline: no ratio rather than a wrong one
		{0, 0, 0, 0},     // solo itself
	} {
		c := cells[tc.i]
		if math.Abs(c.P99Ratio-tc.p99) > 1e-9 || math.Abs(c.P999Ratio-tc.p999) > 1e-9 || math.Abs(c.IdleFilled-tc.filled) > 1e-9 {
			t.Errorf("cell %d (%s %s %v round %d): p99 ratio %v, p99.9 ratio %v, idle filled %v; want %v, %v, %v",
				tc.i, c.View, c.Setting, c.Rate, c.Round, c.P99Ratio, c.P999Ratio, c.IdleFilled, tc.p99, tc.p999, tc.filled)
		}
	}
	if c := cells[4]; math.Abs(c.CleanP99Ratio-1.1) > 1e-9 || math.Abs(c.CleanP999Ratio-1.25) > 1e-9 {
		t.Errorf("clean ratios %v and %v, want 1.1 and 1.25 (to solo's clean figures)", c.CleanP99Ratio, c.CleanP999Ratio)
	}
	if c := cells[5]; c.CleanP99Ratio != 0 || c.CleanP999Ratio != 0 {
		t.Errorf("clean ratios %v and %v with no clean request, want none", c.CleanP99Ratio, c.CleanP999Ratio)
	}
	if starts[1].Ratio != 1.5 || starts[2].Ratio != 0 {
		t.Errorf("pod start ratios %v and %v, want 1.5 (round 1) and 0 (round 2 has no solo)", starts[1].Ratio, starts[2].Ratio)
	}
}

func TestFillCell(t *testing.T) {
	lat := make([]int64, 1000)
	for i := range lat {
		lat[i] = int64(1000 - i) // 1000 µs down to 1 µs, unsorted
	}
	var c cell
	fillCell(&c, loadResult{Sent: 1000, Failed: 2, LatencyUs: lat, MaxLagUs: 1500}, nil)
	if c.P50Ms != 0.5 || c.P99Ms != 0.99 || c.P999Ms != 0.999 || c.MaxLagMs != 1.5 || c.Sent != 1000 || c.Failed != 2 {
		t.Errorf("p50 %v p99 %v p99.9 %v lag %v sent %d failed %d; want 0.5, 0.99, 0.999, 1.5, 1000, 2",
			c.P50Ms, c.P99Ms, c.P999Ms, c.MaxLagMs, c.Sent, c.Failed)
	}
	if c.Stalled != 0 || c.CleanP50Ms != c.P50Ms || c.CleanP99Ms != c.P99Ms || c.CleanP999Ms != c.P999Ms {
		t.Errorf("no steal: stalled %d, clean %v/%v/%v; want 0 and the figures over all", c.Stalled, c.CleanP50Ms, c.CleanP99Ms, c.CleanP999Ms)
	}
}

// TestSplitStalled: 1000 requests due every ms, each taking 1 ms except the 40 that queue behind a
// 40 ms stall of CPU 1, which take 40 ms down to 1 ms more. Requests on CPU 0 alone are clean.
func TestSplitStalled(t *testing.T) {
	t.Parallel()
	const n = 1000
	base := time.Unix(1000, 0).UnixNano()
	at := func(msAfter float64) int64 { return base + int64(msAfter*float64(time.Millisecond)) }
	r := loadResult{Sent: n, DueFromUnixNs: base, LatencyUs: make([]int64, n), DueUs: make([]int64, n), CPUs: make([]cpuSet, n)}
	for i := range n {
		r.DueUs[i] = int64(i) * 1000
		r.LatencyUs[i] = 1000
		r.CPUs[i] = cpuSet(0).add(i % 2) // even requests on CPU 0, odd ones on CPU 1
		if i >= 500 && i < 540 {
			r.CPUs[i] = cpuSet(0).add(1).add(0) // migrated: the stall is on one of their CPUs
			r.LatencyUs[i] = int64(540-i) * 1000
		}
	}
	stall := stalls{nil, {{at(500), at(540)}}}
	for _, tc := range []struct {
		name             string
		r                loadResult
		st               stalls
		wantStalled      int
		wantP99, wantMax float64 // of the clean requests, ms
		wantAllP999      float64
	}{
		{
			name: "no steal at all: every request is clean", r: r, st: nil,
			wantStalled: 0, wantP99: 30, wantMax: 40, wantAllP999: 39,
		},
		{
			// The stalled ones: the 40 in the stall, and the odd requests whose [due, done] touches
			// it (499 ends at 500 ms; 541 is due after it, on CPU 1, and clean).
			name: "a stall on CPU 1: the requests that ran there during it are stalled", r: r, st: stall,
			wantStalled: 41, wantP99: 1, wantMax: 1, wantAllP999: 39,
		},
		{
			name: "no per-request records: nothing is clean when there was steal", r: loadResult{Sent: 2, LatencyUs: []int64{1000, 2000}}, st: stall,
			wantStalled: 2, wantAllP999: 2,
		},
		{
			name: "no per-request records and no steal: all clean", r: loadResult{Sent: 2, LatencyUs: []int64{1000, 2000}}, st: stalls{nil, nil},
			wantStalled: 0, wantP99: 2, wantMax: 2, wantAllP999: 2,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var c cell
			fillCell(&c, tc.r, tc.st)
			_, clean := splitStalled(tc.r, tc.st)
			gotMax := 0.0
			for _, d := range clean {
				gotMax = max(gotMax, float64(d)/float64(time.Millisecond))
			}
			if c.Stalled != tc.wantStalled || c.CleanP99Ms != tc.wantP99 || gotMax != tc.wantMax || c.P999Ms != tc.wantAllP999 {
				t.Errorf("stalled %d, clean p99 %v, clean max %v, p99.9 over all %v; want %d, %v, %v, %v",
					c.Stalled, c.CleanP99Ms, gotMax, c.P999Ms, tc.wantStalled, tc.wantP99, tc.wantMax, tc.wantAllP999)
			}
		})
	}
}

func TestWriteTables(t *testing.T) {
	rep := report{Flavor: "1.6", Capacity: 2, Duration: "20s", Rounds: 2, WorkUs: 200, HostCgroup: "/",
		Cells: []cell{
			{Round: 1, View: viewPod, Rate: 400, Setting: settingSolo, P50Ms: 1, P99Ms: 2, P999Ms: 3, LSCores: 0.2, Sent: 8000, Attempts: 1,
				CleanP50Ms: 1, CleanP99Ms: 2, CleanP999Ms: 3, SamplerCores: 0.0012},
			{Round: 1, View: viewPod, Rate: 400, Setting: settingCFSQuota, P50Ms: 2, P99Ms: 6.2, P999Ms: 9, P99Ratio: 3.1, P999Ratio: 3, BECores: 1.16, IdleFilled: 0.644, Sent: 8000, StealMs: 30, Attempts: 3,
				Stalled: 41, CleanP50Ms: 1.9, CleanP99Ms: 2.4, CleanP999Ms: 3.3, CleanP99Ratio: 1.2, CleanP999Ratio: 1.1, SamplerCores: 0.0021, ProxyCores: 0.0123},
			{Round: 2, View: viewPod, Rate: 400, Setting: settingCFSQuota, P99Ratio: 4.0, P999Ratio: 3.5, BECores: 1.2, IdleFilled: 0.66,
				Sent: 8000, Stalled: 8000, ProxyCores: 0.0081},
		},
		PodStarts: []podStarts{{Round: 1, Setting: settingPlain, P50Ms: 150, MaxMs: 180, Ratio: 1.38}},
	}
	var buf bytes.Buffer
	writeTables(&buf, rep)
	out := buf.String()
	for _, want := range []string{
		"targets (issue 41): p99 <= 1.10x solo (1.25x with the memory and cache antagonists), p99.9 <= 1.5x solo, idle filled >= 80%, host p99 <= 1.5x solo",
		"idle filled = BE cores / (capacity - LS-side cores of solo at that load)",
		"round 1\n",
		"round 2\n",
		"stalled: requests whose [due, done] overlapped steal on a CPU they ran on (each CPU's steal sampled every 10ms, its thread at most 0.21% of a CPU)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	// One row per cell, its figures in order.
	for _, want := range [][]string{
		{"pod", "400", "tandem-cfsquota", "2.00", "6.20", "9.00", "3.10", "3.00", "0.00", "1.16", "64%", "0/8000", "0.0", "30", "3", "41", "1.90", "2.40", "3.30", "12.3"},
		// Solo and plain run no tandem-proxy.
		{"pod", "400", "solo", "1.00", "2.00", "3.00", "-", "-", "0.20", "0.00", "-", "0/8000", "0.0", "0", "1", "0", "1.00", "2.00", "3.00", "-"},
		// Every request stalled: no clean figures rather than zeros.
		{"pod", "400", "tandem-cfsquota", "0.00", "0.00", "0.00", "4.00", "3.50", "0.00", "1.20", "66%", "0/8000", "0.0", "0", "0", "8000", "-", "-", "-", "8.1"},
		{"plain", "150", "180", "1.38"},
		// The summary: ranges over the rounds, like the table; the clean ratios of the cells
		// that have any.
		{"pod", "400", "tandem-cfsquota", "3.10-4.00", "3.00-3.50", "1.16-1.20", "64-66%", "1.20", "1.10", "41-8000", "8.1-12.3"},
	} {
		if !hasRow(out, want) {
			t.Errorf("output has no row %v:\n%s", want, out)
		}
	}
}

// hasRow reports whether some line of out has exactly these fields.
func hasRow(out string, fields []string) bool {
	for line := range strings.Lines(out) {
		got := strings.Fields(line)
		if len(got) != len(fields) {
			continue
		}
		same := true
		for i := range got {
			same = same && got[i] == fields[i]
		}
		if same {
			return true
		}
	}
	return false
}

func TestSLOConfig(t *testing.T) {
	for _, tc := range []struct {
		setting, want string
	}{
		{settingTandem, "colocation-config: '{\"enable\": true}'\n"},
		{settingNoSteal, "colocation-config: '{\"enable\": true}'\nresource-threshold-config: '{\"clusterStrategy\": {\"stealHeadroom\": \"off\"}}'\n"},
		{settingYield, "colocation-config: '{\"enable\": true}'\nresource-qos-config: '{\"clusterStrategy\": {\"beClass\": {\"cpuQOS\": {\"yieldThreads\": true}}}}'\n"},
		{settingCPUSet, "colocation-config: '{\"enable\": true}'\nresource-threshold-config: '{\"clusterStrategy\": {\"enable\": true, \"cpuSuppressThresholdPercent\": 65, \"cpuSuppressPolicy\": \"cpuset\"}}'\n"},
		{settingCFSQuota, "colocation-config: '{\"enable\": true}'\nresource-threshold-config: '{\"clusterStrategy\": {\"enable\": true, \"cpuSuppressThresholdPercent\": 65, \"cpuSuppressPolicy\": \"cfsQuota\"}}'\n"},
		{settingLSWait, "colocation-config: '{\"enable\": true}'\nresource-threshold-config: '{\"clusterStrategy\": {\"lsWaitGuard\": true}}'\n"},
	} {
		if got := sloConfig(tc.setting, 65); got != tc.want {
			t.Errorf("sloConfig(%s) =\n%s\nwant\n%s", tc.setting, got, tc.want)
		}
	}
}
