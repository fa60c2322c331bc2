package main

import (
	"math"
	"testing"
)

const sampleMetrics = `# HELP tandem_hook_duration_seconds Time a hook took.
# TYPE tandem_hook_duration_seconds histogram
tandem_hook_duration_seconds_bucket{hook="qos",stage="PreCreateContainer",le="0.001"} 10
tandem_hook_duration_seconds_sum{hook="qos",stage="PreCreateContainer"} 0.002
tandem_hook_duration_seconds_count{hook="qos",stage="PreCreateContainer"} 10
tandem_hook_duration_seconds_sum{hook="cpuset",stage="PreCreateContainer"} 0.003
tandem_hook_duration_seconds_count{hook="cpuset",stage="PreCreateContainer"} 10
tandem_hook_duration_seconds_sum{hook="cpuset",stage="PreStartContainer"} 0.001
tandem_hook_duration_seconds_count{hook="cpuset",stage="PreStartContainer"} 10
tandem_hook_duration_seconds_total_weird{stage="PreCreateContainer"} 99
tandem_nri_event_duration_seconds_sum{event="CreateContainer"} 0.01
tandem_nri_event_duration_seconds_count{event="CreateContainer"} 10
tandem_nri_events_total{event="CreateContainer",result="ok"} 10
`

func TestHistSums(t *testing.T) {
	t.Parallel()
	hooks, err := histSums(sampleMetrics, metricHook, "stage")
	if err != nil {
		t.Fatal(err)
	}
	// The hooks of a stage add up.
	if got := hooks["PreCreateContainer"]; math.Abs(got.sum-0.005) > 1e-12 || got.count != 20 {
		t.Errorf("PreCreateContainer = %+v, want sum 0.005 over 20", got)
	}
	if got := hooks["PreStartContainer"]; got.count != 10 {
		t.Errorf("PreStartContainer = %+v", got)
	}
	events, err := histSums(sampleMetrics, metricEvent, "event")
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != 1 || events["CreateContainer"].count != 10 {
		t.Errorf("events = %+v", events)
	}
	if none, err := histSums(sampleMetrics, "tandem_absent_seconds", "event"); err != nil || len(none) != 0 {
		t.Errorf("absent metric = %v, %v; want nothing", none, err)
	}
	if _, err := histSums(`tandem_nri_event_duration_seconds_sum{result="ok"} 1`, metricEvent, "event"); err == nil {
		t.Error("a series without the label was accepted")
	}
	if _, err := histSums(`tandem_nri_event_duration_seconds_sum{event="x"} one`, metricEvent, "event"); err == nil {
		t.Error("a value that is no number was accepted")
	}
}

func TestInsideTimes(t *testing.T) {
	t.Parallel()
	before := tandemTimes{
		hooks:  map[string]sumCount{"PreCreateContainer": {sum: 1, count: 30}},
		events: map[string]sumCount{"CreateContainer": {sum: 2, count: 10}},
	}
	after := tandemTimes{
		hooks:  map[string]sumCount{"PreCreateContainer": {sum: 1.3, count: 330}, "PostStartContainer": {sum: 0.1, count: 100}},
		events: map[string]sumCount{"CreateContainer": {sum: 2.5, count: 110}, "StartContainer": {}},
	}
	got := insideTimes(before, after, 100)
	want := []inside{
		{Kind: "event", Name: "CreateContainer", MsPer: 5, PerContainer: 1},
		{Kind: "hooks", Name: "PreCreateContainer", MsPer: 3, PerContainer: 3},
		{Kind: "hooks", Name: "PostStartContainer", MsPer: 1, PerContainer: 1},
	}
	if len(got) != len(want) {
		t.Fatalf("insideTimes = %+v, want %+v (stages without observations left out)", got, want)
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.Kind != w.Kind || g.Name != w.Name || math.Abs(g.MsPer-w.MsPer) > 1e-9 || math.Abs(g.PerContainer-w.PerContainer) > 1e-9 {
			t.Errorf("insideTimes[%d] = %+v, want %+v", i, g, w)
		}
	}
}
