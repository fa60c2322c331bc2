package reporter

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tandemkit/tandem/config/batchwindow"
	"github.com/tandemkit/tandem/metrics/reclaim"
)

// Values of the result label of tandem_reporter_patches_total.
const (
	resultSuccess  = "success"
	resultConflict = "conflict"
	resultError    = "error"
)

type metrics struct {
	patches           *prometheus.CounterVec
	reclaimableCPU    prometheus.Gauge
	reclaimableMemory prometheus.Gauge
	lastSuccess       prometheus.Gauge
	// The batch capacity formula's terms and which one decides each resource (metrics/reclaim).
	cpuTerms, memoryTerms, bound *prometheus.GaugeVec
	clockOffset                  prometheus.Gauge
	windowPhase                  *prometheus.GaugeVec
}

// setWindow publishes the batch window phase; none removes the series.
func (m *metrics) setWindow(st batchwindow.State) {
	if st.Phase == batchwindow.PhaseNone {
		m.windowPhase.Reset()
		return
	}
	for _, p := range []batchwindow.Phase{batchwindow.PhaseOpen, batchwindow.PhaseClosing, batchwindow.PhaseClosed, batchwindow.PhaseEvicting} {
		v := 0.0
		if p == st.Phase {
			v = 1
		}
		m.windowPhase.WithLabelValues(string(p)).Set(v)
	}
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		patches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tandem_reporter_patches_total",
			Help: "Node patches the reporter sent (status and node-metric annotation), by result: success, conflict or error.",
		}, []string{"result"}),
		reclaimableCPU: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tandem_node_reclaimable_cpu_cores",
			Help: "Batch CPU the node can lend now, in cores, as last computed (0 when degraded or disabled).",
		}),
		reclaimableMemory: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tandem_node_reclaimable_memory_bytes",
			Help: "Batch memory the node can lend now, in bytes, as last computed (0 when degraded or disabled).",
		}),
		lastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tandem_reporter_last_success_timestamp_seconds",
			Help: "Unix time of the reporter's last successful Node patch.",
		}),
		cpuTerms: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tandem_node_batch_cpu_term_cores",
			Help: "Each term of the batch CPU formula as last computed, in cores: capacity, safety (capacity × (100 − cpuReclaimThresholdPercent)%), system (max of system usage and reserved), hp (high-priority pods as cpuCalculatePolicy counts them), hp_usage, batch_threshold (the batchCPUThresholdPercent cap; 0 none), steal_headroom (the ceiling; 0 none) and batch, the result. Absent while batch capacity is not computed.",
		}, []string{"term"}),
		memoryTerms: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tandem_node_batch_memory_term_bytes",
			Help: "Each term of the batch memory formula as last computed, in bytes; the terms of tandem_node_batch_cpu_term_cores but steal_headroom.",
		}, []string{"term"}),
		clockOffset: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tandem_node_clock_offset_seconds",
			Help: "The API server's clock minus this node's, in seconds, from the Date of its last answer (±1 s). Batch windows follow the node's clock.",
		}),
		windowPhase: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tandem_node_batch_window_phase",
			Help: "1 for the node's batch window phase now (open, closing, closed, evicting), 0 for the others; absent without batch-window-config.",
		}, []string{"phase"}),
		bound: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tandem_node_batch_capacity_bound",
			Help: "1 for the term that decides a resource's batch capacity now (safety, system, hp, batchThreshold or stealHeadroom), 0 for the others. Absent while batch capacity is not computed.",
		}, []string{"resource", "term"}),
	}
	// Pre-create every result so a rate() query sees zeros instead of no series.
	for _, r := range []string{resultSuccess, resultConflict, resultError} {
		m.patches.WithLabelValues(r)
	}
	if reg == nil {
		return m, nil
	}
	var errs []error
	for _, c := range []prometheus.Collector{m.patches, m.reclaimableCPU, m.reclaimableMemory, m.lastSuccess, m.cpuTerms, m.memoryTerms, m.bound, m.clockOffset, m.windowPhase} {
		errs = append(errs, reg.Register(c))
	}
	return m, errors.Join(errs...)
}

// boundTerms are the terms tandem_node_batch_capacity_bound has a series for.
var boundTerms = []reclaim.Term{reclaim.TermSafety, reclaim.TermSystem, reclaim.TermHP, reclaim.TermCap, reclaim.TermHeadroom}

// setTerms publishes res's terms, or removes the series when nothing was computed.
func (m *metrics) setTerms(res *reclaim.Result) {
	if res == nil {
		m.cpuTerms.Reset()
		m.memoryTerms.Reset()
		m.bound.Reset()
		return
	}
	for term, v := range map[string]int64{
		"capacity": res.Capacity.CPUMilli, "safety": res.Safety.CPUMilli, "system": res.System.CPUMilli,
		"hp": res.HP.CPUMilli, "hp_usage": res.HPUsage.CPUMilli, "batch_threshold": res.Cap.CPUMilli,
		"steal_headroom": res.Ceiling, "batch": res.Batch.CPUMilli,
	} {
		m.cpuTerms.WithLabelValues(term).Set(float64(v) / 1000)
	}
	for term, v := range map[string]int64{
		"capacity": res.Capacity.MemoryBytes, "safety": res.Safety.MemoryBytes, "system": res.System.MemoryBytes,
		"hp": res.HP.MemoryBytes, "hp_usage": res.HPUsage.MemoryBytes, "batch_threshold": res.Cap.MemoryBytes,
		"batch": res.Batch.MemoryBytes,
	} {
		m.memoryTerms.WithLabelValues(term).Set(float64(v))
	}
	for resource, b := range map[string]reclaim.Bound{"cpu": res.CPUBound(), "memory": res.MemoryBound()} {
		for _, t := range boundTerms {
			v := 0.0
			if b.Term == t {
				v = 1
			}
			m.bound.WithLabelValues(resource, string(t)).Set(v)
		}
	}
}
