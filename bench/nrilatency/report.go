package main

import (
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tandemkit/tandem/bench/internal/figures"
	"github.com/tandemkit/tandem/bench/internal/procstat"
)

// The calls reported for every container.
const (
	callCreate = "CreateContainer"
	callStart  = "StartContainer"
	callBoth   = "Create+Start"
)

func calls() []string { return []string{callCreate, callStart, callBoth} }

// sample is one timed container start.
type sample struct {
	path, class string
	round       int
	// create counts from when CreateContainer was due to its answer; start from then (kubelet sends
	// StartContainer as soon as CreateContainer answers) to StartContainer's answer; both is their sum.
	create, start time.Duration
	lag           time.Duration // how late the dispatcher sent CreateContainer, already part of create
}

func newSample(o outcome, path, class string, round int) sample {
	return sample{
		path: path, class: class, round: round,
		create: o.created.Sub(o.due), start: o.started.Sub(o.created), lag: o.sent.Sub(o.due),
	}
}

func (s sample) of(call string) time.Duration {
	switch call {
	case callCreate:
		return s.create
	case callStart:
		return s.start
	default:
		return s.create + s.start
	}
}

// quantiles are the figures reported for one call on one path.
type quantiles struct {
	P50, P99 time.Duration
	// HalfGap is how far apart the two halves of the run (even and odd rounds) put each percentile: how
	// much the figure moves with machine noise and sampling, measured rather than assumed.
	HalfGapP50, HalfGapP99 time.Duration
	N                      int
}

// summarize computes the quantiles of one call over the samples of one path.
func summarize(samples []sample, path, call string) quantiles {
	var all, even, odd []time.Duration
	for _, s := range samples {
		if s.path != path {
			continue
		}
		d := s.of(call)
		all = append(all, d)
		if s.round%2 == 0 {
			even = append(even, d)
		} else {
			odd = append(odd, d)
		}
	}
	q := quantiles{N: len(all), P50: figures.Nearest(all, 0.50), P99: figures.Nearest(all, 0.99)}
	if len(even) > 0 && len(odd) > 0 {
		q.HalfGapP50 = absDur(figures.Nearest(even, 0.50) - figures.Nearest(odd, 0.50))
		q.HalfGapP99 = absDur(figures.Nearest(even, 0.99) - figures.Nearest(odd, 0.99))
	}
	return q
}

func absDur(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}

// added is a path's figure against none's at one percentile of one call.
type added struct {
	Added time.Duration // path − none
	Ratio float64       // path / none; NaN when none's figure is zero
	// Noise is the larger half-run gap of the two figures: an Added no larger than it is not told apart
	// from zero by this run.
	Noise       time.Duration
	WithinNoise bool
	Path, None  time.Duration // the two figures
}

func compare(path, none, noise time.Duration) added {
	a := added{Added: path - none, Noise: noise, Path: path, None: none, Ratio: math.NaN()}
	if none > 0 {
		a.Ratio = float64(path) / float64(none)
	}
	a.WithinNoise = absDur(a.Added) <= noise
	return a
}

// row is one call: every path's quantiles and, for proxy and nri, their figures against none.
type row struct {
	call     string
	q        map[string]quantiles
	vs50     map[string]added // by path; empty without none
	vs99     map[string]added
	hasNone  bool
	maxGap50 time.Duration
	maxGap99 time.Duration
}

func rows(samples []sample, paths []string) []row {
	var out []row
	for _, c := range calls() {
		r := row{call: c, q: map[string]quantiles{}, vs50: map[string]added{}, vs99: map[string]added{}}
		for _, p := range paths {
			q := summarize(samples, p, c)
			r.q[p] = q
			r.maxGap50, r.maxGap99 = max(r.maxGap50, q.HalfGapP50), max(r.maxGap99, q.HalfGapP99)
		}
		none, ok := r.q[pathNone]
		r.hasNone = ok
		for _, p := range paths {
			if p == pathNone || !ok {
				continue
			}
			q := r.q[p]
			r.vs50[p] = compare(q.P50, none.P50, max(q.HalfGapP50, none.HalfGapP50))
			r.vs99[p] = compare(q.P99, none.P99, max(q.HalfGapP99, none.HalfGapP99))
		}
		out = append(out, r)
	}
	return out
}

