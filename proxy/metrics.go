package proxy

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

type metrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	// known holds the series of each CRI method, resolved at its first call: WithLabelValues hashes and
	// validates its label values at every call, which is most of what the metrics cost a relayed call
	// (BenchmarkObserve). Read-only after newMetrics; other methods take the labelled path.
	known            map[string]*methodMetrics
	checkpointErrors prometheus.Counter
	released         prometheus.Counter
	reconciles       *prometheus.CounterVec
	podCgroupErrors  prometheus.Counter
	ctrCgroupErrors  prometheus.Counter
	refreshed        *prometheus.CounterVec
}

// methodMetrics are one method's series. They are created at the method's first call, not before, so
// /metrics lists only the methods kubelet uses, as it did when every call resolved its labels.
type methodMetrics struct {
	once     sync.Once
	ok       prometheus.Counter
	duration prometheus.Observer
}

// newMetrics registers the proxy's metrics on reg; methods are the full names of the CRI methods whose
// series are kept resolved.
func newMetrics(reg prometheus.Registerer, methods []string) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "tandem", Subsystem: "proxy", Name: "requests_total",
			Help: "CRI calls handled by tandem-proxy, by full gRPC method and status code.",
		}, []string{"method", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "tandem", Subsystem: "proxy", Name: "request_duration_seconds",
			Help:    "Time from receiving a CRI call to returning its result, including the runtime's time.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"method"}),
		checkpointErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "tandem", Subsystem: "proxy", Name: "checkpoint_errors_total",
			Help: "Failed writes of the store checkpoint; the store stays correct in memory, but a restart would lose the latest decisions.",
		}),
		released: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "tandem", Subsystem: "proxy", Name: "released_containers_total",
			Help: "Containers forgotten because the runtime no longer had them when the store was reconciled.",
		}),
		reconciles: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "tandem", Subsystem: "proxy", Name: "reconciles_total",
			Help: "Reconciliations of the store with the runtime, by result (ok, error).",
		}, []string{"result"}),
		podCgroupErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "tandem", Subsystem: "proxy", Name: "pod_cgroup_errors_total",
			Help: "Pod-level settings from hooks that could not be written to the pod's cgroup.",
		}),
		ctrCgroupErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "tandem", Subsystem: "proxy", Name: "container_cgroup_errors_total",
			Help: "Container settings from hooks that the runtime cannot carry (cgroup v1 unified files, RDT classes) and tandem-proxy could not apply itself.",
		}),
		refreshed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "tandem", Subsystem: "proxy", Name: "container_refreshes_total",
			Help: "Containers whose resources the proxy updated on its own because a policy's decision changed (pools moved), by result.",
		}, []string{"result"}),
	}
	m.known = make(map[string]*methodMetrics, len(methods))
	for _, name := range methods {
		m.known[name] = &methodMetrics{}
	}
	for _, c := range []prometheus.Collector{m.requests, m.duration, m.checkpointErrors, m.released, m.reconciles, m.podCgroupErrors, m.ctrCgroupErrors, m.refreshed} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *metrics) observe(method string, err error, d time.Duration) {
	code := status.Code(err)
	mm := m.known[method]
	if mm == nil {
		m.requests.WithLabelValues(method, code.String()).Inc()
		m.duration.WithLabelValues(method).Observe(d.Seconds())
		return
	}
	mm.once.Do(func() {
		mm.ok = m.requests.WithLabelValues(method, codes.OK.String())
		mm.duration = m.duration.WithLabelValues(method)
	})
	if code == codes.OK {
		mm.ok.Inc()
	} else {
		m.requests.WithLabelValues(method, code.String()).Inc()
	}
	mm.duration.Observe(d.Seconds())
}
