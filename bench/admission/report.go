package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/tandemkit/tandem/bench/internal/figures"
)

// stats summarizes the latencies of one kind (or one kind and pod variant).
type stats struct {
	n, failed          int
	p50, p90, p99, max time.Duration
	mean               time.Duration
	lagP99, lagMax     time.Duration // the dispatcher's lateness: sent − due
	errors             map[string]int
}

// summarize takes the outcomes that keep returns true for. Failed requests count with their time
// to failure, so that a request that timed out still weighs on the tail.
func summarize(outs []outcome, keep func(outcome) bool) stats {
	var lat, lag []time.Duration
	var sum time.Duration
	st := stats{errors: map[string]int{}}
	for _, o := range outs {
		if !keep(o) {
			continue
		}
		st.n++
		if o.err != nil {
			st.failed++
			st.errors[o.err.Error()]++
		}
		l := o.latency()
		lat = append(lat, l)
		lag = append(lag, o.sent.Sub(o.due))
		sum += l
	}
	if st.n == 0 {
		return st
	}
	st.p50, st.p90, st.p99 = figures.Nearest(lat, 0.50), figures.Nearest(lat, 0.90), figures.Nearest(lat, 0.99)
	st.max = slices.Max(lat)
	st.mean = sum / time.Duration(st.n)
	st.lagP99, st.lagMax = figures.Nearest(lag, 0.99), slices.Max(lag)
	return st
}

// delta is x − y quantile by quantile, as the report prints it: the difference of the two
// distributions' quantiles (not a quantile of per-request differences, which do not exist: each
// request has one kind).
type delta struct {
	mean, p50, p90, p99, max time.Duration
}

func minus(x, y stats) delta {
	return delta{mean: x.mean - y.mean, p50: x.p50 - y.p50, p90: x.p90 - y.p90, p99: x.p99 - y.p99, max: x.max - y.max}
}

// The differences the report prints, as [kinds]stats indices: minuend, subtrahend and what the
// difference is.
var comparisons = []struct {
	x, y    int
	meaning string
}{
	{kindWebhook, kindPlain, "what a user sees"},
	{kindFloor, kindPlain, "calling any webhook"},
	{kindWebhook, kindFloor, "tandem-webhook's own"},
}

// judgement is the verdict on the target: tandem-webhook adds at most target at p99 over the
// leanest webhook.
type judgement struct {
	ok   bool
	line string
}

// judge judges the target on B − C at p99: what tandem-webhook adds over the floor webhook, which
// the API server calls with the same configuration and gets the same patch from. B − A is what a
// user sees, but it also holds the API server's own cost of calling any webhook at all (C − A),
// which no webhook can lower; the line says so and gives both. It counts failures too. With aa
// (every kind without a webhook) there is no target to judge: the differences are the noise floor.
func judge(st [kinds]stats, target time.Duration, failed int, aa bool) judgement {
	a, b, c := st[kindPlain], st[kindWebhook], st[kindFloor]
	bc, ba, ca := b.p99-c.p99, b.p99-a.p99, c.p99-a.p99
	fails := fmt.Sprintf("all %d measured requests succeeded", a.n+b.n+c.n)
	if failed > 0 {
		fails = fmt.Sprintf("%d requests failed", failed)
	}
	if aa {
		return judgement{ok: failed == 0, line: fmt.Sprintf("verdict: A/A check (all three kinds sent to %s, no webhook called), no target judged: p99 differs by %s (B − C), %s (B − A), %s (C − A), the noise floor of this run; %s",
			nsPlain, figures.Signed(bc), figures.Signed(ba), figures.Signed(ca), fails)}
	}
	within := bc <= target
	word := "PASS"
	if !within || failed > 0 {
		word = "FAIL"
	}
	cmp := "within"
	if !within {
		cmp = "over"
	}
	return judgement{ok: within && failed == 0, line: fmt.Sprintf("verdict: %s: tandem-webhook adds %s at p99 over the leanest webhook (B − C: %s %s − %s %s), %s the %s target; "+
		"B − A (%s at p99, what a user sees) is reported too but not judged, as it also holds the API server's own cost of calling any webhook with this patch (C − A = %s), which no webhook can remove; %s",
		word, figures.Signed(bc), nsWebhook, figures.Duration(b.p99), nsFloor, figures.Duration(c.p99), cmp, figures.Duration(target), figures.Signed(ba), figures.Signed(ca), fails)}
}

