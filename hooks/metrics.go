package hooks

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	calls, errors, timeouts, ignored, conflicts, tooLarge *prometheus.CounterVec
	duration                                              *prometheus.HistogramVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	counter := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "tandem", Subsystem: "hook", Name: name, Help: help}, []string{"hook", "stage"})
	}
	m := &metrics{
		calls:     counter("calls_total", "Hook calls, by hook and stage."),
		errors:    counter("errors_total", "Hook calls that failed, timed out or conflicted, by hook and stage."),
		timeouts:  counter("timeouts_total", "Hook calls that did not answer within their timeout."),
		ignored:   counter("ignored_failures_total", "Failed hook calls the CRI call went on without (failure policy Ignore, or a post stage)."),
		conflicts: counter("conflicts_total", "Hook adjustments rejected because an earlier hook had changed the same field."),
		tooLarge:  counter("oversized_answers_total", "Hook answers refused because they added more bytes than the hook limits allow."),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "tandem", Subsystem: "hook", Name: "duration_seconds",
			Help:    "Time a hook call took, by hook and stage.",
			Buckets: []float64{.00001, .00005, .0001, .00025, .0005, .001, .0025, .005, .01, .05, .1, .5, 1, 2, 5},
		}, []string{"hook", "stage"}),
	}
	for _, c := range []prometheus.Collector{m.calls, m.errors, m.timeouts, m.ignored, m.conflicts, m.tooLarge, m.duration} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