// cpuUse is the CPU time one process spent over the timed rounds.
type cpuUse struct {
	Path    string `json:"path"`
	Process string `json:"process"` // containerd, tandem-proxy or tandem-nri
	Ticks   int64  `json:"cpuTicks"`
	// IdleTicks is what the process used over IdleSeconds before the rounds, the pods running and no calls
	// made: its background work (collectors, the store's resync, containerd's own loops), which goes on
	// during the rounds too.
	IdleTicks   int64   `json:"idleCPUTicks"`
	IdleSeconds float64 `json:"idleSeconds"`
}

// perContainer divides the CPU time of the timed rounds (seconds long) by the containers started in
// them: all of it, and net of the background rate measured at rest. Both in ms.
func (c cpuUse) perContainer(containers int, seconds float64) (total, net float64) {
	n := float64(max(containers, 1))
	total = float64(c.Ticks) * 1000 / procstat.UserHZ / n
	net = total
	if c.IdleSeconds > 0 {
		net -= float64(c.IdleTicks) * 1000 / procstat.UserHZ * seconds / c.IdleSeconds / n
	}
	return total, net
}

// restPercent is the background rate at rest, in % of one core.
func (c cpuUse) restPercent() float64 {
	if c.IdleSeconds <= 0 {
		return 0
	}
	return float64(c.IdleTicks) / procstat.UserHZ / c.IdleSeconds * 100
}

// report is everything one run prints.
type report struct {
	machine    figures.Machine
	runtime    string
	opts       options
	seed       uint64
	paths      []string
	startOrder []string // the order the containerds started in
	samples    []sample
	seconds    float64
	loadBefore string
	loadAfter  string
	maxLag     time.Duration
	maxFlight  int
	perPath    int // timed containers per path
	cpu        []cpuUse
	inside     map[string][]inside // by path: Tandem's own timings
}

func ratio(a added) string {
	if math.IsNaN(a.Ratio) {
		return "-"
	}
	s := fmt.Sprintf("%.2f", a.Ratio)
	if a.WithinNoise {
		s += " ~"
	}
	return s
}

