package main

import (
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/tandemkit/tandem/bench/internal/figures"
)

// The hook framework's targets.
const (
	// limitInProcess5 bounds what five in-process hooks add to a CreateContainer.
	limitInProcess5 = 20 * time.Microsecond
	// limitRemote bounds what one remote hook adds to a CreateContainer at p50, its server in a process
	// of its own. containerd spends some 50 ms on a CreateContainer: this is half a percent of it.
	limitRemote = 250 * time.Microsecond
	// limitBuiltinP99 bounds what all built-in policies add to a CreateContainer at p99 (the QoS issue's
	// target).
	limitBuiltinP99 = time.Millisecond
)

type machine struct {
	figures.Machine
	// Processes is true when every server ran in a process of its own, false when all ran in one.
	Processes bool `json:"processes"`
	// Load averages (1, 5, 15 min) before and after the run: other work on the machine shows here.
	LoadBefore string `json:"loadBefore"`
	LoadAfter  string `json:"loadAfter"`
}

// result is one variant's latency, in microseconds. Added* are against the variant without hooks: the
// difference of the percentiles, not a percentile of differences.
type result struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	// CreateContainer is set for CreateContainer calls through a proxy; the others time a hook call alone.
	CreateContainer bool     `json:"createContainer"`
	Calls           int      `json:"calls"`
	P50             float64  `json:"p50Micros"`
	P99             float64  `json:"p99Micros"`
	Mean            float64  `json:"meanMicros"`
	AddedP50        *float64 `json:"addedP50Micros,omitempty"`
	AddedP99        *float64 `json:"addedP99Micros,omitempty"`
}

type check struct {
	Name  string  `json:"name"`
	Value float64 `json:"valueMicros"`
	Limit float64 `json:"limitMicros"`
	Pass  bool    `json:"pass"`
	How   string  `json:"how"`
	// Judged is set in the layout that judges the target (see judgedAcrossProcesses); elsewhere the
	// check is printed for reference and does not decide the run.
	Judged bool `json:"judged"`
}

// judgedAcrossProcesses says, per target, which layout measures what the target is about. A remote
// hook's round trip is between processes, as between tandem-proxy and koordlet: only the processes
// layout has it; in one Go runtime a round trip is CPU time only, a fraction of what it costs across
// processes. In-process hooks are CPU time in the proxy: one process shows it without the wake-ups of
// switching between processes, which make two identical proxies differ by some 10 µs.
var judgedAcrossProcesses = map[string]bool{
	checkInProcess5: false,
	checkRemote:     true,
	checkBuiltin:    false,
}

const (
	checkInProcess5 = "in-process dispatch, 5 hooks"
	checkRemote     = "one remote hook"
	checkBuiltin    = "all built-in policies"
)

// ratio is what one remote hook adds at p50 in multiples of a round trip's p50, for context.
type ratio struct {
	Name  string  `json:"name"`
	Added float64 `json:"addedP50Micros"`
	// RoundTrip is the round trip's p50, in µs.
	RoundTrip float64 `json:"roundTripP50Micros"`
	Ratio     float64 `json:"ratio"`
	How       string  `json:"how"`
}

type report struct {
	Machine    machine  `json:"machine"`
	Iterations int      `json:"iterations"`
	Batch      int      `json:"batch"`
	Warmup     int      `json:"warmup"`
	Results    []result `json:"results"`
	Checks     []check  `json:"checks"`
	Pass       bool     `json:"pass"`
	// Context says what the remote hook adds in round trips to its server: bare, and nested in a gRPC
	// relay's handler. Not a target.
	Context []ratio `json:"context"`
	// RemoteHookInProxyMean is the mean time of the remote hook's calls inside its proxy, in µs, from
	// the proxy's tandem_hook_duration_seconds (warm-up included); compare it with the mean of
	// remote-dispatch, the same call made outside a proxy.
	RemoteHookInProxyMean float64 `json:"remoteHookInProxyMeanMicros"`
}

func summarize(name, description string, ds []time.Duration) result {
	// Nearest sorts in place: the caller's samples keep their order.
	sorted := slices.Clone(ds)
	var sum time.Duration
	for _, d := range sorted {
		sum += d
	}
	r := result{Name: name, Description: description, Calls: len(sorted),
		P50: figures.In(figures.Nearest(sorted, 0.50), time.Microsecond), P99: figures.In(figures.Nearest(sorted, 0.99), time.Microsecond)}
	if len(sorted) > 0 {
		r.Mean = figures.In(sum/time.Duration(len(sorted)), time.Microsecond)
	}
	return r
}

