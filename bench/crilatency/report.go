package main

import (
	"debug/buildinfo"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tandemkit/tandem/bench/internal/figures"
	"github.com/tandemkit/tandem/bench/internal/procstat"
)

// Targets: tandem-proxy's added latency against the floor's, in every run,
// and its footprint at rest.
const (
	limitP50      = 1.1
	limitP99      = 1.3
	limitRSSMiB   = 25
	limitCPUPct   = 1.0
	kibPerMiB     = 1024
	microsPerNano = 1e-3
)

type machine struct {
	figures.Machine
	Runtime string `json:"runtime"`
	Flavor  string `json:"flavor"`
}

// buildOf says how a Go executable was built: its RSS follows its size, and the size follows cgo and
// the build tags (the Makefile's GOTAGS).
func buildOf(path string) string {
	fi, err := os.Stat(path)
	if err != nil {
		return err.Error()
	}
	desc := fmt.Sprintf("%.1f MB executable", float64(fi.Size())/1e6)
	bi, err := buildinfo.ReadFile(path)
	if err != nil {
		return desc + " (no build information: " + err.Error() + ")"
	}
	cgo, tags := "unset", "none"
	for _, s := range bi.Settings {
		switch s.Key {
		case "CGO_ENABLED":
			cgo = s.Value
		case "-tags":
			tags = s.Value
		}
	}
	return fmt.Sprintf("%s, CGO_ENABLED=%s, build tags: %s", desc, cgo, tags)
}

// row is the result of one RPC × mode.
type row struct {
	rpc, mode string
	q         map[string]quantiles // by target
	p50, p99  *comparison          // nil unless all three targets ran
}

// proxyCPU is the CPU time one proxy process used over the latency run.
type proxyCPU struct {
	Target string `json:"target"`
	Ticks  int64  `json:"cpuTicks"` // 1/100 s
	Calls  int    `json:"calls"`    // timed and warm-up calls it relayed
	// Switches over the same calls, all threads: each voluntary one is a thread that slept and had to be
	// woken, the part of a hop's latency that CPU time does not show.
	Switches switches `json:"contextSwitches"`
}

func (p proxyCPU) microsPerCall() float64 {
	return float64(p.Ticks) * 1e6 / procstat.UserHZ / float64(p.Calls)
}

// latencyRun is one complete latency measurement: every RPC, mode and target.
type latencyRun struct {
	Seconds float64
	// Load averages (1, 5, 15 min) when the run started and ended: other
	// work on the machine shows here.
	LoadBefore, LoadAfter string
	rows                  []row
	proxyCPU              []proxyCPU
}

// namedComparison is one percentile's verdict on a row.
type namedComparison struct {
	name string // "p50" or "p99"
	c    *comparison
}

// comparisons are the row's verdicts, p50 then p99; none unless all three targets ran.
func (rw row) comparisons() []namedComparison {
	if rw.p50 == nil {
		return nil
	}
	return []namedComparison{{"p50", rw.p50}, {"p99", rw.p99}}
}

// met says whether the run showed no miss of either latency target on any
// row: a row over the limit by less than the run can resolve is not a miss
// it has shown (excessInterval says why).
func (l latencyRun) met() bool {
	for _, rw := range l.rows {
		if rw.p50 == nil {
			return false
		}
		for _, c := range rw.comparisons() {
			if c.c.MissShown {
				return false
			}
		}
	}
	return len(l.rows) > 0
}

// over lists the comparisons whose figure is over the limit but whose
// excess the run cannot tell from noise.
func (l latencyRun) over() []string {
	var out []string
	for _, rw := range l.rows {
		for _, c := range rw.comparisons() {
			if !c.c.Meets && !c.c.MissShown {
				out = append(out, fmt.Sprintf("%s %s %s", rw.rpc, rw.mode, c.name))
			}
		}
	}
	return out
}

type report struct {
	machine machine
	opts    options
	// proxyBuild says how the measured tandem-proxy was built; empty in the A/A check.
	proxyBuild string
	runs       []latencyRun
	Idle       *idleReport
}

func newReport(o options, runtimeVersion string) *report {
	return &report{machine: machine{Machine: figures.ReadMachine(), Runtime: runtimeVersion, Flavor: o.flavor}, opts: o}
}

