package proxy

import (
	"context"

	"golang.org/x/sync/semaphore"
	"google.golang.org/grpc/status"
)

// inflight bounds the bytes of lifecycle requests the proxy holds at once. A decoded call costs a few
// times its request (the received frame, the decoded request, what hooks copy, the request re-encoded
// for the runtime), so 30 concurrent 16 MB CreateContainers took the proxy past 2 GB of RSS.
//
// A call waits for room before its request is read: until then the request sits in the HTTP/2
// transport, which holds at most one flow-control window of it (requestWindow) and stops the sender
// there. So a waiting call costs little, and its size cannot be known yet: it reserves the largest
// message gRPC accepts and gives back the rest once the request is read. Reading a small request takes
// microseconds, so the reservation does not hold back kubelet's usual calls.
//
// Waiting, bounded by the call's own deadline, rather than refusing with ResourceExhausted: kubelet
// retries a refused pod start only at the pod's next sync, about 10 s later, and reports it as failed
// meanwhile, while the calls that hold the budget finish in milliseconds to seconds. kubelet sets a
// deadline on every CRI call (--runtime-request-timeout, 2 minutes by default).
//
// Relayed calls are not counted: their frames pass through without a copy, for the time of one write,
// and they include the List calls kubelet makes every second, whose path stays free of locks.
type inflight struct {
	sem     *semaphore.Weighted
	max     int64
	reserve int64
}

func newInflight(maxBytes int64, maxMsg int) *inflight {
	return &inflight{sem: semaphore.NewWeighted(maxBytes), max: maxBytes, reserve: int64(maxMsg)}
}

// admit waits until the largest request fits, within ctx. On success the caller holds reserve bytes and
// must call settle once the request is read.
func (f *inflight) admit(ctx context.Context) error {
	if err := f.sem.Acquire(ctx, f.reserve); err != nil {
		st := status.FromContextError(err)
		return status.Errorf(st.Code(), "tandem-proxy: lifecycle calls in flight hold all of max-inflight-bytes (%d) and none finished in time: %v", f.max, err)
	}
	return nil
}

// settle turns the reservation into the request's size n, and returns the release for the end of the
// call. n is at most reserve: gRPC refuses larger messages before they are read.
func (f *inflight) settle(n int) func() {
	held := min(int64(n), f.reserve)
	f.sem.Release(f.reserve - held)
	return func() { f.sem.Release(held) }
}

// abandon gives the reservation back when the request could not be read.
func (f *inflight) abandon() { f.sem.Release(f.reserve) }
