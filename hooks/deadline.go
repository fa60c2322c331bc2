package hooks

import (
	"context"
	"sync"
	"time"
)

// deadlines bounds hook calls with one timer for all the calls in flight, where context.WithTimeout
// arms a timer per call. A new timer that fires before the one an idle Go scheduler sleeps until wakes
// the thread parked in the network poller, so every hook call paid one more thread wake-up: measured
// across processes on two shared CPUs, 7–10 µs per call (see docs/hooks.md, Benchmark). Hooks almost
// always share one timeout, so their deadlines arrive in order and the timer, once armed, is moved only
// when it fires.
type deadlines struct {
	mu       sync.Mutex
	inFlight []*deadlineCtx
	timer    *time.Timer
	// next is when timer fires; zero when it is not armed.
	next time.Time
}

// start returns a context that ends at now+timeout (now is the call's start, which the caller has read
// already), or when parent ends; stop must be called when the call returns, and releases it.
func (w *deadlines) start(parent context.Context, now time.Time, timeout time.Duration) (*deadlineCtx, func()) {
	inner, cancel := context.WithCancelCause(parent)
	c := &deadlineCtx{Context: inner, cancel: cancel, deadline: now.Add(timeout)}
	w.mu.Lock()
	c.index = len(w.inFlight)
	w.inFlight = append(w.inFlight, c)
	if w.next.IsZero() || c.deadline.Before(w.next) {
		w.arm(c.deadline)
	}
	w.mu.Unlock()
	return c, func() {
		w.mu.Lock()
		w.remove(c)
		w.mu.Unlock()
		cancel(context.Canceled)
	}
}

// arm sets the timer to fire at t. Called with mu held.
func (w *deadlines) arm(t time.Time) {
	w.next = t
	if w.timer == nil {
		w.timer = time.AfterFunc(time.Until(t), w.expire)
		return
	}
	w.timer.Reset(time.Until(t))
}

// remove takes c out of inFlight; a second remove is a no-op. Called with mu held.
func (w *deadlines) remove(c *deadlineCtx) {
	i := c.index
	if i < 0 {
		return
	}
	last := len(w.inFlight) - 1
	w.inFlight[i] = w.inFlight[last]
	w.inFlight[i].index = i
	w.inFlight[last] = nil
	w.inFlight = w.inFlight[:last]
	c.index = -1
}

// expire ends the calls past their deadline and sets the timer for the earliest one left.
func (w *deadlines) expire() {
	now := time.Now()
	var expired []*deadlineCtx
	w.mu.Lock()
	var next time.Time
	for i := 0; i < len(w.inFlight); {
		c := w.inFlight[i]
		if !c.deadline.After(now) {
			expired = append(expired, c)
			w.remove(c)
			continue
		}
		if next.IsZero() || c.deadline.Before(next) {
			next = c.deadline
		}
		i++
	}
	w.next = time.Time{}
	if !next.IsZero() {
		w.arm(next)
	}
	w.mu.Unlock()
	for _, c := range expired {
		c.cancel(context.DeadlineExceeded)
	}
}

// inFlightCount is how many calls are being timed, for tests: it must fall to zero when calls end.
func (w *deadlines) inFlightCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.inFlight)
}

// deadlineCtx is a hook call's context. It behaves as context.WithTimeout's does: Deadline reports the
// deadline and Err is context.DeadlineExceeded once it passed, so hooks and the gRPC client (which sends
// the remaining time to hook servers as grpc-timeout) see no difference. A context derived from it with
// context.WithCancel reports context.Canceled instead, with context.DeadlineExceeded as its cause.
type deadlineCtx struct {
	context.Context
	cancel   context.CancelCauseFunc
	deadline time.Time
	// index is the position in deadlines.inFlight, -1 once removed; guarded by deadlines.mu.
	index int
}

func (c *deadlineCtx) Deadline() (time.Time, bool) {
	if d, ok := c.Context.Deadline(); ok && d.Before(c.deadline) {
		return d, true
	}
	return c.deadline, true
}

func (c *deadlineCtx) Err() error {
	err := c.Context.Err()
	if err != nil && context.Cause(c.Context) == context.DeadlineExceeded {
		return context.DeadlineExceeded
	}
	return err
}
