package cpuset_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"k8s.io/utils/cpuset"

	tcpuset "github.com/tandemkit/tandem/resource/cpuset"
	"github.com/tandemkit/tandem/resource/qos"
	"github.com/tandemkit/tandem/resource/topology"
	"github.com/tandemkit/tandem/resource/topology/topologytest"
)

// The allocator runs on fake sysfs trees (see resource/topology/testdata): the test host has 2 CPUs and
// one NUMA node, and the placement rules only show on SMT, multi-socket machines.
const (
	tree16 = "16cpu-2socket-smt" // CPU i and i+8 are siblings; NUMA0 = 0-3,8-11, NUMA1 = 4-7,12-15
	tree96 = "96cpu-2socket-smt" // CPU i and i+48 are siblings; NUMA0 = 0-23,48-71
	tree2  = "2cpu-vm"           // this test host, captured
)

func discover(t testing.TB, shape string) *topology.Topology {
	t.Helper()
	topo, err := topology.Discover(filepath.Join("..", "topology", "testdata", shape))
	if err != nil {
		t.Fatal(err)
	}
	return topo
}

func newAllocator(t testing.TB, topo *topology.Topology, cfg tcpuset.Config) *tcpuset.Allocator {
	t.Helper()
	a, err := tcpuset.New(topo, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func set(s string) cpuset.CPUSet {
	c, err := cpuset.Parse(s)
	if err != nil {
		panic(err)
	}
	return c
}

// held is an allocation a test starts from, put in place with Restore.
type held struct {
	owner string
	class qos.Class
	cpus  string
}

func restoreAll(t *testing.T, a *tcpuset.Allocator, hs []held) {
	t.Helper()
	for _, h := range hs {
		if err := a.Restore(h.owner, h.class, set(h.cpus)); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSeed000 reproduces Koordinator's documented QoS example on its 16-CPU machine, the cpusets users
// check a colocation system against: LSE 2 and LSR 2 with SpreadByPCPUs, then the LS pod's cpuset is 4-15
// and the BE pod's is everything but the LSE CPUs.
func TestSeed000(t *testing.T) {
	t.Parallel()
	a := newAllocator(t, discover(t, tree16), tcpuset.DefaultConfig())
	lse, err := a.Allocate("nginx-lse", qos.LSE, 2, tcpuset.SpreadByPCPUs)
	if err != nil {
		t.Fatal(err)
	}
	lsr, err := a.Allocate("nginx-lsr", qos.LSR, 2, tcpuset.SpreadByPCPUs)
	if err != nil {
		t.Fatal(err)
	}
	p := a.Pools()
	for _, c := range []struct{ name, got, want string }{
		{"LSE container", lse.String(), "0-1"},
		{"LSR container", lsr.String(), "2-3"},
		{"LSE pool", p.LSE.String(), "0-1"},
		{"LSR pool", p.LSR.String(), "2-3"},
		{"LS pool", p.LS.String(), "4-15"},
		{"BE pool", p.BE.String(), "2-15"},
	} {
		if c.got != c.want {
			t.Errorf("%s = %q, want %q", c.name, c.got, c.want)
		}
	}
}

func TestPlacement(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		shape  string
		cfg    tcpuset.Config
		held   []held
		n      int
		policy tcpuset.BindPolicy
		want   string
	}{
		// FullPCPUs: whole cores.
		{name: "full: one whole core", shape: tree16, n: 2, policy: tcpuset.FullPCPUs, want: "0,8"},
		{name: "full: default policy is FullPCPUs", shape: tree16, n: 2, want: "0,8"},
		{name: "full: two whole cores in NUMA0", shape: tree16, n: 4, policy: tcpuset.FullPCPUs, want: "0-1,8-9"},
		{name: "full: a whole node", shape: tree16, n: 8, policy: tcpuset.FullPCPUs, want: "0-3,8-11"},
		{name: "full: odd count splits one core only when no core is partly used", shape: tree16, n: 3,
			policy: tcpuset.FullPCPUs, want: "0-1,8"},
		{name: "full: odd remainder fills a partly used core instead of splitting a whole one", shape: tree16, n: 3,
			held: []held{{"other", qos.LSR, "1"}}, policy: tcpuset.FullPCPUs, want: "0,8-9"},
		{name: "full: one CPU goes to a partly used core", shape: tree16, n: 1,
			held: []held{{"other", qos.LSE, "2"}}, policy: tcpuset.FullPCPUs, want: "10"},
		{name: "full: whole cores are skipped past partly used ones", shape: tree16, n: 2,
			held: []held{{"other", qos.LSE, "0,9"}}, policy: tcpuset.FullPCPUs, want: "2,10"},
		{name: "full: a node with whole cores beats a fuller node without", shape: tree16, n: 2,
			held: []held{{"other", qos.LSE, "0-3"}}, policy: tcpuset.FullPCPUs, want: "4,12"},
		{name: "full: best fit picks the fuller node", shape: tree16, n: 4,
			held: []held{{"other", qos.LSE, "4"}}, policy: tcpuset.FullPCPUs, want: "5-6,13-14"},
		{name: "full: a core with a reserved sibling is never whole", shape: tree16, n: 2,
			cfg: tcpuset.Config{Reserved: set("0"), MinSharedCPUs: 1}, policy: tcpuset.FullPCPUs, want: "1,9"},
		{name: "full: too big for one node spans both, whole cores", shape: tree16, n: 10, policy: tcpuset.FullPCPUs,
			want: "0-4,8-12"},
		{name: "full: no whole core left anywhere", shape: tree16, n: 2,
			held: []held{{"other", qos.LSE, "0-7"}}, policy: tcpuset.FullPCPUs, want: "8-9"},
		{name: "full: 96 CPUs, 24 CPUs fill NUMA0's first 12 cores", shape: tree96, n: 24, policy: tcpuset.FullPCPUs,
			want: "0-11,48-59"},
		{name: "full: no SMT", shape: tree2, n: 1, policy: tcpuset.FullPCPUs, want: "0"},

		// SpreadByPCPUs: one thread per core first.
		{name: "spread: two cores", shape: tree16, n: 2, policy: tcpuset.SpreadByPCPUs, want: "0-1"},
		{name: "spread: every core of NUMA0", shape: tree16, n: 4, policy: tcpuset.SpreadByPCPUs, want: "0-3"},
		{name: "spread: whole cores before partly used ones", shape: tree16, n: 2,
			held: []held{{"lse", qos.LSE, "0-1"}}, policy: tcpuset.SpreadByPCPUs, want: "2-3"},
		{name: "spread: second threads only after every core gave one", shape: tree16, n: 6,
			policy: tcpuset.SpreadByPCPUs, want: "0-3,8-9"},
		{name: "spread: a node where every thread gets its own core beats a fuller one", shape: tree16, n: 3,
			held: []held{{"other", qos.LSE, "0-1,8-9"}}, policy: tcpuset.SpreadByPCPUs, want: "4-6"},
		{name: "spread: too big for one node", shape: tree16, n: 10, policy: tcpuset.SpreadByPCPUs, want: "0-9"},
		{name: "spread: 96 CPUs, 24 threads on 24 cores", shape: tree96, n: 24, policy: tcpuset.SpreadByPCPUs,
			want: "0-23"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := tc.cfg
			if cfg.Reserved.Size() == 0 && cfg.MinSharedCPUs == 0 {
				cfg = tcpuset.DefaultConfig()
			}
			a := newAllocator(t, discover(t, tc.shape), cfg)
			restoreAll(t, a, tc.held)
			got, err := a.Allocate("pod", qos.LSE, tc.n, tc.policy)
			if err != nil {
				t.Fatal(err)
			}
			if got.String() != tc.want {
				t.Errorf("Allocate(%d, %s) = %q, want %q", tc.n, tc.policy, got.String(), tc.want)
			}
		})
	}
}

// TestFullPCPUsNeverSplits allocates even counts from many starting states and checks that every chosen
// core is taken whole whenever one NUMA node has enough whole free cores.
func TestFullPCPUsNeverSplits(t *testing.T) {
	t.Parallel()
	topo := discover(t, tree96)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 200 {
		a := newAllocator(t, topo, tcpuset.DefaultConfig())
		// Hold a random scatter of single threads so that many cores are partly used.
		for j := range rng.IntN(40) {
			_, _ = a.Allocate(fmt.Sprintf("scatter-%d", j), qos.LSR, 1, tcpuset.SpreadByPCPUs)
		}
		n := 2 * (1 + rng.IntN(12))
		before := wholeFreeCoresPerNode(topo, a)
		got, err := a.Allocate("pod", qos.LSE, n, tcpuset.FullPCPUs)
		if err != nil {
			t.Fatalf("state %d: %v", i, err)
		}
		if maxOf(before) >= n/2 {
			if split := splitCores(topo, got); len(split) > 0 {
				t.Fatalf("state %d: %d CPUs %q split cores %v although a node had %v whole free cores",
					i, n, got.String(), split, before)
			}
		}
	}
}

// wholeFreeCoresPerNode counts, per NUMA node, the cores whose CPUs are all usable and free.
func wholeFreeCoresPerNode(topo *topology.Topology, a *tcpuset.Allocator) map[int]int {
	taken := cpuset.New()
	for _, al := range a.Allocations() {
		taken = taken.Union(al.CPUs)
	}
	out := map[int]int{}
	for _, c := range topo.Cores {
		if c.CPUs.IsSubsetOf(a.Usable()) && c.CPUs.Intersection(taken).IsEmpty() {
			out[c.NUMANode]++
		}
	}
	return out
}

func maxOf(m map[int]int) int {
	n := 0
	for _, v := range m {
		n = max(n, v)
	}
	return n
}

// splitCores lists the cores of which got holds some threads but not all.
func splitCores(topo *topology.Topology, got cpuset.CPUSet) []string {
	var split []string
	for _, c := range topo.Cores {
		if in := c.CPUs.Intersection(got); !in.IsEmpty() && !in.Equals(c.CPUs) {
			split = append(split, c.CPUs.String())
		}
	}
	return split
}

// TestNUMALocality checks that a request that fits into one NUMA node lands in one, whatever is held.
func TestNUMALocality(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		held   []held
		policy tcpuset.BindPolicy
	}{
		{name: "empty machine, full", policy: tcpuset.FullPCPUs},
		{name: "empty machine, spread", policy: tcpuset.SpreadByPCPUs},
		{name: "NUMA0 half used, full", held: []held{{"a", qos.LSE, "0-1,8-9"}}, policy: tcpuset.FullPCPUs},
		{name: "NUMA0 half used, spread", held: []held{{"a", qos.LSE, "0-1,8-9"}}, policy: tcpuset.SpreadByPCPUs},
		{name: "both nodes scattered, full", held: []held{{"a", qos.LSR, "0,5,10,15"}}, policy: tcpuset.FullPCPUs},
		{name: "both nodes scattered, spread", held: []held{{"a", qos.LSR, "0,5,10,15"}}, policy: tcpuset.SpreadByPCPUs},
		{name: "only NUMA1 has room", held: []held{{"a", qos.LSE, "0-2,8-10"}}, policy: tcpuset.FullPCPUs},
	}
	topo := discover(t, tree16)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a := newAllocator(t, topo, tcpuset.DefaultConfig())
			restoreAll(t, a, tc.held)
			got, err := a.Allocate("pod", qos.LSR, 4, tc.policy)
			if err != nil {
				t.Fatal(err)
			}
			if got.Size() != 4 {
				t.Fatalf("got %q, want 4 CPUs", got.String())
			}
			if inOneNode(topo, got) < 0 {
				t.Errorf("4 CPUs %q span NUMA nodes", got.String())
			}
		})
	}
}

