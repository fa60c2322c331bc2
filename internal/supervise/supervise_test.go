package supervise

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2/ktesting"

	"github.com/tandemkit/tandem/internal/polltest"
)

// fast keeps restarts quick in tests; the shape is the production one.
var fast = wait.Backoff{Duration: time.Millisecond, Factor: 2, Steps: 1 << 30, Cap: 20 * time.Millisecond}

func newGroup(t *testing.T) (*Group, context.CancelFunc, *prometheus.Registry) {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	reg := prometheus.NewRegistry()
	g, err := New(ctx, reg, fast)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); g.Wait() })
	return g, cancel, reg
}

func TestLoops(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// fails is how many times the loop returns early before it runs until the end.
		fails int
		err   error
	}{
		{name: "runs until the end", fails: 0},
		{name: "returns an error twice, then runs", fails: 2, err: errors.New("watch: too many open files")},
		{name: "returns nil early three times, then runs", fails: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			g, cancel, reg := newGroup(t)
			var runs atomic.Int32
			running := make(chan struct{})
			g.Go("collector", func(ctx context.Context) error {
				if int(runs.Add(1)) <= tt.fails {
					return tt.err
				}
				close(running)
				<-ctx.Done()
				return ctx.Err()
			})
			select {
			case <-running:
			case <-time.After(10 * time.Second):
				t.Fatalf("loop not running again after %d runs", runs.Load())
			}
			if err := g.Check(); err != nil {
				t.Fatalf("Check = %v while the loop runs", err)
			}
			if got := testutil.ToFloat64(g.restarts.WithLabelValues("collector")); int(got) != tt.fails {
				t.Fatalf("restarts = %v, want %d", got, tt.fails)
			}
			if n, err := testutil.GatherAndCount(reg, "tandem_loop_restarts_total"); err != nil || n != 1 {
				t.Fatalf("tandem_loop_restarts_total series on the registry = %d, %v; want 1", n, err)
			}
			cancel()
			g.Wait()
			if got := runs.Load(); int(got) != tt.fails+1 {
				t.Fatalf("runs = %d, want %d: a loop must not run again after the end", got, tt.fails+1)
			}
		})
	}
}

// TestDownWhileWaiting: between a loop's stop and its next run, Check names it and why.
func TestDownWhileWaiting(t *testing.T) {
	t.Parallel()
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	g, err := New(ctx, nil, wait.Backoff{Duration: time.Hour, Factor: 1, Steps: 1, Cap: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	stopped := make(chan struct{})
	g.Go("evict", func(context.Context) error { defer close(stopped); return errors.New("no API server") })
	<-stopped
	polltest.Until(t, "Check to report the stopped loop", func() bool { return g.Check() != nil })
	if err := g.Check(); err == nil || !strings.Contains(err.Error(), "evict: no API server") {
		t.Fatalf("Check = %v, want it to name the loop and its error", err)
	}
	// Shutdown does not wait for the hour-long backoff.
	done := make(chan struct{})
	go func() { cancel(); g.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Wait did not return after the context ended")
	}
}

// TestOnce: a task runs once, is not started again, and only a failed one is down.
func TestOnce(t *testing.T) {
	t.Parallel()
	g, _, _ := newGroup(t)
	var runs atomic.Int32
	g.Once("connect-api", func(context.Context) error { runs.Add(1); return errors.New("no kubeconfig") })
	g.Once("restore", func(context.Context) error { runs.Add(1); return nil })
	g.Wait()
	if runs.Load() != 2 {
		t.Fatalf("runs = %d, want one each", runs.Load())
	}
	if err := g.Check(); err == nil || !strings.Contains(err.Error(), "connect-api: no kubeconfig") || strings.Contains(err.Error(), "restore") {
		t.Fatalf("Check = %v, want only the failed task named", err)
	}
}

func TestPanicIsReraised(t *testing.T) {
	t.Parallel()
	_, ctx := ktesting.NewTestContext(t)
	g, err := New(ctx, nil, fast)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if r := recover(); r != "boom" {
			t.Fatalf("recovered %v, want the loop's panic", r)
		}
	}()
	_ = g.run(ctx, "broken", func(context.Context) error { panic("boom") })
}
