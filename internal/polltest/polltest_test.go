package polltest

import (
	"sync/atomic"
	"testing"
	"time"
)

// recorder is a testing.TB that records a Fatalf instead of stopping the goroutine.
type recorder struct {
	testing.TB
	failed atomic.Bool
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(string, ...any) { r.failed.Store(true) }

func TestWithin(t *testing.T) {
	tests := []struct {
		name     string
		after    time.Duration // when the condition starts to hold; negative: never
		deadline time.Duration
		fail     bool
	}{
		{name: "holds at once", after: 0, deadline: time.Second},
		{name: "holds after a while", after: 30 * time.Millisecond, deadline: 5 * time.Second},
		{name: "never holds", after: -1, deadline: 50 * time.Millisecond, fail: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			cond := func() bool { return tt.after >= 0 && time.Since(start) >= tt.after }
			r := &recorder{TB: t}
			Within(r, tt.deadline, "the condition", cond)
			if r.failed.Load() != tt.fail {
				t.Fatalf("failed = %v, want %v", r.failed.Load(), tt.fail)
			}
			if !tt.fail && time.Since(start) >= tt.deadline {
				t.Fatalf("returned after %s, past its deadline %s", time.Since(start), tt.deadline)
			}
		})
	}
}
