package reporter

import (
	"github.com/tandemkit/tandem/metrics/collector"
	"github.com/tandemkit/tandem/metrics/reclaim"
)

// FromSnapshot turns a collector snapshot into a Sample, summing containers by pod; nil stays
// nil. Containers without a pod UID (the proxy has not learnt it yet) count for nothing here: the
// collector already left their usage out of System, so the formula errs by that much towards
// more batch capacity until the next sample names them.
func FromSnapshot(s *collector.Snapshot) *Sample {
	if s == nil {
		return nil
	}
	out := &Sample{
		Time:     s.Time,
		Capacity: reclaim.Resources(s.Capacity),
		Node:     reclaim.Resources(s.Node),
		System:   reclaim.Resources(s.System),
		Pods:     make([]PodUsage, 0, len(s.Containers)),
	}
	// CPU the host of a virtual machine takes back is not the node's to hand out: it counts with what
	// the system uses, so the predictor's peak of it stays out of the batch capacity.
	out.System.CPUMilli += max(s.Steal.CPUMilli, 0)
	for _, c := range s.Containers {
		uid := c.PodUID
		if c.Cgroup != "" {
			// A host application (actuate/hostapp) counts as a pod of its class: an LS one is
			// high-priority use, no longer system use; ContainerID keys it apart from every pod.
			uid = c.ContainerID
		}
		if uid == "" {
			continue
		}
		out.Pods = append(out.Pods, PodUsage{UID: uid, QoS: c.QoS, Usage: reclaim.Resources(c.Usage)})
	}
	return out
}

// Latest is what Deps.Samples needs of a collector.
type Latest interface{ Latest() *collector.Snapshot }

// SamplesFrom adapts a collector to Deps.Samples.
func SamplesFrom(c Latest) func() *Sample {
	return func() *Sample { return FromSnapshot(c.Latest()) }
}