// inOneNode returns the NUMA node that holds all of cpus, or -1.
func inOneNode(topo *topology.Topology, cpus cpuset.CPUSet) int {
	for _, n := range topo.NUMANodes {
		if cpus.IsSubsetOf(n.CPUs) {
			return n.ID
		}
	}
	return -1
}

func TestExhaustion(t *testing.T) {
	t.Parallel()
	topo := discover(t, tree16)
	tests := []struct {
		name    string
		cfg     tcpuset.Config
		held    []held
		n       int
		wantErr string // "" for success
	}{
		{name: "more than the machine", cfg: tcpuset.DefaultConfig(), n: 17, wantErr: "want 17, free 15"},
		{name: "the shared pool keeps one CPU", cfg: tcpuset.DefaultConfig(), n: 16, wantErr: "want 16, free 15"},
		{name: "all but the shared CPU", cfg: tcpuset.DefaultConfig(), n: 15},
		{name: "every CPU when the shared pool may be empty", cfg: tcpuset.Config{}, n: 16},
		{name: "partly held", cfg: tcpuset.DefaultConfig(), held: []held{{"a", qos.LSE, "0-9"}}, n: 6,
			wantErr: "want 6, free 5"},
		{name: "reserved CPUs are not free", cfg: tcpuset.Config{Reserved: set("0-3")}, n: 13, wantErr: "want 13, free 12"},
		{name: "a node whose only usable CPU is the shared one", cfg: tcpuset.Config{Reserved: set("0-14"), MinSharedCPUs: 1}, n: 1,
			wantErr: "want 1, free 0"},
		{name: "LSR CPUs are not free for LSE either", cfg: tcpuset.Config{}, held: []held{{"a", qos.LSR, "0-13"}}, n: 3,
			wantErr: "want 3, free 2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a := newAllocator(t, topo, tc.cfg)
			restoreAll(t, a, tc.held)
			poolsBefore := a.Pools()
			got, err := a.Allocate("pod", qos.LSE, tc.n, tcpuset.FullPCPUs)
			if tc.wantErr == "" {
				if err != nil || got.Size() != tc.n {
					t.Fatalf("Allocate(%d) = %q, %v; want %d CPUs", tc.n, got.String(), err, tc.n)
				}
				return
			}
			if !errdefs.IsResourceExhausted(err) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Allocate(%d) = %q, %v; want resource exhausted with %q", tc.n, got.String(), err, tc.wantErr)
			}
			if _, ok := a.Get("pod"); ok {
				t.Error("a failed allocation left an allocation behind")
			}
			if p := a.Pools(); !p.LS.Equals(poolsBefore.LS) || !p.BE.Equals(poolsBefore.BE) {
				t.Errorf("a failed allocation changed the pools: %+v → %+v", poolsBefore, p)
			}
		})
	}
}

