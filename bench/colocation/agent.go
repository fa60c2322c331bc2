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
	"strings"
	"syscall"
	"time"
	"unsafe"

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

// getcpu is the CPU the calling thread runs on, or -1. x/sys/unix has no wrapper; a raw syscall,
// since it never blocks.
func getcpu() int {
	var cpu uint32
	if _, _, e := unix.RawSyscall(unix.SYS_GETCPU, uintptr(unsafe.Pointer(&cpu)), 0, 0); e != 0 {
		return -1
	}
	return int(cpu)
}

// served is the server's record of one request, sent back in the answer's body for the client to
// attribute steal: the CPU and wall-clock time at the start and end of handling.
type served struct {
	cpuFrom, cpuTo int
	from, to       int64 // Unix ns
}

// appendServed writes the body: the burn's result (which keeps the compiler from dropping the
// burn), then the record, space-separated.
func appendServed(b []byte, x uint64, s served) []byte {
	b = strconv.AppendUint(b, x, 10)
	for _, v := range []int64{int64(s.cpuFrom), int64(s.cpuTo), s.from, s.to} {
		b = strconv.AppendInt(append(b, ' '), v, 10)
	}
	return append(b, '\n')
}

// parseServed reads appendServed's body; false if it is not one (a failure, another server).
func parseServed(b []byte) (served, bool) {
	f := strings.Fields(string(b))
	if len(f) != 5 {
		return served{}, false
	}
	var v [4]int64
	for i := range v {
		n, err := strconv.ParseInt(f[i+1], 10, 64)
		if err != nil {
			return served{}, false
		}
		v[i] = n
	}
	if v[0] < 0 || v[1] < 0 || v[0] > math.MaxInt32 || v[1] > math.MaxInt32 {
		return served{}, false
	}
	return served{cpuFrom: int(v[0]), cpuTo: int(v[1]), from: v[2], to: v[3]}, true
}

// serveMain serves GET / on addr, burning work of CPU and reading touch bytes of its working set per
// request, until ctx ends.
func serveMain(ctx context.Context, addr string, work time.Duration, touch int) error {
	var table touchTable
	if touch > 0 {
		table = newTouchTable()
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		// Two getcpu calls (0.2 µs each here) and two vDSO clock reads, next to a 200 µs burn. The
		// body is built in a fixed buffer: no more allocation than the formatted string before.
		s := served{from: time.Now().UnixNano(), cpuFrom: getcpu()}
		x := burn(work)
		if touch > 0 {
			x += table.touch(uint64(s.from), touch)
		}
		s.cpuTo, s.to = getcpu(), time.Now().UnixNano()
		var buf [96]byte
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write(appendServed(buf[:0], x&0xff, s))
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