func (r *report) print(w io.Writer) {
	m, o := r.machine, r.opts
	fmt.Fprintf(w, "\nTandem container start benchmark: none, proxy, NRI\n")
	fmt.Fprintf(w, "machine:  %s\n", m.Line())
	plugin := "only nri's has a plugin connected"
	if o.aa {
		plugin = "none has a plugin connected"
	}
	fmt.Fprintf(w, "runtime:  %s, one daemon per path, same config, NRI enabled on each; %s\n", r.runtime, plugin)
	fmt.Fprintf(w, "paths:    %s (containerds started in the order %s, drawn from the seed)\n", strings.Join(r.paths, ", "), strings.Join(r.startOrder, ", "))
	for _, p := range r.paths {
		fmt.Fprintf(w, "          %-6s %s\n", p, pathDescription(p))
	}
	if o.aa {
		fmt.Fprintf(w, "A/A:      NO TANDEM on any path: proxy and nri are plain containerds like none's, so the differences show the benchmark's own bias and noise\n")
	}
	fmt.Fprintf(w, "pods:     per path an LS pod (Burstable: 500m/1 CPU, 256Mi/512Mi) and a BE pod (BestEffort, batch-cpu 1k/1500m, batch-memory 64Mi)\n")
	fmt.Fprintf(w, "schedule: %d timed rounds (+%d warm-up) x %d containers per path (half LS, half BE) = %d per path;\n",
		o.rounds, o.warmupRounds, 2*o.perPod, r.perPath)
	fmt.Fprintf(w, "          open loop at %g containers/s (all paths together) in blocks of one per path in random order (seed %d);\n", o.rate, r.seed)
	fmt.Fprintf(w, "          between rounds, untimed: stop and remove through the same path, %s pause\n", o.settle)
	fmt.Fprintf(w, "run:      %.0f s; load %s before, %s after (1/5/15 min); dispatcher at most %s ms late; at most %d starts in flight\n",
		r.seconds, r.loadBefore, r.loadAfter, figures.Cell(r.maxLag, time.Millisecond), r.maxFlight)

	rs := rows(r.samples, r.paths)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "\nlatency (ms)\t")
	for _, p := range r.paths {
		fmt.Fprintf(tw, "%s\t\t", p)
	}
	fmt.Fprintln(tw, "half-run gap [a]\t\t")
	fmt.Fprint(tw, "call\t")
	for range r.paths {
		fmt.Fprint(tw, "p50\tp99\t")
	}
	fmt.Fprintln(tw, "p50\tp99\t")
	for _, rw := range rs {
		fmt.Fprintf(tw, "%s\t", rw.call)
		for _, p := range r.paths {
			fmt.Fprintf(tw, "%s\t%s\t", figures.Cell(rw.q[p].P50, time.Millisecond), figures.Cell(rw.q[p].P99, time.Millisecond))
		}
		fmt.Fprintf(tw, "%s\t%s\t\n", figures.Cell(rw.maxGap50, time.Millisecond), figures.Cell(rw.maxGap99, time.Millisecond))
	}
	_ = tw.Flush()

	var others []string
	for _, p := range r.paths {
		if p != pathNone {
			others = append(others, p)
		}
	}
	if len(rs) > 0 && rs[0].hasNone && len(others) > 0 {
		fmt.Fprintf(w, "\nadded over none in the same run: ms (ratio to none)\n")
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprint(tw, "call\t")
		for _, p := range others {
			fmt.Fprintf(tw, "%s+ p50\t\t%s+ p99\t\t", p, p)
		}
		fmt.Fprintln(tw)
		for _, rw := range rs {
			fmt.Fprintf(tw, "%s\t", rw.call)
			for _, p := range others {
				fmt.Fprintf(tw, "%s\t(%s)\t%s\t(%s)\t", figures.Cell(rw.vs50[p].Added, time.Millisecond), ratio(rw.vs50[p]), figures.Cell(rw.vs99[p].Added, time.Millisecond), ratio(rw.vs99[p]))
			}
			fmt.Fprintln(tw)
		}
		_ = tw.Flush()
		fmt.Fprintln(w, "~  the difference is within the larger half-run gap of the two figures: this run does not tell it from zero")
	}
	fmt.Fprintln(w, "[a] largest gap, over the paths, between the percentile of the even and of the odd rounds: the noise of these figures")
	k := r.perPath - int(math.Ceil(0.99*float64(r.perPath))) + 1
	fmt.Fprintf(w, "    with %d containers per path, p99 is the %s value: read it as the tail, not as a stable figure\n", r.perPath, nthLargest(k))
	if len(r.cpu) > 0 {
		fmt.Fprintf(w, "\nCPU time (utime+stime) of each process over the timed rounds, per timed container (create, start, stop, remove);\n")
		fmt.Fprintf(w, "net: less the process's rate at rest (measured %s before the rounds, pods running, no calls), which goes on meanwhile\n", r.opts.idle)
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "path\tprocess\tat rest, % of a core\tms per container\tnet\t")
		for _, c := range r.cpu {
			total, net := c.perContainer(r.perPath, r.seconds)
			fmt.Fprintf(tw, "%s\t%s\t%.2f\t%.1f\t%.1f\t\n", c.Path, c.Process, c.restPercent(), total, net)
		}
		_ = tw.Flush()
	}
	if len(r.inside) > 0 {
		fmt.Fprintf(w, "inside Tandem, ms per timed container (its own metrics; xN: observations per container, one per hook for a stage):\n")
		for _, p := range r.paths {
			ins, ok := r.inside[p]
			if !ok {
				continue
			}
			var parts []string
			for _, in := range ins {
				parts = append(parts, fmt.Sprintf("%s %s %.2f x%.1f", in.Kind, in.Name, in.MsPer, in.PerContainer))
			}
			fmt.Fprintf(w, "  %-6s %s\n", p, strings.Join(parts, ", "))
		}
	}
	fmt.Fprintln(w)
}

// nthLargest names the k-th largest of a set of values.
func nthLargest(k int) string {
	switch k {
	case 1:
		return "largest"
	case 2:
		return "2nd largest"
	case 3:
		return "3rd largest"
	default:
		return fmt.Sprintf("%dth largest", k)
	}
}

func pathDescription(p string) string {
	switch p {
	case pathNone:
		return "k8s.io/cri-client -> containerd (no plugin)"
	case pathProxy:
		return "k8s.io/cri-client -> tandem-proxy (default policies) -> containerd"
	default:
		return "k8s.io/cri-client -> containerd -> tandem-nri, its NRI plugin (default policies)"
	}
}

