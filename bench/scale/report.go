package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/prometheus/procfs"

	"github.com/tandemkit/tandem/bench/internal/controlplane"
	"github.com/tandemkit/tandem/bench/internal/figures"
	"github.com/tandemkit/tandem/bench/internal/runctx"
	"github.com/tandemkit/tandem/metrics/nodemetric"
)

// usage is what the servers used: CPU seconds by process, and tandem-webhook's admission histogram.
type usage struct {
	at      time.Time
	cpu     map[string]float64
	webhook histogram
	// extender is tandem-extender's time to answer a call (filter and prioritize), server side.
	extender histogram
	// algorithm is kube-scheduler's time to pick a node for one pod: its filters, the extender's
	// calls and scoring (scheduler_scheduling_algorithm_duration_seconds).
	algorithm histogram
}

func (u usage) minus(b usage) usage {
	out := usage{at: u.at, cpu: map[string]float64{}, webhook: u.webhook.minus(b.webhook),
		extender: u.extender.minus(b.extender), algorithm: u.algorithm.minus(b.algorithm)}
	for k, v := range u.cpu {
		out.cpu[k] = v - b.cpu[k]
	}
	out.cpu["wall"] = u.at.Sub(b.at).Seconds()
	return out
}

// total is the CPU every process of the run used over the window, in cores: near the machine's
// count, the processes wait for each other.
func (u usage) total() float64 {
	if u.cpu["wall"] <= 0 {
		return 0
	}
	var sum float64
	for k, v := range u.cpu {
		if k != "wall" {
			sum += v
		}
	}
	return sum / u.cpu["wall"]
}

// perPod is the process's CPU per pod of the phase, in milliseconds.
func (u usage) perPod(name string, pods int) float64 {
	if pods == 0 {
		return math.NaN()
	}
	return 1000 * u.cpu[name] / float64(pods)
}

// cores is the process's average CPU use over the window, in cores.
func (u usage) cores(name string) float64 {
	if u.cpu["wall"] <= 0 {
		return 0
	}
	return u.cpu[name] / u.cpu["wall"]
}

func (c *cluster) snapshot(ctx context.Context) (usage, error) {
	u := usage{at: time.Now(), cpu: map[string]float64{}}
	for _, d := range c.daemons() {
		s, err := controlplane.CPUSeconds(d.PID())
		if err != nil {
			return u, fmt.Errorf("CPU time of %s: %w", d.Name(), err)
		}
		u.cpu[d.Name()] = s
	}
	self, err := controlplane.CPUSeconds(os.Getpid())
	if err != nil {
		return u, err
	}
	u.cpu["bench"] = self
	if c.webhook != nil {
		h, err := scrapeHistogram(ctx, c.webhookMetrics+"/metrics", "tandem_webhook_admission_duration_seconds", nil)
		if err != nil {
			return u, fmt.Errorf("tandem-webhook's metrics: %w", err)
		}
		u.webhook = h
	}
	if c.extender != nil {
		h, err := scrapeHistogram(ctx, c.extenderMetrics+"/metrics", "tandem_extender_request_duration_seconds", nil)
		if err != nil {
			return u, fmt.Errorf("tandem-extender's metrics: %w", err)
		}
		u.extender = h
	}
	if c.sched != nil {
		body, err := controlplane.Fetch(ctx, insecureClient(), c.schedURL+"/metrics", c.cp.PKI.Token)
		if err != nil {
			return u, fmt.Errorf("kube-scheduler's metrics: %w", err)
		}
		if u.algorithm, err = parseHistogram(body, "scheduler_scheduling_algorithm_duration_seconds", nil); err != nil {
			return u, err
		}
	}
	return u, nil
}

