// Package cpuset hands out exclusive CPUs to LSE and LSR containers and derives the CPU pools every
// QoS class runs in, following Koordinator's rules, so that pods land on the CPUs its users expect:
//
//   - LSE CPUs are exclusive to their owner: no other container of any class runs on them.
//   - LSR CPUs are exclusive among LS and LSR, but BE containers may use them.
//   - LS containers share what no LSE or LSR owner holds; BE containers share everything but LSE.
//   - Reserved (system) and isolated CPUs are in no pool and are never handed out.
//
// An owner is whatever the caller keys allocations by (normally a container ID). The allocator is pure
// computation over a topology.Topology: it writes no cgroup file and keeps its state in memory; the
// caller checkpoints Allocations and replays them with Restore after a restart.
//
// # Placement
//
// A request that fits into one NUMA node gets CPUs from one node, so its memory accesses stay local.
// Among the nodes it fits into, the allocator first takes the one where the bind policy can be met best
// (FullPCPUs: fewest cores shared with someone else; SpreadByPCPUs: fewest cores holding two of the
// request's threads), then the node with the fewest free CPUs ("best fit"). Best fit keeps the emptiest
// nodes intact for later large requests instead of cutting every node down evenly; it is also what
// puts the LSR pod of Koordinator's documented QoS example on 2-3, next to the LSE pod on 0-1, rather
// than on the other socket. A request that fits in no single node spans as few nodes as possible, the
// emptiest first. NUMA locality comes before core quality: a request that fits one node stays in it even
// if spanning two nodes would have given it whole cores, because remote memory costs more than a shared
// core.
//
// Inside the chosen CPUs:
//
//   - FullPCPUs (the default) takes whole free physical cores, lowest first. A remainder smaller than a
//     core (an odd count on an SMT machine) goes first to a core that is already partly taken, so no
//     further core is split; only when no such core exists is a whole core split. So no core is ever
//     split while enough whole cores are free.
//   - SpreadByPCPUs takes one thread per core, from the cores with the most free threads first (whole
//     cores before partly used ones), and a second thread of a core only when every core in reach has
//     given one. This is what Koordinator users see in its documented QoS example: LSE 2 → 0-1, then
//     LSR 2 → 2-3 on the 16-CPU machine where CPU i and i+8 are siblings.
//
// # The shared pool is never emptied
//
// Koordinator lets exclusive allocations take every CPU. Tandem keeps Config.MinSharedCPUs (default 1)
// CPUs out of reach of Allocate, so that the LS pool (and with it the cpuset of every LS container and
// of the pod-level cgroups) is never empty: the kernel rejects an empty cpuset.cpus for a cgroup with
// tasks, so an empty pool would fail every LS container start and update. kubelet's static CPU manager
// keeps its shared pool non-empty for the same reason. MinSharedCPUs 0 gives Koordinator's behaviour.
// Restore does not apply the limit: it records what already runs.
package cpuset

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/containerd/errdefs"
	"k8s.io/utils/cpuset"

	"github.com/tandemkit/tandem/resource/qos"
	"github.com/tandemkit/tandem/resource/topology"
)

// BindPolicy says how an allocation is laid out over physical cores, as in Koordinator's
// scheduling.koordinator.sh/resource-spec preferredCPUBindPolicy.
type BindPolicy string

// The bind policies Koordinator users write.
const (
	// FullPCPUs takes whole physical cores, so the owner shares no core's caches and execution units
	// with another container.
	FullPCPUs BindPolicy = "FullPCPUs"
	// SpreadByPCPUs takes one thread per physical core first, so each thread has a core to itself
	// as far as the owner's own threads go.
	SpreadByPCPUs BindPolicy = "SpreadByPCPUs"
)

// ParseBindPolicy returns the policy named by a preferredCPUBindPolicy value; "" means the default,
// FullPCPUs. Koordinator's "Default" is accepted with the same meaning.
func ParseBindPolicy(s string) (BindPolicy, error) {
	switch s {
	case "", "Default", string(FullPCPUs):
		return FullPCPUs, nil
	case string(SpreadByPCPUs):
		return SpreadByPCPUs, nil
	}
	return "", fmt.Errorf("CPU bind policy %q is not one of FullPCPUs, SpreadByPCPUs: %w", s, errdefs.ErrInvalidArgument)
}

// Config is what the allocator needs besides the topology.
type Config struct {
	// Reserved CPUs are kept for the system (kubelet's --reserved-cpus): never handed out and in no pool.
	Reserved cpuset.CPUSet
	// MinSharedCPUs is how many CPUs Allocate always leaves in the LS pool; see the package doc.
	MinSharedCPUs int
}