func TestInvalidArguments(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		owner  string
		class  qos.Class
		n      int
		policy tcpuset.BindPolicy
	}{
		{name: "zero CPUs", owner: "pod", class: qos.LSE, n: 0},
		{name: "negative CPUs", owner: "pod", class: qos.LSR, n: -2},
		{name: "LS holds no exclusive CPUs", owner: "pod", class: "LS", n: 1},
		{name: "BE holds no exclusive CPUs", owner: "pod", class: "BE", n: 1},
		{name: "no class", owner: "pod", n: 1},
		{name: "no owner", class: qos.LSE, n: 1},
		{name: "unknown policy", owner: "pod", class: qos.LSE, n: 1, policy: "Spread"},
	}
	a := newAllocator(t, discover(t, tree16), tcpuset.DefaultConfig())
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := a.Allocate(tc.owner, tc.class, tc.n, tc.policy)
			if !errdefs.IsInvalidArgument(err) {
				t.Fatalf("Allocate = %q, %v; want an invalid-argument error", got.String(), err)
			}
			if !got.IsEmpty() {
				t.Errorf("a rejected request returned CPUs %q", got.String())
			}
		})
	}
	t.Cleanup(func() {
		if n := len(a.Allocations()); n != 0 {
			t.Errorf("rejected requests left %d allocations behind", n)
		}
	})
}

