package extender

import (
	"fmt"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

const (
	verbFilter     = "filter"
	verbPrioritize = "prioritize"
)

// metrics are registered on a registry passed in, so tests and the benchmark use their own.
type metrics struct {
	duration   *prometheus.HistogramVec
	requests   *prometheus.CounterVec
	passed     prometheus.Counter
	rejected   prometheus.Counter
	rejections map[Reason]prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "tandem", Subsystem: "extender", Name: "request_duration_seconds",
			Help: "Time to answer a kube-scheduler extender call, from request to response body, by verb.",
			// From 25µs: a 500-node filter takes well under a millisecond, and kube-scheduler's
			// httpTimeout is a few seconds.
			Buckets: prometheus.ExponentialBuckets(25e-6, 2, 16),
		}, []string{"verb"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "tandem", Subsystem: "extender", Name: "requests_total",
			Help: "Extender calls by verb and HTTP status code.",
		}, []string{"verb", "code"}),
	}
	decisions := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "tandem", Subsystem: "extender", Name: "filter_decisions_total",
		Help: "Nodes that filter passed or rejected.",
	}, []string{"decision"})
	rejections := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "tandem", Subsystem: "extender", Name: "filter_rejections_total",
		Help: "Nodes that filter rejected, by reason.",
	}, []string{"reason"})
	for _, c := range []prometheus.Collector{m.duration, m.requests, decisions, rejections} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register extender metrics: %w", err)
		}
	}
	m.passed = decisions.WithLabelValues("pass")
	m.rejected = decisions.WithLabelValues("reject")
	// Every reason exists from the start, so a dashboard's rate() sees the first rejection.
	m.rejections = make(map[Reason]prometheus.Counter, len(reasons))
	for _, r := range reasons {
		m.rejections[r] = rejections.WithLabelValues(string(r))
	}
	return m, nil
}

func (m *metrics) observe(verb string, code int, d time.Duration) {
	m.duration.WithLabelValues(verb).Observe(d.Seconds())
	m.requests.WithLabelValues(verb, strconv.Itoa(code)).Inc()
}
