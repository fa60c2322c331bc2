package figures

import (
	"math"
	"slices"
	"time"
)

// Nearest returns the nearest-rank q-quantile (0 ≤ q ≤ 1) of ds, which it sorts in place: the smallest
// value with at least q of ds at or below it. Zero for no values.
func Nearest(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	i := int(math.Ceil(q*float64(len(ds)))) - 1
	return ds[min(max(i, 0), len(ds)-1)]
}