func TestAllocateTwice(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		class  qos.Class
		n      int
		policy tcpuset.BindPolicy
		same   bool // true: the first set back; false: an already-exists error
	}{
		{name: "same request", class: qos.LSE, n: 2, policy: tcpuset.FullPCPUs, same: true},
		{name: "same class and size, other policy", class: qos.LSE, n: 2, policy: tcpuset.SpreadByPCPUs, same: true},
		{name: "other size", class: qos.LSE, n: 4, policy: tcpuset.FullPCPUs},
		{name: "other class", class: qos.LSR, n: 2, policy: tcpuset.FullPCPUs},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a := newAllocator(t, discover(t, tree16), tcpuset.DefaultConfig())
			first, err := a.Allocate("pod", qos.LSE, 2, tcpuset.FullPCPUs)
			if err != nil {
				t.Fatal(err)
			}
			again, err := a.Allocate("pod", tc.class, tc.n, tc.policy)
			if tc.same {
				if err != nil || !again.Equals(first) {
					t.Fatalf("second Allocate = %q, %v; want %q again", again.String(), err, first.String())
				}
			} else if !errdefs.IsAlreadyExists(err) {
				t.Fatalf("second Allocate = %q, %v; want an already-exists error", again.String(), err)
			}
			if al, _ := a.Get("pod"); !al.CPUs.Equals(first) || al.Class != qos.LSE || len(a.Allocations()) != 1 {
				t.Errorf("after the second call the allocation is %+v, want LSE %q only", al, first.String())
			}
		})
	}
}