// callPair is the mean the API server's histogram gives one webhook call of each of the two pod
// webhooks of a configuration, and their sum: what one pod's two calls cost as the API server
// times them (serialising the review, TLS and HTTP/2, the wait for the answer, decoding it).
// Zero when either has no samples in the window.
func callPair(after, before map[string]*histogram, mutate, validate string) (m, v, sum float64, ok bool) {
	mean := func(name string) (float64, bool) {
		h, found := after[name]
		if !found {
			return 0, false
		}
		d := h.sub(before[name])
		if d.count <= 0 {
			return 0, false
		}
		return d.mean(), true
	}
	m, okM := mean(mutate)
	v, okV := mean(validate)
	if !okM || !okV {
		return 0, 0, 0, false
	}
	return m, v, m + v, true
}

// busyNote warns when the figures include other work: the machine was loaded before the run
// (1-minute load average, as figures.LoadAverage prints it, over half the CPUs) or the client
// itself sent a request more than 10 ms late. Empty when neither.
func busyNote(loadAvg string, cpus int, lagMax time.Duration) string {
	var why []string
	if f := strings.Fields(loadAvg); len(f) > 0 {
		if l, err := strconv.ParseFloat(f[0], 64); err == nil && cpus > 0 && l > float64(cpus)/2 {
			why = append(why, fmt.Sprintf("load average %.2f on %d CPUs before the run", l, cpus))
		}
	}
	if lagMax > 10*time.Millisecond {
		why = append(why, fmt.Sprintf("the client itself sent a request %s late", figures.Duration(lagMax)))
	}
	if len(why) == 0 {
		return ""
	}
	return "note: the machine was busy (" + strings.Join(why, "; ") + "): the tails include other work; -aa shows this machine's noise floor"
}

func fmtSeconds(s float64) string {
	return figures.Duration(time.Duration(s * float64(time.Second)))
}

func ratio(a, b time.Duration) string {
	if b <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fx", float64(a)/float64(b))
}

// histogram is one Prometheus histogram: cumulative counts by upper bound (+Inf last).
type histogram struct {
	bounds []float64
	cum    []float64
	sum    float64
	count  float64
}

// sub returns h − before, bucket by bucket: what was observed between the two scrapes. A nil
// before is an empty histogram.
func (h histogram) sub(before *histogram) histogram {
	if before == nil {
		return h
	}
	out := histogram{bounds: h.bounds, cum: slices.Clone(h.cum), sum: h.sum - before.sum, count: h.count - before.count}
	for i, b := range h.bounds {
		if j := slices.Index(before.bounds, b); j >= 0 {
			out.cum[i] -= before.cum[j]
		}
	}
	return out
}

func (h histogram) mean() float64 {
	if h.count <= 0 {
		return math.NaN()
	}
	return h.sum / h.count
}

// quantile estimates the q-quantile as Prometheus' histogram_quantile does (linear within the
// bucket that holds it) and returns the bucket's bounds too, the only thing a histogram knows for
// sure. A quantile in the +Inf bucket is reported as the largest finite bound.
func (h histogram) quantile(q float64) (est, lo, hi float64) {
	if h.count <= 0 || len(h.bounds) == 0 {
		return math.NaN(), math.NaN(), math.NaN()
	}
	rank := q * h.count
	prevBound, prevCum := 0.0, 0.0
	for i, b := range h.bounds {
		if h.cum[i] >= rank && h.cum[i] > prevCum {
			if math.IsInf(b, 1) {
				return prevBound, prevBound, b
			}
			return prevBound + (b-prevBound)*(rank-prevCum)/(h.cum[i]-prevCum), prevBound, b
		}
		prevBound, prevCum = b, h.cum[i]
	}
	return prevBound, prevBound, math.Inf(1)
}

