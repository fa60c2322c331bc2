package extender

import (
	"fmt"
	"strings"
	"time"

	extenderv1 "k8s.io/kube-scheduler/extender/v1"
)

// Reason is why filter rejected a node. It labels the rejection metric, so the set is closed.
type Reason string

const (
	// ReasonNodeUnknown means the node is not (yet) in the informer cache.
	ReasonNodeUnknown Reason = "NodeUnknown"
	// ReasonNodeMetricMissing means the node has no valid tandem.io/node-metric annotation.
	ReasonNodeMetricMissing Reason = "NodeMetricMissing"
	// ReasonNodeMetricExpired means the metric is older than nodeMetricExpirationSeconds.
	ReasonNodeMetricExpired Reason = "NodeMetricExpired"
	// ReasonCPUUsage means CPU usage, counting pods not reported yet, is above the threshold.
	ReasonCPUUsage Reason = "CPUUsageAboveThreshold"
	// ReasonMemoryUsage means memory usage, counting pods not reported yet, is above the threshold.
	ReasonMemoryUsage Reason = "MemoryUsageAboveThreshold"
	// ReasonBatchCPU means free reclaimable CPU cannot hold the pod's kubernetes.io/batch-cpu request.
	ReasonBatchCPU Reason = "InsufficientBatchCPU"
	// ReasonBatchMemory means free reclaimable memory cannot hold the pod's kubernetes.io/batch-memory request.
	ReasonBatchMemory Reason = "InsufficientBatchMemory"
	// ReasonBatchReserved means the pod would fit in the node's free reclaimable capacity, but not
	// beside the room active Reservations hold there for other pods.
	ReasonBatchReserved Reason = "BatchCapacityReserved"
	// ReasonReservedElsewhere means an active Reservation holds room for the pod on another node.
	ReasonReservedElsewhere Reason = "ReservedOnAnotherNode"
)

// reasons is every Reason, for metric initialisation and documentation.
var reasons = []Reason{
	ReasonNodeUnknown, ReasonNodeMetricMissing, ReasonNodeMetricExpired,
	ReasonCPUUsage, ReasonMemoryUsage, ReasonBatchCPU, ReasonBatchMemory,
	ReasonBatchReserved, ReasonReservedElsewhere,
}

// resolvable reports whether preempting pods on the node could make room. Only batch capacity
// frees up when pods go; load and metric age change with the next report, so kube-scheduler must
// not evict for them, and no preemption on another node makes room reserved elsewhere.
func (r Reason) resolvable() bool {
	return r == ReasonBatchCPU || r == ReasonBatchMemory || r == ReasonBatchReserved
}

// message is what kube-scheduler shows for a rejected node. It is the same for every node with
// the same reason so that kube-scheduler's "0/N nodes are available" event groups them; the
// figures of each node go to the log (see explain).
func (r Reason) message() string {
	switch r {
	case ReasonNodeUnknown:
		return "tandem: node not known yet"
	case ReasonNodeMetricMissing:
		return "tandem: node metric missing"
	case ReasonNodeMetricExpired:
		return "tandem: node metric expired"
	case ReasonCPUUsage:
		return "tandem: cpu usage above threshold"
	case ReasonMemoryUsage:
		return "tandem: memory usage above threshold"
	case ReasonBatchCPU:
		return "tandem: insufficient reclaimable batch-cpu"
	case ReasonBatchMemory:
		return "tandem: insufficient reclaimable batch-memory"
	case ReasonBatchReserved:
		return "tandem: reclaimable batch capacity reserved for other pods"
	case ReasonReservedElsewhere:
		return "tandem: room reserved for this pod on another node"
	}
	return "tandem: " + string(r)
}