// setUpWebhook applies the CRD, starts tandem-webhook, registers it for the workload's namespaces,
// creates the profile and waits until the webhook holds it.
func (c *cluster) setUpWebhook(ctx context.Context, dyn dynamic.Interface, root, bin string) error {
	if err := controlplane.ApplyCRD(ctx, dyn, root); err != nil {
		return err
	}
	if err := c.startWebhook(ctx, bin); err != nil {
		return err
	}
	if err := c.registerShippedWebhooks(ctx, dyn, root); err != nil {
		return err
	}
	if err := createProfile(ctx, dyn); err != nil {
		return err
	}
	deadline := time.Now().Add(time.Minute)
	for {
		body, err := controlplane.Fetch(ctx, &http.Client{Timeout: 5 * time.Second}, c.webhookMetrics+"/metrics", "")
		if err == nil {
			var n float64
			if n, _, err = sumMetric(body, "tandem_webhook_profiles"); err == nil && n == 1 {
				return nil
			}
		}
		if time.Now().After(deadline) {
			if err != nil {
				return fmt.Errorf("tandem-webhook does not hold the profile after a minute (its metrics: %w)", err)
			}
			return errors.New("tandem-webhook does not hold the profile after a minute: tandem_webhook_profiles is not 1 (see its log)")
		}
		if err := runctx.Sleep(ctx, 200*time.Millisecond); err != nil {
			return err
		}
	}
}

// checkExtenderUsed makes sure kube-scheduler really called the extender: a run in which the
// extender was skipped (it is ignorable) would measure kube-scheduler alone.
func (c *cluster) checkExtenderUsed(ctx context.Context) error {
	body, err := controlplane.Fetch(ctx, &http.Client{Timeout: 5 * time.Second}, c.extenderMetrics+"/metrics", "")
	if err != nil {
		return err
	}
	calls, _, err := sumMetric(body, "tandem_extender_requests_total")
	if err != nil {
		return err
	}
	if calls == 0 {
		return errors.New("kube-scheduler never called tandem-extender: the run measured kube-scheduler alone")
	}
	return nil
}

// checkPluginUsed makes sure tandem-scheduler ran TandemLoadAware's Filter: a run without it
// would measure kube-scheduler alone under another name.
func (c *cluster) checkPluginUsed(ctx context.Context) error {
	body, err := controlplane.Fetch(ctx, insecureClient(), c.schedURL+"/metrics", c.cp.PKI.Token)
	if err != nil {
		return err
	}
	n, _, err := sumMetric(body, "scheduler_plugin_evaluation_total", "plugin", "TandemLoadAware", "extension_point", "Filter")
	if err != nil {
		return err
	}
	if n == 0 {
		return errors.New("tandem-scheduler never ran TandemLoadAware's Filter: the run measured kube-scheduler alone")
	}
	return nil
}

// checks is what the CI version asserts, and what every run reports.
type checks struct {
	unbound   []string // pods never bound
	overfull  []string // nodes whose batch pods request more than the batch capacity they publish
	bigOnWarm []string // large batch pods on warm nodes (only asserted with loads held still)
	strict    bool
	err       error
}

func (k checks) failures() []string {
	var out []string
	if k.err != nil {
		out = append(out, k.err.Error())
	}
	if len(k.unbound) > 0 {
		out = append(out, fmt.Sprintf("%d pods never bound (first: %s)", len(k.unbound), k.unbound[0]))
	}
	if k.strict && len(k.overfull) > 0 {
		out = append(out, fmt.Sprintf("%d nodes hold more batch requests than their published batch-cpu (first: %s)", len(k.overfull), k.overfull[0]))
	}
	if k.strict && len(k.bigOnWarm) > 0 {
		out = append(out, fmt.Sprintf("%d large batch pods on nodes without room for them (first: %s)", len(k.bigOnWarm), k.bigOnWarm[0]))
	}
	return out
}

// checkPlacement compares where pods went with what the Nodes publish.
func checkPlacement(ctx context.Context, cs kubernetes.Interface, t *tracker, strict bool) checks {
	k := checks{strict: strict}
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		k.err = fmt.Errorf("list nodes: %w", err)
		return k
	}
	published := map[string]int64{}
	cold := map[string]bool{}
	for _, nd := range nodes.Items {
		q := nd.Status.Allocatable[nodemetric.ResourceBatchCPU]
		published[nd.Name] = q.Value()
		cold[nd.Name] = nd.Labels[classLabel] == "cold"
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	used := map[string]int64{}
	for name := range t.sent {
		node, ok := t.node[name]
		if !ok {
			k.unbound = append(k.unbound, name)
			continue
		}
		used[node] += t.req[name]
		if t.kind[name] == kindBatchBig && !cold[node] {
			k.bigOnWarm = append(k.bigOnWarm, name+" on "+node)
		}
	}
	for node, u := range used {
		if u > published[node] {
			k.overfull = append(k.overfull, fmt.Sprintf("%s: %d milli-cores requested, %d published", node, u, published[node]))
		}
	}
	return k
}

