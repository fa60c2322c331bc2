package main

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/tandemkit/tandem/bench/internal/figures"
)

// rpc is one CRI call the benchmark times. The requests are the ones kubelet
// sends most: its version probe and the two lists of every PLEG relist.
type rpc struct {
	name string
	call func(ctx context.Context, c runtimeapi.RuntimeServiceClient) error
}

// callTimeout is kubelet's CRI call timeout. Every call carries it, as
// kubelet's do, so the deadline travels over every hop (grpc-timeout) and a
// hung target cannot stall the benchmark.
const callTimeout = 2 * time.Minute

// timed makes one call with kubelet's per-call deadline and returns how long
// it took, deadline set-up included, as it is in kubelet.
func timed(ctx context.Context, r rpc, c runtimeapi.RuntimeServiceClient) (time.Duration, error) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	err := r.call(ctx, c)
	cancel()
	return time.Since(start), err
}

func benchmarkRPCs() []rpc {
	return []rpc{
		{name: "Version", call: func(ctx context.Context, c runtimeapi.RuntimeServiceClient) error {
			_, err := c.Version(ctx, &runtimeapi.VersionRequest{Version: "0.1.0"})
			return err
		}},
		{name: "ListPodSandbox", call: func(ctx context.Context, c runtimeapi.RuntimeServiceClient) error {
			_, err := c.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
			return err
		}},
		{name: "ListContainers", call: func(ctx context.Context, c runtimeapi.RuntimeServiceClient) error {
			_, err := c.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
			return err
		}},
	}
}

// mode is how many callers share one connection, as kubelet's goroutines share its one.
type mode struct {
	name    string
	workers int
}

func benchmarkModes() []mode {
	return []mode{{name: "sequential", workers: 1}, {name: "parallel-8", workers: 8}}
}

// target is one socket the benchmark calls.
type target struct {
	name   string
	client runtimeapi.RuntimeServiceClient
}

// plan says how many calls to make and how to slice them.
type plan struct {
	iterations      int // calls per RPC per mode per target
	batchPerWorker  int // calls each worker makes before the next target gets its turn
	warmupPerWorker int // unrecorded calls per worker per RPC, mode and target
	// collectBetweenBatches keeps the benchmark's own garbage collector out
	// of the timed batches: it is switched off while they run and a
	// collection runs before each batch instead. Left to itself it ran
	// about every 50 calls, its mark phase taking a share of a CPU for about
	// a millisecond (2 at p90) from whichever target happened to be timed
	// then: noise in the tail that two identical proxies did not share.
	collectBetweenBatches bool
}

// sample is one timed call; round tells which interleaving round it came from,
// which the noise estimate needs.
type sample struct {
	d     time.Duration
	round int
}

// series holds the samples of one RPC × mode × target.
type series []sample

// key names a series.
type key struct{ rpc, mode, target string }

// runBatch makes n calls of r on c with the given number of workers and
// returns each call's latency.
func runBatch(ctx context.Context, c runtimeapi.RuntimeServiceClient, r rpc, workers, n int) ([]time.Duration, error) {
	out := make([]time.Duration, n)
	if workers == 1 {
		for i := range n {
			d, err := timed(ctx, r, c)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", r.name, err)
			}
			out[i] = d
		}
		return out, nil
	}
	var (
		next     atomic.Int64
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
	)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n || ctx.Err() != nil {
					return
				}
				d, err := timed(ctx, r, c)
				if err != nil {
					errOnce.Do(func() { firstErr = fmt.Errorf("%s: %w", r.name, err); cancel() })
					return
				}
				out[i] = d
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	return out, nil
}

// clientMemoryLimit bounds the benchmark's heap while its collector is held
// off, should a batch ever allocate far more than its calls' responses (a
// parallel batch of ListContainers decodes 200 lists of 100 containers).
const clientMemoryLimit = 1 << 30

