package cpuset_test

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/containerd/errdefs"
	"k8s.io/utils/cpuset"

	tcpuset "github.com/tandemkit/tandem/resource/cpuset"
	"github.com/tandemkit/tandem/resource/qos"
	"github.com/tandemkit/tandem/resource/topology"
	"github.com/tandemkit/tandem/resource/topology/topologytest"
)

// TestChurn runs 10 000 random allocate/release steps per machine and checks after every step that no
// two exclusive sets overlap, that the pools follow from the allocations, that a refusal was right,
// and that placement kept its promises; at the end every CPU is free again.
func TestChurn(t *testing.T) {
	t.Parallel()
	odd := t.TempDir()
	// 3 threads per core, a reserved CPU, an isolated CPU and an offline one: the uneven cases.
	oddMachine := topologytest.Machine{Sockets: 2, CoresPerDie: 3, ThreadsPerCore: 3,
		Isolated: set("4"), Offline: set("17")}
	if err := oddMachine.Write(odd); err != nil {
		t.Fatal(err)
	}
	oddTopo, err := topology.Discover(odd)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		topo *topology.Topology
		cfg  tcpuset.Config
		maxN int
		seed uint64
	}{
		{name: "16 CPUs", topo: discover(t, tree16), cfg: tcpuset.DefaultConfig(), maxN: 6, seed: 1},
		{name: "16 CPUs, shared pool may empty", topo: discover(t, tree16), cfg: tcpuset.Config{}, maxN: 9, seed: 2},
		{name: "96 CPUs", topo: discover(t, tree96), cfg: tcpuset.DefaultConfig(), maxN: 16, seed: 3},
		{name: "96 CPUs, 4 reserved", topo: discover(t, tree96), cfg: tcpuset.Config{Reserved: set("0,48,24,72"), MinSharedCPUs: 2},
			maxN: 30, seed: 4},
		{name: "SMT3, reserved, isolated, offline", topo: oddTopo, cfg: tcpuset.Config{Reserved: set("0"), MinSharedCPUs: 1},
			maxN: 5, seed: 5},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a := newAllocator(t, tc.topo, tc.cfg)
			rng := rand.New(rand.NewPCG(tc.seed, 42))
			var held []string
			var granted, refused int
			for step := range 10_000 {
				if len(held) > 0 && rng.IntN(2) == 0 {
					i := rng.IntN(len(held))
					if !a.Release(held[i]) {
						t.Fatalf("step %d: Release(%s) found nothing to release", step, held[i])
					}
					held[i] = held[len(held)-1]
					held = held[:len(held)-1]
				} else {
					owner := fmt.Sprintf("ctr-%d", step)
					class := []qos.Class{qos.LSE, qos.LSR}[rng.IntN(2)]
					policy := []tcpuset.BindPolicy{tcpuset.FullPCPUs, tcpuset.SpreadByPCPUs}[rng.IntN(2)]
					n := 1 + rng.IntN(tc.maxN)
					before := snapshot(a)
					got, err := a.Allocate(owner, class, n, policy)
					if err != nil {
						refused++
						if !errdefs.IsResourceExhausted(err) {
							t.Fatalf("step %d: Allocate(%d) = %v; only exhaustion is expected", step, n, err)
						}
						if avail := before.free.Size() - tc.cfg.MinSharedCPUs; n <= avail {
							t.Fatalf("step %d: Allocate(%d) refused with %d CPUs available: %v", step, n, avail, err)
						}
						if _, ok := a.Get(owner); ok {
							t.Fatalf("step %d: refused Allocate left an allocation", step)
						}
					} else {
						granted++
						held = append(held, owner)
						checkPlacement(t, step, tc.topo, before, got, n, policy)
					}
				}
				checkInvariants(t, step, a, tc.cfg, len(held))
			}
			for _, o := range held {
				a.Release(o)
			}
			p := a.Pools()
			if len(a.Allocations()) != 0 || !p.LSE.IsEmpty() || !p.LSR.IsEmpty() || !p.LS.Equals(a.Usable()) || !p.BE.Equals(a.Usable()) {
				t.Fatalf("after releasing everything: %d allocations, pools %+v; want all of %q free",
					len(a.Allocations()), p, a.Usable().String())
			}
			// The free counts came back too, not only the sets: the largest request fits again.
			all := a.Usable().Size() - tc.cfg.MinSharedCPUs
			if got, err := a.Allocate("all", qos.LSE, all, tcpuset.FullPCPUs); err != nil || got.Size() != all {
				t.Fatalf("Allocate(%d) on the emptied allocator = %q, %v", all, got.String(), err)
			}
			if granted < 1000 || refused < 10 {
				t.Errorf("churn exercised too little: %d granted, %d refused", granted, refused)
			}
			t.Logf("%d granted, %d refused", granted, refused)
		})
	}
}

