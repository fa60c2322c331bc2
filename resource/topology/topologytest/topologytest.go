// Package topologytest writes fake sysfs CPU trees of chosen machine shapes, and captures the relevant
// part of a real one. Tests need machines the test host does not have (it has 2 CPUs and one NUMA
// node), and the allocator's behaviour depends only on the files topology.Discover reads.
package topologytest

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

// Machine describes an x86-like machine. CPU numbering follows Intel's Linux enumeration: first one
// thread of every core, socket by socket, then the second thread of every core in the same order, so
// on a 2-thread machine CPU i and CPU i+Cores are siblings.
type Machine struct {
	Sockets        int
	DiesPerSocket  int // 0 means 1
	CoresPerDie    int
	ThreadsPerCore int
	// NUMAPerSocket splits each socket's cores into that many nodes (sub-NUMA clustering); 0 means 1.
	NUMAPerSocket int
	// Offline CPUs get no topology directory and are left out of online, as the kernel does.
	Offline cpuset.CPUSet
	// Isolated is written to devices/system/cpu/isolated (isolcpus=).
	Isolated cpuset.CPUSet
	// NoNUMA leaves devices/system/node out, as on a kernel without CONFIG_NUMA.
	NoNUMA bool
	// NoDieID leaves die_id out, as on kernels before 5.2.
	NoDieID bool
}

// NumCPUs returns the number of CPUs the machine has, online or not.
func (m Machine) NumCPUs() int { return m.numCores() * m.ThreadsPerCore }

func (m Machine) dies() int {
	return max(m.DiesPerSocket, 1)
}

func (m Machine) numa() int {
	return max(m.NUMAPerSocket, 1)
}

func (m Machine) numCores() int { return m.Sockets * m.dies() * m.CoresPerDie }

// Write creates the tree under root (root is the fake "/sys").
func (m Machine) Write(root string) error {
	if m.Sockets < 1 || m.CoresPerDie < 1 || m.ThreadsPerCore < 1 {
		return fmt.Errorf("machine %+v: sockets, cores per die and threads per core must be at least 1", m)
	}
	coresPerSocket := m.dies() * m.CoresPerDie
	if coresPerSocket%m.numa() != 0 {
		return fmt.Errorf("machine %+v: cores per socket must divide evenly into NUMA nodes", m)
	}
	ncores := m.numCores()
	var online []int
	siblings := make([][]int, ncores)
	for cpu := range m.NumCPUs() {
		if !m.Offline.Contains(cpu) {
			online = append(online, cpu)
			siblings[cpu%ncores] = append(siblings[cpu%ncores], cpu)
		}
	}
	cpuDir := filepath.Join(root, "devices", "system", "cpu")
	files := map[string]string{
		filepath.Join(cpuDir, "online"):   cpuset.New(online...).String(),
		filepath.Join(cpuDir, "possible"): fmt.Sprintf("0-%d", m.NumCPUs()-1),
		filepath.Join(cpuDir, "isolated"): m.Isolated.String(),
	}
	nodeCPUs := map[int][]int{}
	for _, cpu := range online {
		core := cpu % ncores
		socket := core / coresPerSocket
		inSocket := core % coresPerSocket
		die := inSocket / m.CoresPerDie
		node := socket*m.numa() + inSocket/(coresPerSocket/m.numa())
		nodeCPUs[node] = append(nodeCPUs[node], cpu)
		dir := filepath.Join(cpuDir, "cpu"+strconv.Itoa(cpu), "topology")
		files[filepath.Join(dir, "physical_package_id")] = strconv.Itoa(socket)
		// core_id restarts in every socket, as on real Intel machines: the reason cores are keyed by
		// socket, die and core_id together.
		files[filepath.Join(dir, "core_id")] = strconv.Itoa(inSocket)
		files[filepath.Join(dir, "thread_siblings_list")] = cpuset.New(siblings[core]...).String()
		if !m.NoDieID {
			files[filepath.Join(dir, "die_id")] = strconv.Itoa(die)
		}
	}
	if !m.NoNUMA {
		for node := range m.Sockets * m.numa() {
			files[filepath.Join(root, "devices", "system", "node", "node"+strconv.Itoa(node), "cpulist")] = cpuset.New(nodeCPUs[node]...).String()
		}
	}
	return writeFiles(files)
}

func writeFiles(files map[string]string) error {
	for path, content := range files {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, []byte(content+"\n"), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// Capture copies from a real sysfs root (normally "/sys") the files topology.Discover reads, so a
// machine's shape can be kept as test data. Files that do not exist are skipped, as Discover would.
func Capture(sysfsRoot, dst string) error {
	cpuDir := filepath.Join(sysfsRoot, "devices", "system", "cpu")
	rel := []string{"devices/system/cpu/online", "devices/system/cpu/isolated", "devices/system/cpu/possible"}
	entries, err := os.ReadDir(cpuDir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if n, ok := strings.CutPrefix(e.Name(), "cpu"); ok {
			if _, err := strconv.Atoi(n); err == nil {
				for _, f := range []string{"physical_package_id", "die_id", "core_id", "thread_siblings_list"} {
					rel = append(rel, filepath.Join("devices/system/cpu", e.Name(), "topology", f))
				}
			}
		}
	}
	nodes, err := os.ReadDir(filepath.Join(sysfsRoot, "devices", "system", "node"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	for _, e := range nodes {
		if strings.HasPrefix(e.Name(), "node") && e.IsDir() {
			rel = append(rel, filepath.Join("devices/system/node", e.Name(), "cpulist"))
		}
	}
	slices.Sort(rel)
	files := map[string]string{}
	for _, r := range rel {
		b, err := os.ReadFile(filepath.Join(sysfsRoot, r))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		files[filepath.Join(dst, r)] = strings.TrimSpace(string(b))
	}
	return writeFiles(files)
}
