package main

import (
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/tandemkit/tandem/bench/internal/figures"
)

// How sure the verdict must be before it calls a target missed. A
// percentile of one run moves with the few stalls that happen to land in
// it: at p99 of the parallel rows a run of 20 000 calls held only 25 to 53
// of its 100 rounds with a call in the tail, and two identical proxies (the --aa
// check) put their added p99 up to 1.8 times apart. So each comparison
// carries the interval its excess over the limit lies in, from a bootstrap
// over the run's rounds, and only an excess whose whole interval lies above
// zero is a miss the run has shown.
const (
	// bootstrapReplicates is how many resampled runs the interval is drawn
	// from. On a run of 20 000 calls, 500 put the ends of the p50 intervals
	// within 2 µs of where 2000 put them and those of p99 within a tenth of
	// the interval's width, in 9 s against 37 s.
	bootstrapReplicates = 500
	// intervalTail is the share of replicates left out at each end: a
	// 90 % interval, so a miss is called with 95 % confidence.
	intervalTail = 0.05
	// bootstrapSeed makes the interval a function of the measurements
	// alone: the same run reported twice gives the same verdict.
	bootstrapSeed = 0x7a6e64656d
)

// excessInterval gives, for each quantile of qs and the limit of the same
// index, the 90 % interval of tandem's excess over what the limit allows,
// (tandem added) - limit x (floor added), computed from the three series'
// percentiles. It resamples whole rounds, the same
// rounds for all three targets: within a round the targets ran one right
// after the other, so what the machine did then lands on all of them, and
// the calls of one batch share the stalls that hit it.
func excessInterval(direct, floor, tandem series, qs []float64, limits []float64, replicates int, rng *rand.Rand) []interval {
	byRound := func(s series) map[int][]time.Duration {
		m := map[int][]time.Duration{}
		for _, x := range s {
			m[x.round] = append(m[x.round], x.d)
		}
		return m
	}
	all := []map[int][]time.Duration{byRound(direct), byRound(floor), byRound(tandem)}
	var rounds []int
	for r := range all[0] {
		if _, ok := all[1][r]; !ok {
			continue
		}
		if _, ok := all[2][r]; ok {
			rounds = append(rounds, r)
		}
	}
	out := make([]interval, len(qs))
	if len(rounds) == 0 {
		return out
	}
	slices.Sort(rounds) // map order must not reach the random draws
	excess := make([][]float64, len(qs))
	var buf []time.Duration
	pick := make([]int, len(rounds))
	pct := make([][3]time.Duration, len(qs))
	for range replicates {
		for i := range pick {
			pick[i] = rounds[rng.IntN(len(rounds))]
		}
		for t, m := range all {
			buf = buf[:0]
			for _, r := range pick {
				buf = append(buf, m[r]...)
			}
			for i, q := range qs {
				pct[i][t] = figures.Nearest(buf, q) // sorts buf once; later calls find it sorted
			}
		}
		for i, lim := range limits {
			d, f, t := pct[i][0], pct[i][1], pct[i][2]
			excess[i] = append(excess[i], float64(t-d)-lim*float64(f-d))
		}
	}
	for i, e := range excess {
		slices.Sort(e)
		lo := int(math.Floor(intervalTail * float64(len(e))))
		hi := len(e) - 1 - lo
		out[i] = interval{Low: time.Duration(e[lo]), High: time.Duration(e[hi])}
	}
	return out
}

// interval bounds tandem's excess over the limit; negative is room to spare.
type interval struct{ Low, High time.Duration }

func newBootstrapRand() *rand.Rand {
	return rand.New(rand.NewPCG(bootstrapSeed, bootstrapSeed))
}