// measure times every RPC × mode on every target. Work is sliced into rounds; in
// each round every target gets one batch of the same RPC and mode right after
// the others, in an order that rotates from round to round, so that a noisy
// moment on the machine lands on all targets alike instead of on whichever
// target happened to run then.
func measure(ctx context.Context, targets []target, rpcs []rpc, modes []mode, p plan, progress func(done, total int)) (map[key]series, error) {
	for _, r := range rpcs {
		for _, m := range modes {
			for _, t := range targets {
				if _, err := runBatch(ctx, t.client, r, m.workers, p.warmupPerWorker*m.workers); err != nil {
					return nil, fmt.Errorf("warm-up of %s: %w", t.name, err)
				}
			}
		}
	}

	rounds := func(m mode) int {
		per := p.batchPerWorker * m.workers
		return (p.iterations + per - 1) / per
	}
	maxRounds, total := 0, 0
	for _, m := range modes {
		maxRounds = max(maxRounds, rounds(m))
		total += rounds(m) * len(rpcs)
	}
	out := make(map[key]series)
	done := 0
	collect := func() {}
	if p.collectBetweenBatches {
		defer debug.SetGCPercent(debug.SetGCPercent(-1))
		// A backstop in case a batch allocates far more than it does today.
		defer debug.SetMemoryLimit(debug.SetMemoryLimit(clientMemoryLimit))
		collect = runtime.GC
	}
	for g := range maxRounds {
		for _, r := range rpcs {
			for _, m := range modes {
				// A mode with fewer rounds (parallel batches are larger) is
				// spread evenly over the run rather than bunched at its start.
				round, next := g*rounds(m)/maxRounds, (g+1)*rounds(m)/maxRounds
				if round == next {
					continue
				}
				perBatch := p.batchPerWorker * m.workers
				n := min(perBatch, p.iterations-round*perBatch)
				for i := range targets {
					t := targets[(i+g)%len(targets)]
					collect()
					ds, err := runBatch(ctx, t.client, r, m.workers, n)
					if err != nil {
						return nil, fmt.Errorf("round %d on %s: %w", round, t.name, err)
					}
					k := key{rpc: r.name, mode: m.name, target: t.name}
					for _, d := range ds {
						out[k] = append(out[k], sample{d: d, round: round})
					}
				}
				done++
				if progress != nil {
					progress(done, total)
				}
			}
		}
	}
	return out, nil
}

func (s series) durations(keep func(sample) bool) []time.Duration {
	out := make([]time.Duration, 0, len(s))
	for _, x := range s {
		if keep == nil || keep(x) {
			out = append(out, x.d)
		}
	}
	return out
}

// quantiles are the figures reported for one series.
type quantiles struct {
	P50, P99 time.Duration
	// HalfGap is how far apart the two halves of the run (even and odd
	// rounds) put each percentile: a direct measure of how much the figure
	// moves with machine noise and sampling.
	HalfGapP50, HalfGapP99 time.Duration
	N                      int
}

func summarize(s series) quantiles {
	all := s.durations(nil)
	even := s.durations(func(x sample) bool { return x.round%2 == 0 })
	odd := s.durations(func(x sample) bool { return x.round%2 == 1 })
	q := quantiles{P50: figures.Nearest(all, 0.50), P99: figures.Nearest(all, 0.99), N: len(all)}
	if len(even) > 0 && len(odd) > 0 {
		q.HalfGapP50 = absDur(figures.Nearest(even, 0.50) - figures.Nearest(odd, 0.50))
		q.HalfGapP99 = absDur(figures.Nearest(even, 0.99) - figures.Nearest(odd, 0.99))
	}
	return q
}

func absDur(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}

// minMeaningfulAdded is the smallest floor overhead a ratio is computed
// against; below it the timer and scheduler dominate.
const minMeaningfulAdded = 2 * time.Microsecond

// comparison is the verdict on one percentile of one RPC × mode.
type comparison struct {
	Direct, Floor, Tandem   time.Duration
	FloorAdded, TandemAdded time.Duration
	Noise                   time.Duration
	Ratio                   float64 // TandemAdded / FloorAdded; NaN when FloorAdded is within noise
	Limit                   float64
	FloorWithinNoise        bool
	Meets                   bool
	ExcessOverLimit         time.Duration
	// Excess is the 90 % interval of (tandem added) - Limit x (floor added)
	// over resamplings of the run (excessInterval).
	Excess interval
	// MissShown is a miss the run can tell from noise: the point figure
	// misses and the whole interval of the excess lies above zero.
	MissShown bool
}

// withExcess records the interval of the excess and whether the run has
// shown a miss.
func (c comparison) withExcess(iv interval) comparison {
	c.Excess = iv
	c.MissShown = !c.Meets && iv.Low > 0
	return c
}

// compare judges tandem's added latency against the floor's at one percentile.
// noise is the largest half-to-half gap of the three series at that
// percentile: the amount by which the figure itself moves from one half of the
// run to the other. A floor overhead no larger than that is indistinguishable
// from zero, and a ratio against it would be noise divided by noise.
func compare(direct, floor, tandem, noise time.Duration, limit float64) comparison {
	c := comparison{
		Direct: direct, Floor: floor, Tandem: tandem,
		FloorAdded: floor - direct, TandemAdded: tandem - direct,
		Noise: noise, Limit: limit, Ratio: math.NaN(),
	}
	allowed := time.Duration(limit * float64(c.FloorAdded))
	if c.FloorAdded <= max(noise, minMeaningfulAdded) {
		// Judge tandem in absolute terms instead: it meets the target if its
		// own overhead is also within the noise (or within what the floor's
		// overhead would allow).
		c.FloorWithinNoise = true
		allowed = max(noise, minMeaningfulAdded, allowed)
		c.Meets = c.TandemAdded <= allowed
	} else {
		c.Ratio = float64(c.TandemAdded) / float64(c.FloorAdded)
		c.Meets = c.Ratio <= limit
	}
	if !c.Meets {
		c.ExcessOverLimit = c.TandemAdded - allowed
	}
	return c
}
