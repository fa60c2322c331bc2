package reporter

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
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
	}
	// Pre-create every result so a rate() query sees zeros instead of no series.
	for _, r := range []string{resultSuccess, resultConflict, resultError} {
		m.patches.WithLabelValues(r)
	}
	if reg == nil {
		return m, nil
	}
	var errs []error
	for _, c := range []prometheus.Collector{m.patches, m.reclaimableCPU, m.reclaimableMemory, m.lastSuccess} {
		errs = append(errs, reg.Register(c))
	}
	return m, errors.Join(errs...)
}
