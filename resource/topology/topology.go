// Package topology models a node's CPUs as the kernel reports them in sysfs: sockets, dies, NUMA nodes,
// physical cores with their SMT siblings, and which CPUs are online or isolated. The cpuset allocator
// needs this to hand out whole physical cores and to keep an allocation inside one NUMA node.
//
// The sysfs root is an argument so that tests run on fake trees of machine shapes the test host does
// not have; production passes "/sys".
package topology

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"k8s.io/utils/cpuset"
)

// Topology is a snapshot of the node's CPUs; build one with Discover, whose index the lookup methods
// use. It is read-only once Discover returns it: the allocator and other readers share one value
// without locking.
type Topology struct {
	// CPUs lists the online CPUs in ascending ID order.
	CPUs []CPU
	// Cores lists the physical cores, ordered by their lowest CPU ID.
	Cores []Core
	// Sockets lists the physical packages in ascending ID order.
	Sockets []Socket
	// NUMANodes lists the NUMA nodes that have at least one online CPU, in ascending ID order.
	// Memory-only nodes are left out: no CPU can be allocated from them.
	NUMANodes []NUMANode
	// Online is every CPU in CPUs.
	Online cpuset.CPUSet
	// Isolated is the kernel's isolcpus= set as read; the scheduler does not balance load onto these
	// CPUs, so a pool that contained them would run its tasks on whichever one they started on.
	Isolated cpuset.CPUSet

	// byID maps a CPU ID to its index in CPUs.
	byID map[int]int
}

// CPU is one online logical CPU (a hardware thread).
type CPU struct {
	ID     int
	Socket int // physical_package_id
	Die    int // die_id, 0 where the kernel has no such file
	// Core is the index of the CPU's physical core in Topology.Cores. It is not the kernel's core_id,
	// which repeats across sockets (and dies).
	Core     int
	NUMANode int
}

// Core is one physical core: the CPUs that share its execution units (SMT siblings).
type Core struct {
	Socket int
	Die    int
	// ID is the kernel's core_id; it is unique only within a socket and die.
	ID       int
	CPUs     cpuset.CPUSet
	NUMANode int
}

// Socket is one physical package.
type Socket struct {
	ID   int
	Dies []Die
	CPUs cpuset.CPUSet
}

// Die is one die of a socket.
type Die struct {
	ID   int
	CPUs cpuset.CPUSet
}

// NUMANode is one NUMA node with online CPUs.
type NUMANode struct {
	ID   int
	CPUs cpuset.CPUSet
}

// CPU returns the online CPU with the given ID.
func (t *Topology) CPU(id int) (CPU, bool) {
	i, ok := t.byID[id]
	if !ok {
		return CPU{}, false
	}
	return t.CPUs[i], true
}

// Siblings returns the CPUs of the physical core that cpu belongs to, cpu included; empty when cpu is
// not online.
func (t *Topology) Siblings(cpu int) cpuset.CPUSet {
	c, ok := t.CPU(cpu)
	if !ok {
		return cpuset.New()
	}
	return t.Cores[c.Core].CPUs
}

// ThreadsPerCore returns the largest number of online SMT siblings on one core: 1 without SMT (or with
// SMT turned off), 2 on most SMT machines.
func (t *Topology) ThreadsPerCore() int {
	n := 0
	for _, c := range t.Cores {
		n = max(n, c.CPUs.Size())
	}
	return n
}

// String summarises the shape for log lines and benchmark output.
func (t *Topology) String() string {
	return fmt.Sprintf("%d CPUs, %d cores, %d sockets, %d NUMA nodes, online %s, isolated %q",
		len(t.CPUs), len(t.Cores), len(t.Sockets), len(t.NUMANodes), t.Online, t.Isolated.String())
}

type coreKey struct{ socket, die, core int }

