// Package batchwindow decides, from the node's clock, whether batch work may use a node: weekly windows
// in a time zone (batch-window-config), and what a node does around them. Outside every window a node
// publishes only outsideCapacityPercent of its batch capacity; stopPlacementBeforeCloseSeconds before a
// window closes it already does, so that no batch pod is placed there that would have to leave at once;
// evictionGraceSeconds after the close the batch pods that do not fit what remains are evicted.
//
// Windows follow the wall clock of their time zone, as a cron line or a shift plan does: a window is
// open whenever the local clock shows a time inside it on one of its days. So on the night a daylight
// saving change moves the clock forward, a window 22:00-07:00 is one hour shorter and one starting in
// the skipped hour opens when the clock jumps past its start; when the clock moves back, a window
// covering the repeated hour is open for both passes of it. A window whose end is not after its start
// crosses midnight and belongs to the day it starts on. Overlapping windows are one window: the node
// is open while any of them is, and it closes when the last one does.
package batchwindow

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Settings is batch-window-config as the operator writes it.
type Settings struct {
	// Enable turns the windows on; off, batch capacity is published at any time, as without this section.
	Enable bool `json:"enable"`
	// TimeZone is an IANA zone name ("Asia/Shanghai"); "" and "Local" are the node's own zone, "UTC" is UTC.
	TimeZone string `json:"timeZone"`
	// Windows are the times batch may run; none means never.
	Windows []Window `json:"windows"`
	// OutsideCapacityPercent is the share of the computed batch capacity a node publishes outside the
	// windows (and in the closing lead), 0-100; 0 by default: no batch at all.
	OutsideCapacityPercent int64 `json:"outsideCapacityPercent"`
	// StopPlacementBeforeCloseSeconds is how long before a window closes the node stops taking new batch
	// pods (it publishes what it publishes outside). 0 by default.
	StopPlacementBeforeCloseSeconds int64 `json:"stopPlacementBeforeCloseSeconds"`
	// EvictionGraceSeconds is how long after a window closes batch pods may still finish before those
	// that do not fit the outside capacity are evicted. 600 by default.
	EvictionGraceSeconds int64 `json:"evictionGraceSeconds"`
}

// Window is one weekly window.
type Window struct {
	// Name names the window in Events and on the Node; "" is "window <index>".
	Name string `json:"name"`
	// Days are the days the window starts on ("Mon" or "Monday", any case); none means every day.
	Days []string `json:"days"`
	// Start and End are local times, "HH:MM"; End may be "24:00". An End not after Start crosses midnight.
	Start string `json:"start"`
	End   string `json:"end"`
}

// Defaults returns the values a section that writes nothing has.
func Defaults() Settings { return Settings{EvictionGraceSeconds: 600} }

// Phase is where a node stands against its windows.
type Phase string

// The phases, in the order a window passes through them.
const (
	// PhaseNone: windows are off; batch capacity is published as computed.
	PhaseNone Phase = ""
	// PhaseOpen: inside a window; batch capacity is published as computed.
	PhaseOpen Phase = "open"
	// PhaseClosing: inside a window that closes within stopPlacementBeforeCloseSeconds; the outside
	// capacity is published, so no new batch pod that would not fit it is placed.
	PhaseClosing Phase = "closing"
	// PhaseClosed: outside every window, within the eviction grace; batch pods that run may finish.
	PhaseClosed Phase = "closed"
	// PhaseEvicting: outside every window and past the grace; batch pods that do not fit the outside
	// capacity are evicted.
	PhaseEvicting Phase = "evicting"
)

// Limits reports whether batch capacity is held to the outside share in this phase.
func (p Phase) Limits() bool { return p == PhaseClosing || p == PhaseClosed || p == PhaseEvicting }

// State is the node's standing at one instant.
type State struct {
	Phase Phase `json:"phase,omitempty"`
	// Window names the window open now (the first in the list when several are), or the one that
	// closed last; "" when none.
	Window string `json:"window,omitempty"`
	// Next is the next change between inside and outside: the close while open, the next opening while
	// closed; zero when there is none within a week (always open, never open).
	Next time.Time `json:"next,omitzero"`
	// ClosedAt is when the last window closed, while closed; zero when none closed within a week.
	ClosedAt time.Time `json:"closedAt,omitzero"`
	// OutsidePercent is the share of batch capacity published while Phase.Limits().
	OutsidePercent int64 `json:"outsidePercent"`
	// Describe is the windows in words, for Events and the Node ("night 22:00-07:00 Mon-Fri Asia/Shanghai").
	Describe string `json:"describe,omitempty"`
}

