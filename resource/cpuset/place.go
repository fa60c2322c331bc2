package cpuset

import (
	"cmp"
	"slices"
)

// place chooses n free CPUs; the caller has checked that at least n are free. See the package doc for
// the rules.
func (a *Allocator) place(n int, policy BindPolicy) []int {
	var (
		best     []int
		bestCost = -1
		bestFree int
	)
	for ni := range a.nodes {
		nd := &a.nodes[ni]
		if nd.free < n {
			continue
		}
		cpus, cost := a.pick(nd.cores, n, policy)
		// Nodes are visited in ID order, so on a tie the lowest node wins.
		if bestCost < 0 || cost < bestCost || (cost == bestCost && nd.free < bestFree) {
			best, bestCost, bestFree = cpus, cost, nd.free
		}
	}
	if bestCost >= 0 {
		return best
	}

	// No single node has room: span as few nodes as possible by taking the emptiest first.
	order := make([]int, len(a.nodes))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(x, y int) int { return cmp.Compare(a.nodes[y].free, a.nodes[x].free) })
	var scope []int
	for got, i := 0, 0; got < n; i++ {
		scope = append(scope, a.nodes[order[i]].cores...)
		got += a.nodes[order[i]].free
	}
	cpus, _ := a.pick(scope, n, policy)
	return cpus
}

// pick chooses n free CPUs from the given cores (which hold at least n free CPUs) and returns them with
// a cost: for FullPCPUs the number of chosen cores whose other threads someone else may get, for
// SpreadByPCPUs the number of chosen threads that share a core with another chosen thread.
func (a *Allocator) pick(scope []int, n int, policy BindPolicy) ([]int, int) {
	if policy == SpreadByPCPUs {
		return a.pickSpread(scope, n)
	}
	return a.pickFull(scope, n)
}

func (a *Allocator) pickFull(scope []int, n int) ([]int, int) {
	out := make([]int, 0, n)
	cost := 0
	taken := make(map[int]bool, n)
	// Whole cores first, lowest first, while the remainder still needs a whole core's worth.
	for _, ci := range scope {
		c := &a.cores[ci]
		if len(out) < n && c.whole() && c.free <= n-len(out) {
			out = a.appendFree(out, ci, c.free)
			taken[ci] = true
		}
	}
	for len(out) < n {
		r := n - len(out)
		// Best fit among partly used cores: the fewest free threads that still cover the remainder,
		// which closes gaps instead of opening new ones.
		fit, biggest, split := -1, -1, -1
		for _, ci := range scope {
			c := &a.cores[ci]
			if taken[ci] || c.free == 0 {
				continue
			}
			if c.whole() {
				if split < 0 {
					split = ci
				}
				continue
			}
			if c.free >= r && (fit < 0 || c.free < a.cores[fit].free) {
				fit = ci
			}
			if biggest < 0 || c.free > a.cores[biggest].free {
				biggest = ci
			}
		}
		switch {
		case fit >= 0:
			out = a.appendFree(out, fit, r)
			taken[fit] = true
			cost++
		case biggest >= 0:
			out = a.appendFree(out, biggest, a.cores[biggest].free)
			taken[biggest] = true
			cost++
		default:
			// Only whole cores bigger than the remainder are left: splitting one is unavoidable.
			take := min(r, a.cores[split].free)
			out = a.appendFree(out, split, take)
			taken[split] = true
			if take < a.cores[split].online {
				cost++
			}
		}
	}
	slices.Sort(out)
	return out, cost
}

func (a *Allocator) pickSpread(scope []int, n int) ([]int, int) {
	cores := make([]int, 0, len(scope))
	for _, ci := range scope {
		if a.cores[ci].free > 0 {
			cores = append(cores, ci)
		}
	}
	// Cores with the most free threads first; scope order (lowest CPU first) breaks ties.
	slices.SortStableFunc(cores, func(x, y int) int { return cmp.Compare(a.cores[y].free, a.cores[x].free) })
	// freeThreads[i] lists the free CPUs of cores[i], so round k can take the k-th one.
	freeThreads := make([][]int, len(cores))
	for i, ci := range cores {
		freeThreads[i] = a.appendFree(nil, ci, a.cores[ci].free)
	}
	out := make([]int, 0, n)
	for round := 0; len(out) < n; round++ {
		for i := range cores {
			if len(out) == n {
				break
			}
			if round < len(freeThreads[i]) {
				out = append(out, freeThreads[i][round])
			}
		}
	}
	used := min(n, len(cores))
	slices.Sort(out)
	return out, n - used
}

// appendFree appends the first k free CPUs of core ci to out.
func (a *Allocator) appendFree(out []int, ci, k int) []int {
	for _, id := range a.cores[ci].cpus {
		if k == 0 {
			break
		}
		if a.owner[id] == "" {
			out = append(out, id)
			k--
		}
	}
	return out
}
