package collector

import (
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tandemkit/tandem/resource/qos"
)

var (
	nodeLabels      = []string{"node"}
	podLabels       = []string{"node", "namespace", "pod", "qos"}
	containerLabels = []string{"node", "namespace", "pod", "container", "qos"}
	hostAppLabels   = []string{"node", "application", "qos"}
)

// exporter is a prometheus.Collector over the latest samples: a scrape builds const metrics from
// whatever each source stored last, so sampling never updates metric vectors and a container that
// is gone simply stops appearing.
type exporter struct {
	c *Collector

	nodeCPU, nodeCPUCapacity, nodeMem, nodeMemCapacity, systemCPU, systemMem *prometheus.Desc
	ctrCPU, ctrMem, ctrThrottled, ctrPeriods                                 *prometheus.Desc
	podCPU, podMem                                                           *prometheus.Desc
	hostAppCPU, hostAppMem                                                   *prometheus.Desc
	nodePressureSome, nodePressureFull, podPressureSome, podPressureFull     *prometheus.Desc
	ctrCycles, ctrInstructions, ctrCPI                                       *prometheus.Desc
	ctrRunQueue                                                              *prometheus.Desc
	lastSample                                                               *prometheus.Desc
	nodeSteal, cpuSteal                                                      *prometheus.Desc
}

func newExporter(c *Collector) *exporter {
	d := prometheus.NewDesc
	withRes := func(l []string) []string { return append(append([]string{}, l...), "resource") }
	return &exporter{
		c:               c,
		nodeCPU:         d("tandem_node_cpu_usage_cores", "CPU the node used over the last usage interval, from /proc/stat.", nodeLabels, nil),
		nodeCPUCapacity: d("tandem_node_cpu_capacity_cores", "CPUs online on the node.", nodeLabels, nil),
		nodeMem:         d("tandem_node_memory_usage_bytes", "Memory the node uses: MemTotal − MemAvailable.", nodeLabels, nil),
		nodeMemCapacity: d("tandem_node_memory_capacity_bytes", "MemTotal of the node.", nodeLabels, nil),
		systemCPU:       d("tandem_node_system_cpu_usage_cores", "Node CPU use outside every known container, floored at 0.", nodeLabels, nil),
		systemMem:       d("tandem_node_system_memory_usage_bytes", "Node memory use outside every known container's working set, floored at 0.", nodeLabels, nil),
		ctrCPU:          d("tandem_container_cpu_usage_cores", "CPU the container used over the last usage interval.", containerLabels, nil),
		ctrMem:          d("tandem_container_memory_working_set_bytes", "Container memory usage minus inactive file cache.", containerLabels, nil),
		ctrThrottled:    d("tandem_container_cpu_cfs_throttled_periods_total", "CFS periods in which the container was throttled.", containerLabels, nil),
		ctrPeriods:      d("tandem_container_cpu_cfs_periods_total", "CFS periods in which the container was runnable.", containerLabels, nil),
		podCPU:          d("tandem_pod_cpu_usage_cores", "Sum of the pod's containers' CPU use over the last usage interval.", podLabels, nil),
		podMem:          d("tandem_pod_memory_working_set_bytes", "Sum of the pod's containers' working sets.", podLabels, nil),
		hostAppCPU: d("tandem_host_application_cpu_usage_cores",
			"CPU a host application (host-application-config) used over the last usage interval; counted as its QoS class's.", hostAppLabels, nil),
		hostAppMem: d("tandem_host_application_memory_working_set_bytes", "A host application's memory usage minus inactive file cache.", hostAppLabels, nil),
		nodePressureSome: d("tandem_node_pressure_some_seconds_total",
			"Time at least one task on the node stalled on the resource (PSI some).", withRes(nodeLabels), nil),
		nodePressureFull: d("tandem_node_pressure_full_seconds_total",
			"Time all non-idle tasks on the node stalled on the resource at once (PSI full).", withRes(nodeLabels), nil),
		podPressureSome: d("tandem_pod_pressure_some_seconds_total",
			"Time at least one task of the pod stalled on the resource (PSI some, cgroup v2 only).", withRes(podLabels), nil),
		podPressureFull: d("tandem_pod_pressure_full_seconds_total",
			"Time all non-idle tasks of the pod stalled on the resource at once (PSI full, cgroup v2 only).", withRes(podLabels), nil),
		ctrCycles:       d("tandem_container_cpu_cycles_total", "CPU cycles the container's tasks ran, scaled for counter multiplexing.", containerLabels, nil),
		ctrInstructions: d("tandem_container_cpu_instructions_total", "Instructions the container's tasks retired, scaled for counter multiplexing.", containerLabels, nil),
		ctrCPI:          d("tandem_container_cpu_cycles_per_instruction", "Cycles per instruction over the last CPI interval.", containerLabels, nil),
		ctrRunQueue: d("tandem_container_runqueue_latency_seconds",
			"Time the container's runnable threads waited for a CPU, from the scheduler tracepoints.", containerLabels, nil),
		nodeSteal: d("tandem_node_cpu_steal_cores",
			"CPU the hypervisor took back from the node over the last usage interval (steal in /proc/stat); not in tandem_node_cpu_usage_cores.", nodeLabels, nil),
		cpuSteal: d("tandem_node_cpu_steal_ratio",
			"Share of one CPU's time over the last usage interval that the hypervisor took back.", append(append([]string{}, nodeLabels...), "cpu"), nil),
		lastSample: d("tandem_collector_last_sample_timestamp_seconds", "When the usage source last sampled; stale means the collector is stuck.", nodeLabels, nil),
	}
}