// Schedule is Settings checked and ready to answer State. It is safe for concurrent use.
type Schedule struct {
	set     Settings
	loc     *time.Location
	windows []window

	// cache keeps the last span between two changes, so that State costs a few comparisons until the
	// next change instead of a week's walk minute by minute.
	mu    sync.Mutex
	cache span
}

// span is a stretch of time over which inside-or-outside does not change.
type span struct {
	valid      bool
	from, to   time.Time // from: the last change (zero: none within a week); to: the next one
	open       bool
	name       string // the window open during the span, or the last to close before it
	unboundedF bool   // no change within a week before
	unboundedT bool   // no change within a week after
}

type window struct {
	name       string
	days       [7]bool // by time.Weekday
	start, end int     // minutes since midnight; end may be 1440
}

// horizon is how far State looks for a change: a weekly schedule that does not change within eight
// days never changes.
const horizon = 8 * 24 * time.Hour

// FieldError is one bad field: its path below the section ("windows[0].start") and what is wrong.
type FieldError struct {
	Path    string
	Message string
}

func (e *FieldError) Error() string { return e.Path + ": " + e.Message }

// fields collects FieldErrors.
type fields []error

func (f *fields) fail(path, format string, args ...any) {
	*f = append(*f, &FieldError{Path: path, Message: fmt.Sprintf(format, args...)})
}

