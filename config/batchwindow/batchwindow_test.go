package batchwindow

import (
	"strings"
	"testing"
	"time"
)

func mustLoc(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

func mustNew(t *testing.T, s Settings) *Schedule {
	t.Helper()
	s.Enable = true
	sch, err := New(s)
	if err != nil {
		t.Fatal(err)
	}
	return sch
}

func TestState(t *testing.T) {
	sh := mustLoc(t, "Asia/Shanghai")
	ny := mustLoc(t, "America/New_York")
	at := func(loc *time.Location, y int, m time.Month, d, hh, mm int) time.Time {
		return time.Date(y, m, d, hh, mm, 0, 0, loc)
	}
	night := Settings{TimeZone: "Asia/Shanghai", Windows: []Window{{Name: "night", Days: []string{"Mon", "Tue", "Wed", "Thu", "Fri"}, Start: "22:00", End: "07:00"}},
		StopPlacementBeforeCloseSeconds: 1800, EvictionGraceSeconds: 600}
	// 2026-12-07 is a Monday.
	cases := []struct {
		name      string
		set       Settings
		now       time.Time
		phase     Phase
		window    string
		next      time.Time
		closedAt  time.Time
		noNext    bool
		noClosed  bool
		outsidePc int64
	}{
		{name: "monday evening inside", set: night, now: at(sh, 2026, 12, 7, 23, 0), phase: PhaseOpen, window: "night",
			next: at(sh, 2026, 12, 8, 7, 0)},
		{name: "across midnight the morning belongs to the day before", set: night, now: at(sh, 2026, 12, 8, 3, 0), phase: PhaseOpen,
			window: "night", next: at(sh, 2026, 12, 8, 7, 0)},
		{name: "in the lead before the close", set: night, now: at(sh, 2026, 12, 8, 6, 31), phase: PhaseClosing, window: "night",
			next: at(sh, 2026, 12, 8, 7, 0)},
		{name: "just closed: grace", set: night, now: at(sh, 2026, 12, 8, 7, 5), phase: PhaseClosed, window: "night",
			next: at(sh, 2026, 12, 8, 22, 0), closedAt: at(sh, 2026, 12, 8, 7, 0)},
		{name: "grace passed", set: night, now: at(sh, 2026, 12, 8, 7, 10), phase: PhaseEvicting, window: "night",
			next: at(sh, 2026, 12, 8, 22, 0), closedAt: at(sh, 2026, 12, 8, 7, 0)},
		{name: "saturday morning still belongs to friday night", set: night, now: at(sh, 2026, 12, 12, 6, 0), phase: PhaseOpen,
			window: "night", next: at(sh, 2026, 12, 12, 7, 0)},
		{name: "saturday night is not a window: next opens monday", set: night, now: at(sh, 2026, 12, 12, 23, 0), phase: PhaseEvicting,
			window: "night", next: at(sh, 2026, 12, 14, 22, 0), closedAt: at(sh, 2026, 12, 12, 7, 0)},
		{name: "sunday morning: friday's window closed saturday", set: night, now: at(sh, 2026, 12, 13, 3, 0), phase: PhaseEvicting,
			window: "night", next: at(sh, 2026, 12, 14, 22, 0), closedAt: at(sh, 2026, 12, 12, 7, 0)},
		{name: "the same instant read in another zone", set: night, now: at(sh, 2026, 12, 7, 23, 0).UTC(), phase: PhaseOpen, window: "night",
			next: at(sh, 2026, 12, 8, 7, 0)},
		{name: "overlapping windows close with the last", now: at(sh, 2026, 12, 7, 21, 0), phase: PhaseOpen, window: "early",
			set:  Settings{TimeZone: "Asia/Shanghai", Windows: []Window{{Name: "early", Start: "20:00", End: "23:00"}, {Name: "late", Start: "22:00", End: "02:00"}}},
			next: at(sh, 2026, 12, 8, 2, 0)},
		{name: "overlap: the first open window names the state", now: at(sh, 2026, 12, 7, 22, 30), phase: PhaseOpen, window: "early",
			set:  Settings{TimeZone: "Asia/Shanghai", Windows: []Window{{Name: "early", Start: "20:00", End: "23:00"}, {Name: "late", Start: "22:00", End: "02:00"}}},
			next: at(sh, 2026, 12, 8, 2, 0)},
		{name: "overlap: closed names the last to close", now: at(sh, 2026, 12, 8, 2, 30), phase: PhaseEvicting, window: "late",
			set:  Settings{TimeZone: "Asia/Shanghai", Windows: []Window{{Name: "early", Start: "20:00", End: "23:00"}, {Name: "late", Start: "22:00", End: "02:00"}}},
			next: at(sh, 2026, 12, 8, 20, 0), closedAt: at(sh, 2026, 12, 8, 2, 0)},
		{name: "whole day every day: always open", now: at(sh, 2026, 12, 7, 12, 0), phase: PhaseOpen, window: "all", noNext: true,
			set: Settings{Windows: []Window{{Name: "all", Start: "00:00", End: "24:00"}}}},
		{name: "no window: never open", now: at(sh, 2026, 12, 7, 12, 0), phase: PhaseEvicting, noNext: true, noClosed: true,
			set: Settings{OutsideCapacityPercent: 25}, outsidePc: 25},
		// America/New_York moves 02:00 EST to 03:00 EDT on 2026-03-08 (a Sunday).
		{name: "spring forward: a window starting in the skipped hour opens when the clock jumps past it",
			set: Settings{TimeZone: "America/New_York", Windows: []Window{{Name: "n", Start: "02:30", End: "04:00"}}},
			now: time.Date(2026, 3, 8, 6, 59, 0, 0, time.UTC) /* 01:59 EST */, phase: PhaseEvicting, window: "n",
			next: time.Date(2026, 3, 8, 7, 0, 0, 0, time.UTC) /* 03:00 EDT */, closedAt: at(ny, 2026, 3, 7, 4, 0)},
		{name: "spring forward: the night is an hour shorter",
			set: Settings{TimeZone: "America/New_York", Windows: []Window{{Name: "n", Start: "22:00", End: "07:00"}}},
			now: at(ny, 2026, 3, 7, 22, 0), phase: PhaseOpen, window: "n", next: at(ny, 2026, 3, 8, 7, 0)},
		// It moves 02:00 EDT back to 01:00 EST on 2026-11-01.
		{name: "fall back: a window over the repeated hour is open in its second pass",
			set: Settings{TimeZone: "America/New_York", Windows: []Window{{Name: "n", Start: "01:00", End: "02:00"}}},
			now: time.Date(2026, 11, 1, 6, 30, 0, 0, time.UTC) /* 01:30 EST, the second pass */, phase: PhaseOpen, window: "n",
			next: time.Date(2026, 11, 1, 7, 0, 0, 0, time.UTC) /* 02:00 EST */},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := mustNew(t, tc.set).State(tc.now)
			if st.Phase != tc.phase || st.Window != tc.window {
				t.Errorf("phase %q window %q, want %q %q", st.Phase, st.Window, tc.phase, tc.window)
			}
			if tc.noNext != st.Next.IsZero() || !tc.noNext && !st.Next.Equal(tc.next) {
				t.Errorf("next %v, want %v (none: %v)", st.Next, tc.next, tc.noNext)
			}
			wantClosed := tc.phase == PhaseClosed || tc.phase == PhaseEvicting
			if wantClosed && (tc.noClosed != st.ClosedAt.IsZero() || !tc.noClosed && !st.ClosedAt.Equal(tc.closedAt)) {
				t.Errorf("closedAt %v, want %v", st.ClosedAt, tc.closedAt)
			}
			if st.OutsidePercent != tc.outsidePc {
				t.Errorf("outside %d, want %d", st.OutsidePercent, tc.outsidePc)
			}
		})
	}
}