func TestRelease(t *testing.T) {
	t.Parallel()
	a := newAllocator(t, discover(t, tree16), tcpuset.DefaultConfig())
	lse, err := a.Allocate("lse", qos.LSE, 4, tcpuset.FullPCPUs)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Allocate("lsr", qos.LSR, 4, tcpuset.FullPCPUs); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Allocate("big", qos.LSE, 11, tcpuset.FullPCPUs); !errdefs.IsResourceExhausted(err) {
		t.Fatalf("Allocate(11) with 8 CPUs held = %v; want resource exhausted", err)
	}
	if !a.Release("lse") {
		t.Fatal("Release of a held allocation reported nothing released")
	}
	if a.Release("lse") {
		t.Error("second Release reported something released")
	}
	if a.Release("never-allocated") {
		t.Error("Release of an unknown owner reported something released")
	}
	p := a.Pools()
	if !lse.IsSubsetOf(p.LS) || !lse.IsSubsetOf(p.BE) || !p.LSE.IsEmpty() {
		t.Errorf("released CPUs %q are not back in LS and BE: %+v", lse.String(), p)
	}
	// The released CPUs can be handed out again: 16 − 4 (LSR) − 1 (shared) = 11.
	if got, err := a.Allocate("big", qos.LSE, 11, tcpuset.FullPCPUs); err != nil || got.Intersection(lse).Size() < 3 {
		t.Errorf("Allocate(11) after release = %q, %v; want 11 CPUs, 3 or more of them from %q", got.String(), err, lse.String())
	}
}

