package main

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tandemkit/tandem/bench/internal/figures"
)

// synth builds a series of rounds x perRound calls, each taking what f says.
func synth(rounds, perRound int, f func(round int) time.Duration) series {
	var s series
	for r := range rounds {
		for range perRound {
			s = append(s, sample{d: f(r), round: r})
		}
	}
	return s
}

func TestExcessInterval(t *testing.T) {
	t.Parallel()
	const rounds, perRound = 40, 50
	us := func(v float64) time.Duration { return time.Duration(v * float64(time.Microsecond)) }
	// The backend takes 100-200µs; a hop adds 100µs, or what the case says.
	backend := func(rng *rand.Rand) time.Duration { return us(100 + 100*rng.Float64()) }
	tests := []struct {
		name string
		// tandem's hop: what it adds in a given round.
		tandemHop       func(round int) time.Duration
		limit           float64
		q               float64
		wantMeets       bool
		wantShown       bool
		wantLowAboveTen bool // the interval is well clear of zero
	}{
		{name: "tandem as fast as the floor, p50", tandemHop: func(int) time.Duration { return us(100) }, limit: 1.1, q: 0.5, wantMeets: true},
		{name: "tandem as fast as the floor, p99", tandemHop: func(int) time.Duration { return us(100) }, limit: 1.3, q: 0.99, wantMeets: true},
		{name: "tandem twice the floor: a miss shown", tandemHop: func(int) time.Duration { return us(200) }, limit: 1.1, q: 0.5, wantShown: true, wantLowAboveTen: true},
		{
			// One round of 50 calls stalled by 5 ms holds the whole 1 % tail
			// of 2000 calls: the figure misses, but a resampled run without
			// that round does not, so the run has not shown a miss.
			name: "one stalled round puts p99 over the limit, not shown",
			tandemHop: func(r int) time.Duration {
				if r == 17 {
					return us(5000)
				}
				return us(100)
			},
			limit: 1.3, q: 0.99,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(1, 2))
			direct := synth(rounds, perRound, func(int) time.Duration { return backend(rng) })
			floor := synth(rounds, perRound, func(int) time.Duration { return backend(rng) + us(100) })
			tandem := synth(rounds, perRound, func(r int) time.Duration { return backend(rng) + tt.tandemHop(r) })
			pct := func(s series) time.Duration { return figures.Nearest(s.durations(nil), tt.q) }
			c := compare(pct(direct), pct(floor), pct(tandem), 0, tt.limit)
			iv := excessInterval(direct, floor, tandem, []float64{tt.q}, []float64{tt.limit}, bootstrapReplicates, newBootstrapRand())[0]
			c = c.withExcess(iv)
			if c.Meets != tt.wantMeets || c.MissShown != tt.wantShown {
				t.Errorf("meets=%v missShown=%v (ratio %.2f, excess interval %v to %v), want %v and %v",
					c.Meets, c.MissShown, c.Ratio, iv.Low, iv.High, tt.wantMeets, tt.wantShown)
			}
			point := c.TandemAdded - time.Duration(tt.limit*float64(c.FloorAdded))
			if iv.Low > point || iv.High < point {
				t.Errorf("interval %v to %v does not hold the run's own excess %v", iv.Low, iv.High, point)
			}
			if tt.wantLowAboveTen && iv.Low < us(10) {
				t.Errorf("interval starts at %v, want it clear of zero for a hop twice the floor's", iv.Low)
			}
			again := excessInterval(direct, floor, tandem, []float64{tt.q}, []float64{tt.limit}, bootstrapReplicates, newBootstrapRand())[0]
			if again != iv {
				t.Errorf("the same run gave %v then %v: the verdict must depend on the measurements alone", iv, again)
			}
		})
	}
}