// TestFallBackTwoHours: a window over the repeated hour lasts two real hours, from 01:00 EDT to 02:00 EST.
func TestFallBackTwoHours(t *testing.T) {
	sch := mustNew(t, Settings{TimeZone: "America/New_York", Windows: []Window{{Name: "n", Start: "01:00", End: "02:00"}}})
	opened := time.Date(2026, 11, 1, 5, 0, 0, 0, time.UTC) // 01:00 EDT
	if st := sch.State(opened); st.Phase != PhaseOpen || !st.Next.Equal(time.Date(2026, 11, 1, 7, 0, 0, 0, time.UTC)) {
		t.Fatalf("at 01:00 EDT: %+v, want open until 07:00 UTC", st)
	}
	if st := sch.State(opened.Add(-time.Minute)); st.Phase == PhaseOpen {
		t.Fatalf("at 00:59 EDT: open")
	}
}

// TestStateIsCachedAndMoves walks a day in steps and checks every answer against a fresh schedule: the
// cache must never answer for a span it does not hold.
func TestStateIsCachedAndMoves(t *testing.T) {
	set := Settings{TimeZone: "Europe/Berlin", Windows: []Window{{Name: "a", Start: "01:00", End: "03:30"}, {Name: "b", Days: []string{"sunday"}, Start: "12:00", End: "12:01"}},
		StopPlacementBeforeCloseSeconds: 90, EvictionGraceSeconds: 30}
	cached := mustNew(t, set)
	start := time.Date(2026, 3, 28, 20, 0, 0, 0, time.UTC) // across Berlin's spring change
	for t0 := start; t0.Before(start.Add(48 * time.Hour)); t0 = t0.Add(17 * time.Second) {
		got, want := cached.State(t0), mustNew(t, set).State(t0)
		if got.Phase != want.Phase || !got.Next.Equal(want.Next) || !got.ClosedAt.Equal(want.ClosedAt) || got.Window != want.Window {
			t.Fatalf("at %v: cached %+v, fresh %+v", t0, got, want)
		}
	}
}

