package main

import (
	"bufio"
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Tandem's own timings, read from its /metrics: where the added latency is spent inside Tandem, and
// what is left for the hops to it.
const (
	metricHook  = "tandem_hook_duration_seconds"      // by hook and stage, in both binaries
	metricEvent = "tandem_nri_event_duration_seconds" // by event, tandem-nri only
)

// timedStages are the hook stages and NRI events of a container start; the report shows them in this order.
var (
	timedStages = []string{"PreCreateContainer", "PreStartContainer", "PostStartContainer"}
	timedEvents = []string{"CreateContainer", "StartContainer", "PostStartContainer"}
)

// sumCount is a histogram's _sum and _count.
type sumCount struct {
	sum   float64 // seconds
	count float64
}

// histSums reads the _sum and _count of histogram metric from Prometheus text, keyed by the value of
// label and summed over every other label (the hooks of a stage add up to the stage's time).
func histSums(text, metric, label string) (map[string]sumCount, error) {
	out := map[string]sumCount{}
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		rest, isSum := strings.CutPrefix(line, metric+"_sum{")
		if !isSum {
			var isCount bool
			if rest, isCount = strings.CutPrefix(line, metric+"_count{"); !isCount {
				continue
			}
		}
		labels, value, ok := strings.Cut(rest, "} ")
		if !ok {
			return nil, fmt.Errorf("%s: malformed line %q", metric, line)
		}
		key, ok := labelValue(labels, label)
		if !ok {
			return nil, fmt.Errorf("%s: line %q has no label %s", metric, line, label)
		}
		v, err := strconv.ParseFloat(strings.Fields(value)[0], 64)
		if err != nil {
			return nil, fmt.Errorf("%s: value of %q: %w", metric, line, err)
		}
		sc := out[key]
		if isSum {
			sc.sum += v
		} else {
			sc.count += v
		}
		out[key] = sc
	}
	return out, sc.Err()
}

// labelValue finds name="value" in the text between a metric's braces. Tandem's label values (hook,
// stage and event names) hold no quotes or commas.
func labelValue(labels, name string) (string, bool) {
	for l := range strings.SplitSeq(labels, ",") {
		k, v, ok := strings.Cut(l, "=")
		if ok && strings.TrimSpace(k) == name {
			return strings.Trim(v, `"`), true
		}
	}
	return "", false
}

// tandemTimes is what one Tandem process says it spent, per stage or event.
type tandemTimes struct {
	hooks  map[string]sumCount // by stage
	events map[string]sumCount // by NRI event; empty for tandem-proxy
}

func readTandemTimes(ctx context.Context, p *path) (tandemTimes, error) {
	text, err := p.tandem.Metrics(ctx)
	if err != nil {
		return tandemTimes{}, fmt.Errorf("path %s: %w", p.name, err)
	}
	var t tandemTimes
	if t.hooks, err = histSums(text, metricHook, "stage"); err != nil {
		return t, err
	}
	if t.events, err = histSums(text, metricEvent, "event"); err != nil {
		return t, err
	}
	return t, nil
}

// inside is the time Tandem spent in one stage (all its hooks) or NRI event over the timed rounds, per
// timed container, and how many observations that was per container: one per event, one per hook for a
// stage.
type inside struct {
	Kind         string  `json:"kind"` // "hooks" (a stage) or "event" (an NRI event)
	Name         string  `json:"name"`
	MsPer        float64 `json:"msPerContainer"`
	PerContainer float64 `json:"observationsPerContainer"`
}

// insideTimes is the difference of two readings of one process, per timed container.
func insideTimes(before, after tandemTimes, containers int) []inside {
	var out []inside
	add := func(kind string, names []string, b, a map[string]sumCount) {
		for _, n := range names {
			d := sumCount{sum: a[n].sum - b[n].sum, count: a[n].count - b[n].count}
			if d.count <= 0 {
				continue
			}
			per := float64(max(containers, 1))
			out = append(out, inside{Kind: kind, Name: n, MsPer: d.sum * float64(time.Second/time.Millisecond) / per, PerContainer: d.count / per})
		}
	}
	add("event", timedEvents, before.events, after.events)
	add("hooks", timedStages, before.hooks, after.hooks)
	return out
}
