package topology

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"k8s.io/utils/cpuset"
)

// MaxCPUID bounds the CPU numbers ParseCPUList accepts. The kernel's own limit (NR_CPUS) is at most
// 8192 on common builds; the margin keeps odd kernels working while a corrupt or hostile list such as
// "0-4000000000" cannot make the parser build a set of billions of entries.
const MaxCPUID = 1<<16 - 1

// ParseCPUList parses the kernel's CPU list format ("0-3,8-11", "" for none), as found in sysfs files
// such as devices/system/cpu/online and in cgroup cpuset.cpus. Surrounding white space, including the
// newline sysfs ends with, is ignored.
//
// It does not call cpuset.Parse because that accepts any range size and would try to allocate one map
// entry per CPU of "0-2147483647".
func ParseCPUList(s string) (cpuset.CPUSet, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return cpuset.New(), nil
	}
	type span struct{ first, last int }
	var spans []span
	for item := range strings.SplitSeq(s, ",") {
		lo, hi, isRange := strings.Cut(item, "-")
		first, err := parseCPUNumber(lo)
		if err != nil {
			return cpuset.New(), fmt.Errorf("cpu list %q: %w", s, err)
		}
		last := first
		if isRange {
			if last, err = parseCPUNumber(hi); err != nil {
				return cpuset.New(), fmt.Errorf("cpu list %q: %w", s, err)
			}
			if last < first {
				return cpuset.New(), fmt.Errorf("cpu list %q: range %q ends before it starts", s, item)
			}
		}
		spans = append(spans, span{first, last})
	}
	// Merge overlapping spans before expanding them, so that a list repeating "0-65535" costs no more
	// than one such range.
	slices.SortFunc(spans, func(a, b span) int { return a.first - b.first })
	var cpus []int
	next := 0 // lowest CPU not yet expanded
	for _, sp := range spans {
		for c := max(sp.first, next); c <= sp.last; c++ {
			cpus = append(cpus, c)
		}
		next = max(next, sp.last+1)
	}
	return cpuset.New(cpus...), nil
}

func parseCPUNumber(s string) (int, error) {
	// Only plain decimal digits: strconv.Atoi alone would accept "+3", which the kernel never writes.
	if s == "" {
		return 0, fmt.Errorf("empty CPU number")
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return 0, fmt.Errorf("%q is not a CPU number", s)
		}
	}
	n, err := strconv.Atoi(s)
	if err != nil || n > MaxCPUID {
		return 0, fmt.Errorf("CPU number %q is above %d", s, MaxCPUID)
	}
	return n, nil
}