// rejectMessage is filter's message for a node rejected for r. The reservation reasons name the
// reservations (and, for the pod's own, the node), as an operator needs to find them; the others
// are r.message().
func rejectMessage(r Reason, st *nodeState, cl claims, now time.Time) string {
	switch r {
	case ReasonReservedElsewhere:
		return cl.elsewhereMessage(now)
	case ReasonBatchReserved:
		names := st.othersOn(cl, now)
		noun := "reservation"
		if len(names) > 1 {
			noun = "reservations"
		}
		return fmt.Sprintf("%s (%s %s)", r.message(), noun, strings.Join(names, ", "))
	}
	return r.message()
}

// fresh reports whether st has a metric young enough to trust at now.
func (cfg *Config) fresh(st *nodeState, now time.Time) bool {
	return st != nil && st.metric != nil && now.UnixNano() <= st.staleAfter
}

func (cfg *Config) staleMetricPolicy(d demand) MetricPolicy {
	if d.batch() {
		return cfg.ExpiredMetricPolicy.BatchPods
	}
	return cfg.ExpiredMetricPolicy.OtherPods
}

// filterNode decides whether a pod with demand d, claiming the reservations cl, may go to the node
// st (nil: unknown node) named node; an empty Reason passes. Load and metric age never reject an
// exempt pod (DaemonSet, system-critical): that would only leave it pending. A pod with room
// reserved goes to a node holding it and nowhere else; there, the reserved room is its own.
func (cfg *Config) filterNode(st *nodeState, node string, d demand, cl claims, now time.Time) Reason {
	if len(cl) > 0 && d.batch() && cl.anyActive(now) && !cl.activeOn(node, now) {
		return ReasonReservedElsewhere
	}
	fresh := cfg.fresh(st, now)
	if !fresh && !d.exempt() && cfg.staleMetricPolicy(d) == Reject {
		switch {
		case st == nil:
			return ReasonNodeUnknown
		case st.metric == nil:
			return ReasonNodeMetricMissing
		default:
			return ReasonNodeMetricExpired
		}
	}
	if st == nil {
		return ""
	}
	if fresh && !d.exempt() {
		if overThreshold(st.metric.NodeUsage.CPUMilli+st.unreportedCPU, st.allocCPU, st.thresholds.CPU) {
			return ReasonCPUUsage
		}
		if overThreshold(st.metric.NodeUsage.MemoryBytes+st.unreportedMemory, st.allocMemory, st.thresholds.Memory) {
			return ReasonMemoryUsage
		}
	}
	if d.batch() {
		freeCPU, freeMemory := st.freeBatch()
		availCPU, availMemory := st.availableBatch(cl, now)
		switch {
		case d.batchCPU > availCPU && d.batchCPU > freeCPU:
			return ReasonBatchCPU
		case d.batchMemory > availMemory && d.batchMemory > freeMemory:
			return ReasonBatchMemory
		case d.batchCPU > availCPU || d.batchMemory > availMemory:
			return ReasonBatchReserved
		}
	}
	return ""
}

func overThreshold(used, allocatable, threshold int64) bool {
	return threshold > 0 && allocatable > 0 && used*100 > threshold*allocatable
}

