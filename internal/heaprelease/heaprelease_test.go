package heaprelease

import (
	"context"
	"runtime"
	"testing"
	"time"
)

func TestQuiet(t *testing.T) {
	const mib = 1 << 20
	base := Sample{Allocs: 100 * mib, Goal: 4 * mib, Live: 2 * mib, Held: 5 * mib}
	tests := []struct {
		name string
		cur  Sample
		want bool
	}{
		{"allocated a fraction of a goal, holds 3 MiB over live", Sample{Allocs: 101 * mib, Goal: 4 * mib, Live: 2 * mib, Held: 5 * mib}, true},
		{"allocated nothing", Sample{Allocs: 100 * mib, Goal: 4 * mib, Live: 2 * mib, Held: 5 * mib}, true},
		{"allocated a whole goal: busy", Sample{Allocs: 104 * mib, Goal: 4 * mib, Live: 2 * mib, Held: 5 * mib}, false},
		{"under load", Sample{Allocs: 400 * mib, Goal: 6 * mib, Live: 3 * mib, Held: 9 * mib}, false},
		{"holds less than MinRelease over live", Sample{Allocs: 101 * mib, Goal: 4 * mib, Live: 2 * mib, Held: 3*mib - 1}, false},
		{"holds exactly MinRelease over live", Sample{Allocs: 101 * mib, Goal: 4 * mib, Live: 2 * mib, Held: 3 * mib}, true},
		{"metrics not read", Sample{}, false},
		{"counter went backwards", Sample{Allocs: 50 * mib, Goal: 4 * mib, Live: 2 * mib, Held: 5 * mib}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Quiet(base, tt.cur); got != tt.want {
				t.Errorf("Quiet(%+v, %+v) = %v, want %v", base, tt.cur, got, tt.want)
			}
		})
	}
}

// sink keeps the burst's allocations from being optimised away.
var sink [][]byte

// burst leaves the heap holding n bytes that are no longer live, as a spell of calls does.
func burst(n int) {
	for range n / (32 << 10) {
		sink = append(sink, make([]byte, 32<<10))
	}
	sink = nil
	runtime.GC()
}

func TestStepGivesTheHeapBackWhenQuiet(t *testing.T) {
	const burstBytes = 64 << 20
	r := New(DefaultInterval)
	burst(burstBytes)
	if ok, _ := r.Step(); ok {
		t.Fatal("the first check released: it has no interval to judge yet")
	}
	before := Read()
	ok, given := r.Step()
	after := Read()
	if !ok {
		t.Fatalf("a quiet interval after a %d MiB burst did not release: before %+v", burstBytes>>20, before)
	}
	// The pages the burst left are back with the kernel: the heap holds about its live part again.
	if slack := uint64(8 << 20); after.Held > after.Live+slack {
		t.Errorf("after the release the heap still holds %d KiB with %d KiB live (before: %d KiB held)", after.Held>>10, after.Live>>10, before.Held>>10)
	}
	if given < burstBytes/2 {
		t.Errorf("released %d KiB, want at least half of the %d MiB burst", given>>10, burstBytes>>20)
	}
}

func TestStepLeavesABusyHeapAlone(t *testing.T) {
	r := New(DefaultInterval)
	r.Step()
	cycles := func() uint32 {
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.NumForcedGC
	}
	forced := cycles()
	// More than a heap goal allocated since the last check: the process is busy.
	for range 64 {
		sink = append(sink, make([]byte, 1<<20))
		sink = sink[:0]
	}
	if ok, _ := r.Step(); ok {
		t.Error("released while busy: the pages would be faulted in again at once")
	}
	if n := cycles(); n != forced {
		t.Errorf("%d forced collections while busy, want none", n-forced)
	}
}

func TestRunDisabled(t *testing.T) {
	// Disabled, Run returns at once without waiting for its context.
	for _, interval := range []time.Duration{0, -time.Second} {
		if err := New(interval).Run(context.Background()); err != nil {
			t.Errorf("Run with interval %v: %v", interval, err)
		}
	}
}
