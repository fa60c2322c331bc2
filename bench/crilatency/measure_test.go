package main

import (
	"context"
	"errors"
	"math"
	"runtime/metrics"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestSummarizeHalfGap(t *testing.T) {
	t.Parallel()
	var s series
	// Even rounds take 100µs, odd rounds 130µs: the halves disagree by 30µs.
	for round := range 10 {
		d := 100 * time.Microsecond
		if round%2 == 1 {
			d = 130 * time.Microsecond
		}
		for range 10 {
			s = append(s, sample{d: d, round: round})
		}
	}
	q := summarize(s)
	if q.N != 100 || q.P50 != 100*time.Microsecond || q.P99 != 130*time.Microsecond {
		t.Errorf("summarize = %+v, want N 100, p50 100µs, p99 130µs", q)
	}
	if q.HalfGapP50 != 30*time.Microsecond || q.HalfGapP99 != 30*time.Microsecond {
		t.Errorf("half gaps = %v/%v, want 30µs/30µs", q.HalfGapP50, q.HalfGapP99)
	}
}

func TestCompare(t *testing.T) {
	t.Parallel()
	us := func(v float64) time.Duration { return time.Duration(v * float64(time.Microsecond)) }
	tests := []struct {
		name                         string
		direct, floor, tandem, noise time.Duration
		limit                        float64
		wantRatio                    float64 // NaN: no ratio
		wantMeets, wantWithinNoise   bool
		wantExcess                   time.Duration
	}{
		{
			name:   "tandem at the floor",
			direct: us(100), floor: us(150), tandem: us(150), noise: us(5), limit: 1.2,
			wantRatio: 1, wantMeets: true,
		},
		{
			name:   "exactly at the limit meets it",
			direct: us(100), floor: us(150), tandem: us(160), noise: us(5), limit: 1.2,
			wantRatio: 1.2, wantMeets: true,
		},
		{
			name:   "clear miss",
			direct: us(100), floor: us(150), tandem: us(200), noise: us(5), limit: 1.2,
			wantRatio: 2, wantExcess: us(40),
		},
		{
			name:   "miss smaller than the noise is still over the limit",
			direct: us(100), floor: us(150), tandem: us(165), noise: us(10), limit: 1.2,
			wantRatio: 1.3, wantExcess: us(5),
		},
		{
			name:   "floor within noise and tandem too",
			direct: us(100), floor: us(103), tandem: us(106), noise: us(8), limit: 1.5,
			wantRatio: math.NaN(), wantMeets: true, wantWithinNoise: true,
		},
		{
			name:   "floor within noise but tandem clearly slower",
			direct: us(100), floor: us(103), tandem: us(140), noise: us(8), limit: 1.5,
			wantRatio: math.NaN(), wantWithinNoise: true, wantExcess: us(32),
		},
		{
			name:   "floor faster than direct",
			direct: us(900), floor: us(700), tandem: us(800), noise: us(300), limit: 1.5,
			wantRatio: math.NaN(), wantMeets: true, wantWithinNoise: true,
		},
		{
			name:   "tiny floor cost with no measured noise",
			direct: us(100), floor: us(101), tandem: us(101.5), noise: 0, limit: 1.2,
			wantRatio: math.NaN(), wantMeets: true, wantWithinNoise: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := compare(tt.direct, tt.floor, tt.tandem, tt.noise, tt.limit)
			if math.IsNaN(tt.wantRatio) != math.IsNaN(c.Ratio) || (!math.IsNaN(c.Ratio) && math.Abs(c.Ratio-tt.wantRatio) > 1e-9) {
				t.Errorf("ratio = %v, want %v", c.Ratio, tt.wantRatio)
			}
			if c.Meets != tt.wantMeets || c.FloorWithinNoise != tt.wantWithinNoise {
				t.Errorf("meets=%v floorWithinNoise=%v, want %v and %v", c.Meets, c.FloorWithinNoise, tt.wantMeets, tt.wantWithinNoise)
			}
			if c.ExcessOverLimit != tt.wantExcess {
				t.Errorf("excess=%v, want %v", c.ExcessOverLimit, tt.wantExcess)
			}
		})
	}
}

// callLog records the calls of fake targets. The fakes stand in for sockets
// because what is tested here is the benchmark's scheduling of calls, not CRI.
type callLog struct {
	mu        sync.Mutex
	calls     []string // "target/rpc"
	inFlight  map[string]int
	maxFlight map[string]int
	failOn    string
	// noDeadline counts calls without kubelet's per-call deadline.
	noDeadline int
}