// explain gives the figures behind a rejection, for the log. st is nil only for
// ReasonNodeUnknown and ReasonReservedElsewhere.
func (cfg *Config) explain(r Reason, st *nodeState, d demand, cl claims, now time.Time) string {
	percent := func(v, of int64) int64 {
		if of <= 0 {
			return 0
		}
		return v * 100 / of
	}
	switch r {
	case ReasonNodeMetricMissing:
		return st.metricErr
	case ReasonNodeMetricExpired:
		return fmt.Sprintf("metric is %s old, expiry is %ds", now.Sub(st.metric.UpdateTime).Truncate(time.Second), cfg.NodeMetricExpirationSeconds)
	case ReasonCPUUsage:
		return fmt.Sprintf("cpu usage %d%% (reported %d%%, +%d%% estimated for %d pods not yet reported) is above %d%%",
			percent(st.metric.NodeUsage.CPUMilli+st.unreportedCPU, st.allocCPU), percent(st.metric.NodeUsage.CPUMilli, st.allocCPU),
			percent(st.unreportedCPU, st.allocCPU), st.unreportedPods, st.thresholds.CPU)
	case ReasonMemoryUsage:
		return fmt.Sprintf("memory usage %d%% (reported %d%%, +%d%% estimated for %d pods not yet reported) is above %d%%",
			percent(st.metric.NodeUsage.MemoryBytes+st.unreportedMemory, st.allocMemory), percent(st.metric.NodeUsage.MemoryBytes, st.allocMemory),
			percent(st.unreportedMemory, st.allocMemory), st.unreportedPods, st.thresholds.Memory)
	case ReasonBatchCPU:
		free, _ := st.freeBatch()
		return fmt.Sprintf("free batch-cpu %dm cannot hold the request of %dm", free, d.batchCPU)
	case ReasonBatchMemory:
		_, free := st.freeBatch()
		return fmt.Sprintf("free batch-memory %d bytes cannot hold the request of %d bytes", free, d.batchMemory)
	case ReasonBatchReserved:
		freeCPU, freeMemory := st.freeBatch()
		_, _, otherCPU, otherMemory := st.reservedFor(cl, now)
		return fmt.Sprintf("free batch-cpu %dm and batch-memory %d bytes, of which %dm and %d bytes reserved for other pods (%s), cannot hold the request of %dm and %d bytes",
			freeCPU, freeMemory, otherCPU, otherMemory, strings.Join(st.othersOn(cl, now), ", "), d.batchCPU, d.batchMemory)
	case ReasonReservedElsewhere:
		return cl.elsewhereMessage(now)
	}
	return r.message()
}

// freeBatch is reclaimable capacity minus what batch pods already requested and what
// high-priority pods not yet reported will take from it. The reporter also writes the capacity to
// allocatable and zeroes it there when the node degrades, so the lower of the two counts.
func (st *nodeState) freeBatch() (cpu, memory int64) {
	cpu, memory = max(st.allocBatchCPU, 0), max(st.allocBatchMemory, 0)
	if m := st.metric; m != nil {
		cpu, memory = m.Reclaimable.CPUMilli, m.Reclaimable.MemoryBytes
		if st.allocBatchCPU >= 0 {
			cpu = min(cpu, st.allocBatchCPU)
		}
		if st.allocBatchMemory >= 0 {
			memory = min(memory, st.allocBatchMemory)
		}
		cpu -= st.unreportedHPCPU
		memory -= st.unreportedHPMemory
	}
	return cpu - st.batchCPU, memory - st.batchMemory
}

// scoreNode ranks a node 0–10 by the share of allocatable that would stay free after the pod
// lands, weighted per resource. Usage counts pods not reported yet, so a burst of pods spreads
// instead of piling onto the node that looked coldest at the last report. A node without a
// fresh metric scores the minimum: nothing says it is cold. A node holding room reserved for the
// pod scores the maximum.
func (cfg *Config) scoreNode(st *nodeState, node string, d demand, cl claims, now time.Time) int64 {
	if len(cl) > 0 && cl.activeOn(node, now) {
		return extenderv1.MaxExtenderPriority
	}
	if !cfg.fresh(st, now) {
		return extenderv1.MinExtenderPriority
	}
	free := func(used, alloc int64) float64 {
		if alloc <= 0 {
			return 0
		}
		return min(max(float64(alloc-used)/float64(alloc), 0), 1)
	}
	m := st.metric
	cpu := free(m.NodeUsage.CPUMilli+st.unreportedCPU+d.estCPU, st.allocCPU)
	mem := free(m.NodeUsage.MemoryBytes+st.unreportedMemory+d.estMemory, st.allocMemory)
	w := cfg.ResourceWeights
	s := (float64(w.CPU)*cpu + float64(w.Memory)*mem) / float64(w.CPU+w.Memory)
	return extenderv1.MinExtenderPriority + int64(s*float64(extenderv1.MaxExtenderPriority-extenderv1.MinExtenderPriority))
}
