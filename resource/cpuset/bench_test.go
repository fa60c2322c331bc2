package cpuset_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	tcpuset "github.com/tandemkit/tandem/resource/cpuset"
	"github.com/tandemkit/tandem/resource/qos"
)

// benchSizes is the mix of exclusive requests, in CPUs: mostly 1 and 2, some 4 (2.1 on average).
var benchSizes = []int{1, 1, 1, 2, 2, 2, 4, 4}

// BenchmarkAllocate96 measures the allocator's decision time on the 96-CPU machine with 100 pods on
// it. 100 pods cannot all hold exclusive CPUs on 96 CPUs, so, as on a real node, 40 of them are LSE or
// LSR (about 85 of the 95 allocatable CPUs held, in the size mix above) and 60 are LS or BE, which the allocator does not
// track. Each operation releases one exclusive pod and allocates a new one of a random size and
// policy, so the node stays near full and fragmented, the expensive case. p50-ns and p99-ns are over
// the individual Allocate calls; ns/op includes the Release.
func BenchmarkAllocate96(b *testing.B) {
	a := newAllocator(b, discover(b, tree96), tcpuset.DefaultConfig())
	rng := rand.New(rand.NewPCG(96, 100))
	var held []string
	for i := 0; len(held) < 40; i++ {
		if i == 10_000 {
			b.Fatalf("only %d pods fit", len(held))
		}
		owner := fmt.Sprintf("fill-%d", i)
		if _, err := a.Allocate(owner, benchClass(i), benchSizes[rng.IntN(len(benchSizes))], benchPolicy(rng)); err == nil {
			held = append(held, owner)
		}
	}
	samples := make([]time.Duration, 0, b.N)
	refused := 0
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		j := rng.IntN(len(held))
		a.Release(held[j])
		owner := fmt.Sprintf("pod-%d", i)
		n := benchSizes[rng.IntN(len(benchSizes))]
		class, policy := benchClass(i), benchPolicy(rng)
		start := time.Now()
		_, err := a.Allocate(owner, class, n, policy)
		samples = append(samples, time.Since(start))
		switch {
		case err == nil:
			held[j] = owner
		case errdefs.IsResourceExhausted(err):
			// Keep the pod count: give the slot a 1-CPU pod, which always fits after a release.
			refused++
			if _, err := a.Allocate(owner, class, 1, policy); err != nil {
				b.Fatal(err)
			}
			held[j] = owner
		default:
			b.Fatal(err)
		}
	}
	b.StopTimer()
	slices.Sort(samples)
	b.ReportMetric(float64(samples[len(samples)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(samples[len(samples)*99/100].Nanoseconds()), "p99-ns")
	b.ReportMetric(float64(refused)/float64(b.N), "refused/op")
}

// BenchmarkPools96 measures Pools on the same node between changes, the call hooks make for every LS
// and BE container.
func BenchmarkPools96(b *testing.B) {
	a := newAllocator(b, discover(b, tree96), tcpuset.DefaultConfig())
	for i := range 40 {
		if _, err := a.Allocate(fmt.Sprintf("pod-%d", i), benchClass(i), 2, tcpuset.FullPCPUs); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		_ = a.Pools()
	}
}

func benchClass(i int) qos.Class {
	return []qos.Class{qos.LSE, qos.LSR}[i%2]
}

func benchPolicy(rng *rand.Rand) tcpuset.BindPolicy {
	return []tcpuset.BindPolicy{tcpuset.FullPCPUs, tcpuset.SpreadByPCPUs}[rng.IntN(2)]
}