// state is what a test can see of the allocator before a request.
type state struct {
	free cpuset.CPUSet // usable CPUs no one holds, which is the LS pool
}

func snapshot(a *tcpuset.Allocator) state {
	return state{free: a.Pools().LS}
}

// checkPlacement asserts the placement promises of the package doc against the state before the call.
func checkPlacement(t *testing.T, step int, topo *topology.Topology, before state, got cpuset.CPUSet, n int, policy tcpuset.BindPolicy) {
	t.Helper()
	if got.Size() != n || !got.IsSubsetOf(before.free) {
		t.Fatalf("step %d: Allocate(%d) = %q, want %d CPUs out of the free %q", step, n, got.String(), n, before.free.String())
	}
	fitsOneNode := false
	wholeCores, coresWithFree := 0, 0 // the best node's
	for _, nd := range topo.NUMANodes {
		free := nd.CPUs.Intersection(before.free)
		if free.Size() < n {
			continue
		}
		fitsOneNode = true
		w, f := 0, 0
		for _, c := range topo.Cores {
			if c.NUMANode != nd.ID {
				continue
			}
			if c.CPUs.IsSubsetOf(before.free) {
				w++
			}
			if !c.CPUs.Intersection(before.free).IsEmpty() {
				f++
			}
		}
		wholeCores, coresWithFree = max(wholeCores, w), max(coresWithFree, f)
	}
	if fitsOneNode && inOneNode(topo, got) < 0 {
		t.Fatalf("step %d: %d CPUs %q span NUMA nodes although one node had room", step, n, got.String())
	}
	if !fitsOneNode {
		return
	}
	tpc := topo.ThreadsPerCore()
	switch policy {
	case tcpuset.FullPCPUs:
		// With enough whole cores in one node, no whole core is split, except one for a remainder
		// smaller than a core. Only checked where every core has the same number of threads: with an
		// offline sibling, a 2-thread core among 3-thread ones makes whole-core arithmetic inexact.
		if uniformCores(topo) && wholeCores*tpc >= n {
			limit := 0
			if n%tpc != 0 {
				limit = 1
			}
			if split := newlySplit(topo, before.free, got); len(split) > limit {
				t.Fatalf("step %d: FullPCPUs %d CPUs %q split whole cores %v although a node had %d whole cores",
					step, n, got.String(), split, wholeCores)
			}
		}
	case tcpuset.SpreadByPCPUs:
		if coresWithFree >= n {
			if cores := distinctCores(topo, got); cores != n {
				t.Fatalf("step %d: SpreadByPCPUs %d CPUs %q use %d cores although a node had %d cores with a free thread",
					step, n, got.String(), cores, coresWithFree)
			}
		}
	}
}

func uniformCores(topo *topology.Topology) bool {
	for _, c := range topo.Cores {
		if c.CPUs.Size() != topo.ThreadsPerCore() {
			return false
		}
	}
	return true
}

// newlySplit lists the cores that were wholly free before and of which got holds some threads but
// not all.
func newlySplit(topo *topology.Topology, free, got cpuset.CPUSet) []string {
	var split []string
	for _, c := range topo.Cores {
		if in := c.CPUs.Intersection(got); c.CPUs.IsSubsetOf(free) && !in.IsEmpty() && !in.Equals(c.CPUs) {
			split = append(split, c.CPUs.String())
		}
	}
	return split
}