// newReport summarizes the samples and checks the targets. variants[0] is the one without hooks; the
// names inproc-5, remote-1 and builtin are the ones the targets are about; grpc-rtt, relay-empty and
// relay-rtt give the remote hook's figure in round trips, for context.
func newReport(m machine, o options, variants []variant, samples [][]time.Duration) *report {
	rep := &report{Machine: m, Iterations: o.iterations, Batch: o.batch, Warmup: o.warmup, Pass: true}
	byName := map[string]*result{}
	for i, v := range variants {
		r := summarize(v.name, v.description, samples[i])
		r.CreateContainer = v.createContainer
		rep.Results = append(rep.Results, r)
	}
	base := rep.Results[0]
	for i := range rep.Results {
		r := &rep.Results[i]
		byName[r.Name] = r
		if i > 0 && r.CreateContainer {
			p50, p99 := r.P50-base.P50, r.P99-base.P99
			r.AddedP50, r.AddedP99 = &p50, &p99
		}
	}
	if r := byName["inproc-5"]; r != nil {
		limit := figures.In(limitInProcess5, time.Microsecond)
		rep.Checks = append(rep.Checks, check{Name: checkInProcess5, Value: *r.AddedP50, Limit: limit,
			Pass: *r.AddedP50 <= limit, How: fmt.Sprintf("added p50 %.1f µs ≤ %.0f µs", *r.AddedP50, limit)})
	}
	if r := byName["remote-1"]; r != nil {
		limit := figures.In(limitRemote, time.Microsecond)
		rep.Checks = append(rep.Checks, check{Name: checkRemote, Value: *r.AddedP50, Limit: limit,
			Pass: *r.AddedP50 <= limit, How: fmt.Sprintf("added p50 %.1f µs ≤ %.0f µs", *r.AddedP50, limit)})
	}
	if r := byName["builtin"]; r != nil {
		limit := figures.In(limitBuiltinP99, time.Microsecond)
		rep.Checks = append(rep.Checks, check{Name: checkBuiltin, Value: *r.AddedP99, Limit: limit,
			Pass: *r.AddedP99 <= limit, How: fmt.Sprintf("added p99 %.1f µs ≤ %.0f µs", *r.AddedP99, limit)})
	}
	for i := range rep.Checks {
		c := &rep.Checks[i]
		c.Judged = judgedAcrossProcesses[c.Name] == m.Processes
		if c.Judged {
			rep.Pass = rep.Pass && c.Pass
		}
	}
	if r, rtt := byName["remote-1"], byName["grpc-rtt"]; r != nil && rtt != nil {
		rep.Context = append(rep.Context, newRatio("one remote hook in bare round trips", *r.AddedP50, rtt.P50,
			fmt.Sprintf("round-trip p50 %.1f µs", rtt.P50)))
	}
	if r, empty, nested := byName["remote-1"], byName["relay-empty"], byName["relay-rtt"]; r != nil && empty != nil && nested != nil {
		floor := nested.P50 - empty.P50
		rep.Context = append(rep.Context, newRatio("one remote hook in a relay's nested round trips", *r.AddedP50, floor,
			fmt.Sprintf("nested round trip p50 %.1f µs (relay %.1f − %.1f)", floor, nested.P50, empty.P50)))
	}
	return rep
}

// newRatio is added in round trips of roundTrip µs; what describes the round trip.
func newRatio(name string, added, roundTrip float64, what string) ratio {
	r := ratio{Name: name, Added: added, RoundTrip: roundTrip}
	if roundTrip > 0 {
		r.Ratio = added / roundTrip
	}
	r.How = fmt.Sprintf("added p50 %.1f µs = %.2f × %s", added, r.Ratio, what)
	return r
}

func (r *report) print(w io.Writer) {
	m := r.Machine
	if m.Processes {
		fmt.Fprintf(w, "CreateContainer through tandem proxy.Servers in front of a stub runtime; the client, the runtime, the hook server,\nthe proxies (one process, as tandem-proxy) and each relay in processes of their own, as on a node (--layout processes)\n")
	} else {
		fmt.Fprintf(w, "CreateContainer through tandem proxy.Servers in front of stub runtimes, all in the benchmark's process (--layout one-process)\n")
	}
	fmt.Fprintf(w, "%d timed calls per variant in turns of %d (after %d warm-up calls), interleaved\n", r.Iterations, r.Batch, r.Warmup)
	fmt.Fprintf(w, "machine: %s; load %s → %s\n\n", m.Line(), m.LoadBefore, m.LoadAfter)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "variant\tp50 µs\tp99 µs\tmean µs\tadded p50 µs\tadded p99 µs\t")
	for _, res := range r.Results {
		added := func(v *float64) string {
			if v == nil {
				return "-"
			}
			return fmt.Sprintf("%+.1f", *v)
		}
		fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%.1f\t%s\t%s\t\n", res.Description, res.P50, res.P99, res.Mean, added(res.AddedP50), added(res.AddedP99))
	}
	_ = tw.Flush()
	if r.RemoteHookInProxyMean > 0 {
		fmt.Fprintf(w, "\nthe remote hook's calls inside its proxy (tandem_hook_duration_seconds): mean %.1f µs\n", r.RemoteHookInProxyMean)
	}
	fmt.Fprintln(w, "\ntargets judged in this layout:")
	for _, c := range r.Checks {
		if c.Judged {
			fmt.Fprintf(w, "  %s  %s: %s\n", map[bool]string{true: "PASS", false: "FAIL"}[c.Pass], c.Name, c.How)
		}
	}
	other := "one process (--layout one-process)"
	if !m.Processes {
		other = "processes (--layout processes)"
	}
	fmt.Fprintf(w, "judged in %s; here for reference:\n", other)
	for _, c := range r.Checks {
		if !c.Judged {
			fmt.Fprintf(w, "  %s  %s: %s\n", map[bool]string{true: "pass", false: "miss"}[c.Pass], c.Name, c.How)
		}
	}
	for _, c := range r.Context {
		fmt.Fprintf(w, "not a target, for context: %s: %s\n", c.Name, c.How)
	}
}
