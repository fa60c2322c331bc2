package reporter

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tandemkit/tandem/config/batchwindow"
)

// TestBatchWindow walks a node through a window that opens and closes: capacity is published at once
// when it opens, withdrawn (to the outside share) at the closing lead, and the Node says why.
func TestBatchWindow(t *testing.T) {
	h := newHarness(t, seed004(t, true), testNode())
	// t0 is 06:00 UTC. The window is 06:02-06:05, the lead 60 s, 20% outside.
	sch, err := batchwindow.New(batchwindow.Settings{Enable: true, TimeZone: "UTC", OutsideCapacityPercent: 20,
		StopPlacementBeforeCloseSeconds: 60, EvictionGraceSeconds: 30,
		Windows: []batchwindow.Window{{Name: "test", Start: "06:02", End: "06:05"}}})
	if err != nil {
		t.Fatal(err)
	}
	h.mu.Lock()
	h.window = sch
	h.mu.Unlock()
	outside := int64(steadyBatchCPU * 20 / 100)
	type seen struct {
		at    time.Duration
		cpu   int64
		phase batchwindow.Phase
		term  string
	}
	var got []seen
	for end := t0.Add(7 * time.Minute); h.clock.Now().Before(end); h.clock.Step(time.Second) {
		h.setSample(load{aCPU: 4000, bCPU: 3000}.sample(h.clock.Now()))
		if len(h.step()) == 0 {
			continue
		}
		n := h.node()
		cpu, _, _, _ := batch(n)
		var note CapacityNote
		if err := json.Unmarshal([]byte(n.Annotations[CapacityAnnotation]), &note); err != nil || note.Window == nil {
			t.Fatalf("%s = %q (%v): want the window state", CapacityAnnotation, n.Annotations[CapacityAnnotation], err)
		}
		got = append(got, seen{h.clock.Now().Sub(t0), cpu, note.Window.Phase, string(note.CPUTerm)})
		if note.Window.Phase.Limits() && (!strings.Contains(note.CPU, `batch window "test"`) || !strings.Contains(note.CPU, "20%")) {
			t.Errorf("cpu note while limited: %q", note.CPU)
		}
	}
	want := []seen{
		{0, outside, batchwindow.PhaseEvicting, "batchWindow"},
		{2 * time.Minute, steadyBatchCPU, batchwindow.PhaseOpen, "safety"},
		{4 * time.Minute, outside, batchwindow.PhaseClosing, "batchWindow"},
		{5 * time.Minute, outside, batchwindow.PhaseClosed, "batchWindow"},
		{5*time.Minute + 30*time.Second, outside, batchwindow.PhaseEvicting, "batchWindow"},
	}
	if len(got) != len(want) {
		t.Fatalf("writes %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("write %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	if v := testutil.ToFloat64(h.r.metrics.windowPhase.WithLabelValues("evicting")); v != 1 {
		t.Errorf("window phase evicting = %v", v)
	}
	st := h.r.CapacityStatus()
	if st.Window == nil || st.Batch == nil || st.ComputedBatch == nil || st.Batch.CPUMilli != outside || st.ComputedBatch.CPUMilli != steadyBatchCPU {
		t.Errorf("status: window %+v batch %+v computed %+v", st.Window, st.Batch, st.ComputedBatch)
	}
}

// TestClockFarOff: a node whose clock is beyond ClockTolerance from the API server's says so on the Node.
func TestClockFarOff(t *testing.T) {
	for _, tc := range []struct {
		offset time.Duration
		want   string
	}{
		{10 * time.Second, ""},
		{-3 * time.Minute, "3m0s ahead of the API server's"},
		{2 * time.Minute, "2m0s behind the API server's"},
	} {
		h := newHarness(t, seed004(t, true), testNode())
		h.offset = tc.offset
		h.setSample(load{aCPU: 4000, bCPU: 3000}.sample(h.clock.Now()))
		h.step()
		var note CapacityNote
		if err := json.Unmarshal([]byte(h.node().Annotations[CapacityAnnotation]), &note); err != nil {
			t.Fatal(err)
		}
		if tc.want == "" && note.Clock != "" || !strings.Contains(note.Clock, tc.want) {
			t.Errorf("offset %v: clock note %q, want %q", tc.offset, note.Clock, tc.want)
		}
		if got := testutil.ToFloat64(h.r.metrics.clockOffset); got != tc.offset.Seconds() {
			t.Errorf("offset gauge %v", got)
		}
	}
}