func (e *exporter) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		e.nodeCPU, e.nodeCPUCapacity, e.nodeMem, e.nodeMemCapacity, e.systemCPU, e.systemMem,
		e.ctrCPU, e.ctrMem, e.ctrThrottled, e.ctrPeriods, e.podCPU, e.podMem, e.hostAppCPU, e.hostAppMem,
		e.nodePressureSome, e.nodePressureFull, e.podPressureSome, e.podPressureFull,
		e.ctrCycles, e.ctrInstructions, e.ctrCPI, e.ctrRunQueue, e.lastSample, e.nodeSteal, e.cpuSteal,
	} {
		ch <- d
	}
}

func ctrValues(node string, t Target) []string {
	return []string{node, t.Namespace, t.Pod, t.Container, string(t.QoS)}
}

func (e *exporter) Collect(ch chan<- prometheus.Metric) {
	node := e.c.cfg.NodeName
	// A restarted container and its predecessor share every label until the old one's cgroup goes;
	// a registry refuses duplicate series, so the first (the snapshot's order) wins.
	seen := map[*prometheus.Desc]map[string]bool{}
	fresh := func(d *prometheus.Desc, l []string) bool {
		k := strings.Join(l, "\x00")
		if seen[d] == nil {
			seen[d] = map[string]bool{}
		}
		if seen[d][k] {
			return false
		}
		seen[d][k] = true
		return true
	}
	gauge := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, l...)
	}
	counter := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, l...)
	}
	if s := e.c.Latest(); s != nil {
		gauge(e.nodeCPU, float64(s.Node.CPUMilli)/1000, node)
		gauge(e.nodeCPUCapacity, float64(s.Capacity.CPUMilli)/1000, node)
		gauge(e.nodeMem, float64(s.Node.MemoryBytes), node)
		gauge(e.nodeMemCapacity, float64(s.Capacity.MemoryBytes), node)
		gauge(e.systemCPU, float64(s.System.CPUMilli)/1000, node)
		gauge(e.systemMem, float64(s.System.MemoryBytes), node)
		gauge(e.lastSample, float64(s.Time.UnixNano())/1e9, node)
		gauge(e.nodeSteal, float64(s.Steal.CPUMilli)/1000, node)
		for n, m := range s.Steal.PerCPU {
			gauge(e.cpuSteal, float64(m)/1000, node, strconv.Itoa(n))
		}
		type podKey struct {
			ns, pod string
			qos     qos.Class
		}
		pods := map[podKey]*Usage{}
		var order []podKey
		for _, c := range s.Containers {
			if c.Cgroup != "" {
				l := []string{node, c.Container, string(c.QoS)}
				if fresh(e.hostAppCPU, l) {
					gauge(e.hostAppCPU, float64(c.CPUMilli)/1000, l...)
					gauge(e.hostAppMem, float64(c.MemoryBytes), l...)
				}
				continue
			}
			// The pod sums every container cgroup, both attempts of a restarted one included:
			// both use the node until the old one is gone.
			k := podKey{c.Namespace, c.Pod, c.QoS}
			if pods[k] == nil {
				pods[k] = &Usage{}
				order = append(order, k)
			}
			pods[k].CPUMilli += c.CPUMilli
			pods[k].MemoryBytes += c.MemoryBytes
			l := ctrValues(node, c.Target)
			if !fresh(e.ctrCPU, l) {
				continue
			}
			gauge(e.ctrCPU, float64(c.CPUMilli)/1000, l...)
			gauge(e.ctrMem, float64(c.MemoryBytes), l...)
			counter(e.ctrThrottled, float64(c.ThrottledPeriods), l...)
			counter(e.ctrPeriods, float64(c.Periods), l...)
		}
		for _, k := range order {
			gauge(e.podCPU, float64(pods[k].CPUMilli)/1000, node, k.ns, k.pod, string(k.qos))
			gauge(e.podMem, float64(pods[k].MemoryBytes), node, k.ns, k.pod, string(k.qos))
		}
	}
	if p := e.c.psi.latest.Load(); p != nil {
		for i, r := range psiResources {
			if !p.nodeOK[i] {
				continue
			}
			counter(e.nodePressureSome, float64(p.node[i].someMicros)/1e6, node, r)
			if p.node[i].hasFull {
				counter(e.nodePressureFull, float64(p.node[i].fullMicros)/1e6, node, r)
			}
		}
		for _, pp := range p.pods {
			class := string(pp.QoS)
			if !fresh(e.podPressureSome, []string{pp.Namespace, pp.Pod, class}) {
				continue
			}
			for i, r := range psiResources {
				if !pp.ok[i] {
					continue
				}
				counter(e.podPressureSome, float64(pp.res[i].someMicros)/1e6, node, pp.Namespace, pp.Pod, class, r)
				if pp.res[i].hasFull {
					counter(e.podPressureFull, float64(pp.res[i].fullMicros)/1e6, node, pp.Namespace, pp.Pod, class, r)
				}
			}
		}
	}
	if cs := e.c.cpi.latest.Load(); cs != nil {
		for _, c := range *cs {
			l := ctrValues(node, c.Target)
			if !fresh(e.ctrCycles, l) {
				continue
			}
			counter(e.ctrCycles, c.cycles, l...)
			counter(e.ctrInstructions, c.instructions, l...)
			if c.hasCPI {
				gauge(e.ctrCPI, c.cpi, l...)
			}
		}
	}
	if rs := e.c.runQueue.latest.Load(); rs != nil {
		for _, r := range rs.Containers {
			if !fresh(e.ctrRunQueue, ctrValues(node, r.Target)) {
				continue
			}
			ch <- prometheus.MustNewConstHistogram(e.ctrRunQueue, r.hist.count(), float64(r.hist.sumNanos)/1e9,
				r.hist.promBuckets(), ctrValues(node, r.Target)...)
		}
	}
}
