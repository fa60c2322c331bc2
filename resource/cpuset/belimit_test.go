package cpuset_test

import (
	"testing"

	tcpuset "github.com/tandemkit/tandem/resource/cpuset"
	"github.com/tandemkit/tandem/resource/qos"
)

// TestSetBELimit checks CPU suppression's cap on the BE pool: BE never gets LSE CPUs, keeps whole cores
// from the top of the shared pool, gives LSR CPUs back before shared ones, and never drops below one CPU.
func TestSetBELimit(t *testing.T) {
	t.Parallel()
	seed000 := []held{{"nginx-lse", qos.LSE, "0-1"}, {"nginx-lsr", qos.LSR, "2-3"}}
	tests := []struct {
		name        string
		tree        string
		held        []held
		limit       int
		wantBE      string
		wantChanged bool
	}{
		{name: "2-cpu host suppressed to one CPU", tree: tree2, limit: 1, wantBE: "1", wantChanged: true},
		{name: "2-cpu host, cap above the pool", tree: tree2, limit: 5, wantBE: "0-1"},
		{name: "zero lifts the cap", tree: tree2, limit: 0, wantBE: "0-1"},
		{name: "negative lifts the cap", tree: tree2, limit: -3, wantBE: "0-1"},
		// Koordinator's QoS example: BE is 2-15. Whole cores from the top: core 7 is {7,15}, core 6 is {6,14}.
		{name: "QoS example, four CPUs", tree: tree16, held: seed000, limit: 4, wantBE: "6-7,14-15", wantChanged: true},
		{name: "QoS example, odd count splits only the last core", tree: tree16, held: seed000, limit: 3, wantBE: "6-7,15", wantChanged: true},
		// The shared pool 4-15 holds 12 CPUs: with 13 BE keeps it and one LSR CPU, never an LSE one.
		{name: "QoS example, LSR CPUs last", tree: tree16, held: seed000, limit: 13, wantBE: "3-15", wantChanged: true},
		{name: "QoS example, cap equals the pool", tree: tree16, held: seed000, limit: 14, wantBE: "2-15"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a := newAllocator(t, discover(t, tt.tree), tcpuset.DefaultConfig())
			restoreAll(t, a, tt.held)
			before := a.Pools()
			if got := a.SetBELimit(tt.limit); got != tt.wantChanged {
				t.Errorf("SetBELimit(%d) reported change %v, want %v", tt.limit, got, tt.wantChanged)
			}
			p := a.Pools()
			if p.BE.String() != tt.wantBE {
				t.Errorf("BE pool = %q, want %q", p.BE.String(), tt.wantBE)
			}
			if !p.BE.Intersection(p.LSE).IsEmpty() {
				t.Errorf("BE pool %q overlaps LSE %q", p.BE.String(), p.LSE.String())
			}
			// Suppression only moves BE: the exclusive sets and the LS pool stay as they were.
			if !p.LS.Equals(before.LS) || !p.LSE.Equals(before.LSE) || !p.LSR.Equals(before.LSR) {
				t.Errorf("pools other than BE changed: before %+v, after %+v", before, p)
			}
		})
	}
}

// TestBELimitFollowsAllocations checks that the cap is a count that stays in force while exclusive CPUs
// come and go, and that the BE pool is never empty even when the cap is 1 and only one CPU is shared.
func TestBELimitFollowsAllocations(t *testing.T) {
	t.Parallel()
	a := newAllocator(t, discover(t, tree16), tcpuset.DefaultConfig())
	a.SetBELimit(2)
	if got := a.Pools().BE.String(); got != "7,15" {
		t.Fatalf("BE with cap 2 = %q, want 7,15", got)
	}
	if _, err := a.Allocate("big", qos.LSE, 15, tcpuset.FullPCPUs); err != nil {
		t.Fatal(err)
	}
	p := a.Pools()
	if p.BE.Size() != 1 || !p.BE.Intersection(p.LSE).IsEmpty() {
		t.Errorf("BE after LSE took 15 CPUs = %q (LSE %q), want the one shared CPU", p.BE.String(), p.LSE.String())
	}
	if a.SetBELimit(1) {
		t.Error("SetBELimit(1) reported a change although BE already had one CPU")
	}
	a.Release("big")
	if got := a.Pools().BE.String(); got != "7" {
		t.Errorf("BE after the release with cap 1 = %q, want 7", got)
	}
	if got := a.BELimit(); got != 1 {
		t.Errorf("BELimit() = %d, want 1", got)
	}
	if !a.SetBELimit(0) {
		t.Error("lifting the cap reported no change")
	}
	if got := a.Pools().BE.String(); got != "0-15" {
		t.Errorf("BE without cap = %q, want 0-15", got)
	}
}
