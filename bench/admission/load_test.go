package main

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

func TestRequestCount(t *testing.T) {
	t.Parallel()
	tests := []struct {
		rate float64
		d    time.Duration
		want int
	}{
		{50, 60 * time.Second, 3000},
		{50, 100 * time.Millisecond, 5},
		{400, 100 * time.Millisecond, 40},
		{50, 0, 0},
		{0, time.Second, 0},
		{-1, time.Second, 0},
		{3, 500 * time.Millisecond, 1},
	}
	for _, tt := range tests {
		if got := requestCount(tt.rate, tt.d); got != tt.want {
			t.Errorf("requestCount(%g, %s) = %d, want %d", tt.rate, tt.d, got, tt.want)
		}
	}
}

func TestSchedule(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		rate float64
		n    int
		step time.Duration // between consecutive slots
	}{
		{name: "50 per second", rate: 50, n: 3000, step: 10 * time.Millisecond},
		{name: "one pair", rate: 50, n: 1, step: 10 * time.Millisecond},
		{name: "none", rate: 50, n: 0},
		{name: "fractional rate", rate: 3, n: 30, step: time.Second / 6},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := schedule(tt.rate, tt.n, rand.New(rand.NewPCG(1, 2)))
			if len(s) != 2*tt.n {
				t.Fatalf("%d slots, want %d", len(s), 2*tt.n)
			}
			var count [kinds]int
			var firsts [kinds]int
			last := [kinds]time.Duration{-1, -1}
			for i, sl := range s {
				if want := time.Duration(i) * tt.step; sl.offset < want-time.Microsecond || sl.offset > want+time.Microsecond {
					t.Fatalf("slot %d at %s, want %s", i, sl.offset, want)
				}
				if sl.seq != count[sl.kind] {
					t.Fatalf("slot %d: kind %d seq %d, want %d", i, sl.kind, sl.seq, count[sl.kind])
				}
				count[sl.kind]++
				if i%2 == 0 {
					firsts[sl.kind]++
				} else if s[i-1].kind == sl.kind {
					t.Fatalf("pair %d holds two requests of kind %d", i/2, sl.kind)
				}
				// A kind's requests are at most three slots apart (pair order BA then AB... AB then BA).
				if last[sl.kind] >= 0 && sl.offset-last[sl.kind] > 3*tt.step+time.Microsecond {
					t.Fatalf("kind %d waits %s between requests", sl.kind, sl.offset-last[sl.kind])
				}
				last[sl.kind] = sl.offset
			}
			if count[kindPlain] != tt.n || count[kindWebhook] != tt.n {
				t.Fatalf("per kind %v, want %d each", count, tt.n)
			}
			if tt.n >= 100 && (firsts[kindPlain] < tt.n/3 || firsts[kindWebhook] < tt.n/3) {
				t.Errorf("goes first: %v times; the order should be random", firsts)
			}
		})
	}
}

// TestRunScheduleIsOpenLoop: a request that hangs must not hold back the ones due after it, and
// latency counts from the due time.
func TestRunScheduleIsOpenLoop(t *testing.T) {
	t.Parallel()
	slots := schedule(100, 10, rand.New(rand.NewPCG(3, 4))) // 20 slots 5 ms apart
	release := make(chan struct{})
	var mu sync.Mutex
	sentBeforeRelease := 0
	send := func(_ context.Context, s slot) error {
		if s.seq == 0 && s.kind == kindPlain {
			<-release // the first request of kind A hangs until every other one was sent
			return nil
		}
		mu.Lock()
		sentBeforeRelease++
		if sentBeforeRelease == len(slots)-1 {
			close(release)
		}
		mu.Unlock()
		return nil
	}
	start := time.Now()
	done := make(chan []outcome)
	go func() { done <- runSchedule(context.Background(), slots, start, send) }()
	var outs []outcome
	select {
	case outs = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("runSchedule waited for the hanging request before sending the others: closed loop")
	}
	if len(outs) != len(slots) {
		t.Fatalf("%d outcomes, want %d", len(outs), len(slots))
	}
	for i, o := range outs {
		if o.slot != slots[i] || !o.due.Equal(start.Add(slots[i].offset)) {
			t.Errorf("outcome %d: slot %+v due %s, want %+v due %s", i, o.slot, o.due, slots[i], start.Add(slots[i].offset))
		}
		if o.sent.Before(o.due) || o.done.Before(o.sent) || o.latency() != o.done.Sub(o.due) {
			t.Errorf("outcome %d: due %s sent %s done %s latency %s", i, o.due, o.sent, o.done, o.latency())
		}
	}
}

func TestRunScheduleStopsOnCancel(t *testing.T) {
	t.Parallel()
	slots := schedule(1, 5, rand.New(rand.NewPCG(5, 6))) // 10 slots 500 ms apart
	ctx, cancel := context.WithCancel(context.Background())
	send := func(context.Context, slot) error { cancel(); return nil }
	outs := runSchedule(ctx, slots, time.Now(), send)
	if len(outs) != 1 {
		t.Fatalf("%d outcomes after cancel at the first request, want 1", len(outs))
	}
}