// parseHistograms reads the histogram family name from a Prometheus text exposition and returns
// its series grouped by the value of the label by, summed over every other label.
func parseHistograms(text []byte, name, by string) (map[string]*histogram, error) {
	type acc struct {
		buckets    map[float64]float64
		sum, count float64
	}
	accs := map[string]*acc{}
	get := func(k string) *acc {
		if accs[k] == nil {
			accs[k] = &acc{buckets: map[float64]float64{}}
		}
		return accs[k]
	}
	sc := bufio.NewScanner(bytes.NewReader(text))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"_") {
			continue
		}
		metric, labels, value, err := parseSample(line)
		if err != nil {
			return nil, fmt.Errorf("%q: %w", line, err)
		}
		a := get(labels[by])
		switch metric {
		case name + "_bucket":
			le, err := strconv.ParseFloat(labels["le"], 64)
			if err != nil {
				return nil, fmt.Errorf("%q: le: %w", line, err)
			}
			a.buckets[le] += value
		case name + "_sum":
			a.sum += value
		case name + "_count":
			a.count += value
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	out := map[string]*histogram{}
	for k, a := range accs {
		h := &histogram{sum: a.sum, count: a.count}
		for b := range a.buckets {
			h.bounds = append(h.bounds, b)
		}
		sort.Float64s(h.bounds)
		for _, b := range h.bounds {
			h.cum = append(h.cum, a.buckets[b])
		}
		out[k] = h
	}
	return out, nil
}

// parseSample splits one sample line, `name{k="v",...} value [timestamp]`.
func parseSample(line string) (string, map[string]string, float64, error) {
	labels := map[string]string{}
	i := strings.IndexAny(line, "{ ")
	if i < 0 {
		return "", nil, 0, errors.New("no value")
	}
	name, rest := line[:i], line[i:]
	if rest[0] == '{' {
		rest = rest[1:]
		for {
			rest = strings.TrimLeft(rest, " ,")
			if strings.HasPrefix(rest, "}") {
				rest = rest[1:]
				break
			}
			eq := strings.Index(rest, `="`)
			if eq < 0 {
				return "", nil, 0, errors.New("malformed labels")
			}
			key := rest[:eq]
			rest = rest[eq+2:]
			var val strings.Builder
			closed := false
			for j := 0; j < len(rest); j++ {
				c := rest[j]
				if c == '\\' && j+1 < len(rest) {
					j++
					switch rest[j] {
					case 'n':
						val.WriteByte('\n')
					default:
						val.WriteByte(rest[j])
					}
					continue
				}
				if c == '"' {
					rest, closed = rest[j+1:], true
					break
				}
				val.WriteByte(c)
			}
			if !closed {
				return "", nil, 0, errors.New("unterminated label value")
			}
			labels[key] = val.String()
		}
	}
	fields := strings.Fields(rest)
	if len(fields) == 0 {
		return "", nil, 0, errors.New("no value")
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	return name, labels, v, err
}

// parseCounters sums the samples of the counter name by the value of the label by.
func parseCounters(text []byte, name, by string) (map[string]float64, error) {
	out := map[string]float64{}
	for _, line := range strings.Split(string(text), "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		_, labels, v, err := parseSample(line)
		if err != nil {
			return nil, fmt.Errorf("%q: %w", line, err)
		}
		out[labels[by]] += v
	}
	return out, nil
}

// gaugeValue returns the value of an unlabelled sample name in a text exposition.
func gaugeValue(text []byte, name string) (float64, bool) {
	for _, line := range strings.Split(string(text), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f, err == nil
		}
	}
	return 0, false
}

// printHistograms writes one line per series: count, mean, and p50/p99 from the buckets.
func printHistograms(w io.Writer, title string, after, before map[string]*histogram) {
	fmt.Fprintln(w, title)
	keys := make([]string, 0, len(after))
	for k := range after {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if len(keys) == 0 {
		fmt.Fprintln(w, "  (no samples)")
	}
	for _, k := range keys {
		h := after[k].sub(before[k])
		if h.count <= 0 {
			continue
		}
		e50, lo50, hi50 := h.quantile(0.50)
		e99, lo99, hi99 := h.quantile(0.99)
		fmt.Fprintf(w, "  %-46s n=%-6.0f mean %-8s p50 ~%-8s (bucket %s..%s)  p99 ~%-8s (bucket %s..%s)\n", k, h.count,
			fmtSeconds(h.mean()), fmtSeconds(e50), fmtSeconds(lo50), fmtBound(hi50), fmtSeconds(e99), fmtSeconds(lo99), fmtBound(hi99))
	}
}

func fmtBound(b float64) string {
	if math.IsInf(b, 1) {
		return "+Inf"
	}
	return fmtSeconds(b)
}