// result is one run: a node count and a setting.
type result struct {
	nodes int
	// setting is plain, tandem or plugin; tandem is whether it is not plain.
	setting                 string
	tandem                  bool
	phases                  []phaseFigures
	writes                  writeStats
	extenderRSS             int64
	schedulerRSS            int64 // kube-scheduler's, or tandem-scheduler's with the plugin
	windowStart, windowEnd  time.Time
	stealBefore, stealAfter [2]float64
	checks                  checks
	cleanedUp               bool
}

type phaseFigures struct {
	phaseResult
	usage usage
}

// stealPercent is the share of CPU time the hypervisor took during the run.
func (r *result) stealPercent() float64 {
	total := r.stealAfter[1] - r.stealBefore[1]
	if total <= 0 {
		return 0
	}
	return 100 * (r.stealAfter[0] - r.stealBefore[0]) / total
}

// readSteal returns the CPU time the hypervisor took since boot and all the CPUs' time (/proc/stat;
// guest time is inside user's), in seconds; zeros when /proc cannot be read.
func readSteal() [2]float64 {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return [2]float64{}
	}
	st, err := fs.Stat()
	if err != nil {
		return [2]float64{}
	}
	c := st.CPUTotal
	return [2]float64{c.Steal, c.User + c.Nice + c.System + c.Idle + c.Iowait + c.IRQ + c.SoftIRQ + c.Steal}
}

// row is one line of the table: a figure for both settings.
type row struct {
	name       string
	plain, tdm float64
	unit       string
	floor      string // "" none; "≥0.80", "≤1.50": on the ratio; "abs≤5" on tandem's figure
	judged     bool
}

func fmtVal(v float64, unit string) string {
	switch {
	case math.IsNaN(v):
		return "-"
	case unit == "ms":
		return fmt.Sprintf("%.1f ms", v)
	case unit == "MiB":
		return fmt.Sprintf("%.0f MiB", v)
	case unit == "cores":
		return fmt.Sprintf("%.2f", v)
	case unit == "%":
		return fmt.Sprintf("%.1f%%", v)
	}
	return fmt.Sprintf("%.1f", v)
}

