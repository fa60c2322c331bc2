package cgroup

import (
	"math"
	"math/bits"
)

// The ranges the kernel accepts for the CPU controller's files (kernel/sched): cpu.shares within
// [MIN_SHARES, MAX_SHARES], cpu.weight within [1, 10000], cpu.cfs_period_us within [1 ms, 1 s], and a
// CFS quota of at least 1 ms (min_cfs_quota_period) and at most max_cfs_runtime, MAX_BW = 2^44-1 µs,
// beyond which the kernel's fixed-point bandwidth would overflow. Quota plus burst is bounded by
// max_cfs_runtime too. Writes outside these ranges fail with EINVAL, and runc fails the container.
const (
	MinShares = 2
	MaxShares = 1 << 18
	MinWeight = 1
	MaxWeight = 10000
	MinPeriod = 1000
	MaxPeriod = 1000000
	MinQuota  = 1000
	MaxQuota  = 1<<44 - 1
	// DefaultPeriod is the CFS period (µs) kubelet and the kernel use when none is set.
	DefaultPeriod = 100000
)

// Kubelet's units: shares per CPU, and milli-cores per CPU.
const (
	sharesPerCPU  = 1024
	milliCPUToCPU = 1000
)

// Scale returns x × num / den rounded down, computed on 128 bits so that the product never wraps, and
// saturated at math.MaxInt64. It is for quantities, which are never negative: x or num at or below 0
// gives 0, and den at or below 0 (a division by nothing) gives math.MaxInt64 for a positive product.
func Scale(x, num, den int64) int64 {
	if x <= 0 || num <= 0 {
		return 0
	}
	if den <= 0 {
		return math.MaxInt64
	}
	hi, lo := bits.Mul64(uint64(x), uint64(num))
	if hi >= uint64(den) {
		// The quotient would not fit 64 bits (bits.Div64 panics on that).
		return math.MaxInt64
	}
	q, _ := bits.Div64(hi, lo, uint64(den))
	if q > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(q)
}

// Add returns a + b, saturated at math.MaxInt64 and math.MinInt64 instead of wrapping, so that a sum
// of huge quantities stays huge rather than turning negative (which cgroup files read as unlimited).
func Add(a, b int64) int64 {
	s := a + b
	// Overflow happened exactly when the sum moved the other way than b's sign says.
	if (s > a) != (b > 0) {
		if b > 0 {
			return math.MaxInt64
		}
		return math.MinInt64
	}
	return s
}

// MilliCPUToShares converts a CPU request in milli-cores to cpu.shares as kubelet does
// (pkg/kubelet/cm MilliCPUToShares): request × 1024 / 1000, within [MinShares, MaxShares]. No request
// is MinShares.
func MilliCPUToShares(milli int64) int64 {
	return min(max(Scale(milli, sharesPerCPU, milliCPUToCPU), MinShares), MaxShares)
}

// MilliCPUToQuota converts a CPU limit in milli-cores to a CFS quota at period µs as kubelet does
// (pkg/kubelet/cm MilliCPUToQuota): limit × period / 1000, raised to MinQuota (a limit of a few
// milli-cores would give less, which the kernel refuses) and capped at MaxQuota (the kernel refuses
// more, and the cap is more CPU than any machine has). No limit (0 or less) is -1, unlimited. A period
// at or below 0 is DefaultPeriod.
func MilliCPUToQuota(milli, period int64) int64 {
	if milli <= 0 {
		return -1
	}
	if period <= 0 {
		period = DefaultPeriod
	}
	return min(max(Scale(milli, period, milliCPUToCPU), MinQuota), MaxQuota)
}
