package collector

import (
	"context"
	"time"
)

// Follow calls step with each new snapshot latest returns, until ctx is done: it looks when updates is
// signalled and every interval, in case a signal was missed. A look that finds no snapshot newer than
// the last one stepped calls nothing, so a loop that counts samples never counts one twice.
func Follow(ctx context.Context, interval time.Duration, updates <-chan struct{}, latest func() *Snapshot, step func(*Snapshot)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-updates:
		case <-t.C:
		}
		snap := latest()
		if snap == nil || !snap.Time.After(last) {
			continue
		}
		last = snap.Time
		step(snap)
	}
}
