package nri

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	events       *prometheus.CounterVec
	duration     *prometheus.HistogramVec
	updates      *prometheus.CounterVec
	connected    prometheus.Gauge
	connects     prometheus.Counter
	cgroupErrors prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		events: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "tandem", Subsystem: "nri", Name: "events_total",
			Help: "NRI events containerd sent the plugin, by event and result (error: the event was refused)."}, []string{"event", "result"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "tandem", Subsystem: "nri", Name: "event_duration_seconds",
			Help:    "Time the plugin took to answer an NRI event; containerd drops a plugin slower than its plugin_request_timeout.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .05, .1, .5, 1, 2},
		}, []string{"event"}),
		updates: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "tandem", Subsystem: "nri", Name: "container_updates_total",
			Help: "Unsolicited container updates the plugin sent containerd (pool moves), by result."}, []string{"result"}),
		connected: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "tandem", Subsystem: "nri", Name: "connected",
			Help: "1 while the plugin is registered with containerd's NRI."}),
		connects: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "tandem", Subsystem: "nri", Name: "connection_attempts_total",
			Help: "Connections the plugin opened to containerd's NRI socket; more than one means containerd restarted or refused it."}),
		cgroupErrors: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "tandem", Subsystem: "nri", Name: "cgroup_errors_total",
			Help: "Pod or container cgroup settings the plugin could not write itself."}),
	}
	for _, c := range []prometheus.Collector{m.events, m.duration, m.updates, m.connected, m.connects, m.cgroupErrors} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// observe counts an event and its duration.
func (m *metrics) observe(event string, start time.Time, err error) {
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.events.WithLabelValues(event, result).Inc()
	m.duration.WithLabelValues(event).Observe(time.Since(start).Seconds())
}
