package hooks

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

func TestDeadlinesEndCalls(t *testing.T) {
	tests := []struct {
		name string
		// parent returns the caller's context and a func that ends it (nil: it does not end).
		parent  func() (context.Context, func())
		timeout time.Duration
		// stopEarly releases the call before anything ends it.
		stopEarly bool
		wantErr   error
		wantCause error
	}{
		{name: "deadline passes", parent: background, timeout: 20 * time.Millisecond,
			wantErr: context.DeadlineExceeded, wantCause: context.DeadlineExceeded},
		{name: "caller cancels first", timeout: time.Hour, parent: func() (context.Context, func()) {
			ctx, cancel := context.WithCancel(context.Background())
			return ctx, cancel
		}, wantErr: context.Canceled, wantCause: context.Canceled},
		{name: "caller's own deadline comes first", timeout: time.Hour, parent: func() (context.Context, func()) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
			return ctx, func() { <-ctx.Done(); cancel() }
		}, wantErr: context.DeadlineExceeded, wantCause: context.DeadlineExceeded},
		{name: "call returns in time", parent: background, timeout: time.Hour, stopEarly: true,
			wantErr: context.Canceled, wantCause: context.Canceled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var w deadlines
			parent, end := tt.parent()
			start := time.Now()
			ctx, stop := w.start(parent, time.Now(), tt.timeout)
			if tt.stopEarly {
				stop()
			}
			if end != nil {
				end()
			}
			select {
			case <-ctx.Done():
			case <-time.After(10 * time.Second):
				t.Fatal("the call's context never ended")
			}
			if !tt.stopEarly && tt.wantErr == context.DeadlineExceeded && time.Since(start) < 20*time.Millisecond {
				t.Fatalf("ended after %v, before its deadline", time.Since(start))
			}
			if err := ctx.Err(); err != tt.wantErr {
				t.Fatalf("Err() = %v, want %v", err, tt.wantErr)
			}
			if cause := context.Cause(ctx); !errors.Is(cause, tt.wantCause) {
				t.Fatalf("Cause() = %v, want %v", cause, tt.wantCause)
			}
			stop()
			if n := w.inFlightCount(); n != 0 {
				t.Fatalf("%d calls still timed after they ended", n)
			}
		})
	}
}

func background() (context.Context, func()) { return context.Background(), nil }

func TestDeadlineReportsTheEarlierDeadline(t *testing.T) {
	var w deadlines
	ctx, stop := w.start(context.Background(), time.Now(), time.Minute)
	defer stop()
	d, ok := ctx.Deadline()
	if !ok || time.Until(d) > time.Minute || time.Until(d) < 50*time.Second {
		t.Fatalf("Deadline() = %v, %v; want about a minute from now", d, ok)
	}
	parent, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	ctx2, stop2 := w.start(parent, time.Now(), time.Minute)
	defer stop2()
	want, _ := parent.Deadline()
	if d, ok := ctx2.Deadline(); !ok || !d.Equal(want) {
		t.Fatalf("Deadline() = %v, %v; want the caller's earlier %v", d, ok, want)
	}
}

// A short timeout after a long one must not wait for the long one's timer.
func TestDeadlinesShorterTimeoutAfterLonger(t *testing.T) {
	var w deadlines
	long, stopLong := w.start(context.Background(), time.Now(), time.Hour)
	defer stopLong()
	short, stopShort := w.start(context.Background(), time.Now(), 20*time.Millisecond)
	defer stopShort()
	select {
	case <-short.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the 20ms call did not end: the timer stayed on the 1h call")
	}
	if long.Err() != nil {
		t.Fatalf("the 1h call ended with the 20ms one: %v", long.Err())
	}
	if n := w.inFlightCount(); n != 1 {
		t.Fatalf("%d calls timed, want 1 (the 1h call)", n)
	}
}

// Calls with one timeout, one after another as kubelet makes them, share the timer: it is set once,
// not per call, which is what spares the scheduler a wake-up per call.
func TestDeadlinesArmTheTimerOnce(t *testing.T) {
	var w deadlines
	for range 1000 {
		_, stop := w.start(context.Background(), time.Now(), time.Hour)
		stop()
	}
	w.mu.Lock()
	next := w.next
	w.mu.Unlock()
	if d := time.Until(next); d > time.Hour || d < 59*time.Minute {
		t.Fatalf("the timer fires in %v; want the first call's deadline, about an hour away", d)
	}
	if n := w.inFlightCount(); n != 0 {
		t.Fatalf("%d calls still timed after they ended", n)
	}
}

// Many calls at once, some outliving their deadline: each ends by its own deadline, none is ended by
// another's, and none stays behind.
func TestDeadlinesConcurrentCalls(t *testing.T) {
	var w deadlines
	var wg sync.WaitGroup
	errs := make(chan error, 200)
	for i := range 200 {
		wg.Go(func() {
			timeout := time.Duration(1+i%7) * 5 * time.Millisecond
			if i%2 == 0 {
				timeout = time.Hour
			}
			start := time.Now()
			ctx, stop := w.start(context.Background(), time.Now(), timeout)
			defer stop()
			if i%2 == 0 {
				// Returns in time.
				if err := ctx.Err(); err != nil {
					errs <- err
				}
				return
			}
			<-ctx.Done()
			if took := time.Since(start); took < timeout {
				errs <- errors.New("ended before its deadline: " + took.String())
			}
			if ctx.Err() != context.DeadlineExceeded {
				errs <- ctx.Err()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := w.inFlightCount(); n != 0 {
		t.Fatalf("%d calls still timed after they ended", n)
	}
}
