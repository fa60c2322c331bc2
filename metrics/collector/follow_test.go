package collector

import (
	"context"
	"sync"
	"testing"
	"time"
)

func TestFollow(t *testing.T) {
	t0 := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		// snaps are what latest returns at each look, in turn; nil is no snapshot yet.
		snaps []*Snapshot
		// interval is long unless the test relies on the ticker.
		interval time.Duration
		signal   bool
		want     []time.Time
	}{
		{name: "each new snapshot once, woken by updates", signal: true, interval: time.Hour,
			snaps: []*Snapshot{nil, {Time: t0}, {Time: t0}, {Time: t0.Add(time.Second)}, {Time: t0.Add(time.Second)}, {Time: t0.Add(2 * time.Second)}},
			want:  []time.Time{t0, t0.Add(time.Second), t0.Add(2 * time.Second)}},
		{name: "an older snapshot is not stepped", signal: true, interval: time.Hour,
			snaps: []*Snapshot{{Time: t0.Add(time.Second)}, {Time: t0}, {Time: t0.Add(2 * time.Second)}},
			want:  []time.Time{t0.Add(time.Second), t0.Add(2 * time.Second)}},
		{name: "the ticker looks when no update comes", interval: time.Millisecond,
			snaps: []*Snapshot{{Time: t0}, {Time: t0.Add(time.Second)}},
			want:  []time.Time{t0, t0.Add(time.Second)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			var mu sync.Mutex
			looks := 0
			latest := func() *Snapshot {
				mu.Lock()
				defer mu.Unlock()
				i := min(looks, len(tt.snaps)-1)
				looks++
				return tt.snaps[i]
			}
			var got []time.Time
			updates := make(chan struct{})
			done := make(chan struct{})
			go func() {
				defer close(done)
				Follow(ctx, tt.interval, updates, latest, func(s *Snapshot) { got = append(got, s.Time) })
			}()
			for range len(tt.snaps) {
				if tt.signal {
					updates <- struct{}{}
				}
			}
			deadline := time.After(10 * time.Second)
			for {
				mu.Lock()
				n := looks
				mu.Unlock()
				if n >= len(tt.snaps) {
					break
				}
				select {
				case <-deadline:
					t.Fatalf("latest was looked at %d times, want %d", n, len(tt.snaps))
				case <-time.After(time.Millisecond):
				}
			}
			cancel()
			<-done
			if len(got) != len(tt.want) {
				t.Fatalf("stepped %v, want %v", got, tt.want)
			}
			for i := range got {
				if !got[i].Equal(tt.want[i]) {
					t.Fatalf("stepped %v, want %v", got, tt.want)
				}
			}
		})
	}
}
