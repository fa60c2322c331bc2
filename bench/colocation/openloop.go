package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"sync"
	"time"
)

// The open-loop schedule: request i is due at start + i/rate, whatever happened to the requests
// before it. A closed-loop client (send, wait, send) slows down when the service does and so never
// samples the queue it would have built: coordinated omission. Latency here is measured from the
// due time, so a client that was itself descheduled, or a dispatcher that fell behind, shows up in
// the figures instead of hiding them.

// requestCount is how many requests an open-loop run at rate (per second) sends in d.
func requestCount(rate float64, d time.Duration) int {
	if rate <= 0 || d <= 0 {
		return 0
	}
	// The epsilon keeps 400 rps × 0.1 s at 40, not 39 from 39.99999.
	return int(math.Floor(rate*d.Seconds() + 1e-9))
}

// dueAt is when request i of a run that starts at start is due.
func dueAt(start time.Time, rate float64, i int) time.Time {
	return start.Add(time.Duration(float64(i) * float64(time.Second) / rate))
}

// outcome is one request: when it was due, when it was sent (the dispatcher's lag is diagnostic),
// when its answer was read, and whether it failed; the CPUs it ran on (the client's at send and
// receipt, the server's at the start and end of handling), and the server's handling times.
type outcome struct {
	due, sent, done time.Time
	failed          bool
	cpus            cpuSet
	srv             served
	srvOK           bool
}

// loadResult is what a load client reports back to the bench: the latencies of the requests due
// after the warm-up, in microseconds from their due time, unsorted.
type loadResult struct {
	Rate      float64 `json:"rate"`
	Sent      int     `json:"sent"`   // measured requests (due after the warm-up)
	Failed    int     `json:"failed"` // of those, errors and non-200 answers (their latency is kept: time to failure)
	LatencyUs []int64 `json:"latencyUs"`
	// MaxLagUs is the longest a measured request was sent after it was due: the client's own
	// scheduling delay, already part of every latency above.
	MaxLagUs int64 `json:"maxLagUs"`
	// CPUSeconds is the client process's own CPU time (user+system), filled in by the client.
	CPUSeconds float64 `json:"cpuSeconds"`

	// For the bench to attribute steal, per measured request in LatencyUs's order: when it was due,
	// in µs after DueFromUnixNs (its done time is that plus its latency), and the CPUs it ran on
	// (a cpuSet; 0 when unknown).
	DueFromUnixNs int64    `json:"dueFromUnixNs"`
	DueUs         []int64  `json:"dueUs"`
	CPUs          []cpuSet `json:"cpus"`
	// ServerOutside counts answered requests whose handling, by the server's clock, did not fall
	// within [sent, done] by the client's: more than none and the clocks cannot be compared, nor
	// the requests placed against the bench's steal samples.
	ServerOutside int `json:"serverOutside"`
}

// account turns outcomes into a loadResult, leaving out requests due before measureFrom (the
// warm-up: connections open, caches fill). A request that never completed (zero done) counts as
// failed at its due time plus timeout.
func account(outs []outcome, rate float64, measureFrom time.Time, timeout time.Duration) loadResult {
	r := loadResult{Rate: rate, LatencyUs: make([]int64, 0, len(outs)),
		DueFromUnixNs: measureFrom.UnixNano(), DueUs: make([]int64, 0, len(outs)), CPUs: make([]cpuSet, 0, len(outs))}
	for _, o := range outs {
		if o.due.Before(measureFrom) {
			continue
		}
		r.Sent++
		done, failed, cpus := o.done, o.failed, o.cpus
		if done.IsZero() {
			done, failed, cpus = o.due.Add(timeout), true, 0
		}
		if failed {
			r.Failed++
		}
		r.LatencyUs = append(r.LatencyUs, done.Sub(o.due).Microseconds())
		r.DueUs = append(r.DueUs, o.due.Sub(measureFrom).Microseconds())
		r.CPUs = append(r.CPUs, cpus)
		if o.srvOK && (o.srv.from < o.sent.UnixNano() || o.srv.to > o.done.UnixNano()) {
			r.ServerOutside++
		}
		if !o.sent.IsZero() {
			r.MaxLagUs = max(r.MaxLagUs, o.sent.Sub(o.due).Microseconds())
		}
	}
	return r
}

// runLoad sends GET url open-loop at rate for warmup+d and returns the measured part.
func runLoad(ctx context.Context, url string, rate float64, warmup, d, timeout time.Duration) loadResult {
	n := requestCount(rate, warmup+d)
	outs := make([]outcome, n)
	client := &http.Client{
		// Enough idle connections that a burst after a stall reuses them instead of opening new ones.
		Transport: &http.Transport{MaxIdleConnsPerHost: 512, DisableCompression: true},
		Timeout:   timeout,
	}
	start := time.Now().Add(20 * time.Millisecond)
	var wg sync.WaitGroup
	timer := time.NewTimer(0)
	<-timer.C
	for i := range n {
		due := dueAt(start, rate, i)
		if wait := time.Until(due); wait > 0 {
			timer.Reset(wait)
			select {
			case <-ctx.Done():
				timer.Stop()
				wg.Wait()
				return account(outs[:i], rate, start.Add(warmup), timeout)
			case <-timer.C:
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			o := outcome{due: due, sent: time.Now()}
			o.cpus = o.cpus.add(getcpu())
			resp, err := client.Get(url)
			var body []byte
			if err == nil {
				body, _ = io.ReadAll(io.LimitReader(resp.Body, 256))
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
			}
			o.done, o.failed = time.Now(), err != nil || resp.StatusCode != http.StatusOK
			// After done: what follows is bookkeeping, not latency.
			o.cpus = o.cpus.add(getcpu())
			if o.srv, o.srvOK = parseServed(body); o.srvOK {
				o.cpus = o.cpus.add(o.srv.cpuFrom).add(o.srv.cpuTo)
			} else {
				// Where the server ran is unknown: every CPU, so that the request is never clean
				// by accident.
				o.cpus = allCPUs
			}
			outs[i] = o
		}()
	}
	wg.Wait()
	return account(outs, rate, start.Add(warmup), timeout)
}

// loadMain is the load client's entry point (the binary run with "load"): it writes its loadResult
// as JSON to out.
func loadMain(ctx context.Context, url string, rate float64, warmup, d, timeout time.Duration, out string) error {
	r := runLoad(ctx, url, rate, warmup, d, timeout)
	r.CPUSeconds = ownCPUSeconds()
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	tmp := out + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("write load result: %w", err)
	}
	// Renamed into place so the bench never reads half a file.
	return os.Rename(tmp, out)
}
