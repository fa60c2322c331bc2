package main

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"time"
)

// slot is one container start of a round's open-loop schedule.
type slot struct {
	// offset is when the CreateContainer is due, from the start of the round.
	offset time.Duration
	path   int // index into the run's paths
	// block picks the pod and the container's name; every path gets the same blocks, so every path
	// starts the same containers in the same order.
	block int
}

// roundSlots is one round's schedule: blocks of one slot per path, the paths in an order drawn from
// rng for each block (a random permutation), slots 1/rate apart. So the runtimes see rate starts per
// second whatever the number of paths, every path gets exactly its share of every block, and none
// always goes first (which would give it the quiet moment after another's start, or the reverse).
func roundSlots(paths, blocks int, rate float64, rng *rand.Rand) []slot {
	out := make([]slot, 0, paths*blocks)
	step := float64(time.Second) / rate
	for b := range blocks {
		for j, p := range rng.Perm(paths) {
			out = append(out, slot{offset: time.Duration(float64(b*paths+j) * step), path: p, block: b})
		}
	}
	return out
}

// outcome is one container start: when CreateContainer was due and sent, when it returned (and
// StartContainer was sent), when StartContainer returned, and what failed, if anything.
type outcome struct {
	slot
	due, sent, created, started time.Time
	id                          string // the container, once created
	err                         error
}

// starter creates and starts the container of a slot, filling o's times and id.
type starter func(ctx context.Context, s slot, o *outcome) error

// runRound sends each slot at start+offset, whatever the earlier ones are doing (each runs on a
// goroutine of its own: open loop), and returns every outcome once all have ended. A closed-loop
// client would wait for a slow start before sending the next and so never see the queue a slow
// runtime builds; measuring from the due time also charges the dispatcher's own lateness to the
// call. If ctx ends, the slots not yet sent are left out.
func runRound(ctx context.Context, slots []slot, start time.Time, run starter) []outcome {
	outs := make([]outcome, len(slots))
	var wg sync.WaitGroup
	timer := time.NewTimer(0)
	<-timer.C
	sent := len(slots)
loop:
	for i, s := range slots {
		due := start.Add(s.offset)
		if wait := time.Until(due); wait > 0 {
			timer.Reset(wait)
			select {
			case <-ctx.Done():
				timer.Stop()
				sent = i
				break loop
			case <-timer.C:
			}
		}
		wg.Go(func() {
			o := outcome{slot: s, due: due, sent: time.Now()}
			o.err = run(ctx, s, &o)
			outs[i] = o
		})
	}
	wg.Wait()
	return outs[:sent]
}

// maxInFlight is the most starts that overlapped in outs: with the calls of one slot taking longer
// than the gap between slots, the runtimes serve several at once, and that shows here.
func maxInFlight(outs []outcome) int {
	type edge struct {
		at    time.Time
		delta int
	}
	var edges []edge
	for _, o := range outs {
		if o.started.IsZero() {
			continue
		}
		edges = append(edges, edge{o.sent, 1}, edge{o.started, -1})
	}
	// Ends before starts at the same instant: a start that begins as another ends does not overlap it.
	slices.SortFunc(edges, func(a, b edge) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.delta - b.delta
	})
	cur, most := 0, 0
	for _, e := range edges {
		cur += e.delta
		most = max(most, cur)
	}
	return most
}
