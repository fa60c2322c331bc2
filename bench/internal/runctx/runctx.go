// Package runctx is what the benchmarks' main functions share around their run: waiting that a Ctrl-C
// cuts short, and the exit code that says how the run ended.
package runctx

import (
	"context"
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