func TestRestore(t *testing.T) {
	t.Parallel()
	topo := discover(t, tree16)
	tests := []struct {
		name    string
		cfg     tcpuset.Config
		held    []held
		restore held
		wantErr func(error) bool // nil: success
	}{
		{name: "free CPUs", restore: held{"pod", qos.LSE, "0-1"}},
		{name: "same allocation twice", held: []held{{"pod", qos.LSE, "0-1"}}, restore: held{"pod", qos.LSE, "0-1"}},
		{name: "overlap with another LSE owner", held: []held{{"a", qos.LSE, "0-1"}},
			restore: held{"pod", qos.LSE, "1-2"}, wantErr: errdefs.IsAlreadyExists},
		{name: "overlap between LSE and LSR", held: []held{{"a", qos.LSR, "2-3"}},
			restore: held{"pod", qos.LSE, "3"}, wantErr: errdefs.IsAlreadyExists},
		{name: "overlap between LSR owners", held: []held{{"a", qos.LSR, "2-3"}},
			restore: held{"pod", qos.LSR, "3-4"}, wantErr: errdefs.IsAlreadyExists},
		{name: "same owner, other CPUs", held: []held{{"pod", qos.LSE, "0-1"}},
			restore: held{"pod", qos.LSE, "4-5"}, wantErr: errdefs.IsAlreadyExists},
		{name: "same owner, other class", held: []held{{"pod", qos.LSE, "0-1"}},
			restore: held{"pod", qos.LSR, "0-1"}, wantErr: errdefs.IsAlreadyExists},
		{name: "reserved CPU", cfg: tcpuset.Config{Reserved: set("0")},
			restore: held{"pod", qos.LSE, "0-1"}, wantErr: errdefs.IsInvalidArgument},
		{name: "offline CPU", restore: held{"pod", qos.LSE, "15-16"}, wantErr: errdefs.IsInvalidArgument},
		{name: "no CPUs", restore: held{"pod", qos.LSE, ""}, wantErr: errdefs.IsInvalidArgument},
		{name: "no class", restore: held{"pod", "", "0"}, wantErr: errdefs.IsInvalidArgument},
		{name: "restore may take the last shared CPU", held: []held{{"a", qos.LSE, "0-14"}},
			restore: held{"pod", qos.LSR, "15"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := tc.cfg
			if cfg.Reserved.Size() == 0 {
				cfg = tcpuset.DefaultConfig()
			}
			a := newAllocator(t, topo, cfg)
			restoreAll(t, a, tc.held)
			before := a.Allocations()
			err := a.Restore(tc.restore.owner, tc.restore.class, set(tc.restore.cpus))
			if tc.wantErr == nil {
				if err != nil {
					t.Fatal(err)
				}
				if al, ok := a.Get(tc.restore.owner); !ok || al.Class != tc.restore.class || al.CPUs.String() != tc.restore.cpus {
					t.Errorf("after Restore the allocation is %+v, want %s %q", al, tc.restore.class, tc.restore.cpus)
				}
				return
			}
			if !tc.wantErr(err) {
				t.Fatalf("Restore = %v; want an error of the other class", err)
			}
			if after := a.Allocations(); !sameAllocations(before, after) {
				t.Errorf("a rejected Restore changed the allocations: %v → %v", before, after)
			}
		})
	}
}

func samePools(x, y tcpuset.Pools) bool {
	return x.LSE.Equals(y.LSE) && x.LSR.Equals(y.LSR) && x.LS.Equals(y.LS) && x.BE.Equals(y.BE)
}

func sameAllocations(x, y map[string]tcpuset.Allocation) bool {
	if len(x) != len(y) {
		return false
	}
	for o, a := range x {
		if b, ok := y[o]; !ok || a.Class != b.Class || !a.CPUs.Equals(b.CPUs) {
			return false
		}
	}
	return true
}

// TestCheckpointRoundTrip saves Allocations as JSON, as the proxy's checkpoint does, and rebuilds a
// fresh allocator from it: the pools come out identical.
func TestCheckpointRoundTrip(t *testing.T) {
	t.Parallel()
	topo := discover(t, tree96)
	a := newAllocator(t, topo, tcpuset.DefaultConfig())
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 30 {
		class := []qos.Class{qos.LSE, qos.LSR}[i%2]
		if _, err := a.Allocate(fmt.Sprintf("ctr-%d", i), class, 1+rng.IntN(4), tcpuset.SpreadByPCPUs); err != nil {
			t.Fatal(err)
		}
	}
	b, err := json.Marshal(a.Allocations())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"ctr-0":{"class":"LSE","cpus":"`) {
		t.Errorf("checkpoint does not hold readable CPU lists: %s", b)
	}
	var saved map[string]tcpuset.Allocation
	if err := json.Unmarshal(b, &saved); err != nil {
		t.Fatal(err)
	}
	restarted := newAllocator(t, topo, tcpuset.DefaultConfig())
	for owner, al := range saved {
		if err := restarted.Restore(owner, al.Class, al.CPUs); err != nil {
			t.Fatal(err)
		}
	}
	if !sameAllocations(a.Allocations(), restarted.Allocations()) {
		t.Errorf("restored allocations differ:\n%v\n%v", a.Allocations(), restarted.Allocations())
	}
	if !samePools(a.Pools(), restarted.Pools()) {
		t.Errorf("restored pools differ: %+v vs %+v", a.Pools(), restarted.Pools())
	}
	var bad tcpuset.Allocation
	if err := json.Unmarshal([]byte(`{"class":"LSE","cpus":"3-1"}`), &bad); !errdefs.IsInvalidArgument(err) {
		t.Errorf("a corrupt CPU list unmarshalled with %v; want an invalid-argument error", err)
	}
}