func distinctCores(topo *topology.Topology, cpus cpuset.CPUSet) int {
	seen := map[int]bool{}
	for _, id := range cpus.UnsortedList() {
		c, _ := topo.CPU(id)
		seen[c.Core] = true
	}
	return len(seen)
}

// checkInvariants asserts the exclusivity rules and that the pools follow from the allocations.
func checkInvariants(t *testing.T, step int, a *tcpuset.Allocator, cfg tcpuset.Config, wantOwners int) {
	t.Helper()
	allocs := a.Allocations()
	if len(allocs) != wantOwners {
		t.Fatalf("step %d: %d allocations, want %d", step, len(allocs), wantOwners)
	}
	usable := a.Usable()
	// Every exclusive set is disjoint from every other: LSE from LSE, LSE from LSR, LSR from LSR.
	holder := map[int]string{}
	var lseIDs, lsrIDs []int
	for owner, al := range allocs {
		if al.Class != qos.LSE && al.Class != qos.LSR {
			t.Fatalf("step %d: %s has class %q", step, owner, al.Class)
		}
		for _, id := range al.CPUs.UnsortedList() {
			if !usable.Contains(id) {
				t.Fatalf("step %d: %s holds %q, and CPU %d is not usable (%q)", step, owner, al.CPUs.String(), id, usable.String())
			}
			if other, ok := holder[id]; ok {
				t.Fatalf("step %d: %s %s CPUs %q overlap %s %s on CPU %d",
					step, al.Class, owner, al.CPUs.String(), allocs[other].Class, other, id)
			}
			holder[id] = owner
			if al.Class == qos.LSE {
				lseIDs = append(lseIDs, id)
			} else {
				lsrIDs = append(lsrIDs, id)
			}
		}
	}
	lse, lsr := cpuset.New(lseIDs...), cpuset.New(lsrIDs...)
	p := a.Pools()
	want := tcpuset.Pools{LSE: lse, LSR: lsr, LS: usable.Difference(lse).Difference(lsr), BE: usable.Difference(lse)}
	if !fastSamePools(p, want) {
		t.Fatalf("step %d: pools %+v, want %+v", step, p, want)
	}
	if p.LS.Size() < cfg.MinSharedCPUs {
		t.Fatalf("step %d: LS pool %q is smaller than the %d CPUs it keeps", step, p.LS.String(), cfg.MinSharedCPUs)
	}
	if !p.BE.Intersection(p.LSE).IsEmpty() || !p.LS.Intersection(p.LSR).IsEmpty() || !p.BE.Intersection(cfg.Reserved).IsEmpty() {
		t.Fatalf("step %d: pools break exclusivity: %+v", step, p)
	}
}

// fastSamePools is samePools without reflect.DeepEqual, which cpuset.CPUSet.Equals uses and which
// would make the churn test slow under -race.
func fastSamePools(x, y tcpuset.Pools) bool {
	eq := func(a, b cpuset.CPUSet) bool {
		if a.Size() != b.Size() {
			return false
		}
		for _, id := range a.UnsortedList() {
			if !b.Contains(id) {
				return false
			}
		}
		return true
	}
	return eq(x.LSE, y.LSE) && eq(x.LSR, y.LSR) && eq(x.LS, y.LS) && eq(x.BE, y.BE)
}

// TestConcurrent runs allocations, releases and pool reads from several goroutines; -race checks the
// locking, and the final state must still hold no overlap.
func TestConcurrent(t *testing.T) {
	t.Parallel()
	a := newAllocator(t, discover(t, tree96), tcpuset.DefaultConfig())
	const workers, steps = 8, 300
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for s := range steps {
				owner := fmt.Sprintf("w%d-%d", w, s)
				class := []qos.Class{qos.LSE, qos.LSR}[s%2]
				if _, err := a.Allocate(owner, class, 1+rng.IntN(4), tcpuset.SpreadByPCPUs); err != nil && !errdefs.IsResourceExhausted(err) {
					t.Errorf("Allocate: %v", err)
					return
				}
				_ = a.Pools()
				if s%3 != 0 {
					a.Release(owner)
				}
			}
		})
	}
	wg.Wait()
	checkInvariants(t, workers*steps, a, tcpuset.DefaultConfig(), len(a.Allocations()))
}