// latencyRows compares the targets on every RPC and mode of one run.
func latencyRows(s map[key]series, targets []target) []row {
	var rows []row
	rng := newBootstrapRand()
	have := map[string]bool{}
	for _, t := range targets {
		have[t.name] = true
	}
	for _, rp := range benchmarkRPCs() {
		for _, m := range benchmarkModes() {
			rw := row{rpc: rp.name, mode: m.name, q: map[string]quantiles{}}
			for _, t := range targets {
				rw.q[t.name] = summarize(s[key{rpc: rp.name, mode: m.name, target: t.name}])
			}
			if have[targetDirect] && have[targetFloor] && have[targetTandem] {
				d, f, t := rw.q[targetDirect], rw.q[targetFloor], rw.q[targetTandem]
				ivs := excessInterval(s[key{rp.name, m.name, targetDirect}], s[key{rp.name, m.name, targetFloor}], s[key{rp.name, m.name, targetTandem}],
					[]float64{0.50, 0.99}, []float64{limitP50, limitP99}, bootstrapReplicates, rng)
				c50 := compare(d.P50, f.P50, t.P50, max(d.HalfGapP50, f.HalfGapP50, t.HalfGapP50), limitP50).withExcess(ivs[0])
				c99 := compare(d.P99, f.P99, t.P99, max(d.HalfGapP99, f.HalfGapP99, t.HalfGapP99), limitP99).withExcess(ivs[1])
				rw.p50, rw.p99 = &c50, &c99
			}
			rows = append(rows, rw)
		}
	}
	return rows
}

// excessNote says what the interval of a comparison over its limit shows.
func excessNote(c *comparison) string {
	iv := fmt.Sprintf("90%% interval of the excess %s to %sµs", figures.Cell(c.Excess.Low, time.Microsecond), figures.Cell(c.Excess.High, time.Microsecond))
	if c.MissShown {
		return iv + ": a miss this run shows, MISS"
	}
	return iv + ": this run cannot tell it from noise [e]"
}

func ratioCell(c *comparison) string {
	if c == nil {
		return "-"
	}
	verdict := "ok"
	switch {
	case c.MissShown:
		verdict = "MISS"
	case !c.Meets:
		verdict = "over [e]"
	}
	if c.FloorWithinNoise {
		return "n/a " + verdict + " [a]"
	}
	return fmt.Sprintf("%.2f %s", c.Ratio, verdict)
}