// Discover reads the CPU topology under sysfsRoot (normally "/sys").
//
// Required: devices/system/cpu/online and, for every online CPU N, cpuN/topology/physical_package_id,
// core_id and thread_siblings_list. Optional: devices/system/cpu/isolated (absent on old kernels: none
// isolated), cpuN/topology/die_id (absent before Linux 5.2 and on some architectures: die 0) and
// devices/system/node (absent without CONFIG_NUMA: one node 0 with every CPU).
//
// Offline CPUs are left out entirely: their topology directory is gone while they are offline.
func Discover(sysfsRoot string) (*Topology, error) {
	cpuDir := filepath.Join(sysfsRoot, "devices", "system", "cpu")
	online, err := readCPUList(filepath.Join(cpuDir, "online"), false)
	if err != nil {
		return nil, err
	}
	if online.IsEmpty() {
		return nil, fmt.Errorf("%s: no CPU is online", filepath.Join(cpuDir, "online"))
	}
	isolated, err := readCPUList(filepath.Join(cpuDir, "isolated"), true)
	if err != nil {
		return nil, err
	}

	numaOf, err := readNUMA(filepath.Join(sysfsRoot, "devices", "system", "node"), online)
	if err != nil {
		return nil, err
	}

	t := &Topology{Online: online, Isolated: isolated, byID: make(map[int]int, online.Size())}
	coreIndex := map[coreKey]int{}
	coreCPUs := map[int][]int{}
	siblingsFile := map[int]cpuset.CPUSet{}
	for _, id := range online.List() {
		dir := filepath.Join(cpuDir, "cpu"+strconv.Itoa(id), "topology")
		socket, err := readInt(filepath.Join(dir, "physical_package_id"), false)
		if err != nil {
			return nil, err
		}
		die, err := readInt(filepath.Join(dir, "die_id"), true)
		if err != nil {
			return nil, err
		}
		coreID, err := readInt(filepath.Join(dir, "core_id"), false)
		if err != nil {
			return nil, err
		}
		siblings, err := readCPUList(filepath.Join(dir, "thread_siblings_list"), false)
		if err != nil {
			return nil, err
		}
		siblingsFile[id] = siblings
		key := coreKey{socket, die, coreID}
		ci, ok := coreIndex[key]
		if !ok {
			// CPUs are visited in ascending order, so cores come out ordered by their lowest CPU.
			ci = len(t.Cores)
			coreIndex[key] = ci
			t.Cores = append(t.Cores, Core{Socket: socket, Die: die, ID: coreID, NUMANode: numaOf[id]})
		}
		coreCPUs[ci] = append(coreCPUs[ci], id)
		t.byID[id] = len(t.CPUs)
		t.CPUs = append(t.CPUs, CPU{ID: id, Socket: socket, Die: die, Core: ci, NUMANode: numaOf[id]})
	}
	for ci := range t.Cores {
		t.Cores[ci].CPUs = cpuset.New(coreCPUs[ci]...)
	}

	// Two independent sources describe a core: (socket, die, core_id) and thread_siblings_list. If they
	// disagree, FullPCPUs could hand one core to two exclusive owners, so refuse the topology instead.
	for _, c := range t.CPUs {
		core := t.Cores[c.Core]
		if listed := siblingsFile[c.ID].Intersection(online); !listed.Equals(core.CPUs) {
			return nil, fmt.Errorf("%s: lists online siblings %q, but physical_package_id/die_id/core_id put CPU %d on a core with %q: the sysfs tree is inconsistent",
				filepath.Join(cpuDir, "cpu"+strconv.Itoa(c.ID), "topology", "thread_siblings_list"), listed.String(), c.ID, core.CPUs.String())
		}
		if t.CPUs[t.byID[core.CPUs.List()[0]]].NUMANode != c.NUMANode {
			return nil, fmt.Errorf("%s: SMT siblings %q of one core are in different NUMA nodes: the sysfs tree is inconsistent",
				filepath.Join(sysfsRoot, "devices", "system", "node"), core.CPUs.String())
		}
	}

	t.Sockets = buildSockets(t.CPUs)
	t.NUMANodes = buildNUMANodes(t.CPUs)
	return t, nil
}

