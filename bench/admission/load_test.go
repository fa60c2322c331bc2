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

func TestPerKind(t *testing.T) {
	t.Parallel()
	tests := []struct {
		rate float64
		d    time.Duration
		want int
	}{
		{50, 120 * time.Second, 2000}, // the defaults: 6000 requests in all
		{50, 5 * time.Second, 83},     // 250 in all: whole blocks of three only
		{50, 10 * time.Second, 166},
		{3, time.Second, 1},
		{2, time.Second, 0},
		{0, time.Second, 0},
	}
	for _, tt := range tests {
		if got := perKind(tt.rate, tt.d); got != tt.want {
			t.Errorf("perKind(%g, %s) = %d, want %d", tt.rate, tt.d, got, tt.want)
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
		{name: "50 per second in all", rate: 50, n: 2000, step: 20 * time.Millisecond},
		{name: "one block", rate: 50, n: 1, step: 20 * time.Millisecond},
		{name: "none", rate: 50, n: 0},
		{name: "fractional rate", rate: 3, n: 30, step: time.Second / 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := schedule(tt.rate, tt.n, rand.New(rand.NewPCG(1, 2)))
			if len(s) != kinds*tt.n {
				t.Fatalf("%d slots, want %d", len(s), kinds*tt.n)
			}
			var count [kinds]int
			var position [kinds][kinds]int // how often each kind had each place in its block
			last := [kinds]time.Duration{-1, -1, -1}
			for i, sl := range s {
				if want := time.Duration(i) * tt.step; sl.offset < want-time.Microsecond || sl.offset > want+time.Microsecond {
					t.Fatalf("slot %d at %s, want %s (the API server gets rate per second in all)", i, sl.offset, want)
				}
				if sl.seq != count[sl.kind] || sl.seq != i/kinds {
					t.Fatalf("slot %d: kind %d seq %d, want %d", i, sl.kind, sl.seq, count[sl.kind])
				}
				count[sl.kind]++
				position[sl.kind][i%kinds]++
				for j := i - i%kinds; j < i; j++ {
					if s[j].kind == sl.kind {
						t.Fatalf("block %d holds two requests of kind %d", i/kinds, sl.kind)
					}
				}
				// A kind's requests are at most 2·kinds−1 slots apart (first in one block, last in the next).
				if last[sl.kind] >= 0 && sl.offset-last[sl.kind] > time.Duration(2*kinds-1)*tt.step+time.Microsecond {
					t.Fatalf("kind %d waits %s between requests", sl.kind, sl.offset-last[sl.kind])
				}
				last[sl.kind] = sl.offset
			}
			for k := range kinds {
				if count[k] != tt.n {
					t.Fatalf("per kind %v, want %d each", count, tt.n)
				}
				if tt.n >= 300 {
					for p := range kinds {
						if position[k][p] < tt.n/5 {
							t.Errorf("kind %d had place %d of its block %d times in %d: the order should be random", k, p, position[k][p], tt.n)
						}
					}
				}
			}
		})
	}
}

// TestRunScheduleIsOpenLoop: a request that hangs must not hold back the ones due after it, and
// latency counts from the due time.
func TestRunScheduleIsOpenLoop(t *testing.T) {
	t.Parallel()
	slots := schedule(200, 7, rand.New(rand.NewPCG(3, 4))) // 21 slots 5 ms apart
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
	slots := schedule(2, 4, rand.New(rand.NewPCG(5, 6))) // 12 slots 500 ms apart
	ctx, cancel := context.WithCancel(context.Background())
	send := func(context.Context, slot) error { cancel(); return nil }
	outs := runSchedule(ctx, slots, time.Now(), send)
	if len(outs) != 1 {
		t.Fatalf("%d outcomes after cancel at the first request, want 1", len(outs))
	}
}