// The JSON form gives every duration in milliseconds.

type jsonQuantiles struct {
	P50ms        float64 `json:"p50Ms"`
	P99ms        float64 `json:"p99Ms"`
	HalfGapP50ms float64 `json:"halfGapP50Ms"`
	HalfGapP99ms float64 `json:"halfGapP99Ms"`
	Samples      int     `json:"samples"`
}

type jsonAdded struct {
	AddedMs     float64  `json:"addedMs"`
	Ratio       *float64 `json:"ratio"`
	NoiseMs     float64  `json:"noiseMs"`
	WithinNoise bool     `json:"withinNoise"`
}

type jsonRow struct {
	Call   string                   `json:"call"`
	Paths  map[string]jsonQuantiles `json:"paths"`
	VsP50  map[string]jsonAdded     `json:"addedOverNoneP50,omitempty"`
	VsP99  map[string]jsonAdded     `json:"addedOverNoneP99,omitempty"`
	Sample map[string][]float64     `json:"samplesMs"`
}

type jsonReport struct {
	Machine      figures.Machine     `json:"machine"`
	Runtime      string              `json:"runtime"`
	Paths        []string            `json:"paths"`
	StartOrder   []string            `json:"startOrder"`
	Rounds       int                 `json:"rounds"`
	WarmupRounds int                 `json:"warmupRounds"`
	PerPod       int                 `json:"perPodPerRound"`
	Rate         float64             `json:"rate"`
	Seed         uint64              `json:"seed"`
	AA           bool                `json:"aaCheck"`
	Seconds      float64             `json:"seconds"`
	LoadBefore   string              `json:"loadBefore"`
	LoadAfter    string              `json:"loadAfter"`
	MaxLagMs     float64             `json:"maxLagMs"`
	MaxInFlight  int                 `json:"maxInFlight"`
	CPU          []cpuUse            `json:"cpu"`
	Inside       map[string][]inside `json:"insideTandem,omitempty"`
	Rows         []jsonRow           `json:"latency"`
}

func toJSONAdded(a added) jsonAdded {
	j := jsonAdded{AddedMs: figures.In(a.Added, time.Millisecond), NoiseMs: figures.In(a.Noise, time.Millisecond), WithinNoise: a.WithinNoise}
	if !math.IsNaN(a.Ratio) {
		r := a.Ratio
		j.Ratio = &r
	}
	return j
}

func (r *report) writeJSON(path string) error {
	j := jsonReport{
		Machine: r.machine, Runtime: r.runtime, Paths: r.paths, StartOrder: r.startOrder, Rounds: r.opts.rounds, WarmupRounds: r.opts.warmupRounds,
		PerPod: r.opts.perPod, Rate: r.opts.rate, Seed: r.seed, AA: r.opts.aa, Seconds: r.seconds, LoadBefore: r.loadBefore,
		LoadAfter: r.loadAfter, MaxLagMs: figures.In(r.maxLag, time.Millisecond), MaxInFlight: r.maxFlight, CPU: r.cpu, Inside: r.inside,
	}
	for _, rw := range rows(r.samples, r.paths) {
		jr := jsonRow{Call: rw.call, Paths: map[string]jsonQuantiles{}, Sample: map[string][]float64{}}
		for p, q := range rw.q {
			jr.Paths[p] = jsonQuantiles{P50ms: figures.In(q.P50, time.Millisecond), P99ms: figures.In(q.P99, time.Millisecond), HalfGapP50ms: figures.In(q.HalfGapP50, time.Millisecond), HalfGapP99ms: figures.In(q.HalfGapP99, time.Millisecond), Samples: q.N}
		}
		if rw.hasNone {
			jr.VsP50, jr.VsP99 = map[string]jsonAdded{}, map[string]jsonAdded{}
			for p, a := range rw.vs50 {
				jr.VsP50[p] = toJSONAdded(a)
			}
			for p, a := range rw.vs99 {
				jr.VsP99[p] = toJSONAdded(a)
			}
		}
		for _, s := range r.samples {
			jr.Sample[s.path] = append(jr.Sample[s.path], figures.In(s.of(rw.call), time.Millisecond))
		}
		j.Rows = append(j.Rows, jr)
	}
	return figures.WriteJSON(path, j)
}
