package reporter

import (
	"testing"
	"time"

	"github.com/tandemkit/tandem/metrics/collector"
	"github.com/tandemkit/tandem/metrics/reclaim"
	"github.com/tandemkit/tandem/resource/qos"
)

type fixedCollector struct{ s *collector.Snapshot }

func (f fixedCollector) Latest() *collector.Snapshot { return f.s }

func TestFromSnapshot(t *testing.T) {
	t.Parallel()
	if SamplesFrom(fixedCollector{})() != nil {
		t.Fatal("no snapshot yet must give no sample")
	}
	snap := &collector.Snapshot{
		Time:     t0,
		Capacity: collector.Usage{CPUMilli: 32000, MemoryBytes: 128 * gi},
		Node:     collector.Usage{CPUMilli: 9000, MemoryBytes: 40 * gi},
		System:   collector.Usage{CPUMilli: 600, MemoryBytes: 2 * gi},
		// The host took 400m back: it counts with the system's use, never as batch capacity.
		Steal: collector.Steal{CPUMilli: 400},
		Containers: []collector.ContainerUsage{
			{Target: collector.Target{PodUID: "a", Container: "app", QoS: qos.LS}, Usage: collector.Usage{CPUMilli: 3000, MemoryBytes: gi}},
			{Target: collector.Target{PodUID: "a", Container: "sidecar", QoS: qos.LS}, Usage: collector.Usage{CPUMilli: 1000, MemoryBytes: gi}},
			{Target: collector.Target{Container: "unknown"}, Usage: collector.Usage{CPUMilli: 500}},
			// Host applications (host-application-config) count as their class: LS is HP use, BE is not.
			{Target: collector.Target{Container: "nginx", ContainerID: "host-application/nginx", QoS: qos.LS, Cgroup: "/host-latency-sensitive/nginx"},
				Usage: collector.Usage{CPUMilli: 2000}},
			{Target: collector.Target{Container: "logtail", ContainerID: "host-application/logtail", QoS: qos.BE, Cgroup: "/host-best-effort/logtail"},
				Usage: collector.Usage{CPUMilli: 3000}},
		},
	}
	got := SamplesFrom(fixedCollector{snap})()
	if !got.Time.Equal(t0) || got.Capacity != (reclaim.Resources{CPUMilli: 32000, MemoryBytes: 128 * gi}) ||
		got.System != (reclaim.Resources{CPUMilli: 1000, MemoryBytes: 2 * gi}) || len(got.Pods) != 4 {
		t.Fatalf("FromSnapshot() = %+v", got)
	}
	// The reporter sums a pod's containers: both of pod a count, and the LS host application.
	h := newHarness(t, seed004(t, true), testNode())
	h.setSample(got)
	h.step()
	if c, _, _, _ := batch(h.node()); c != 32000-12800-1000-4000-2000 {
		t.Fatalf("batch cpu = %d, want 12200 (pod a counted with both containers, nginx as HP, logtail not)", c)
	}
	// The steal headroom holds BE to 3000m on this node: the published capacity follows it.
	h.mu.Lock()
	h.ceiling = 3000
	h.mu.Unlock()
	h.clock.Step(time.Minute)
	got.Time = h.clock.Now()
	h.setSample(got)
	h.step()
	if c, _, _, _ := batch(h.node()); c != 3000 {
		t.Fatalf("batch cpu = %d under a steal headroom ceiling of 3000m, want 3000", c)
	}
}