var errInjected = errors.New("injected failure")

type fakeClient struct {
	runtimeapi.RuntimeServiceClient // nil: any other method panics
	name                            string
	log                             *callLog
}

func (f fakeClient) do(ctx context.Context, rpc string) error {
	l := f.log
	l.mu.Lock()
	if _, ok := ctx.Deadline(); !ok {
		l.noDeadline++
	}
	l.calls = append(l.calls, f.name+"/"+rpc)
	l.inFlight[f.name]++
	l.maxFlight[f.name] = max(l.maxFlight[f.name], l.inFlight[f.name])
	fail := l.failOn == f.name+"/"+rpc
	l.mu.Unlock()
	// Long enough that 8 workers overlap, short enough for a fast test.
	time.Sleep(200 * time.Microsecond)
	l.mu.Lock()
	l.inFlight[f.name]--
	l.mu.Unlock()
	if fail {
		return errInjected
	}
	return nil
}

func (f fakeClient) Version(ctx context.Context, _ *runtimeapi.VersionRequest, _ ...grpc.CallOption) (*runtimeapi.VersionResponse, error) {
	return &runtimeapi.VersionResponse{}, f.do(ctx, "Version")
}

func (f fakeClient) ListPodSandbox(ctx context.Context, _ *runtimeapi.ListPodSandboxRequest, _ ...grpc.CallOption) (*runtimeapi.ListPodSandboxResponse, error) {
	return &runtimeapi.ListPodSandboxResponse{}, f.do(ctx, "ListPodSandbox")
}

func (f fakeClient) ListContainers(ctx context.Context, _ *runtimeapi.ListContainersRequest, _ ...grpc.CallOption) (*runtimeapi.ListContainersResponse, error) {
	return &runtimeapi.ListContainersResponse{}, f.do(ctx, "ListContainers")
}

func fakeTargets(l *callLog, names ...string) []target {
	var ts []target
	for _, n := range names {
		ts = append(ts, target{name: n, client: fakeClient{name: n, log: l}})
	}
	return ts
}

func TestMeasureCountsAndConcurrency(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		plan       plan
		wantPerKey int
	}{
		{name: "iterations a multiple of the batch", plan: plan{iterations: 80, batchPerWorker: 5}, wantPerKey: 80},
		{name: "last batch shorter", plan: plan{iterations: 47, batchPerWorker: 5, warmupPerWorker: 2}, wantPerKey: 47},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			l := &callLog{inFlight: map[string]int{}, maxFlight: map[string]int{}}
			targets := fakeTargets(l, "a", "b", "c")
			got, err := measure(t.Context(), targets, benchmarkRPCs(), benchmarkModes(), tt.plan, nil)
			if err != nil {
				t.Fatalf("measure: %v", err)
			}
			if len(got) != 3*3*2 {
				t.Errorf("%d series, want 18 (3 RPCs x 2 modes x 3 targets)", len(got))
			}
			for k, s := range got {
				if len(s) != tt.wantPerKey {
					t.Errorf("%+v: %d samples, want %d", k, len(s), tt.wantPerKey)
				}
				for _, x := range s {
					if x.d < 200*time.Microsecond {
						t.Errorf("%+v: a sample of %v is shorter than the call itself", k, x.d)
						break
					}
				}
			}
			wantCalls := 3 * 3 * (2*tt.wantPerKey + tt.plan.warmupPerWorker*(1+8))
			if len(l.calls) != wantCalls {
				t.Errorf("%d calls made, want %d (timed plus warm-up)", len(l.calls), wantCalls)
			}
			if l.noDeadline != 0 {
				t.Errorf("%d calls carried no deadline, want every call to carry kubelet's", l.noDeadline)
			}
			for _, n := range []string{"a", "b", "c"} {
				if l.maxFlight[n] != 8 {
					t.Errorf("target %s saw at most %d calls at once, want 8 in parallel mode", n, l.maxFlight[n])
				}
			}
		})
	}
}

