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

// Reasons a filter or prioritize request is refused, the reason label of
// tandem_extender_rejected_requests_total.
const (
	rejectInflight       = "inflight"        // 429: maxRequestsInflight requests being served
	rejectBodySize       = "body_size"       // 413: Content-Length above maxRequestBodyBytes
	rejectLengthRequired = "length_required" // 411: no Content-Length
	rejectDecodedSize    = "decoded_size"    // 413: too many nodes or JSON values, or too large an object
	rejectNotReady       = "not_ready"       // 503: informers not synced
	rejectMalformed      = "malformed"       // 400: not ExtenderArgs
)

var rejectReasons = []string{rejectInflight, rejectBodySize, rejectLengthRequired, rejectDecodedSize, rejectNotReady, rejectMalformed}

// metrics are registered on a registry passed in, so tests and the benchmark use their own.
type metrics struct {
	duration         *prometheus.HistogramVec
	requests         *prometheus.CounterVec
	rejectedRequests *prometheus.CounterVec
	passed           prometheus.Counter
	rejected         prometheus.Counter
	rejections       map[Reason]prometheus.Counter
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
		rejectedRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "tandem", Subsystem: "extender", Name: "rejected_requests_total",
			Help: "Filter and prioritize calls refused before they were answered, by reason.",
		}, []string{"reason"}),
	}
	decisions := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "tandem", Subsystem: "extender", Name: "filter_decisions_total",
		Help: "Nodes that filter passed or rejected.",
	}, []string{"decision"})
	rejections := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "tandem", Subsystem: "extender", Name: "filter_rejections_total",
		Help: "Nodes that filter rejected, by reason.",
	}, []string{"reason"})
	for _, c := range []prometheus.Collector{m.duration, m.requests, m.rejectedRequests, decisions, rejections} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register extender metrics: %w", err)
		}
	}
	for _, r := range rejectReasons {
		m.rejectedRequests.WithLabelValues(r)
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