func buildSockets(cpus []CPU) []Socket {
	type dieKey struct{ socket, die int }
	socketCPUs := map[int][]int{}
	dieCPUs := map[dieKey][]int{}
	for _, c := range cpus {
		socketCPUs[c.Socket] = append(socketCPUs[c.Socket], c.ID)
		dieCPUs[dieKey{c.Socket, c.Die}] = append(dieCPUs[dieKey{c.Socket, c.Die}], c.ID)
	}
	var sockets []Socket
	for id, ids := range socketCPUs {
		sockets = append(sockets, Socket{ID: id, CPUs: cpuset.New(ids...)})
	}
	slices.SortFunc(sockets, func(a, b Socket) int { return a.ID - b.ID })
	for i := range sockets {
		for k, ids := range dieCPUs {
			if k.socket == sockets[i].ID {
				sockets[i].Dies = append(sockets[i].Dies, Die{ID: k.die, CPUs: cpuset.New(ids...)})
			}
		}
		slices.SortFunc(sockets[i].Dies, func(a, b Die) int { return a.ID - b.ID })
	}
	return sockets
}

func buildNUMANodes(cpus []CPU) []NUMANode {
	nodeCPUs := map[int][]int{}
	for _, c := range cpus {
		nodeCPUs[c.NUMANode] = append(nodeCPUs[c.NUMANode], c.ID)
	}
	var nodes []NUMANode
	for id, ids := range nodeCPUs {
		nodes = append(nodes, NUMANode{ID: id, CPUs: cpuset.New(ids...)})
	}
	slices.SortFunc(nodes, func(a, b NUMANode) int { return a.ID - b.ID })
	return nodes
}

// readNUMA maps every online CPU to its NUMA node.
func readNUMA(nodeDir string, online cpuset.CPUSet) (map[int]int, error) {
	numaOf := make(map[int]int, online.Size())
	entries, err := os.ReadDir(nodeDir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w", nodeDir, err)
	}
	for _, e := range entries {
		idStr, ok := strings.CutPrefix(e.Name(), "node")
		if !ok || !e.IsDir() {
			continue
		}
		id, err := strconv.Atoi(idStr)
		if err != nil || id < 0 {
			continue // not a node directory (the kernel has none such, but be strict only about nodeN)
		}
		path := filepath.Join(nodeDir, e.Name(), "cpulist")
		cpus, err := readCPUList(path, false)
		if err != nil {
			return nil, err
		}
		// cpulist may name CPUs that are present but offline; they are not part of the topology.
		for _, c := range cpus.Intersection(online).List() {
			if prev, dup := numaOf[c]; dup {
				return nil, fmt.Errorf("%s: CPU %d is also listed in node%d: the sysfs tree is inconsistent", path, c, prev)
			}
			numaOf[c] = id
		}
	}
	if len(numaOf) == 0 {
		// No NUMA information (kernel without CONFIG_NUMA, or a tree without node directories): the
		// machine is one node as far as placement goes.
		for _, c := range online.UnsortedList() {
			numaOf[c] = 0
		}
		return numaOf, nil
	}
	if missing := online.Difference(cpuset.New(mapKeys(numaOf)...)); !missing.IsEmpty() {
		return nil, fmt.Errorf("%s: online CPUs %q are in no NUMA node's cpulist: the sysfs tree is inconsistent", nodeDir, missing.String())
	}
	return numaOf, nil
}

func mapKeys(m map[int]int) []int {
	keys := make([]int, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	return keys
}

func readCPUList(path string, optional bool) (cpuset.CPUSet, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		if optional && errors.Is(err, fs.ErrNotExist) {
			return cpuset.New(), nil
		}
		return cpuset.New(), fmt.Errorf("read CPU list: %w", err)
	}
	set, err := ParseCPUList(string(b))
	if err != nil {
		return cpuset.New(), fmt.Errorf("%s: %w", path, err)
	}
	return set, nil
}

func readInt(path string, optional bool) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		if optional && errors.Is(err, fs.ErrNotExist) {
			return 0, nil
		}
		return 0, fmt.Errorf("read CPU topology: %w", err)
	}
	s := strings.TrimSpace(string(b))
	// physical_package_id and die_id are -1 where the firmware does not say; keep that as an ID.
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("%s: %q is not an integer", path, s)
	}
	return n, nil
}