func TestMeasureInterleavesTargets(t *testing.T) {
	t.Parallel()
	l := &callLog{inFlight: map[string]int{}, maxFlight: map[string]int{}}
	rpcs := benchmarkRPCs()[:1]                 // Version
	modes := benchmarkModes()[:1]               // sequential
	p := plan{iterations: 6, batchPerWorker: 2} // 3 rounds of 2 calls
	if _, err := measure(t.Context(), fakeTargets(l, "a", "b", "c"), rpcs, modes, p, nil); err != nil {
		t.Fatalf("measure: %v", err)
	}
	var order string
	for _, c := range l.calls {
		order += c[:1]
	}
	// Each round gives every target one batch; the first target rotates so
	// that none always runs first (right after another RPC or mode).
	if want := "aabbcc" + "bbccaa" + "ccaabb"; order != want {
		t.Errorf("call order %s, want %s", order, want)
	}
}

func TestMeasureStopsOnError(t *testing.T) {
	t.Parallel()
	for _, failOn := range []string{"b/ListContainers", "c/Version"} {
		t.Run(failOn, func(t *testing.T) {
			t.Parallel()
			l := &callLog{inFlight: map[string]int{}, maxFlight: map[string]int{}, failOn: failOn}
			_, err := measure(t.Context(), fakeTargets(l, "a", "b", "c"), benchmarkRPCs(), benchmarkModes(), plan{iterations: 16, batchPerWorker: 2}, nil)
			if !errors.Is(err, errInjected) {
				t.Fatalf("measure error = %v, want the failed call's error", err)
			}
			if target := failOn[:1]; !strings.Contains(err.Error(), target) {
				t.Errorf("error %q does not name target %s", err, target)
			}
		})
	}
}

// gcClient is a target whose every call allocates as a CRI list decode does
// and notes how many collections the benchmark's process had run by then.
type gcClient struct {
	runtimeapi.RuntimeServiceClient
	name  string
	log   *[]gcCall
	alloc int
}

type gcCall struct {
	target string
	cycles uint64
}

func (g gcClient) Version(context.Context, *runtimeapi.VersionRequest, ...grpc.CallOption) (*runtimeapi.VersionResponse, error) {
	garbage := make([]byte, g.alloc)
	*g.log = append(*g.log, gcCall{target: g.name, cycles: gcCycles()})
	return &runtimeapi.VersionResponse{RuntimeName: string(garbage[:0])}, nil
}

func gcCycles() uint64 {
	s := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

func gogc() uint64 {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// TestMeasureKeepsItsCollectorOutOfBatches runs alone (not parallel): the
// garbage collector's settings and counts are the whole process's.
func TestMeasureKeepsItsCollectorOutOfBatches(t *testing.T) {
	const batch = 10
	tests := []struct {
		name             string
		collect          bool
		wantGCInsideSome bool
	}{
		{name: "collected between batches", collect: true},
		{name: "collector left to run (--gc-in-batches)", collect: false, wantGCInsideSome: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var calls []gcCall
			var targets []target
			for _, n := range []string{"a", "b", "c"} {
				// 1 MiB a call: ten calls pass Go's smallest heap goal (4 MB) twice.
				targets = append(targets, target{name: n, client: gcClient{name: n, log: &calls, alloc: 1 << 20}})
			}
			gogcBefore := gogc()
			cyclesBefore := gcCycles()
			p := plan{iterations: 20 * batch, batchPerWorker: batch, collectBetweenBatches: tt.collect}
			if _, err := measure(t.Context(), targets, benchmarkRPCs()[:1], benchmarkModes()[:1], p, nil); err != nil {
				t.Fatalf("measure: %v", err)
			}
			if got := gogc(); got != gogcBefore {
				t.Errorf("GOGC after the run is %d, want it restored to %d", got, gogcBefore)
			}
			if gcCycles() == cyclesBefore {
				t.Fatal("no collection at all in the run: the test allocates too little to tell")
			}
			if len(calls) != 3*20*batch {
				t.Fatalf("%d calls, want %d", len(calls), 3*20*batch)
			}
			inside := 0
			for i := 0; i < len(calls); i += batch {
				b := calls[i : i+batch]
				if b[0].target != b[batch-1].target {
					t.Fatalf("calls %d-%d span targets %s and %s, want one batch of one target", i, i+batch-1, b[0].target, b[batch-1].target)
				}
				if b[0].cycles != b[batch-1].cycles {
					inside++
				}
			}
			if tt.wantGCInsideSome && inside == 0 {
				t.Errorf("no collection ran inside a batch; the check above cannot tell the two settings apart")
			}
			if !tt.wantGCInsideSome && inside > 0 {
				t.Errorf("a collection ran inside %d of %d batches, want none: it lands on whichever target is timed", inside, len(calls)/batch)
			}
		})
	}
}
