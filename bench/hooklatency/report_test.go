package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
)

// constant returns n samples of d.
func constant(n int, d time.Duration) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = d
	}
	return out
}

func TestReportChecks(t *testing.T) {
	t.Parallel()
	names := []string{"none", "inproc-1", "inproc-5", "remote-1", "grpc-rtt"}
	tests := []struct {
		name string
		// p50 per variant, in µs, in the order of names.
		p50        []int
		wantChecks []bool
	}{
		{name: "both met", p50: []int{100, 103, 115, 300, 150}, wantChecks: []bool{true, true}},
		{name: "limits are inclusive", p50: []int{100, 103, 120, 350, 150}, wantChecks: []bool{true, true}},
		{name: "five hooks too slow", p50: []int{100, 103, 121, 300, 150}, wantChecks: []bool{false, true}},
		{name: "remote hook over 250 µs", p50: []int{100, 103, 115, 351, 300}, wantChecks: []bool{true, false}},
		// The round trip is context only: many round trips within 250 µs pass.
		{name: "remote hook of 10 round trips within 250 µs", p50: []int{100, 103, 115, 300, 20}, wantChecks: []bool{true, true}},
	}
	for _, tt := range tests {
		for _, processes := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/processes=%v", tt.name, processes), func(t *testing.T) {
				t.Parallel()
				var variants []variant
				var samples [][]time.Duration
				for i, n := range names {
					variants = append(variants, variant{name: n, description: n, createContainer: n != "grpc-rtt"})
					samples = append(samples, constant(10, time.Duration(tt.p50[i])*time.Microsecond))
				}
				rep := newReport(machine{Processes: processes}, options{iterations: 10, batch: 5}, variants, samples)
				var got, judged []bool
				for _, c := range rep.Checks {
					got = append(got, c.Pass)
					judged = append(judged, c.Judged)
				}
				if !slices.Equal(got, tt.wantChecks) {
					t.Errorf("checks pass = %v, want %v (%+v)", got, tt.wantChecks, rep.Checks)
				}
				// The remote hook is judged across processes, the in-process hooks in one.
				if want := []bool{!processes, processes}; !slices.Equal(judged, want) {
					t.Errorf("checks judged = %v, want %v", judged, want)
				}
				want := true
				for i, pass := range tt.wantChecks {
					if judged[i] {
						want = want && pass
					}
				}
				if rep.Pass != want {
					t.Errorf("report pass = %v, want %v: only the targets judged in the layout decide", rep.Pass, want)
				}
				checkAdded(t, rep, tt.p50)
				checkRatio(t, rep, tt.p50)
			})
		}
	}
}

// checkAdded checks the added latencies: against the variant without hooks, and only for CreateContainer.
func checkAdded(t *testing.T, rep *report, p50 []int) {
	t.Helper()
	if a := rep.Results[2].AddedP50; a == nil || *a != float64(p50[2]-p50[0]) {
		t.Errorf("inproc-5 added p50 = %v, want %d", a, p50[2]-p50[0])
	}
	if rep.Results[4].AddedP50 != nil {
		t.Errorf("the round trip has an added latency %v; it is not a CreateContainer", *rep.Results[4].AddedP50)
	}
}

// checkRatio checks the remote hook's figure in bare round trips, given for context: without relays,
// the only one.
func checkRatio(t *testing.T, rep *report, p50 []int) {
	t.Helper()
	added, rtt := float64(p50[3]-p50[0]), float64(p50[4])
	if len(rep.Context) != 1 {
		t.Fatalf("context = %+v, want one ratio, to the bare round trip", rep.Context)
	}
	if c := rep.Context[0]; c.Added != added || c.RoundTrip != rtt || c.Ratio != added/rtt {
		t.Errorf("context = %+v, want added %v µs = %v × round trip %v µs", c, added, added/rtt, rtt)
	}
}