func (r *report) print(w io.Writer) {
	o, m := r.opts, r.machine
	fmt.Fprintf(w, "\nTandem CRI latency benchmark\n")
	fmt.Fprintf(w, "machine:  %s\n", m.Line())
	fmt.Fprintf(w, "runtime:  %s (flavor %s), %d pods x %d running containers\n", m.Runtime, m.Flavor, o.pods, o.containersPerPod)
	floorKind := "frame pump for streams, one Invoke for unary CRI methods"
	if !o.floorUnary {
		floorKind = "frame pump for every call"
	}
	where := "in its own process, built as tandem-proxy is (" + floorPackage + ")"
	switch {
	case o.floorFromBenchmark:
		where = "in its own process, FROM A COPY OF THE BENCHMARK'S EXECUTABLE (a build that relays faster than others of the same code)"
	case o.floorInProcess:
		where = "IN THE BENCHMARK'S OWN PROCESS, beside its callers (not how a proxy runs: it flatters the floor)"
	}
	fmt.Fprintf(w, "floor:    minimal Go gRPC proxy %s (%s)\n", where, floorKind)
	if r.proxyBuild != "" {
		fmt.Fprintf(w, "tandem:   tandem-proxy with default flags, -v %d; %s\n", o.proxyVerbosity, r.proxyBuild)
	}
	if o.aa {
		fmt.Fprintf(w, "A/A:      the tandem column is a SECOND FLOOR PROXY, not tandem-proxy: the ratios show the benchmark's own bias and noise\n")
		if o.aaExtraWork > 0 {
			fmt.Fprintf(w, "          that floor BURNS %v OF CPU ON EVERY CALL (--aa-extra-work): the verdict should show the rows where that is over the limit\n", o.aaExtraWork)
		}
	}
	fmt.Fprintf(w, "calls:    %d timed per RPC x mode x target in each run, interleaved in batches of %d per caller; %d warm-up calls per caller first\n",
		o.iterations, o.batch, o.warmup)
	if o.gcInBatches {
		fmt.Fprintf(w, "client:   the benchmark's garbage collector RUNS DURING TIMED BATCHES (--gc-in-batches), on whichever target is timed\n")
	} else {
		fmt.Fprintf(w, "client:   the benchmark's own garbage collector runs between batches, never during one\n")
	}
	for i, run := range r.runs {
		fmt.Fprintf(w, "\n== run %d of %d: %.0f s; load %s before, %s after (1/5/15 min averages; other work on the machine)\n", i+1, len(r.runs), run.Seconds, run.LoadBefore, run.LoadAfter)
		run.print(w)
	}
	if r.Idle != nil {
		i := r.Idle
		fmt.Fprintf(w, "\ntandem-proxy at rest with %d containers: %.0f s window, no calls, connections open\n", o.pods*o.containersPerPod, i.Tandem.Seconds)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "\ttandem-proxy\tfloor (for scale)\ttarget\t")
		floorMem := func(f func(idleCost) string) string {
			if i.Floor == nil {
				return "-"
			}
			return f(*i.Floor)
		}
		fmt.Fprintf(tw, "VmRSS after start, before load\t%s\t-\t\t\n", mib(i.TandemFresh.VmRSSKiB))
		fmt.Fprintf(tw, "VmRSS idle, start of window\t%s\t%s\t\t\n", mib(i.Tandem.Start.VmRSSKiB), floorMem(func(c idleCost) string { return mib(c.Start.VmRSSKiB) }))
		fmt.Fprintf(tw, "VmRSS idle, end of window\t%s\t%s\t<= %d MiB %s\t\n", mib(i.Tandem.End.VmRSSKiB), floorMem(func(c idleCost) string { return mib(c.End.VmRSSKiB) }),
			limitRSSMiB, okMiss(i.Tandem.rssMet()))
		fmt.Fprintf(tw, "VmHWM (peak, under load)\t%s\t%s\t\t\n", mib(i.Tandem.End.VmHWMKiB), floorMem(func(c idleCost) string { return mib(c.End.VmHWMKiB) }))
		used := func(f func(workingSet) int64) func(idleCost) string {
			return func(c idleCost) string {
				if c.Used == nil {
					return "-"
				}
				return mib(f(*c.Used))
			}
		}
		for _, row := range []struct {
			name string
			f    func(workingSet) int64
		}{
			{"anonymous, end of window", func(w workingSet) int64 { return w.AnonKiB }},
			{"file-backed, end of window", func(w workingSet) int64 { return w.FileKiB }},
			{"of it used in the window [c]", func(w workingSet) int64 { return w.FileUsedKiB }},
			{"working set at rest [c]", workingSet.KiB},
		} {
			fmt.Fprintf(tw, "%s\t%s\t%s\t\t\n", row.name, used(row.f)(i.Tandem), floorMem(used(row.f)))
		}
		fmt.Fprintf(tw, "CPU, %% of one core\t%.3f%%\t%s\t<= %.0f%% %s\t\n", i.Tandem.CPUPercentCore,
			floorMem(func(c idleCost) string { return fmt.Sprintf("%.3f%%", c.CPUPercentCore) }), limitCPUPct, okMiss(i.Tandem.cpuMet()))
		fmt.Fprintf(tw, "CPU ticks (1/%d s) in window\t%d\t%s\t\t\n", procstat.UserHZ, i.Tandem.CPUTicks, floorMem(func(c idleCost) string { return fmt.Sprint(c.CPUTicks) }))
		perSecond := func(c idleCost) string {
			return fmt.Sprintf("%.1f", float64(c.Switches.Voluntary+c.Switches.Involuntary)/c.Seconds)
		}
		fmt.Fprintf(tw, "context switches per second\t%s\t%s\t\t\n", perSecond(i.Tandem), floorMem(perSecond))
		_ = tw.Flush()
		fmt.Fprintln(w, "[c] pages referenced during the window (its referenced bits cleared at its start): the working set is the anonymous\n"+
			"    memory plus those; the executable's other resident pages were touched at start and are clean page cache the\n"+
			"    kernel takes back under memory pressure")
		fmt.Fprintln(w, "executable pages resident at the end of the window, by Go module [d]:")
		fmt.Fprintf(w, "  tandem-proxy  %s\n", executableLine(i.Tandem))
		if i.Floor != nil {
			fmt.Fprintf(w, "  floor         %s\n", executableLine(*i.Floor))
		}
		fmt.Fprintln(w, "[d] bench/internal/exepages: each resident page shared among the modules by the bytes their code, function\n"+
			"    tables and symbols take of it; (unattributed) is mostly .rodata's type descriptors and strings, which the\n"+
			"    linker does not mark by package. Leaving a module out takes about its share off VmRSS, and its part of those")
	}
	r.printVerdict(w)
	fmt.Fprintln(w)
}

