package main

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tandemkit/tandem/bench/internal/figures"
)

// Views: whose latency is measured.
const (
	viewPod  = "pod"  // the load client is an LS peer pod (a client elsewhere, modelled on this node)
	viewHost = "host" // the load client is a process in the bench's own cgroup, as node daemons are
)

// settingSolo is the baseline every ratio is taken against: the LS service and its client alone.
const settingSolo = "solo"

// The targets, printed beside the figures (the bench reports; it does not judge).
const (
	targetP99Ratio       = 1.10
	targetP99RatioMemory = 1.25 // and p99.9, with the memory, cache and disk antagonists
	targetP999Ratio      = 1.5
	targetIdleFilled     = 0.80
	targetHostP99Ratio   = 1.5
)

// cell is one measurement: a view, a load and a setting, in one round.
type cell struct {
	Round   int     `json:"round"`
	View    string  `json:"view"`
	Rate    float64 `json:"rate"`
	Setting string  `json:"setting"`

	Sent     int     `json:"sent"`
	Failed   int     `json:"failed"`
	P50Ms    float64 `json:"p50Ms"`
	P99Ms    float64 `json:"p99Ms"`
	P999Ms   float64 `json:"p999Ms"`
	MaxLagMs float64 `json:"maxLagMs"` // the client's worst lateness in sending (part of the latencies)

	// P99Ratio and P999Ratio are to the solo cell of the same round, view and rate (0 for solo itself
	// or when solo is missing).
	P99Ratio  float64 `json:"p99Ratio"`
	P999Ratio float64 `json:"p999Ratio"`

	// LSCores is the CPU the LS side used over the window: the service's pod and the client (its pod,
	// or its process in the host view), in cores. BECores is the BE pods' CPU over the same window.
	LSCores float64 `json:"lsCores"`
	BECores float64 `json:"beCores"`
	// IdleFilled is BECores / (capacity − LSCores of the same round's solo cell): how much of the
	// CPU the LS side leaves idle when alone went to BE. 1 = all of it.
	IdleFilled float64 `json:"idleFilled"`

	// StealMs is the CPU time the hypervisor took from the machine during the window (all CPUs
	// together); Attempts is how many times the cell was measured because of it.
	StealMs  float64 `json:"stealMs"`
	Attempts int     `json:"attempts"`

	// Stalled is how many of the Sent requests overlapped a stall of the host: steal advanced on a
	// CPU the request ran on (the client's at send and receipt, the server's at the start and end of
	// handling) during its [due, done]. The Clean percentiles are over the others, and so say what
	// the guest did on a noisy host (0 when every request was stalled); the clean ratios are to
	// solo's clean figures.
	Stalled        int     `json:"stalled"`
	CleanP50Ms     float64 `json:"cleanP50Ms"`
	CleanP99Ms     float64 `json:"cleanP99Ms"`
	CleanP999Ms    float64 `json:"cleanP999Ms"`
	CleanP99Ratio  float64 `json:"cleanP99Ratio"`
	CleanP999Ratio float64 `json:"cleanP999Ratio"`
	StealIntervals int     `json:"stealIntervals"`      // sample intervals of one CPU in which its steal advanced
	SamplerCores   float64 `json:"stealSamplerCores"`   // the steal sampler thread's CPU over the window (see stealEvery)
	SampleMaxGapMs float64 `json:"stealSampleMaxGapMs"` // the longest time between two steal samples
	ServerOutside  int     `json:"serverOutside"`       // see loadResult: 0 unless the clocks disagree
	// ProxyCores is tandem-proxy's CPU over the window (0 for solo and plain, which run none).
	ProxyCores float64 `json:"proxyCores"`
}

// podStarts is the kubelet-like work of one setting in one round: RunPodSandbox + CreateContainer +
// StartContainer of a one-container pod through the runtime endpoint the setting uses.
type podStarts struct {
	Round   int       `json:"round"`
	Setting string    `json:"setting"`
	Ms      []float64 `json:"ms"`
	P50Ms   float64   `json:"p50Ms"`
	MaxMs   float64   `json:"maxMs"`
	Ratio   float64   `json:"p50Ratio"` // to solo's p50 in the same round
}

