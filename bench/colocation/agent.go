package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The LS service is this binary run with "serve", built static and mounted read-only into the LS
// pod's busybox container. A Go server is steady to the microsecond where busybox httpd forking a
// CGI shell per request costs milliseconds and varies with the fork; and the same binary needs no
// image of its own (the test image cannot be extended without touching e2e/framework).

// burn runs xorshift rounds (pure CPU: no memory traffic, no syscalls but the clock) until the
// calling thread has used d of CPU. The demand is fixed in CPU time, not in rounds: a count of rounds
// calibrated once took 4× longer inside the server than in a tight calibration loop on this VM
// (frequency and cache state differ between a burst and a loop), and a fixed CPU time is what "the
// service needs 0.2 ms per request" means. Waiting for the CPU while another thread runs is not
// counted, so under contention the request's wall time grows, as a real service's would. The
// goroutine is locked to its thread so that the thread's clock is the request's.
func burn(d time.Duration) uint64 {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	start := threadCPU()
	x := uint64(88172645463325252)
	for threadCPU()-start < d {
		for range 2000 {
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
		}
	}
	return x
}

// threadCPU is the CPU time the calling thread has used.
func threadCPU() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return time.Duration(math.MaxInt64) // ends the burn rather than spinning forever
	}
	return time.Duration(ts.Nano())
}

// serveMain serves GET / on addr, burning work of CPU per request, until ctx ends.
func serveMain(ctx context.Context, addr string, work time.Duration) error {
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte(strconv.FormatUint(burn(work)&0xff, 10) + "\n"))
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", addr, err)
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(lis) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	}
}

// ownCPUSeconds is this process's user+system CPU time so far.
func ownCPUSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}