func TestIsolatedAndReservedStayOut(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	m := topologytest.Machine{Sockets: 1, CoresPerDie: 4, ThreadsPerCore: 2, Isolated: set("3,7")}
	if err := m.Write(root); err != nil {
		t.Fatal(err)
	}
	topo, err := topology.Discover(root)
	if err != nil {
		t.Fatal(err)
	}
	a := newAllocator(t, topo, tcpuset.Config{Reserved: set("0"), MinSharedCPUs: 1})
	if got := a.Usable(); got.String() != "1-2,4-6" {
		t.Errorf("usable = %q, want 1-2,4-6", got.String())
	}
	p := a.Pools()
	if p.LS.String() != "1-2,4-6" || p.BE.String() != "1-2,4-6" {
		t.Errorf("pools = %+v; want LS and BE 1-2,4-6", p)
	}
	// Everything that can be allocated: 5 usable − 1 shared.
	got, err := a.Allocate("all", qos.LSE, 4, tcpuset.FullPCPUs)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Intersection(set("0,3,7")).IsEmpty() {
		t.Errorf("allocation %q includes reserved or isolated CPUs", got.String())
	}
	// FullPCPUs prefers the whole cores {1,5} and {2,6}.
	if got.String() != "1-2,5-6" {
		t.Errorf("allocation = %q, want 1-2,5-6", got.String())
	}
}

func TestNewRejects(t *testing.T) {
	t.Parallel()
	topo := discover(t, tree2)
	tests := []struct {
		name string
		topo *topology.Topology
		cfg  tcpuset.Config
	}{
		{name: "no topology", cfg: tcpuset.DefaultConfig()},
		{name: "reserved CPU not online", topo: topo, cfg: tcpuset.Config{Reserved: set("5")}},
		{name: "nothing left after reserving", topo: topo, cfg: tcpuset.Config{Reserved: set("0-1")}},
		{name: "negative shared pool", topo: topo, cfg: tcpuset.Config{MinSharedCPUs: -1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if _, err := tcpuset.New(tc.topo, tc.cfg); !errdefs.IsInvalidArgument(err) {
				t.Fatalf("New = %v; want an invalid-argument error", err)
			}
		})
	}
}

func TestParseBindPolicy(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want tcpuset.BindPolicy
		ok   bool
	}{
		{"", tcpuset.FullPCPUs, true},
		{"Default", tcpuset.FullPCPUs, true},
		{"FullPCPUs", tcpuset.FullPCPUs, true},
		{"SpreadByPCPUs", tcpuset.SpreadByPCPUs, true},
		{"fullpcpus", "", false},
		{"ConstrainedBurst", "", false},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			t.Parallel()
			got, err := tcpuset.ParseBindPolicy(tc.in)
			if tc.ok != (err == nil) || got != tc.want {
				t.Fatalf("ParseBindPolicy(%q) = %q, %v; want %q (ok %v)", tc.in, got, err, tc.want, tc.ok)
			}
			if err != nil && !errdefs.IsInvalidArgument(err) {
				t.Errorf("error %v is not an invalid-argument error", err)
			}
		})
	}
}
