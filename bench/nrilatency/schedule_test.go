package main

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"
)

func TestRoundSlots(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name          string
		paths, blocks int
		rate          float64
		step          time.Duration
	}{
		{name: "defaults", paths: 3, blocks: 4, rate: 2, step: 500 * time.Millisecond},
		{name: "one path", paths: 1, blocks: 3, rate: 4, step: 250 * time.Millisecond},
		{name: "fractional rate", paths: 3, blocks: 2, rate: 3, step: time.Second / 3},
		{name: "no blocks", paths: 3, blocks: 0, rate: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := roundSlots(tt.paths, tt.blocks, tt.rate, rand.New(rand.NewPCG(1, 2)))
			if len(s) != tt.paths*tt.blocks {
				t.Fatalf("%d slots, want %d", len(s), tt.paths*tt.blocks)
			}
			for i, sl := range s {
				if want := time.Duration(i) * tt.step; sl.offset < want-time.Microsecond || sl.offset > want+time.Microsecond {
					t.Errorf("slot %d at %s, want %s (the runtimes get rate starts per second in all)", i, sl.offset, want)
				}
				if sl.block != i/tt.paths {
					t.Errorf("slot %d in block %d, want %d: blocks must follow each other", i, sl.block, i/tt.paths)
				}
			}
			for b := range tt.blocks {
				seen := map[int]bool{}
				for _, sl := range s[b*tt.paths : (b+1)*tt.paths] {
					seen[sl.path] = true
				}
				if len(seen) != tt.paths {
					t.Errorf("block %d has paths %v, want each of %d once", b, seen, tt.paths)
				}
			}
		})
	}
}

// Over many rounds every path goes first about as often as any other: the permutation is drawn per block.
func TestRoundSlotsOrderIsRandom(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 4))
	first := make([]int, 3)
	for range 300 {
		for b, sl := range roundSlots(3, 4, 2, rng) {
			if b%3 == 0 {
				first[sl.path]++
			}
		}
	}
	for p, n := range first {
		// 1200 blocks, 400 expected each; 5 standard deviations is about ±80.
		if n < 320 || n > 480 {
			t.Errorf("path %d went first in %d of 1200 blocks, want about 400", p, n)
		}
	}
}

func TestRunRound(t *testing.T) {
	t.Parallel()
	slots := []slot{{offset: 0, path: 0}, {offset: 20 * time.Millisecond, path: 1}, {offset: 40 * time.Millisecond, path: 0, block: 1}}
	start := time.Now().Add(10 * time.Millisecond)
	// Every start takes 100 ms: an open-loop round sends the later slots anyway, on time.
	outs := runRound(context.Background(), slots, start, func(ctx context.Context, s slot, o *outcome) error {
		time.Sleep(50 * time.Millisecond)
		o.created = time.Now()
		time.Sleep(50 * time.Millisecond)
		o.started = time.Now()
		if s.path == 1 {
			return errors.New("boom")
		}
		return nil
	})
	if len(outs) != len(slots) {
		t.Fatalf("%d outcomes, want %d", len(outs), len(slots))
	}
	for i, o := range outs {
		if o.slot != slots[i] || !o.due.Equal(start.Add(slots[i].offset)) {
			t.Errorf("outcome %d = slot %+v due %s, want slot %+v due %s", i, o.slot, o.due, slots[i], start.Add(slots[i].offset))
		}
		if o.sent.Before(o.due) {
			t.Errorf("outcome %d sent %s before it was due", i, o.due.Sub(o.sent))
		}
		if (o.err != nil) != (o.path == 1) {
			t.Errorf("outcome %d: err %v", i, o.err)
		}
	}
	// The third slot was due while the first was still running: sent on time, not after it.
	if lag := outs[2].sent.Sub(outs[2].due); lag > 30*time.Millisecond {
		t.Errorf("third slot sent %s late: the round waited for earlier starts (closed loop)", lag)
	}
	if got := maxInFlight(outs); got != 3 {
		t.Errorf("maxInFlight = %d, want 3", got)
	}
}

func TestRunRoundCancelled(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	slots := []slot{{offset: 0}, {offset: time.Hour}}
	outs := runRound(ctx, slots, time.Now(), func(context.Context, slot, *outcome) error {
		cancel()
		return nil
	})
	if len(outs) != 1 {
		t.Fatalf("%d outcomes after cancel, want the 1 sent", len(outs))
	}
}

func TestMaxInFlight(t *testing.T) {
	t.Parallel()
	at := func(ms int) time.Time { return time.Unix(0, 0).Add(time.Duration(ms) * time.Millisecond) }
	tests := []struct {
		name string
		outs []outcome
		want int
	}{
		{name: "none", want: 0},
		{name: "one after the other", outs: []outcome{{sent: at(0), started: at(10)}, {sent: at(10), started: at(20)}}, want: 1},
		{name: "overlapping", outs: []outcome{{sent: at(0), started: at(30)}, {sent: at(10), started: at(20)}, {sent: at(15), started: at(40)}}, want: 3},
		{name: "failed creates do not count", outs: []outcome{{sent: at(0)}, {sent: at(1), started: at(5)}}, want: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := maxInFlight(tt.outs); got != tt.want {
				t.Errorf("maxInFlight = %d, want %d", got, tt.want)
			}
		})
	}
}