// printVerdict sums the targets up: the latency ones must hold in every run, one after the other.
func (r *report) printVerdict(w io.Writer) {
	if len(r.runs) == 0 || len(r.runs[0].rows) == 0 || r.runs[0].rows[0].p50 == nil {
		return
	}
	met := 0
	var missed []string
	for i, run := range r.runs {
		if run.met() {
			met++
		} else {
			missed = append(missed, fmt.Sprint(i+1))
		}
	}
	fmt.Fprintf(w, "\nverdict:  latency (tandem added <= %.1fx floor added at p50, <= %.1fx at p99, every RPC and mode): ", limitP50, limitP99)
	if len(missed) == 0 {
		fmt.Fprintf(w, "met in all %d consecutive runs\n", len(r.runs))
	} else {
		fmt.Fprintf(w, "MISSED in run %s (met in %d of %d)\n", strings.Join(missed, ", "), met, len(r.runs))
	}
	within, total := 0, 0
	for i, run := range r.runs {
		for _, rw := range run.rows {
			for _, c := range rw.comparisons() {
				total++
				if c.c.Meets {
					within++
				}
			}
		}
		if over := run.over(); len(over) > 0 {
			fmt.Fprintf(w, "          run %d over the limit by less than it can resolve [e]: %s\n", i+1, strings.Join(over, ", "))
		}
	}
	fmt.Fprintf(w, "          figures within the limits on their own: %d of %d\n", within, total)
	if r.Idle != nil {
		i := r.Idle.Tandem
		fmt.Fprintf(w, "          at rest: VmRSS %s (<= %d MiB %s), CPU %.3f%% of one core (<= %.0f%% %s)\n",
			mib(i.End.VmRSSKiB), limitRSSMiB, okMiss(i.rssMet()),
			i.CPUPercentCore, limitCPUPct, okMiss(i.cpuMet()))
		if i.Used != nil {
			fmt.Fprintf(w, "          working set at rest %s [c]\n", mib(i.Used.KiB()))
		}
	}
}