// printTables prints one table per node count and returns the floors missed at the largest.
func printTables(w io.Writer, o options, results []*result) []error {
	var errs []error
	largest := 0
	for _, n := range o.nodes {
		largest = max(largest, n)
	}
	for _, n := range o.nodes {
		var plain *result
		var tandems []*result
		for _, r := range results {
			switch {
			case r.nodes != n:
			case r.tandem:
				tandems = append(tandems, r)
			default:
				plain = r
			}
		}
		if len(tandems) == 0 {
			tandems = []*result{nil}
		}
		// Each Tandem setting gets a table of its own against the one plain run.
		for _, tdm := range tandems {
			name := "tandem"
			if tdm != nil {
				name = tdm.setting
			}
			// The floors compare Tandem with kube-scheduler alone at the largest node count; the
			// CI version runs Tandem alone and asserts its checks instead.
			rows := buildRows(plain, tdm, n == largest && plain != nil && tdm != nil && !o.ci)
			fmt.Fprintf(w, "\n%d simulated nodes, %s against plain", n, name)
			for _, r := range []*result{plain, tdm} {
				if r != nil {
					fmt.Fprintf(w, "; %s: steal %.1f%% during the run", r.setting, r.stealPercent())
				}
			}
			fmt.Fprintln(w)
			tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
			fmt.Fprintf(tw, "figure\tplain\t%s\t%s/plain\tfloor\t\n", name, name)
			for _, rw := range rows {
				if tdm != nil && tdm.setting == "plugin" && strings.Contains(rw.name, "tandem-extender") {
					continue
				}
				ratio := "-"
				if rw.plain > 0 && !math.IsNaN(rw.plain) && !math.IsNaN(rw.tdm) {
					ratio = fmt.Sprintf("%.2fx", rw.tdm/rw.plain)
				}
				floor := rw.floor
				if rw.judged && floor != "" {
					if ok, msg := judge(rw); ok {
						floor += " ok"
					} else {
						floor += " MISSED"
						errs = append(errs, fmt.Errorf("%d nodes, %s: %s: %s", n, name, rw.name, msg))
					}
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t\n", rw.name, fmtVal(rw.plain, rw.unit), fmtVal(rw.tdm, rw.unit), ratio, floor)
			}
			_ = tw.Flush()
		}
		for _, r := range append([]*result{plain}, tandems...) {
			if r == nil {
				continue
			}
			fails := r.checks.failures()
			if len(fails) == 0 {
				fmt.Fprintf(w, "%s: every pod bound; every node's batch pods within its published batch-cpu; run directory removed and no process left: %v\n", r.setting, r.cleanedUp)
			}
			for _, f := range fails {
				fmt.Fprintf(w, "%s: CHECK FAILED: %s\n", r.setting, f)
				if o.ci {
					errs = append(errs, fmt.Errorf("%d nodes, %s: %s", n, r.setting, f))
				}
			}
		}
	}
	return errs
}

func judge(rw row) (bool, string) {
	var bound float64
	var le bool
	spec := rw.floor
	abs := strings.HasPrefix(spec, "abs")
	spec = strings.TrimPrefix(spec, "abs")
	switch {
	case strings.HasPrefix(spec, "≤"):
		le, spec = true, strings.TrimPrefix(spec, "≤")
	case strings.HasPrefix(spec, "≥"):
		spec = strings.TrimPrefix(spec, "≥")
	}
	bound, _ = strconv.ParseFloat(strings.Fields(spec)[0], 64)
	v := rw.tdm
	if !abs {
		if rw.plain <= 0 {
			return false, "no baseline"
		}
		v = rw.tdm / rw.plain
	}
	if math.IsNaN(v) {
		return false, "not measured"
	}
	if le && v <= bound || !le && v >= bound {
		return true, ""
	}
	return false, fmt.Sprintf("%.2f against a floor of %s", v, rw.floor)
}

func callP99(ds []time.Duration) float64 {
	if len(ds) == 0 {
		return math.NaN()
	}
	return figures.In(figures.Nearest(append([]time.Duration(nil), ds...), 0.99), time.Millisecond)
}

func buildRows(plain, tdm *result, judged bool) []row {
	get := func(r *result, f func(*result) float64) float64 {
		if r == nil {
			return math.NaN()
		}
		return f(r)
	}
	var rows []row
	for i, name := range []string{"full", "rate", "burst"} {
		ph := func(r *result) phaseFigures {
			if i < len(r.phases) {
				return r.phases[i]
			}
			return phaseFigures{}
		}
		lat := func(q float64) func(*result) float64 {
			return func(r *result) float64 {
				l := ph(r).latencies
				if len(l) == 0 {
					return math.NaN()
				}
				return figures.In(figures.Nearest(append([]time.Duration(nil), l...), q), time.Millisecond)
			}
		}
		thrFloor, p99Floor := "", ""
		if name == "burst" || name == "full" {
			thrFloor, p99Floor = "≥0.80", "≤1.50"
		}
		if name == "rate" {
			p99Floor = "≤1.50"
		}
		rows = append(rows,
			row{name: name + ": pods bound of created", plain: get(plain, func(r *result) float64 { return float64(ph(r).bound) }), tdm: get(tdm, func(r *result) float64 { return float64(ph(r).bound) })},
			row{name: name + ": pods created/s (the clients)", plain: get(plain, func(r *result) float64 { return ph(r).createRate() }), tdm: get(tdm, func(r *result) float64 { return ph(r).createRate() })},
			row{name: name + ": throughput pods/s", plain: get(plain, func(r *result) float64 { return ph(r).throughput() }), tdm: get(tdm, func(r *result) float64 { return ph(r).throughput() }), floor: thrFloor, judged: judged},
			row{name: name + ": creation-to-bound p50", plain: get(plain, lat(0.5)), tdm: get(tdm, lat(0.5)), unit: "ms"},
			row{name: name + ": creation-to-bound p99", plain: get(plain, lat(0.99)), tdm: get(tdm, lat(0.99)), unit: "ms", floor: p99Floor, judged: judged},
			row{name: name + ": kube-apiserver CPU", plain: get(plain, func(r *result) float64 { return ph(r).usage.cores("kube-apiserver") }), tdm: get(tdm, func(r *result) float64 { return ph(r).usage.cores("kube-apiserver") }), unit: "cores"},
			row{name: name + ": etcd CPU", plain: get(plain, func(r *result) float64 { return ph(r).usage.cores("etcd") }), tdm: get(tdm, func(r *result) float64 { return ph(r).usage.cores("etcd") }), unit: "cores"},
			row{name: name + ": kube-scheduler CPU", plain: get(plain, func(r *result) float64 { return ph(r).usage.cores("kube-scheduler") }), tdm: get(tdm, func(r *result) float64 { return ph(r).usage.cores("kube-scheduler") }), unit: "cores"},
			row{name: name + ": kube-scheduler algorithm p99 per pod", plain: get(plain, func(r *result) float64 { return 1000 * ph(r).usage.algorithm.quantile(0.99) }), tdm: get(tdm, func(r *result) float64 { return 1000 * ph(r).usage.algorithm.quantile(0.99) }), unit: "ms"},
			row{name: name + ": tandem-extender call p99 (server side)", plain: math.NaN(), tdm: get(tdm, func(r *result) float64 { return 1000 * ph(r).usage.extender.quantile(0.99) }), unit: "ms"},
			row{name: name + ": tandem-extender CPU", plain: math.NaN(), tdm: get(tdm, func(r *result) float64 { return ph(r).usage.cores("tandem-extender") }), unit: "cores"},
			row{name: name + ": tandem-extender CPU per pod", plain: math.NaN(), tdm: get(tdm, func(r *result) float64 { return ph(r).usage.perPod("tandem-extender", ph(r).bound) }), unit: "ms"},
			row{name: name + ": tandem-webhook CPU per pod", plain: math.NaN(), tdm: get(tdm, func(r *result) float64 { return ph(r).usage.perPod("tandem-webhook", ph(r).pods) }), unit: "ms"},
			row{name: name + fmt.Sprintf(": CPU of every process (of %d cores)", runtime.NumCPU()), plain: get(plain, func(r *result) float64 { return ph(r).usage.total() }), tdm: get(tdm, func(r *result) float64 { return ph(r).usage.total() }), unit: "cores"},
		)
		rows = append(rows, row{name: name + ": pod create call p99 (the clients)", unit: "ms",
			plain: get(plain, func(r *result) float64 { return callP99(ph(r).createCalls) }), tdm: get(tdm, func(r *result) float64 { return callP99(ph(r).createCalls) })})
		if name == "burst" {
			rows = append(rows, row{name: "burst: tandem-webhook p99 (server side)", plain: math.NaN(), unit: "ms", floor: "abs≤5 ms", judged: judged,
				tdm: get(tdm, func(r *result) float64 { return 1000 * ph(r).usage.webhook.quantile(0.99) })})
		}
	}
	rows = append(rows,
		row{name: "tandem-extender peak RSS", plain: math.NaN(), unit: "MiB", floor: "abs≤512 MiB", judged: judged,
			tdm: get(tdm, func(r *result) float64 { return float64(r.extenderRSS) / (1 << 20) })},
		row{name: "kube-scheduler peak RSS (tandem-scheduler with the plugin)", unit: "MiB",
			plain: get(plain, func(r *result) float64 { return float64(r.schedulerRSS) / (1 << 20) }), tdm: get(tdm, func(r *result) float64 { return float64(r.schedulerRSS) / (1 << 20) })},
		row{name: "agents' writes/s per 1000 nodes", plain: get(plain, func(r *result) float64 { return r.writes.perSecondPer1000() }), tdm: get(tdm, func(r *result) float64 { return r.writes.perSecondPer1000() })},
		row{name: "agents' most writes by a node in one report interval", plain: get(plain, func(r *result) float64 { return float64(r.writes.perNodeMax) }), tdm: get(tdm, func(r *result) float64 { return float64(r.writes.perNodeMax) }), floor: "abs≤1", judged: judged},
		row{name: "agents' writes without a load change (refreshes apart)", plain: get(plain, func(r *result) float64 { return float64(r.writes.unexplained) }), tdm: get(tdm, func(r *result) float64 { return float64(r.writes.unexplained) }), floor: "abs≤0", judged: judged},
		row{name: "agents' refresh writes (updateTimeThresholdSeconds)", plain: get(plain, func(r *result) float64 { return float64(r.writes.refresh) }), tdm: get(tdm, func(r *result) float64 { return float64(r.writes.refresh) })},
		row{name: "agents' failed writes", plain: get(plain, func(r *result) float64 { return float64(r.writes.errors) }), tdm: get(tdm, func(r *result) float64 { return float64(r.writes.errors) })},
	)
	return rows
}