func TestDisabled(t *testing.T) {
	sch, err := New(Settings{Windows: []Window{{Start: "01:00", End: "02:00"}}})
	if err != nil {
		t.Fatal(err)
	}
	if st := sch.State(time.Now()); st.Phase != PhaseNone || st.Phase.Limits() {
		t.Fatalf("disabled: %+v", st)
	}
}

func TestNewRefuses(t *testing.T) {
	cases := []struct {
		name string
		set  Settings
		want []string
	}{
		{"bad zone", Settings{TimeZone: "Mars/Olympus"}, []string{"timeZone", "IANA"}},
		{"bad day", Settings{Windows: []Window{{Days: []string{"Mo"}, Start: "01:00", End: "02:00"}}}, []string{"windows[0].days", "\"Mo\""}},
		{"bad start", Settings{Windows: []Window{{Start: "1:00", End: "02:00"}}}, []string{"windows[0].start", "HH:MM"}},
		{"24:00 is an end only", Settings{Windows: []Window{{Start: "24:00", End: "02:00"}}}, []string{"start", "23:59"}},
		{"empty window", Settings{Windows: []Window{{Start: "02:00", End: "02:00"}}}, []string{"whole day"}},
		{"names twice", Settings{Windows: []Window{{Name: "x", Start: "01:00", End: "02:00"}, {Name: "x", Start: "03:00", End: "04:00"}}}, []string{"windows[1].name", "twice"}},
		{"percent", Settings{OutsideCapacityPercent: 101}, []string{"outsideCapacityPercent"}},
		{"negative", Settings{StopPlacementBeforeCloseSeconds: -1, EvictionGraceSeconds: -1}, []string{"stopPlacementBeforeCloseSeconds", "evictionGraceSeconds"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.set)
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

func BenchmarkState(b *testing.B) {
	sch, err := New(Settings{Enable: true, TimeZone: "Asia/Shanghai", Windows: []Window{{Name: "night", Start: "22:00", End: "07:00"}}})
	if err != nil {
		b.Fatal(err)
	}
	now := time.Now()
	b.Run("cached", func(b *testing.B) {
		for b.Loop() {
			sch.State(now)
		}
	})
	b.Run("walk", func(b *testing.B) {
		for b.Loop() {
			sch.walk(now)
		}
	})
}
