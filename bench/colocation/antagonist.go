package main

import (
	"context"
	"fmt"
	"runtime"
)

// The BE antagonists beside the CPU spinner. Real batch work (Spark, training, builds) also streams
// memory and thrashes the last-level cache; a spinner does neither. Each runs in this binary, mounted
// into the BE pods' busybox containers like the LS service, on one thread, until ctx ends.
const (
	antagonistCPU    = "cpu"    // a shell spinning: CPU only (the default, as before)
	antagonistMemory = "memory" // copies between two buffers far larger than the last-level cache
	antagonistCache  = "cache"  // reads random lines of a buffer twice the last-level cache
)

// antagonistBytes is each antagonist's buffer: 64 MiB, twice this machine's 32 MiB L3, so that its
// lines evict everything else's. Three BE pods hold 384 MiB (memory) or 192 MiB (cache).
const antagonistBytes = 64 << 20

// antagonistMain runs kind until ctx ends.
func antagonistMain(ctx context.Context, kind string) error {
	runtime.LockOSThread()
	switch kind {
	case antagonistMemory:
		a, b := make([]byte, antagonistBytes), make([]byte, antagonistBytes)
		for i := range a {
			a[i] = byte(i)
		}
		for ctx.Err() == nil {
			copy(b, a)
			copy(a, b)
		}
	case antagonistCache:
		buf := make([]uint64, antagonistBytes/8)
		for i := range buf {
			buf[i] = uint64(i)
		}
		x, sum := uint64(88172645463325252), uint64(0)
		for ctx.Err() == nil {
			for range 1 << 16 {
				x ^= x << 13
				x ^= x >> 7
				x ^= x << 17
				// One 64-byte line in eight words; a write now and then keeps lines dirty, as real work does.
				i := (x % uint64(len(buf))) &^ 7
				sum += buf[i]
				if x&15 == 0 {
					buf[i] = sum
				}
			}
		}
		runtime.KeepAlive(sum)
	default:
		return fmt.Errorf("antagonist %q: want %s or %s (the CPU antagonist is a shell)", kind, antagonistMemory, antagonistCache)
	}
	return nil
}

// touchTable is the LS service's working set: 16 MiB, half of this machine's L3, which it keeps warm
// alone and loses to an antagonist that sweeps the cache. Read-only once built: requests touch it
// concurrently.
type touchTable []uint64

func newTouchTable() touchTable {
	t := make(touchTable, (16<<20)/8)
	for i := range t {
		t[i] = uint64(i) * 2654435761
	}
	return t
}

// touch reads n bytes' worth of random 64-byte lines of the table, from seed.
func (t touchTable) touch(seed uint64, n int) uint64 {
	x, sum := seed|1, uint64(0)
	for range n / 64 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		sum += t[(x%uint64(len(t)))&^7]
	}
	return sum
}