// DefaultConfig reserves no CPU and keeps one CPU in the shared pool.
func DefaultConfig() Config {
	return Config{Reserved: cpuset.New(), MinSharedCPUs: 1}
}

// Validate checks the config on its own; New also checks it against the topology.
func (c Config) Validate() error {
	if c.MinSharedCPUs < 0 {
		return fmt.Errorf("minSharedCPUs is %d, want 0 or more: %w", c.MinSharedCPUs, errdefs.ErrInvalidArgument)
	}
	return nil
}

// Allocation is the set of CPUs one owner holds.
type Allocation struct {
	// Class is LSE or LSR, the classes that hold CPUs of their own (qos.Class.Exclusive); LS and BE
	// run in the pools the allocator derives.
	Class qos.Class
	CPUs  cpuset.CPUSet
	// Container is the ID of the container using the CPUs (see Bind), "" until one starts. It lives
	// here, with the allocation, because the hooks that allocate are rebuilt at every configuration
	// change and the binding must outlive them.
	Container string
}

// allocationJSON is the checkpoint form: the CPU list in the kernel's format, readable in a file.
type allocationJSON struct {
	Class     qos.Class `json:"class"`
	CPUs      string    `json:"cpus"`
	Container string    `json:"container,omitempty"`
}

// MarshalJSON writes {"class":"LSE","cpus":"0-1","container":"<id>"}; cpuset.CPUSet alone would marshal
// as {}.
func (a Allocation) MarshalJSON() ([]byte, error) {
	return json.Marshal(allocationJSON{Class: a.Class, CPUs: a.CPUs.String(), Container: a.Container})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (a *Allocation) UnmarshalJSON(b []byte) error {
	var j allocationJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	cpus, err := topology.ParseCPUList(j.CPUs)
	if err != nil {
		return fmt.Errorf("allocation: %w: %w", err, errdefs.ErrInvalidArgument)
	}
	*a = Allocation{Class: j.Class, CPUs: cpus, Container: j.Container}
	return nil
}

// Allocator hands out exclusive CPUs. It is safe for concurrent use.
type Allocator struct {
	topo      *topology.Topology
	usable    cpuset.CPUSet // online − isolated − reserved
	minShared int
	cores     []core
	nodes     []node
	cpuCore   []int // CPU ID → index in cores; -1 for CPUs that are not usable

	mu sync.Mutex
	// owner and class are indexed by CPU ID; "" marks a free CPU.
	owner  []string
	class  []qos.Class
	allocs map[string]Allocation
	free   int
	// pools caches Pools between changes: hooks read it for every LS and BE container, far more often
	// than exclusive allocations change. Valid when poolsOK.
	pools   Pools
	poolsOK bool
	// beLimit caps the BE pool at this many CPUs (CPU suppression); 0 means no cap.
	beLimit int
}

// core is a physical core as the allocator sees it: its usable CPUs, and how many CPUs it has online.
// A core with a reserved or isolated sibling can never be handed out whole.
type core struct {
	cpus   []int // usable CPUs, ascending
	online int
	node   int // index in Allocator.nodes
	free   int // usable CPUs no one holds; guarded by Allocator.mu
}

func (c *core) whole() bool { return c.free == c.online }

type node struct {
	cores []int // indexes in Allocator.cores
	free  int   // guarded by Allocator.mu
}

// New returns an allocator with every usable CPU free.
func New(topo *topology.Topology, cfg Config) (*Allocator, error) {
	if topo == nil || len(topo.CPUs) == 0 {
		return nil, fmt.Errorf("cpuset allocator needs a CPU topology: %w", errdefs.ErrInvalidArgument)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if extra := cfg.Reserved.Difference(topo.Online); !extra.IsEmpty() {
		return nil, fmt.Errorf("reserved CPUs %q are not online (online: %q); fix the reserved CPU list: %w",
			extra.String(), topo.Online.String(), errdefs.ErrInvalidArgument)
	}
	usable := topo.Online.Difference(topo.Isolated).Difference(cfg.Reserved)
	// Too few CPUs for any exclusive allocation is fine (Allocate says so); no CPU at all for the
	// pools is not, since every LS and BE container would get an empty cpuset.
	if usable.IsEmpty() {
		return nil, fmt.Errorf("no CPU left for pods: online %q, isolated %q, reserved %q; reserve fewer CPUs: %w",
			topo.Online.String(), topo.Isolated.String(), cfg.Reserved.String(), errdefs.ErrInvalidArgument)
	}
	maxID := slices.Max(topo.Online.UnsortedList())
	a := &Allocator{
		topo:      topo,
		usable:    usable,
		minShared: cfg.MinSharedCPUs,
		cpuCore:   make([]int, maxID+1),
		owner:     make([]string, maxID+1),
		class:     make([]qos.Class, maxID+1),
		allocs:    map[string]Allocation{},
		free:      usable.Size(),
	}
	for i := range a.cpuCore {
		a.cpuCore[i] = -1
	}
	nodeIndex := map[int]int{}
	for _, n := range topo.NUMANodes {
		nodeIndex[n.ID] = len(a.nodes)
		a.nodes = append(a.nodes, node{})
	}
	for _, tc := range topo.Cores {
		c := core{online: tc.CPUs.Size(), node: nodeIndex[tc.NUMANode]}
		for _, id := range tc.CPUs.List() {
			if usable.Contains(id) {
				c.cpus = append(c.cpus, id)
			}
		}
		if len(c.cpus) == 0 {
			continue
		}
		c.free = len(c.cpus)
		ci := len(a.cores)
		for _, id := range c.cpus {
			a.cpuCore[id] = ci
		}
		a.cores = append(a.cores, c)
		a.nodes[c.node].cores = append(a.nodes[c.node].cores, ci)
		a.nodes[c.node].free += c.free
	}
	return a, nil
}

// Topology returns the topology the allocator was built on.
func (a *Allocator) Topology() *topology.Topology { return a.topo }

// Usable returns the CPUs pods may run on: online − isolated − reserved.
func (a *Allocator) Usable() cpuset.CPUSet { return a.usable }

// Allocate gives owner n exclusive CPUs of the given class, laid out by policy ("" means FullPCPUs).
//
// It is idempotent because lifecycle hooks may run twice for one container: an owner that already
// holds n CPUs of the same class gets the same set back, whatever the policy. An owner that holds a
// different allocation gets an error wrapping errdefs.ErrAlreadyExists. Too few free CPUs gives an
// error wrapping errdefs.ErrResourceExhausted that says "want N, free M"; nothing is allocated then.
func (a *Allocator) Allocate(owner string, class qos.Class, n int, policy BindPolicy) (cpuset.CPUSet, error) {
	if owner == "" {
		return cpuset.New(), fmt.Errorf("cpuset allocation needs an owner: %w", errdefs.ErrInvalidArgument)
	}
	if !class.Exclusive() {
		return cpuset.New(), fmt.Errorf("owner %s: class %q holds no exclusive CPUs, only LSE and LSR do: %w", owner, class, errdefs.ErrInvalidArgument)
	}
	if n < 1 {
		return cpuset.New(), fmt.Errorf("owner %s: %s needs at least 1 whole CPU, got %d: %w", owner, class, n, errdefs.ErrInvalidArgument)
	}
	policy, err := ParseBindPolicy(string(policy))
	if err != nil {
		return cpuset.New(), fmt.Errorf("owner %s: %w", owner, err)
	}

	a.mu.Lock()
	defer a.mu.Unlock()
	if have, ok := a.allocs[owner]; ok {
		if have.Class == class && have.CPUs.Size() == n {
			return have.CPUs, nil
		}
		return cpuset.New(), fmt.Errorf("owner %s already holds %s CPUs %q; release them before asking for %d %s CPUs: %w",
			owner, have.Class, have.CPUs.String(), n, class, errdefs.ErrAlreadyExists)
	}
	if avail := a.free - a.minShared; n > avail {
		kept := ""
		if a.minShared > 0 {
			kept = fmt.Sprintf(" (plus %d kept for the LS pool)", a.minShared)
		}
		return cpuset.New(), fmt.Errorf("owner %s: not enough free CPUs for %s: want %d, free %d%s: %w",
			owner, class, n, max(avail, 0), kept, errdefs.ErrResourceExhausted)
	}
	cpus := a.place(n, policy)
	a.commit(owner, class, cpus)
	return a.allocs[owner].CPUs, nil
}

// Restore records an allocation that existed before a restart. It rejects a set that contains CPUs
// that are not usable (errdefs.ErrInvalidArgument: offline, isolated or reserved now) or that overlaps
// another owner's CPUs (errdefs.ErrAlreadyExists), so a bad checkpoint can never create overlapping
// exclusive sets. Restoring the same allocation again is a no-op.
func (a *Allocator) Restore(owner string, class qos.Class, cpus cpuset.CPUSet) error {
	if owner == "" {
		return fmt.Errorf("restored cpuset allocation needs an owner: %w", errdefs.ErrInvalidArgument)
	}
	if !class.Exclusive() {
		return fmt.Errorf("owner %s: class %q holds no exclusive CPUs, only LSE and LSR do: %w", owner, class, errdefs.ErrInvalidArgument)
	}
	if cpus.IsEmpty() {
		return fmt.Errorf("owner %s: restored %s allocation has no CPUs: %w", owner, class, errdefs.ErrInvalidArgument)
	}
	if bad := cpus.Difference(a.usable); !bad.IsEmpty() {
		return fmt.Errorf("owner %s: restored %s CPUs %q include %q, which are offline, isolated or reserved now; allocate again: %w",
			owner, class, cpus.String(), bad.String(), errdefs.ErrInvalidArgument)
	}

	a.mu.Lock()
	defer a.mu.Unlock()
	if have, ok := a.allocs[owner]; ok {
		if have.Class == class && have.CPUs.Equals(cpus) {
			return nil
		}
		return fmt.Errorf("owner %s already holds %s CPUs %q, cannot restore %s CPUs %q: %w",
			owner, have.Class, have.CPUs.String(), class, cpus.String(), errdefs.ErrAlreadyExists)
	}
	var clashes []string
	for _, id := range cpus.List() {
		if o := a.owner[id]; o != "" {
			clashes = append(clashes, fmt.Sprintf("%d (held by %s)", id, o))
		}
	}
	if len(clashes) > 0 {
		return fmt.Errorf("owner %s: restored %s CPUs %q overlap CPUs %s; exclusive sets never overlap: %w",
			owner, class, cpus.String(), strings.Join(clashes, ", "), errdefs.ErrAlreadyExists)
	}
	a.commit(owner, class, cpus.List())
	return nil
}

// Bind records that container id uses owner's CPUs now; false when owner holds none. A restarted
// container takes over the CPUs of the one it replaces, so the later removal of that one (ReleaseFor)
// keeps them.
func (a *Allocator) Bind(owner, id string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	have, ok := a.allocs[owner]
	if ok {
		have.Container = id
		a.allocs[owner] = have
	}
	return ok
}

// Release frees owner's CPUs and reports whether it held any; releasing twice is harmless.
func (a *Allocator) Release(owner string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.releaseLocked(owner, func(Allocation) bool { return true })
}

// ReleaseFor frees owner's CPUs as container id goes away, unless another container took them over
// (Bind). It reports whether it freed any.
func (a *Allocator) ReleaseFor(owner, id string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.releaseLocked(owner, func(have Allocation) bool { return have.Container == "" || have.Container == id })
}

// ReleaseUnbound frees owner's CPUs unless a container uses them: the rollback of an allocation made
// for a container the runtime then refused. It reports whether it freed any.
func (a *Allocator) ReleaseUnbound(owner string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.releaseLocked(owner, func(have Allocation) bool { return have.Container == "" })
}

func (a *Allocator) releaseLocked(owner string, ok func(Allocation) bool) bool {
	have, held := a.allocs[owner]
	if !held || !ok(have) {
		return false
	}
	delete(a.allocs, owner)
	a.poolsOK = false
	for _, id := range have.CPUs.UnsortedList() {
		a.owner[id] = ""
		a.class[id] = ""
		c := &a.cores[a.cpuCore[id]]
		c.free++
		a.nodes[c.node].free++
		a.free++
	}
	return true
}

// Get returns owner's allocation.
func (a *Allocator) Get(owner string) (Allocation, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	al, ok := a.allocs[owner]
	return al, ok
}

// Allocations returns a copy of every allocation, keyed by owner, for checkpointing.
func (a *Allocator) Allocations() map[string]Allocation {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make(map[string]Allocation, len(a.allocs))
	for o, al := range a.allocs {
		out[o] = al // CPUSet has no mutating methods, so sharing it is a copy in effect.
	}
	return out
}

func (a *Allocator) commit(owner string, class qos.Class, cpus []int) {
	for _, id := range cpus {
		a.owner[id] = owner
		a.class[id] = class
		c := &a.cores[a.cpuCore[id]]
		c.free--
		a.nodes[c.node].free--
		a.free--
	}
	a.allocs[owner] = Allocation{Class: class, CPUs: cpuset.New(cpus...)}
	a.poolsOK = false
}