// report is the whole run, as -json writes it.
type report struct {
	Date       time.Time        `json:"date"`
	Flavor     string           `json:"flavor"`
	Capacity   float64          `json:"capacityCores"`
	Duration   string           `json:"duration"`
	Rounds     int              `json:"rounds"`
	WorkUs     float64          `json:"workUsPerRequest"`
	TouchBytes int              `json:"touchBytesPerRequest"`
	Antagonist string           `json:"antagonist"`
	LS         string           `json:"lsService,omitempty"`
	HostCgroup string           `json:"hostClientCgroup"`
	Load       string           `json:"loadAverageAfter"`
	Machine    *figures.Machine `json:"machine,omitempty"`
	Cells      []cell           `json:"cells"`
	PodStarts  []podStarts      `json:"podStarts"`
}

// fillCell sets a cell's latency figures from a client's result and the stalls of its window.
func fillCell(c *cell, r loadResult, st stalls) {
	all, clean := splitStalled(r, st)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	c.Sent, c.Failed, c.Stalled = r.Sent, r.Failed, len(all)-len(clean)
	c.P50Ms = ms(figures.Nearest(all, 0.50))
	c.P99Ms = ms(figures.Nearest(all, 0.99))
	c.P999Ms = ms(figures.Nearest(all, 0.999))
	c.CleanP50Ms = ms(figures.Nearest(clean, 0.50))
	c.CleanP99Ms = ms(figures.Nearest(clean, 0.99))
	c.CleanP999Ms = ms(figures.Nearest(clean, 0.999))
	c.MaxLagMs = float64(r.MaxLagUs) / 1000
	c.ServerOutside = r.ServerOutside
}

// splitStalled returns every request's latency and those of the requests that overlapped no stall.
// A result without per-request records (they must match LatencyUs one for one) cannot be
// attributed: then no request is clean unless there was no steal at all.
func splitStalled(r loadResult, st stalls) (all, clean []time.Duration) {
	all = make([]time.Duration, len(r.LatencyUs))
	clean = make([]time.Duration, 0, len(r.LatencyUs))
	known := len(r.DueUs) == len(r.LatencyUs) && len(r.CPUs) == len(r.LatencyUs)
	for i, us := range r.LatencyUs {
		all[i] = time.Duration(us) * time.Microsecond
		stalled := false
		if known {
			due := r.DueFromUnixNs + r.DueUs[i]*int64(time.Microsecond)
			stalled = st.overlaps(due, due+int64(all[i]), r.CPUs[i])
		} else {
			stalled = st.overlaps(math.MinInt64, math.MaxInt64, allCPUs)
		}
		if !stalled {
			clean = append(clean, all[i])
		}
	}
	return all, clean
}

// idleFilled is the share of the CPU left idle by LS that BE filled: beCores / (capacity −
// lsSoloCores). With no idle CPU at all it is 0.
func idleFilled(beCores, capacity, lsSoloCores float64) float64 {
	idle := capacity - lsSoloCores
	if idle <= 0 {
		return 0
	}
	return beCores / idle
}

// relate fills every cell's ratios and idle share from the solo cell of the same round, view and
// rate, and every pod-start ratio from solo's of the same round.
func relate(cells []cell, starts []podStarts, capacity float64) {
	solo := func(c cell) (cell, bool) {
		for _, s := range cells {
			if s.Setting == settingSolo && s.Round == c.Round && s.View == c.View && s.Rate == c.Rate {
				return s, true
			}
		}
		return cell{}, false
	}
	for i := range cells {
		c := &cells[i]
		s, ok := solo(*c)
		if !ok || c.Setting == settingSolo {
			continue
		}
		c.P99Ratio, c.P999Ratio = figures.Ratio(c.P99Ms, s.P99Ms), figures.Ratio(c.P999Ms, s.P999Ms)
		c.CleanP99Ratio, c.CleanP999Ratio = figures.Ratio(c.CleanP99Ms, s.CleanP99Ms), figures.Ratio(c.CleanP999Ms, s.CleanP999Ms)
		c.IdleFilled = idleFilled(c.BECores, capacity, s.LSCores)
	}
	for i := range starts {
		for _, s := range starts {
			if s.Setting == settingSolo && s.Round == starts[i].Round && starts[i].Setting != settingSolo {
				starts[i].Ratio = figures.Ratio(starts[i].P50Ms, s.P50Ms)
			}
		}
	}
}

