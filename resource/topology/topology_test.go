package topology_test

import (
	"flag"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"k8s.io/utils/cpuset"

	"github.com/tandemkit/tandem/resource/topology"
	"github.com/tandemkit/tandem/resource/topology/topologytest"
)

// The trees under testdata/ are fake sysfs roots. They are fakes because the test host has 2 CPUs and
// one NUMA node, while the allocator must be right on SMT and multi-socket machines; Discover reads
// only plain files, so a tree of those files is all a machine shape is to it. The generated trees are
// committed so that a reader can see them; TestTestdataMatchesGenerator keeps them in step with the
// generator, and `go test ./resource/topology -run TestTestdata -update` rewrites them.
var update = flag.Bool("update", false, "rewrite the generated testdata trees")

// generated maps each generated testdata directory to its machine.
var generated = map[string]topologytest.Machine{
	// Two sockets of 4 cores with SMT, one NUMA node per socket: the machine of Koordinator's documented
	// QoS example, scaled down.
	"16cpu-2socket-smt": {Sockets: 2, CoresPerDie: 4, ThreadsPerCore: 2},
	// A common 2-socket server: 48 cores, 96 threads.
	"96cpu-2socket-smt": {Sockets: 2, CoresPerDie: 24, ThreadsPerCore: 2},
}

// capturedTree is this test host's own /sys, captured with topologytest.Capture.
const capturedTree = "testdata/2cpu-vm"

func TestTestdataMatchesGenerator(t *testing.T) {
	for name, m := range generated {
		dir := filepath.Join("testdata", name)
		if *update {
			if err := os.RemoveAll(dir); err != nil {
				t.Fatal(err)
			}
			if err := m.Write(dir); err != nil {
				t.Fatal(err)
			}
			continue
		}
		fresh := t.TempDir()
		if err := m.Write(fresh); err != nil {
			t.Fatal(err)
		}
		if got, want := readTree(t, dir), readTree(t, fresh); !equalMaps(got, want) {
			t.Errorf("%s differs from what the generator writes; run with -update", dir)
		}
	}
	if *update && runtime.GOOS == "linux" {
		if err := os.RemoveAll(capturedTree); err != nil {
			t.Fatal(err)
		}
		if err := topologytest.Capture("/sys", capturedTree); err != nil {
			t.Fatal(err)
		}
	}
}