// New checks s and returns its Schedule; the error joins a *FieldError for every bad field.
func New(s Settings) (*Schedule, error) {
	var errs fields
	loc, err := location(s.TimeZone)
	if err != nil {
		errs.fail("timeZone", "%v", err)
	}
	if s.OutsideCapacityPercent < 0 || s.OutsideCapacityPercent > 100 {
		errs.fail("outsideCapacityPercent", "%d is not a percentage; use 0 to 100", s.OutsideCapacityPercent)
	}
	if s.StopPlacementBeforeCloseSeconds < 0 {
		errs.fail("stopPlacementBeforeCloseSeconds", "%d is negative", s.StopPlacementBeforeCloseSeconds)
	}
	if s.EvictionGraceSeconds < 0 {
		errs.fail("evictionGraceSeconds", "%d is negative", s.EvictionGraceSeconds)
	}
	sch := &Schedule{set: s, loc: loc}
	names := map[string]bool{}
	for i, w := range s.Windows {
		at := fmt.Sprintf("windows[%d]", i)
		pw, ok := parseWindow(at, w, &errs)
		if !ok {
			continue
		}
		if pw.name == "" {
			pw.name = fmt.Sprintf("window %d", i)
		}
		if names[pw.name] {
			errs.fail(at+".name", "%q is used twice; names tell windows apart in Events", pw.name)
		}
		names[pw.name] = true
		sch.windows = append(sch.windows, pw)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return sch, nil
}

// Validate reports every bad field of s, as New does.
func (s Settings) Validate() error {
	_, err := New(s)
	return err
}

func location(name string) (*time.Location, error) {
	switch name {
	case "", "Local":
		return time.Local, nil
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("%q is not an IANA time zone (write one such as \"Asia/Shanghai\" or \"UTC\"): %w", name, err)
	}
	return loc, nil
}

// weekday reads "Mon" or "Monday" in any case.
func weekday(s string) (time.Weekday, bool) {
	s = strings.ToLower(strings.TrimSpace(s))
	for d := time.Sunday; d <= time.Saturday; d++ {
		if name := strings.ToLower(d.String()); s == name || s == name[:3] {
			return d, true
		}
	}
	return 0, false
}

func parseWindow(at string, w Window, errs *fields) (window, bool) {
	out := window{name: w.Name}
	n := len(*errs)
	if len(w.Days) == 0 {
		for d := range out.days {
			out.days[d] = true
		}
	}
	for _, d := range w.Days {
		wd, ok := weekday(d)
		if !ok {
			errs.fail(at+".days", "%q is not a day; write Mon, Tue, ... or Monday, Tuesday, ...", d)
			continue
		}
		out.days[wd] = true
	}
	var err error
	if out.start, err = clock(w.Start, false); err != nil {
		errs.fail(at+".start", "%v", err)
	}
	if out.end, err = clock(w.End, true); err != nil {
		errs.fail(at+".end", "%v", err)
	}
	if len(*errs) == n && out.start == out.end {
		errs.fail(at, "start and end are both %s: write 00:00 to 24:00 for a whole day", w.Start)
	}
	return out, len(*errs) == n
}

// clock reads "HH:MM" as minutes since midnight; "24:00" only where allowed.
func clock(s string, end bool) (int, error) {
	hh, mm, ok := strings.Cut(s, ":")
	h, err1 := strconv.Atoi(hh)
	m, err2 := strconv.Atoi(mm)
	if !ok || err1 != nil || err2 != nil || len(hh) != 2 || len(mm) != 2 || h < 0 || m < 0 || m > 59 || h > 24 || (h == 24 && (m != 0 || !end)) {
		if end {
			return 0, fmt.Errorf("%q is not a time of day; write HH:MM from 00:00 to 24:00", s)
		}
		return 0, fmt.Errorf("%q is not a time of day; write HH:MM from 00:00 to 23:59", s)
	}
	return h*60 + m, nil
}

// Settings returns what the schedule was built from.
func (s *Schedule) Settings() Settings { return s.set }

// openAt reports which window is open at t (the first in the list), "" and false when none is.
func (s *Schedule) openAt(t time.Time) (string, bool) {
	lt := t.In(s.loc)
	tod := lt.Hour()*60 + lt.Minute()
	day := lt.Weekday()
	prev := (day + 6) % 7
	for _, w := range s.windows {
		if w.start < w.end {
			if w.days[day] && tod >= w.start && tod < w.end {
				return w.name, true
			}
			continue
		}
		// Across midnight: the evening belongs to its day, the morning to the day before.
		if (w.days[day] && tod >= w.start) || (w.days[prev] && tod < w.end) {
			return w.name, true
		}
	}
	return "", false
}

// State returns the node's standing at now.
func (s *Schedule) State(now time.Time) State {
	if !s.set.Enable {
		return State{}
	}
	sp := s.spanAt(now)
	st := State{Window: sp.name, OutsidePercent: s.set.OutsideCapacityPercent, Describe: s.Describe()}
	if !sp.unboundedT {
		st.Next = sp.to
	}
	if sp.open {
		st.Phase = PhaseOpen
		lead := time.Duration(s.set.StopPlacementBeforeCloseSeconds) * time.Second
		if !sp.unboundedT && sp.to.Sub(now) <= lead {
			st.Phase = PhaseClosing
		}
		return st
	}
	st.Phase = PhaseEvicting
	if !sp.unboundedF {
		st.ClosedAt = sp.from
		if now.Sub(sp.from) < time.Duration(s.set.EvictionGraceSeconds)*time.Second {
			st.Phase = PhaseClosed
		}
	}
	return st
}

// spanAt finds the span holding now, from the cache when it does.
func (s *Schedule) spanAt(now time.Time) span {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.cache
	if c.valid && (c.unboundedF || !now.Before(c.from)) && (c.unboundedT || now.Before(c.to)) {
		return c
	}
	s.cache = s.walk(now)
	return s.cache
}

// walk steps minute by minute away from now in both directions to the nearest changes. Windows are
// written in whole minutes and every zone's offset changes on a whole minute, so inside-or-outside
// changes only on a minute boundary.
func (s *Schedule) walk(now time.Time) span {
	name, open := s.openAt(now)
	sp := span{valid: true, open: open, name: name}
	base := now.Truncate(time.Minute)
	sp.unboundedT = true
	for t := base.Add(time.Minute); t.Sub(base) <= horizon; t = t.Add(time.Minute) {
		if _, o := s.openAt(t); o != open {
			sp.to, sp.unboundedT = t, false
			break
		}
	}
	sp.unboundedF = true
	for t := base.Add(-time.Minute); base.Sub(t) <= horizon; t = t.Add(-time.Minute) {
		n, o := s.openAt(t)
		if o != open {
			sp.from, sp.unboundedF = t.Add(time.Minute), false
			if !open {
				sp.name = n // the window that closed last
			}
			break
		}
	}
	return sp
}

// Describe is the windows in words: "night 22:00-07:00 Mon-Fri, weekend 00:00-24:00 Sat,Sun (Asia/Shanghai)".
func (s *Schedule) Describe() string {
	parts := make([]string, 0, len(s.windows))
	for i, w := range s.windows {
		raw := s.set.Windows[i]
		days := "every day"
		if len(raw.Days) > 0 {
			days = strings.Join(raw.Days, ",")
		}
		parts = append(parts, fmt.Sprintf("%s %s-%s %s", w.name, raw.Start, raw.End, days))
	}
	if len(parts) == 0 {
		parts = []string{"no window"}
	}
	return strings.Join(parts, "; ") + " (" + s.loc.String() + ")"
}
