package agent

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"

	"github.com/tandemkit/tandem/config/knob"
	"github.com/tandemkit/tandem/config/slo"
	"github.com/tandemkit/tandem/config/slo/source"
	"github.com/tandemkit/tandem/hooks/policy"
	"github.com/tandemkit/tandem/internal/polltest"
	"github.com/tandemkit/tandem/internal/supervise"
)

// TestComponentsConfigureStartRestore follows components through an agent's life: each is handed the
// configuration in force when added and every later one, its loop runs under the supervisor, and on
// stop each restores once, the last added first, after its loop returned.
func TestComponentsConfigureStartRestore(t *testing.T) {
	t.Parallel()
	_, ctx := ktesting.NewTestContext(t)
	defaults := resolve(t, nil)
	colocation := &atomic.Pointer[slo.Resolved]{}
	colocation.Store(&defaults)
	cons := &consumers{base: policy.DefaultConfig(), colocation: colocation, resolved: defaults}
	runCtx, cancel := context.WithCancel(ctx)
	loops, err := supervise.New(runCtx, nil, supervise.Backoff())
	if err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	var events []string
	record := func(e string) { mu.Lock(); events = append(events, e); mu.Unlock() }
	var running atomic.Int32
	var stopped atomic.Int32
	newLoop := func(name string) *loop {
		return &loop{name: name,
			configure: func(_ context.Context, r slo.Resolved) error {
				record(name + " configured, colocation " + map[bool]string{true: "on", false: "off"}[r.Colocation.Enable])
				return nil
			},
			run: func(ctx context.Context) error {
				running.Add(1)
				<-ctx.Done()
				stopped.Add(1)
				return nil
			},
			restore: func(context.Context) error {
				if stopped.Load() != 2 {
					t.Errorf("%s restored while %d of 2 loops still ran", name, 2-stopped.Load())
				}
				record(name + " restored")
				return nil
			}}
	}
	for _, name := range []string{"first", "second"} {
		c := newLoop(name)
		cons.add(ctx, c)
		c.Start(runCtx, loops)
	}
	polltest.Until(t, "both loops running", func() bool { return running.Load() == 2 })
	cons.apply(ctx, source.Update{Resolved: resolve(t, map[string]string{slo.ColocationConfigKey: `{"enable": true}`}), Origin: "test"})
	cancel()
	loops.Wait()
	cons.restore(ctx, restoreTimeout)

	want := []string{
		"first configured, colocation off", "second configured, colocation off",
		"first configured, colocation on", "second configured, colocation on",
		"second restored", "first restored",
	}
	if !slices.Equal(events, want) {
		t.Errorf("events\n%q\nwant\n%q", events, want)
	}
}

// TestRestoreSharesOneDeadline: a component whose restore hangs uses up the deadline all share, and the
// ones after it are skipped (the next start puts back what they left) rather than holding the stop; a
// stop signal on the caller's context does not cut the restores short.
func TestRestoreSharesOneDeadline(t *testing.T) {
	t.Parallel()
	_, ctx := ktesting.NewTestContext(t)
	stopping, stop := context.WithCancel(ctx)
	stop()
	var restored []string
	cons := &consumers{comps: []component{
		&loop{name: "skipped", restore: func(context.Context) error { restored = append(restored, "skipped"); return nil }},
		&loop{name: "hangs", restore: func(ctx context.Context) error { restored = append(restored, "hangs"); <-ctx.Done(); return ctx.Err() }},
		&loop{name: "quick", restore: func(context.Context) error { restored = append(restored, "quick"); return nil }},
	}}
	const timeout = 100 * time.Millisecond
	start := time.Now()
	cons.restore(stopping, timeout)
	if took := time.Since(start); took < timeout || took > 10*timeout {
		t.Errorf("restore took %s with a %s deadline", took, timeout)
	}
	if want := []string{"quick", "hangs"}; !slices.Equal(restored, want) {
		t.Errorf("restored %q, want %q", restored, want)
	}
}

// TestSwitchedOffReportsForTheConfigurationInForce: a loop this node cannot run still says what its keys
// do, for the configuration handed over last.
func TestSwitchedOffReportsForTheConfigurationInForce(t *testing.T) {
	t.Parallel()
	_, ctx := ktesting.NewTestContext(t)
	off := switchedOff("quota-burst", func(r slo.Resolved) []knob.Status {
		return []knob.Status{{Section: slo.CPUBurstConfigKey, Key: "policy", Value: string(r.CPUBurst.Policy), State: knob.Ignored}}
	})
	for _, policy := range []string{"auto", "none"} {
		r := resolve(t, map[string]string{slo.CPUBurstConfigKey: `{"clusterStrategy": {"policy": "` + policy + `"}}`})
		if err := off.Configure(ctx, r); err != nil {
			t.Fatal(err)
		}
		if got := off.Knobs(); len(got) != 1 || got[0].Value != policy || got[0].State != knob.Ignored {
			t.Fatalf("knobs after policy %s: %+v", policy, got)
		}
	}
	if err := off.Restore(ctx); err != nil {
		t.Fatalf("a switched-off loop has nothing to restore: %v", err)
	}
}

// TestStartOrOff: a configuration the loop refuses starts it switched off; a node where it cannot run at
// all is an error naming both refusals.
func TestStartOrOff(t *testing.T) {
	t.Parallel()
	_, ctx := ktesting.NewTestContext(t)
	errRefused := errors.New("refused")
	errNoNode := errors.New("nothing to act on")
	type cfg struct{ enable, bad bool }
	tests := []struct {
		name    string
		in      cfg
		noNode  bool
		want    cfg
		wantErr []error
	}{
		{name: "accepted", in: cfg{enable: true}, want: cfg{enable: true}},
		{name: "refused starts off", in: cfg{enable: true, bad: true}, want: cfg{}},
		{name: "cannot run here", in: cfg{enable: true, bad: true}, noNode: true, wantErr: []error{errRefused, errNoNode}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := startOrOff(ctx, "test loop", tt.in, func(cfg) cfg { return cfg{} }, func(c cfg) (cfg, error) {
				switch {
				case c.bad:
					return c, errRefused
				case tt.noNode:
					return c, errNoNode
				}
				return c, nil
			})
			for _, want := range tt.wantErr {
				if !errors.Is(err, want) {
					t.Fatalf("error %v, want it to wrap %v", err, want)
				}
			}
			if tt.wantErr == nil && (err != nil || got != tt.want) {
				t.Fatalf("got %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}