func readTree(t *testing.T, root string) map[string]string {
	t.Helper()
	files := map[string]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		rel, _ := filepath.Rel(root, path)
		files[rel] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func set(s string) cpuset.CPUSet {
	c, err := cpuset.Parse(s)
	if err != nil {
		panic(err)
	}
	return c
}

func TestDiscoverTestdata(t *testing.T) {
	t.Parallel()
	type want struct {
		cpus, cores, sockets, threads int
		numa                          []string // CPU list of each NUMA node, in order
		siblings                      map[int]string
		isolated                      string
	}
	tests := []struct {
		name string
		root string
		want want
	}{
		{
			name: "16 CPUs, 2 sockets, SMT with Intel numbering",
			root: "testdata/16cpu-2socket-smt",
			want: want{cpus: 16, cores: 8, sockets: 2, threads: 2,
				numa:     []string{"0-3,8-11", "4-7,12-15"},
				siblings: map[int]string{0: "0,8", 8: "0,8", 3: "3,11", 4: "4,12", 15: "7,15"}},
		},
		{
			name: "96 CPUs, 2 sockets, SMT",
			root: "testdata/96cpu-2socket-smt",
			want: want{cpus: 96, cores: 48, sockets: 2, threads: 2,
				numa:     []string{"0-23,48-71", "24-47,72-95"},
				siblings: map[int]string{0: "0,48", 47: "47,95", 24: "24,72"}},
		},
		{
			name: "this test host, captured",
			root: capturedTree,
			want: want{cpus: 2, cores: 2, sockets: 1, threads: 1,
				numa:     []string{"0-1"},
				siblings: map[int]string{0: "0", 1: "1"}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			topo, err := topology.Discover(tc.root)
			if err != nil {
				t.Fatal(err)
			}
			if got := len(topo.CPUs); got != tc.want.cpus {
				t.Errorf("CPUs = %d, want %d", got, tc.want.cpus)
			}
			if got := topo.Online.Size(); got != tc.want.cpus {
				t.Errorf("online = %d CPUs, want %d", got, tc.want.cpus)
			}
			if got := len(topo.Cores); got != tc.want.cores {
				t.Errorf("cores = %d, want %d", got, tc.want.cores)
			}
			if got := len(topo.Sockets); got != tc.want.sockets {
				t.Errorf("sockets = %d, want %d", got, tc.want.sockets)
			}
			if got := topo.ThreadsPerCore(); got != tc.want.threads {
				t.Errorf("threads per core = %d, want %d", got, tc.want.threads)
			}
			var numa []string
			for _, n := range topo.NUMANodes {
				numa = append(numa, n.CPUs.String())
			}
			if strings.Join(numa, " ") != strings.Join(tc.want.numa, " ") {
				t.Errorf("NUMA nodes = %v, want %v", numa, tc.want.numa)
			}
			for cpu, sib := range tc.want.siblings {
				if got := topo.Siblings(cpu); !got.Equals(set(sib)) {
					t.Errorf("siblings of CPU %d = %q, want %q", cpu, got.String(), sib)
				}
			}
			if !topo.Isolated.Equals(set(tc.want.isolated)) {
				t.Errorf("isolated = %q, want %q", topo.Isolated.String(), tc.want.isolated)
			}
			checkConsistent(t, topo)
		})
	}
}

// checkConsistent asserts what the allocator relies on: every online CPU is in exactly one core, one
// NUMA node and one socket, and the indexes agree with each other.
func checkConsistent(t *testing.T, topo *topology.Topology) {
	t.Helper()
	var cores, nodes, sockets []cpuset.CPUSet
	for _, c := range topo.Cores {
		cores = append(cores, c.CPUs)
	}
	for _, n := range topo.NUMANodes {
		nodes = append(nodes, n.CPUs)
	}
	for _, s := range topo.Sockets {
		sockets = append(sockets, s.CPUs)
		var dies []cpuset.CPUSet
		for _, d := range s.Dies {
			dies = append(dies, d.CPUs)
		}
		checkPartition(t, "dies of socket", s.CPUs, dies)
	}
	checkPartition(t, "cores", topo.Online, cores)
	checkPartition(t, "NUMA nodes", topo.Online, nodes)
	checkPartition(t, "sockets", topo.Online, sockets)
	for _, c := range topo.CPUs {
		core := topo.Cores[c.Core]
		if !core.CPUs.Contains(c.ID) || core.Socket != c.Socket || core.Die != c.Die || core.NUMANode != c.NUMANode {
			t.Errorf("CPU %+v disagrees with its core %+v", c, core)
		}
	}
}

func checkPartition(t *testing.T, what string, all cpuset.CPUSet, parts []cpuset.CPUSet) {
	t.Helper()
	seen := cpuset.New()
	for _, p := range parts {
		if !seen.Intersection(p).IsEmpty() {
			t.Errorf("%s overlap: %q", what, seen.Intersection(p).String())
		}
		seen = seen.Union(p)
	}
	if !seen.Equals(all) {
		t.Errorf("%s cover %q, want %q", what, seen.String(), all.String())
	}
}

// TestDiscoverHost reads the real /sys of the machine the tests run on.
func TestDiscoverHost(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/sys/devices/system/cpu/online"); err != nil {
		t.Skipf("no Linux sysfs here: %v", err)
	}
	topo, err := topology.Discover("/sys")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := topo.Online.Size(), runtime.NumCPU(); got != want {
		t.Errorf("Discover(/sys) found %d online CPUs, runtime.NumCPU() = %d", got, want)
	}
	checkConsistent(t, topo)
	t.Logf("host: %s", topo)
}

