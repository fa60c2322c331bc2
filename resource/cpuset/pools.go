package cpuset

import (
	"k8s.io/utils/cpuset"

	"github.com/tandemkit/tandem/resource/qos"
)

// Pools are the CPU sets each QoS class runs in.
type Pools struct {
	// LSE is the union of all LSE allocations; each LSE container gets only its own part of it.
	LSE cpuset.CPUSet
	// LSR is the union of all LSR allocations; each LSR container gets only its own part of it.
	LSR cpuset.CPUSet
	// LS is the shared pool: usable − LSE − LSR.
	LS cpuset.CPUSet
	// BE is usable − LSE: BE may run on LSR CPUs, which are idle whenever their owner is. CPU
	// suppression (SetBELimit) shrinks it further.
	BE cpuset.CPUSet
}

// Pools returns the CPU pools of the four classes as they stand now. The sets are shared between
// callers until the next change; cpuset.CPUSet has no mutating methods, so that is safe.
func (a *Allocator) Pools() Pools {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.poolsLocked()
}

func (a *Allocator) poolsLocked() Pools {
	if a.poolsOK {
		return a.pools
	}
	var lse, lsr, ls, be []int
	for _, id := range a.usable.List() {
		switch a.class[id] {
		case qos.LSE:
			lse = append(lse, id)
		case qos.LSR:
			lsr = append(lsr, id)
			be = append(be, id)
		default:
			ls = append(ls, id)
			be = append(be, id)
		}
	}
	a.pools = Pools{LSE: cpuset.New(lse...), LSR: cpuset.New(lsr...), LS: cpuset.New(ls...), BE: cpuset.New(be...)}
	if a.beLimit > 0 && a.beLimit < len(be) {
		a.pools.BE = a.suppressedBE(ls, lsr)
	}
	a.poolsOK = true
	return a.pools
}

// SetBELimit caps the BE pool at n CPUs, for CPU suppression: BE batch work then competes with LS
// containers on fewer CPUs. n <= 0 lifts the cap. The cap never takes LSE CPUs into the BE pool (they
// are never in it) and never empties it: at least one CPU stays, since the kernel refuses an empty
// cpuset.cpus for a cgroup with tasks. It reports whether the BE pool changed, so the caller knows
// whether running BE containers must move.
//
// Which CPUs BE keeps: shared-pool CPUs before LSR CPUs (an LSR owner only lends its CPUs to BE while
// idle, so BE gives those back first), and within each, whole physical cores from the highest-numbered
// down. Whole cores keep an LS thread from sharing a core's execution units with a BE sibling; the high
// end is the far side from where Allocate starts handing out exclusive CPUs, so a later LSE or LSR
// allocation rarely lands on BE's remaining CPUs.
func (a *Allocator) SetBELimit(n int) bool {
	a.mu.Lock()
	before := a.poolsLocked().BE
	if n < 0 {
		n = 0
	}
	a.beLimit = n
	a.poolsOK = false
	after := a.poolsLocked().BE
	a.mu.Unlock()
	return !before.Equals(after)
}

// BELimit returns the cap SetBELimit set; 0 means none.
func (a *Allocator) BELimit() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.beLimit
}

// suppressedBE picks beLimit CPUs from the shared pool, then from LSR; see SetBELimit. The caller holds
// a.mu and has checked that fewer CPUs than ls+lsr are wanted.
func (a *Allocator) suppressedBE(ls, lsr []int) cpuset.CPUSet {
	keep := make([]int, 0, a.beLimit)
	for _, side := range [][]int{ls, lsr} {
		in := make(map[int]bool, len(side))
		for _, id := range side {
			in[id] = true
		}
		for ci := len(a.cores) - 1; ci >= 0 && len(keep) < a.beLimit; ci-- {
			for _, id := range a.cores[ci].cpus {
				if in[id] && len(keep) < a.beLimit {
					keep = append(keep, id)
				}
			}
		}
	}
	return cpuset.New(keep...)
}