// summarize fills a podStarts' p50 and max from its samples.
func summarize(p *podStarts) {
	ds := make([]time.Duration, len(p.Ms))
	for i, ms := range p.Ms {
		ds[i] = time.Duration(ms * float64(time.Millisecond))
	}
	p.P50Ms = float64(figures.Nearest(ds, 0.5)) / float64(time.Millisecond)
	p.MaxMs = float64(figures.Nearest(ds, 1)) / float64(time.Millisecond)
}

// fmtClean formats a clean percentile, "-" when every request was stalled (there is none).
func fmtClean(c cell, ms float64) string {
	if c.Stalled >= c.Sent {
		return "-"
	}
	return fmt.Sprintf("%.2f", ms)
}

// maxSamplerCores is the most CPU the steal sampler used in any cell, in cores.
func maxSamplerCores(cells []cell) float64 {
	m := 0.0
	for _, c := range cells {
		m = max(m, c.SamplerCores)
	}
	return m
}

// writeTables prints the run: the definitions and targets, one table per round, and a summary
// across rounds shaped like the table.
func writeTables(w io.Writer, rep report) {
	service := fmt.Sprintf("%.0f µs of CPU and %d KiB of working set read per request", rep.WorkUs, rep.TouchBytes>>10)
	if rep.LS == lsNginx {
		service = fmt.Sprintf("LS service nginx (Debian's package) serving a %d KiB page", nginxPageBytes>>10)
	}
	fmt.Fprintf(w, "colocation bench: containerd %s, %.0f CPUs, %s per cell, %d round(s), %s, BE antagonist %s\n",
		rep.Flavor, rep.Capacity, rep.Duration, rep.Rounds, service, cmp.Or(rep.Antagonist, antagonistCPU))
	if rep.Machine != nil {
		fmt.Fprintf(w, "machine: %s\n", rep.Machine.Line())
	}
	fmt.Fprintf(w, "latency from each request's intended send time (open loop); ratios are to solo in the same round\n")
	fmt.Fprintf(w, "idle filled = BE cores / (capacity - LS-side cores of solo at that load): the share of the CPU LS leaves idle that BE used\n")
	fmt.Fprintf(w, "view pod: the client is an LS peer pod; view host: the client is a process in the bench's cgroup (%s)\n", rep.HostCgroup)
	fmt.Fprintf(w, "stalled: requests whose [due, done] overlapped steal on a CPU they ran on (each CPU's steal sampled every %v, "+
		"its thread at most %.2f%% of a CPU); clean: the percentiles of the others, what the guest did\n",
		stealEvery, 100*maxSamplerCores(rep.Cells))
	fmt.Fprintf(w, "tandem-proxy ms/s: the CPU time the node agent used per second of the cell (a host process, beside the host view's client)\n")
	fmt.Fprintf(w, "targets (issue 41): p99 <= %.2fx solo (%.2fx with the memory and cache antagonists), p99.9 <= %.1fx solo, idle filled >= %.0f%%, host p99 <= %.1fx solo\n\n",
		targetP99Ratio, targetP99RatioMemory, targetP999Ratio, targetIdleFilled*100, targetHostP99Ratio)

	for r := 1; r <= rep.Rounds; r++ {
		fmt.Fprintf(w, "round %d\n", r)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "view\tload rps\tsetting\tp50 ms\tp99 ms\tp99.9 ms\tp99/solo\tp99.9/solo\tLS cores\tBE cores\tidle filled\tfailed\tmax lag ms\tsteal ms\ttries\t"+
			"stalled\tclean p50 ms\tclean p99 ms\tclean p99.9 ms\ttandem-proxy ms/s\t")
		for _, c := range rep.Cells {
			if c.Round != r {
				continue
			}
			filled := "-"
			if c.Setting != settingSolo {
				filled = fmt.Sprintf("%.0f%%", c.IdleFilled*100)
			}
			proxy := "-"
			if c.Setting != settingSolo && c.Setting != settingPlain {
				proxy = fmt.Sprintf("%.1f", c.ProxyCores*1000)
			}
			fmt.Fprintf(tw, "%s\t%.0f\t%s\t%.2f\t%.2f\t%.2f\t%s\t%s\t%.2f\t%.2f\t%s\t%d/%d\t%.1f\t%.0f\t%d\t%d\t%s\t%s\t%s\t%s\t\n",
				c.View, c.Rate, c.Setting, c.P50Ms, c.P99Ms, c.P999Ms, figures.FormatRatio(c.P99Ratio), figures.FormatRatio(c.P999Ratio),
				c.LSCores, c.BECores, filled, c.Failed, c.Sent, c.MaxLagMs, c.StealMs, c.Attempts,
				c.Stalled, fmtClean(c, c.CleanP50Ms), fmtClean(c, c.CleanP99Ms), fmtClean(c, c.CleanP999Ms), proxy)
		}
		_ = tw.Flush()
		if slices.ContainsFunc(rep.PodStarts, func(p podStarts) bool { return p.Round == r }) {
			tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
			fmt.Fprintln(tw, "pod start (run+create+start)\tsetting\tp50 ms\tmax ms\tp50/solo\t")
			for _, p := range rep.PodStarts {
				if p.Round == r {
					fmt.Fprintf(tw, "\t%s\t%.0f\t%.0f\t%s\t\n", p.Setting, p.P50Ms, p.MaxMs, figures.FormatRatio(p.Ratio))
				}
			}
			_ = tw.Flush()
		}
		fmt.Fprintln(w)
	}
	writeSummary(w, rep)
}