func (l latencyRun) print(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "latency (µs)\t\tdirect\t\tfloor\t\ttandem\t\thalf-run gap [b]\t\t")
	fmt.Fprintln(tw, "RPC\tmode\tp50\tp99\tp50\tp99\tp50\tp99\tp50\tp99\t")
	for _, rw := range l.rows {
		fmt.Fprintf(tw, "%s\t%s\t", rw.rpc, rw.mode)
		var gap50, gap99 time.Duration
		for _, t := range []string{targetDirect, targetFloor, targetTandem} {
			q, ok := rw.q[t]
			if !ok {
				fmt.Fprint(tw, "-\t-\t")
				continue
			}
			fmt.Fprintf(tw, "%s\t%s\t", figures.Cell(q.P50, time.Microsecond), figures.Cell(q.P99, time.Microsecond))
			gap50, gap99 = max(gap50, q.HalfGapP50), max(gap99, q.HalfGapP99)
		}
		fmt.Fprintf(tw, "%s\t%s\t\n", figures.Cell(gap50, time.Microsecond), figures.Cell(gap99, time.Microsecond))
	}
	_ = tw.Flush()

	if len(l.rows) == 0 || l.rows[0].p50 == nil {
		fmt.Fprintln(w, "\n(ratios need the direct, floor and tandem targets)")
	} else {
		fmt.Fprintf(w, "\nadded over direct (µs); target: tandem added <= %.1fx floor added at p50, <= %.1fx at p99\n", limitP50, limitP99)
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "RPC\tmode\tfloor+ p50\ttandem+ p50\tratio p50\tfloor+ p99\ttandem+ p99\tratio p99\t")
		for _, rw := range l.rows {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", rw.rpc, rw.mode,
				figures.Cell(rw.p50.FloorAdded, time.Microsecond), figures.Cell(rw.p50.TandemAdded, time.Microsecond), ratioCell(rw.p50),
				figures.Cell(rw.p99.FloorAdded, time.Microsecond), figures.Cell(rw.p99.TandemAdded, time.Microsecond), ratioCell(rw.p99))
		}
		_ = tw.Flush()
		var notes []string
		for _, rw := range l.rows {
			for _, c := range rw.comparisons() {
				shown := ""
				if !c.c.Meets {
					shown = fmt.Sprintf("; %s", excessNote(c.c))
				}
				switch {
				case c.c.FloorWithinNoise:
					verdict := "within it too: ok"
					if !c.c.Meets {
						verdict = fmt.Sprintf("%sµs beyond it%s", figures.Cell(c.c.ExcessOverLimit, time.Microsecond), shown)
					}
					notes = append(notes, fmt.Sprintf("%s %s %s: floor added %sµs is within noise (±%sµs), so no ratio; tandem added %sµs, %s",
						rw.rpc, rw.mode, c.name, figures.Cell(c.c.FloorAdded, time.Microsecond), figures.Cell(c.c.Noise, time.Microsecond), figures.Cell(c.c.TandemAdded, time.Microsecond), verdict))
				case !c.c.Meets:
					notes = append(notes, fmt.Sprintf("%s %s %s: tandem adds %sµs more than %.1fx the floor allows%s",
						rw.rpc, rw.mode, c.name, figures.Cell(c.c.ExcessOverLimit, time.Microsecond), c.c.Limit, shown))
				}
			}
		}
		for _, n := range notes {
			fmt.Fprintln(w, "  "+n)
		}
		for _, rw := range l.rows {
			if rw.p50.FloorWithinNoise || rw.p99.FloorWithinNoise {
				fmt.Fprintln(w, "[a] the floor's added latency is within noise: judged in absolute µs instead (see the notes above)")
				break
			}
		}
	}
	fmt.Fprintln(w, "[b] largest gap, over the three targets, between the percentile of the even and of the odd rounds: the noise of these figures")
	if len(l.over()) > 0 {
		fmt.Fprintln(w, "[e] over the limit, but the 90% interval of the excess (tandem added - limit x floor added), from 500 resamplings\n"+
			"    of the run's rounds, reaches below zero: this run cannot tell it from noise, so it is not a miss it has shown")
	}
	if len(l.proxyCPU) > 0 {
		fmt.Fprintf(w, "\nproxy CPU time over the latency run (utime+stime, same calls for each):")
		for _, p := range l.proxyCPU {
			fmt.Fprintf(w, "  %s %.2f s = %.0f µs/call", p.Target, float64(p.Ticks)/procstat.UserHZ, p.microsPerCall())
		}
		fmt.Fprintf(w, "\ncontext switches per call (all threads, voluntary + involuntary):")
		for _, p := range l.proxyCPU {
			fmt.Fprintf(w, "  %s %.2f + %.2f", p.Target, float64(p.Switches.Voluntary)/float64(p.Calls), float64(p.Switches.Involuntary)/float64(p.Calls))
		}
		fmt.Fprintln(w)
	}
}

// executableLine lists the modules with 0.1 MiB or more of a process's resident executable pages,
// largest first, and sums up the rest.
func executableLine(c idleCost) string {
	if c.Executable == nil {
		return "not measured: " + c.ExecutableErr
	}
	const shown = 100 << 10
	mb := func(b int64) string { return fmt.Sprintf("%.2f", float64(b)/(1<<20)) }
	var parts []string
	var rest int64
	others := 0
	for _, s := range c.Executable.Sorted() {
		if s.Bytes < shown {
			rest += s.Bytes
			others++
			continue
		}
		parts = append(parts, s.Name+" "+mb(s.Bytes))
	}
	if others > 0 {
		parts = append(parts, fmt.Sprintf("%d others %s", others, mb(rest)))
	}
	return fmt.Sprintf("%s MiB: %s", mb(c.Executable.ResidentBytes), strings.Join(parts, ", "))
}

func mib(kib int64) string { return fmt.Sprintf("%.1f MiB", float64(kib)/kibPerMiB) }

// rssMet and cpuMet judge tandem-proxy's footprint at rest against its targets.
func (c idleCost) rssMet() bool { return float64(c.End.VmRSSKiB)/kibPerMiB <= limitRSSMiB }

func (c idleCost) cpuMet() bool { return c.CPUPercentCore <= limitCPUPct }

func okMiss(ok bool) string {
	if ok {
		return "ok"
	}
	return "MISS"
}

// The JSON form gives every duration in microseconds.