func TestDiscoverShapes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		m         topologytest.Machine
		online    string
		isolated  string
		numa      []string
		cores     int
		coreOf3   string
		socketIDs []int
		dies      int // dies in socket 0
	}{
		{
			name:   "no node directory: one NUMA node",
			m:      topologytest.Machine{Sockets: 2, CoresPerDie: 2, ThreadsPerCore: 2, NoNUMA: true},
			online: "0-7", numa: []string{"0-7"}, cores: 4, coreOf3: "3,7", socketIDs: []int{0, 1}, dies: 1,
		},
		{
			name:   "no die_id: die 0",
			m:      topologytest.Machine{Sockets: 1, DiesPerSocket: 2, CoresPerDie: 2, ThreadsPerCore: 2, NoDieID: true},
			online: "0-7", numa: []string{"0-7"}, cores: 4, coreOf3: "3,7", socketIDs: []int{0}, dies: 1,
		},
		{
			name:   "two dies per socket",
			m:      topologytest.Machine{Sockets: 1, DiesPerSocket: 2, CoresPerDie: 2, ThreadsPerCore: 2},
			online: "0-7", numa: []string{"0-7"}, cores: 4, coreOf3: "3,7", socketIDs: []int{0}, dies: 2,
		},
		{
			name: "offline sibling leaves a one-thread core",
			m: topologytest.Machine{Sockets: 1, CoresPerDie: 4, ThreadsPerCore: 2,
				Offline: set("7")},
			online: "0-6", numa: []string{"0-6"}, cores: 4, coreOf3: "3", socketIDs: []int{0}, dies: 1,
		},
		{
			name: "isolated CPUs are reported, and stay in the topology",
			m: topologytest.Machine{Sockets: 1, CoresPerDie: 4, ThreadsPerCore: 2,
				Isolated: set("3,7")},
			online: "0-7", isolated: "3,7", numa: []string{"0-7"}, cores: 4, coreOf3: "3,7", socketIDs: []int{0}, dies: 1,
		},
		{
			name:   "sub-NUMA clustering: two nodes per socket",
			m:      topologytest.Machine{Sockets: 1, CoresPerDie: 4, ThreadsPerCore: 2, NUMAPerSocket: 2},
			online: "0-7", numa: []string{"0-1,4-5", "2-3,6-7"}, cores: 4, coreOf3: "3,7", socketIDs: []int{0}, dies: 1,
		},
		{
			name:   "no SMT",
			m:      topologytest.Machine{Sockets: 2, CoresPerDie: 3, ThreadsPerCore: 1},
			online: "0-5", numa: []string{"0-2", "3-5"}, cores: 6, coreOf3: "3", socketIDs: []int{0, 1}, dies: 1,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			root := t.TempDir()
			if err := tc.m.Write(root); err != nil {
				t.Fatal(err)
			}
			topo, err := topology.Discover(root)
			if err != nil {
				t.Fatal(err)
			}
			if !topo.Online.Equals(set(tc.online)) {
				t.Errorf("online = %q, want %q", topo.Online.String(), tc.online)
			}
			if !topo.Isolated.Equals(set(tc.isolated)) {
				t.Errorf("isolated = %q, want %q", topo.Isolated.String(), tc.isolated)
			}
			var numa []string
			for _, n := range topo.NUMANodes {
				numa = append(numa, n.CPUs.String())
			}
			if strings.Join(numa, " ") != strings.Join(tc.numa, " ") {
				t.Errorf("NUMA nodes = %v, want %v", numa, tc.numa)
			}
			if len(topo.Cores) != tc.cores {
				t.Errorf("cores = %d, want %d", len(topo.Cores), tc.cores)
			}
			if got := topo.Siblings(3); !got.Equals(set(tc.coreOf3)) {
				t.Errorf("siblings of 3 = %q, want %q", got.String(), tc.coreOf3)
			}
			var ids []int
			for _, s := range topo.Sockets {
				ids = append(ids, s.ID)
			}
			if len(ids) != len(tc.socketIDs) {
				t.Errorf("sockets = %v, want %v", ids, tc.socketIDs)
			}
			if got := len(topo.Sockets[0].Dies); got != tc.dies {
				t.Errorf("dies in socket 0 = %d, want %d", got, tc.dies)
			}
			checkConsistent(t, topo)
		})
	}
}

