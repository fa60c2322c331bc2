package main

import (
	"context"
	"strings"
	"testing"
	"time"
)

func TestAntagonists(t *testing.T) {
	for _, kind := range []string{antagonistMemory, antagonistCache} {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		start := time.Now()
		if err := antagonistMain(ctx, kind); err != nil {
			t.Errorf("%s: %v", kind, err)
		}
		cancel()
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%s ran %v after its context ended; a BE pod's stop would wait for it", kind, d)
		}
	}
	if err := antagonistMain(context.Background(), "disk"); err == nil || !strings.Contains(err.Error(), "want memory or cache") {
		t.Errorf("unknown antagonist: %v, want an error naming the kinds", err)
	}
}

func TestTouchReadsTheTable(t *testing.T) {
	tab := newTouchTable()
	if len(tab)*8 != 16<<20 {
		t.Fatalf("table of %d bytes, want 16 MiB", len(tab)*8)
	}
	a, b := tab.touch(1, 256<<10), tab.touch(2, 256<<10)
	if a == 0 || a == b {
		t.Errorf("touch sums %d and %d from two seeds: want non-zero, seed-dependent reads", a, b)
	}
	if tab.touch(1, 256<<10) != a {
		t.Error("the same seed read different lines")
	}
}
