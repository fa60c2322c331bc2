// Package runctx is what the benchmarks' main functions share around their run: waiting that a Ctrl-C
// cuts short, and the exit code that says how the run ended.
package runctx

import (
	"context"
	"errors"
	"os"
	"time"

	"k8s.io/klog/v2"
)

// Sleep waits d, or until ctx ends, which it returns as an error.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Exit ends the process after a run that returned err: 0 without an error, 130 when ctx was cancelled
// (Ctrl-C, SIGTERM; the run has removed what it started), 1 otherwise. It flushes klog first.
func Exit(ctx context.Context, err error) {
	klog.Flush()
	switch {
	case err == nil:
		return
	case ctx.Err() != nil:
		klog.InfoS("Benchmark interrupted; everything it started is removed", "err", err)
		klog.Flush()
		os.Exit(130)
	default:
		klog.ErrorS(err, "Benchmark failed")
		klog.Flush()
		os.Exit(1)
	}
}

// Cleanups is what a run started, undone last first by Run, each step with a deadline of its own that
// a cancelled ctx does not cut short: a benchmark stopped with Ctrl-C still removes its pods, proxies
// and runtimes. The zero value is ready, with three minutes a step.
type Cleanups struct {
	// Timeout is each step's deadline; zero is three minutes.
	Timeout time.Duration
	steps   []func(context.Context) error
}

// Add registers a step, to run before the steps added earlier.
func (c *Cleanups) Add(step func(context.Context) error) { c.steps = append(c.steps, step) }

// Run runs the steps, last added first, and returns their errors joined. It forgets them.
func (c *Cleanups) Run(ctx context.Context) error {
	timeout := c.Timeout
	if timeout == 0 {
		timeout = 3 * time.Minute
	}
	var errs []error
	for i := len(c.steps) - 1; i >= 0; i-- {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
		errs = append(errs, c.steps[i](sctx))
		cancel()
	}
	c.steps = nil
	return errors.Join(errs...)
}