// TestMeasureInterleaves checks that every variant gets the same number of calls, in turns of batch
// calls, with the first variant of each round rotating.
func TestMeasureInterleaves(t *testing.T) {
	t.Parallel()
	var order []string
	mk := func(name string) variant {
		return variant{name: name, once: func(context.Context) (time.Duration, error) {
			order = append(order, name)
			return time.Microsecond, nil
		}}
	}
	variants := []variant{mk("a"), mk("b"), mk("c")}
	samples, err := measure(t.Context(), variants, options{iterations: 5, batch: 2, warmup: 1})
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range samples {
		if len(s) != 5 {
			t.Errorf("variant %s has %d samples, want 5", variants[i].name, len(s))
		}
	}
	want := []string{"a", "b", "c", // warm-up
		"a", "a", "b", "b", "c", "c", // round 0
		"b", "b", "c", "c", "a", "a", // round 1
		"c", "a", "b"} // round 2: one call left each
	if !slices.Equal(order, want) {
		t.Errorf("call order = %v, want %v", order, want)
	}

	failing := []variant{{name: "bad", once: func(context.Context) (time.Duration, error) { return 0, errors.New("boom") }}}
	if _, err := measure(t.Context(), failing, options{iterations: 1, batch: 1}); err == nil {
		t.Error("measure hid a failing call")
	}
}

// TestMain lets the test binary be one of the benchmark's server processes, as the benchmark's own
// binary is when it runs them in processes of their own.
func TestMain(m *testing.M) {
	if spec := os.Getenv(childEnv); spec != "" {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
		err := serveChild(klog.NewContext(ctx, klog.Background()), spec)
		stop()
		if err != nil {
			klog.ErrorS(err, "Benchmark server process failed")
			os.Exit(2)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestRunSmall runs the whole benchmark briefly in both layouts, with its servers in processes of their
// own and all in one process: every proxy starts, its hooks act (each proxy checks that in its store
// before it says it is ready) and the reports are written, with the remote proxy's hook time. Timing
// targets are not judged here: a few calls on a shared test machine say nothing.
func TestRunSmall(t *testing.T) {
	ctx := klog.NewContext(t.Context(), ktesting.NewLogger(t, ktesting.NewConfig()))
	jsonPath := filepath.Join(t.TempDir(), "out.json")
	err := run(ctx, options{iterations: 20, batch: 5, warmup: 2, jsonPath: jsonPath, stateRoot: t.TempDir(), layout: layoutBoth})
	if err != nil && !errors.Is(err, errMissed) {
		t.Fatal(err)
	}
	b, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var reps []report
	if err := json.Unmarshal(b, &reps); err != nil {
		t.Fatal(err)
	}
	if len(reps) != 2 || !reps[0].Machine.Processes || reps[1].Machine.Processes {
		t.Fatalf("want two reports, processes then one process: %s", b)
	}
	for _, rep := range reps {
		checkReport(t, rep)
	}
}

func checkReport(t *testing.T, rep report) {
	t.Helper()
	if len(rep.Results) != 10 || len(rep.Checks) != 3 || len(rep.Context) != 2 {
		t.Fatalf("report has %d results, %d checks and %d comparisons, want 10, 3 and 2: %+v", len(rep.Results), len(rep.Checks), len(rep.Context), rep)
	}
	for _, r := range rep.Results {
		if r.Calls != 20 || r.P50 <= 0 {
			t.Errorf("%s: %d calls, p50 %v µs; want 20 calls and a positive latency", r.Name, r.Calls, r.P50)
		}
	}
	if rep.RemoteHookInProxyMean <= 0 {
		t.Errorf("the remote proxy reported no hook time (%v µs): its hook never ran, or its report was lost", rep.RemoteHookInProxyMean)
	}
}

func TestLayoutFlag(t *testing.T) {
	for _, tt := range []struct {
		layout string
		want   []bool
	}{{layoutBoth, []bool{true, false}}, {layoutProcesses, []bool{true}}, {layoutOneProcess, []bool{false}}} {
		o := options{iterations: 1, batch: 1, layout: tt.layout}
		if err := o.validate(); err != nil {
			t.Errorf("--layout %s: %v", tt.layout, err)
		}
		if got := o.processLayouts(); !slices.Equal(got, tt.want) {
			t.Errorf("--layout %s runs %v, want %v", tt.layout, got, tt.want)
		}
	}
	if err := (options{iterations: 1, batch: 1, layout: "single"}).validate(); err == nil {
		t.Error("--layout single was accepted")
	}
}
