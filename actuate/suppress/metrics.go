package suppress

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the tandem_suppress_* series: what BE may use now and every change of it, so an operator
// can tell from a dashboard when and how hard BE was held back, and the cgroup v1 caps and quota
// rewrites that keeping the clamp in force took.
type metrics struct {
	beCPUs  prometheus.Gauge
	changes *prometheus.CounterVec
	capped  prometheus.Counter
	resets  prometheus.Counter
}

func newMetrics() metrics {
	return metrics{
		beCPUs: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "tandem", Subsystem: "suppress", Name: "be_cpus",
			Help: "CPUs BE pods may use after suppression: the BE cpuset's size, or the BE quota in CPUs.",
		}),
		changes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "tandem", Subsystem: "suppress", Name: "changes_total",
			Help: "Changes of the BE CPU limit, by policy and direction (shrink, widen, lift).",
		}, []string{"policy", "direction"}),
		capped: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "tandem", Subsystem: "suppress", Name: "be_cgroups_capped_total",
			Help: "BE pod and container cgroups whose CFS quota was lowered to the BE parent's before a shrink (cgroup v1).",
		}),
		resets: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "tandem", Subsystem: "suppress", Name: "be_quota_rewrites_total",
			Help: "Times the BE parent's CFS quota was found changed by someone else (systemd re-applying the slice's properties) and written again.",
		}),
	}
}

// register exports the series; a Registerer that refuses one (a second loop on the same registry) is
// an error.
func (m metrics) register(r prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{m.beCPUs, m.changes, m.capped, m.resets} {
		if err := r.Register(c); err != nil {
			return fmt.Errorf("register suppress metrics: %w", err)
		}
	}
	return nil
}
