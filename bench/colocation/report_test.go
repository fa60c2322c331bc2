package main

import (
	"bytes"
	"math"
	"strings"
	"testing"
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
		{Round: 1, View: viewPod, Rate: 400, Setting: settingSolo, P99Ms: 2, P999Ms: 4, LSCores: 0.2},
		{Round: 1, View: viewPod, Rate: 1200, Setting: settingSolo, P99Ms: 5, P999Ms: 10, LSCores: 0.6},
		{Round: 2, View: viewPod, Rate: 400, Setting: settingSolo, P99Ms: 4, P999Ms: 8, LSCores: 0.4},
		{Round: 1, View: viewHost, Rate: 400, Setting: settingSolo, P99Ms: 1, P999Ms: 1, LSCores: 0.1},
		{Round: 1, View: viewPod, Rate: 400, Setting: settingPlain, P99Ms: 3, P999Ms: 8, BECores: 0.9},
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
	fillCell(&c, loadResult{Sent: 1000, Failed: 2, LatencyUs: lat, MaxLagUs: 1500})
	if c.P50Ms != 0.5 || c.P99Ms != 0.99 || c.P999Ms != 0.999 || c.MaxLagMs != 1.5 || c.Sent != 1000 || c.Failed != 2 {
		t.Errorf("p50 %v p99 %v p99.9 %v lag %v sent %d failed %d; want 0.5, 0.99, 0.999, 1.5, 1000, 2",
			c.P50Ms, c.P99Ms, c.P999Ms, c.MaxLagMs, c.Sent, c.Failed)
	}
}

func TestWriteTables(t *testing.T) {
	rep := report{Flavor: "1.6", Capacity: 2, Duration: "20s", Rounds: 2, WorkUs: 200, HostCgroup: "/",
		Cells: []cell{
			{Round: 1, View: viewPod, Rate: 400, Setting: settingSolo, P50Ms: 1, P99Ms: 2, P999Ms: 3, LSCores: 0.2, Sent: 8000, Attempts: 1},
			{Round: 1, View: viewPod, Rate: 400, Setting: settingCFSQuota, P50Ms: 2, P99Ms: 6.2, P999Ms: 9, P99Ratio: 3.1, P999Ratio: 3, BECores: 1.16, IdleFilled: 0.644, Sent: 8000, StealMs: 30, Attempts: 3},
			{Round: 2, View: viewPod, Rate: 400, Setting: settingCFSQuota, P99Ratio: 4.0, P999Ratio: 3.5, BECores: 1.2, IdleFilled: 0.66},
		},
		PodStarts: []podStarts{{Round: 1, Setting: settingPlain, P50Ms: 150, MaxMs: 180, Ratio: 1.38}},
	}
	var buf bytes.Buffer
	writeTables(&buf, rep)
	out := buf.String()
	for _, want := range []string{
		"targets (issue 13): p99 <= 1.10x solo, p99.9 <= 1.5x solo, idle filled >= 80%, host p99 <= 1.5x solo",
		"idle filled = BE cores / (capacity - LS-side cores of solo at that load)",
		"round 1\n",
		"round 2\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	// One row per cell, its figures in order.
	for _, want := range [][]string{
		{"pod", "400", "tandem-cfsquota", "2.00", "6.20", "9.00", "3.10", "3.00", "0.00", "1.16", "64%", "0/8000", "0.0", "30", "3"},
		{"pod", "400", "solo", "1.00", "2.00", "3.00", "-", "-", "0.20", "0.00", "-", "0/8000", "0.0", "0", "1"},
		{"plain", "150", "180", "1.38"},
		// The summary: ranges over the rounds, like the table.
		{"pod", "400", "tandem-cfsquota", "3.10-4.00", "3.00-3.50", "1.16-1.20", "64-66%"},
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
		{settingYield, "colocation-config: '{\"enable\": true}'\nresource-qos-config: '{\"clusterStrategy\": {\"beClass\": {\"cpuQOS\": {\"yieldThreads\": true}}}}'\n"},
		{settingCPUSet, "colocation-config: '{\"enable\": true}'\nresource-threshold-config: '{\"clusterStrategy\": {\"enable\": true, \"cpuSuppressThresholdPercent\": 65, \"cpuSuppressPolicy\": \"cpuset\"}}'\n"},
		{settingCFSQuota, "colocation-config: '{\"enable\": true}'\nresource-threshold-config: '{\"clusterStrategy\": {\"enable\": true, \"cpuSuppressThresholdPercent\": 65, \"cpuSuppressPolicy\": \"cfsQuota\"}}'\n"},
	} {
		if got := sloConfig(tc.setting, 65); got != tc.want {
			t.Errorf("sloConfig(%s) =\n%s\nwant\n%s", tc.setting, got, tc.want)
		}
	}
}