func TestDiscoverErrors(t *testing.T) {
	t.Parallel()
	base := topologytest.Machine{Sockets: 2, CoresPerDie: 2, ThreadsPerCore: 2}
	cpuDir := "devices/system/cpu"
	tests := []struct {
		name string
		// edit damages a valid tree.
		edit func(root string) error
		// wantIn are substrings of the error: the file at fault and what is wrong with it.
		wantIn []string
	}{
		{
			name:   "no online file",
			edit:   func(root string) error { return os.Remove(filepath.Join(root, cpuDir, "online")) },
			wantIn: []string{"cpu/online", "no such file"},
		},
		{
			name:   "garbage online list",
			edit:   func(root string) error { return write(root, cpuDir+"/online", "0-x") },
			wantIn: []string{"cpu/online", `"x" is not a CPU number`},
		},
		{
			name:   "nothing online",
			edit:   func(root string) error { return write(root, cpuDir+"/online", "") },
			wantIn: []string{"cpu/online", "no CPU is online"},
		},
		{
			name:   "garbage isolated list",
			edit:   func(root string) error { return write(root, cpuDir+"/isolated", "3-1") },
			wantIn: []string{"cpu/isolated", "ends before it starts"},
		},
		{
			name:   "core_id not a number",
			edit:   func(root string) error { return write(root, cpuDir+"/cpu5/topology/core_id", "five") },
			wantIn: []string{"cpu5/topology/core_id", `"five" is not an integer`},
		},
		{
			name: "missing physical_package_id",
			edit: func(root string) error {
				return os.Remove(filepath.Join(root, cpuDir, "cpu2/topology/physical_package_id"))
			},
			wantIn: []string{"cpu2/topology/physical_package_id", "no such file"},
		},
		{
			name:   "online CPU without a topology directory",
			edit:   func(root string) error { return os.RemoveAll(filepath.Join(root, cpuDir, "cpu6")) },
			wantIn: []string{"cpu6/topology", "no such file"},
		},
		{
			name:   "siblings file disagrees with core ids",
			edit:   func(root string) error { return write(root, cpuDir+"/cpu1/topology/thread_siblings_list", "1") },
			wantIn: []string{"cpu1/topology/thread_siblings_list", "inconsistent"},
		},
		{
			name: "CPU in two NUMA nodes",
			edit: func(root string) error {
				return write(root, "devices/system/node/node1/cpulist", "0,2-3,6-7")
			},
			wantIn: []string{"node1/cpulist", "CPU 0 is also listed in node0"},
		},
		{
			name:   "online CPU in no NUMA node",
			edit:   func(root string) error { return write(root, "devices/system/node/node1/cpulist", "2-3") },
			wantIn: []string{"devices/system/node", `"6-7" are in no NUMA node`},
		},
		{
			name:   "siblings in different NUMA nodes",
			edit:   func(root string) error { return swapNUMA(root) },
			wantIn: []string{"different NUMA nodes"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			root := t.TempDir()
			if err := base.Write(root); err != nil {
				t.Fatal(err)
			}
			if err := tc.edit(root); err != nil {
				t.Fatal(err)
			}
			topo, err := topology.Discover(root)
			if err == nil {
				t.Fatalf("Discover succeeded on a damaged tree: %s", topo)
			}
			for _, w := range tc.wantIn {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func write(root, rel, content string) error {
	return os.WriteFile(filepath.Join(root, rel), []byte(content+"\n"), 0o644)
}

// swapNUMA moves CPU 4 (sibling of CPU 0) to node 1 and CPU 2 to node 0, keeping every CPU in one node.
func swapNUMA(root string) error {
	if err := write(root, "devices/system/node/node0/cpulist", "0-2,5"); err != nil {
		return err
	}
	return write(root, "devices/system/node/node1/cpulist", "3-4,6-7")
}

func TestParseCPUList(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		want    string
		wantErr string
	}{
		{in: "", want: ""},
		{in: "\n", want: ""},
		{in: "0", want: "0"},
		{in: "0-3,8-11\n", want: "0-3,8-11"},
		{in: "5,1,3-4", want: "1,3-5"},
		{in: "2-2", want: "2"},
		{in: "65535", want: "65535"},
		{in: "65536", wantErr: "above 65535"},
		{in: "0-4000000000", wantErr: "above 65535"},
		{in: "3-1", wantErr: "ends before it starts"},
		{in: "1,,2", wantErr: "empty CPU number"},
		{in: "-1", wantErr: "empty CPU number"},
		{in: "+1", wantErr: "not a CPU number"},
		{in: "0-8:2/4", wantErr: "not a CPU number"},
		{in: "1 2", wantErr: "not a CPU number"},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			t.Parallel()
			got, err := topology.ParseCPUList(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParseCPUList(%q) = %q, %v; want error containing %q", tc.in, got.String(), err, tc.wantErr)
				}
				return
			}
			if err != nil || got.String() != tc.want {
				t.Fatalf("ParseCPUList(%q) = %q, %v; want %q", tc.in, got.String(), err, tc.want)
			}
		})
	}
}

// FuzzParseCPUList checks that any accepted list round-trips through the kernel's format and stays
// within MaxCPUID, and that nothing panics.
func FuzzParseCPUList(f *testing.F) {
	for _, s := range []string{"", "0", "0-3,8-11", "1,3-5\n", "3-1", "0-8:2/4", "65536", "0-", "-", ","} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		set, err := topology.ParseCPUList(s)
		if err != nil {
			return
		}
		for _, c := range set.UnsortedList() {
			if c < 0 || c > topology.MaxCPUID {
				t.Fatalf("ParseCPUList(%q) accepted CPU %d", s, c)
			}
		}
		again, err := topology.ParseCPUList(set.String())
		if err != nil || !again.Equals(set) {
			t.Fatalf("ParseCPUList(%q) = %q does not round-trip: %q, %v", s, set.String(), again.String(), err)
		}
	})
}