// span formats the range of vs as "a-b" (or "a" when they agree to the precision shown).
func span(vs []float64, format string) string {
	if len(vs) == 0 {
		return "-"
	}
	lo, hi := slices.Min(vs), slices.Max(vs)
	a, b := fmt.Sprintf(format, lo), fmt.Sprintf(format, hi)
	if a == b {
		return a
	}
	return a + "-" + b
}

// writeSummary prints, per view, load and setting, the ranges over the rounds.
func writeSummary(w io.Writer, rep report) {
	type key struct {
		view, setting string
		rate          float64
	}
	var order []key
	groups := map[key][]cell{}
	for _, c := range rep.Cells {
		if c.Setting == settingSolo {
			continue
		}
		k := key{c.View, c.Setting, c.Rate}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], c)
	}
	slices.SortStableFunc(order, func(a, b key) int {
		if a.view != b.view {
			return strings.Compare(b.view, a.view) // pod first
		}
		if a.rate != b.rate {
			return int(a.rate - b.rate)
		}
		return 0
	})
	fmt.Fprintf(w, "summary over %d round(s): ranges\n", rep.Rounds)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "view\tload rps\tsetting\tp99 vs solo\tp99.9 vs solo\tBE cores\tof the idle CPU\tclean p99 vs solo\tclean p99.9 vs solo\tstalled\ttandem-proxy ms/s\t")
	for _, k := range order {
		var p99, p999, be, filled, cp99, cp999, stalled, proxy []float64
		for _, c := range groups[k] {
			p99, p999, be, filled = append(p99, c.P99Ratio), append(p999, c.P999Ratio), append(be, c.BECores), append(filled, c.IdleFilled*100)
			// A cell with no clean request has no clean ratio: left out rather than shown as 0.
			if c.CleanP99Ratio > 0 {
				cp99, cp999 = append(cp99, c.CleanP99Ratio), append(cp999, c.CleanP999Ratio)
			}
			stalled = append(stalled, float64(c.Stalled))
			if k.setting != settingPlain {
				proxy = append(proxy, c.ProxyCores*1000)
			}
		}
		fmt.Fprintf(tw, "%s\t%.0f\t%s\t%s\t%s\t%s\t%s%%\t%s\t%s\t%s\t%s\t\n", k.view, k.rate, k.setting,
			span(p99, "%.2f"), span(p999, "%.2f"), span(be, "%.2f"), span(filled, "%.0f"),
			span(cp99, "%.2f"), span(cp999, "%.2f"), span(stalled, "%.0f"), span(proxy, "%.1f"))
	}
	_ = tw.Flush()
	if rep.Load != "" {
		fmt.Fprintf(w, "load average after the run: %s\n", rep.Load)
	}
}
