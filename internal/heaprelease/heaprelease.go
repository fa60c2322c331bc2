// Package heaprelease gives the Go heap's free pages back to the kernel while the process is quiet.
//
// Go's runtime keeps the pages a burst of work left free: its scavenger returns only what exceeds the
// next heap goal by 10 %, slowly, because a busy process would fault the pages in again at once. A node
// agent is mostly quiet, though: kubelet's relists every second and the collector's reads allocate a
// fraction of a heap goal between two checks (1.5-2.2 MB in 10 s with 100 containers, against a goal of
// 4.4-5 MB). tandem-proxy at rest after bench/crilatency's load held 9.0-9.6 MiB of anonymous memory,
// and holds 7.5 MiB with this release, the same as a bare gRPC relay's (docs/performance.md).
// Anonymous memory is what the node cannot take back without swap, so returning it while nothing
// needs it serves the node.
//
// Each release costs one garbage collection (a millisecond or two of CPU with a 2-3 MB live heap) and
// the page faults of growing the heap again; it happens only in an interval in which the process
// allocated less than one heap goal, so never under load, where the pages would be reused at once.
package heaprelease

import (
	"context"
	"runtime/debug"
	"runtime/metrics"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
)

// DefaultInterval is how often the heap is looked at: no longer than a quiet agent's own collection
// cycle (10-15 s at rest with 100 containers, allocating 140-220 KB/s), or its heap would have grown
// back to the goal between two releases.
const DefaultInterval = 10 * time.Second

// Sample is what the runtime reports at one check.
type Sample struct {
	// Allocs is the bytes allocated on the heap since the process started.
	Allocs uint64
	// Goal is the heap size at which the next collection ends.
	Goal uint64
	// Live is the heap the last collection marked live.
	Live uint64
	// Held is the heap memory the process holds, in use or free; a release keeps about Live of it.
	Held uint64
	// Released is heap memory already given back to the kernel.
	Released uint64
}

// Read takes a Sample from the running process.
func Read() Sample {
	s := []metrics.Sample{
		{Name: "/gc/heap/allocs:bytes"},
		{Name: "/gc/heap/goal:bytes"},
		{Name: "/gc/heap/live:bytes"},
		// The heap's pages the process holds: objects (live or not yet swept), the unused rest of
		// their spans, and free spans not yet given back.
		{Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/memory/classes/heap/unused:bytes"},
		{Name: "/memory/classes/heap/free:bytes"},
		{Name: "/memory/classes/heap/released:bytes"},
	}
	metrics.Read(s)
	v := func(i int) uint64 {
		if s[i].Value.Kind() != metrics.KindUint64 {
			// A metric this Go does not have: 0 makes the goal 0, which is never quiet.
			return 0
		}
		return s[i].Value.Uint64()
	}
	return Sample{Allocs: v(0), Goal: v(1), Live: v(2), Held: v(3) + v(4) + v(5), Released: v(6)}
}

// MinRelease is the least heap over the live heap worth a collection to give back: a process that
// allocates next to nothing is left alone.
const MinRelease = 1 << 20

// Quiet says whether the interval from prev to cur calls for a release: the process allocated less
// than one heap goal in it (so at most one collection would have run anyway, and the pages are not about
// to be reused), and holds at least MinRelease more heap than it had live. A zero goal means the metrics
// were not read; that is never quiet.
func Quiet(prev, cur Sample) bool {
	if cur.Goal == 0 || cur.Allocs < prev.Allocs {
		return false
	}
	return cur.Allocs-prev.Allocs < cur.Goal && cur.Held >= cur.Live+MinRelease
}

// Releaser checks the heap every interval and gives its free pages back when the process is quiet. Its
// Step and Run are for one goroutine.
type Releaser struct {
	interval time.Duration
	prev     Sample
}

// New returns a Releaser of this process's heap.
func New(interval time.Duration) *Releaser {
	return &Releaser{interval: interval}
}

// Step takes one sample and releases if the interval since the last one was quiet. It returns whether
// it released, and the heap memory given back.
func (r *Releaser) Step() (bool, uint64) {
	cur := Read()
	prev := r.prev
	r.prev = cur
	if prev.Goal == 0 || !Quiet(prev, cur) {
		return false, 0
	}
	debug.FreeOSMemory()
	after := Read()
	var given uint64
	if after.Released > cur.Released {
		given = after.Released - cur.Released
	}
	return true, given
}

// Run checks every interval until ctx ends. A zero or negative interval disables it.
func (r *Releaser) Run(ctx context.Context) error {
	if r.interval <= 0 {
		return nil
	}
	logger := klog.FromContext(ctx)
	wait.UntilWithContext(ctx, func(context.Context) {
		if ok, given := r.Step(); ok {
			logger.V(4).Info("Free heap given back to the kernel", "bytes", given)
		}
	}, r.interval)
	return nil
}
