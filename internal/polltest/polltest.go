// Package polltest is the one way Tandem's unit tests wait for something that happens on another
// goroutine or in the kernel: they poll a condition until it holds or a deadline passes, rather than
// sleeping a fixed time, so a fast machine does not wait and a slow one (the race detector on two
// cores) does not fail.
package polltest

import (
	"testing"
	"time"
)

// Timeout is how long Until waits. It is long because it only bounds a failing test: a passing one
// returns as soon as its condition holds.
const Timeout = 10 * time.Second

// interval is short enough that a test waits at most a few milliseconds past the moment its
// condition holds, and long enough not to starve the goroutine it waits for on a two-core machine.
const interval = 5 * time.Millisecond

// Until fails the test if cond does not hold within Timeout; what names the awaited state in the
// failure message ("the clamp lifted").
func Until(t testing.TB, what string, cond func() bool) {
	t.Helper()
	Within(t, Timeout, what, cond)
}

// Within is Until with its own deadline, for a test that asserts something happens in time (a loop
// that must react within one period).
func Within(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
			return // for a testing.TB whose Fatalf returns
		}
		time.Sleep(interval)
	}
}
