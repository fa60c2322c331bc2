package main

import (
	"context"
	"math"
	"math/rand/v2"
	"sync"
	"time"
)

// The three kinds of request, measured in the same run.
const (
	kindPlain   = 0 // namespace bench-plain: the API server's own round trip
	kindWebhook = 1 // namespace bench-webhook: the same plus tandem-webhook's two calls
	kindFloor   = 2 // namespace bench-floor: the same plus two calls to the floor webhook
	kinds       = 3
)

// slot is one request of the open-loop schedule.
type slot struct {
	// offset is when the request is due, from the start of the run.
	offset time.Duration
	kind   int
	// seq counts the kind's requests from 0; it picks the pod variant, so every kind sends the same mix.
	seq int
}

// requestCount is how many requests a run at rate per second sends in d.
func requestCount(rate float64, d time.Duration) int {
	if rate <= 0 || d <= 0 {
		return 0
	}
	// The epsilon keeps 50/s × 0.1 s at 5, not 4 from 4.99999.
	return int(math.Floor(rate*d.Seconds() + 1e-9))
}

// perKind is how many requests of each kind a run at rate per second (all kinds together) sends
// in d: the schedule only holds whole blocks of one request of each kind.
func perKind(rate float64, d time.Duration) int { return requestCount(rate, d) / kinds }

// schedule is the interleaved open-loop schedule of n requests of each kind at rate per second in
// all: slots 1/rate apart, taken in blocks of one request of each kind, in an order drawn from rng
// for each block (a random permutation). So the API server gets rate per second whatever the
// number of kinds, each slot's kind is random with the kinds equally likely, every kind keeps
// exactly its share over any block, and none always goes first (which would give it the quieter
// moment after another's reply, or the reverse).
func schedule(rate float64, n int, rng *rand.Rand) []slot {
	out := make([]slot, 0, kinds*n)
	step := float64(time.Second) / rate
	for i := range n {
		for j, k := range rng.Perm(kinds) {
			out = append(out, slot{offset: time.Duration(float64(kinds*i+j) * step), kind: k, seq: i})
		}
	}
	return out
}

// outcome is one request: when it was due, sent and answered, and what went wrong, if anything.
type outcome struct {
	slot
	due, sent, done time.Time
	err             error
}

// latency is the time from when the request was due (not when it was sent) to its answer.
func (o outcome) latency() time.Duration { return o.done.Sub(o.due) }

// runSchedule sends each slot at start+offset, whatever the earlier requests are doing (each runs
// on a goroutine of its own: open loop), and returns every outcome once all are answered. A
// closed-loop client would slow down when the API server does and so never see the queue it
// would have built; measuring from the due time also charges the dispatcher's own lateness to the
// request. If ctx ends, the slots not yet sent are left out.
func runSchedule(ctx context.Context, slots []slot, start time.Time, send func(context.Context, slot) error) []outcome {
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
		wg.Add(1)
		go func() {
			defer wg.Done()
			o := outcome{slot: s, due: due, sent: time.Now()}
			o.err = send(ctx, s)
			o.done = time.Now()
			outs[i] = o
		}()
	}
	wg.Wait()
	return outs[:sent]
}
