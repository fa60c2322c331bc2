package cgroup

import (
	"math"
	"math/big"
	"testing"
)

func TestScaleAndAdd(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name         string
		x, num, den  int64
		want         int64
		wantAddValue int64 // x + num, saturated
	}{
		{name: "plain", x: 2000, num: 1024, den: 1000, want: 2048, wantAddValue: 3024},
		{name: "rounds down", x: 999, num: 1, den: 1000, want: 0, wantAddValue: 1000},
		{name: "product past int64, quotient within", x: 1e14, num: 100000, den: 1000, want: 1e16, wantAddValue: 1e14 + 100000},
		{name: "quotient past int64 saturates", x: math.MaxInt64, num: math.MaxInt64, den: 2, want: math.MaxInt64, wantAddValue: math.MaxInt64},
		{name: "quotient past 64 bits saturates", x: math.MaxInt64, num: math.MaxInt64, den: 1, want: math.MaxInt64, wantAddValue: math.MaxInt64},
		{name: "a negative quantity is nothing", x: -5, num: 1024, den: 1000, want: 0, wantAddValue: 1019},
		{name: "divided by nothing", x: 5, num: 1, den: 0, want: math.MaxInt64, wantAddValue: 6},
		{name: "negative sums saturate too", x: math.MinInt64, num: -1, den: 1, want: 0, wantAddValue: math.MinInt64},
	}
	for _, tt := range tests {
		if got := Scale(tt.x, tt.num, tt.den); got != tt.want {
			t.Errorf("%s: Scale(%d, %d, %d) = %d, want %d", tt.name, tt.x, tt.num, tt.den, got, tt.want)
		}
		if got := Add(tt.x, tt.num); got != tt.wantAddValue {
			t.Errorf("%s: Add(%d, %d) = %d, want %d", tt.name, tt.x, tt.num, got, tt.wantAddValue)
		}
	}
}

// exact is x × num / den on big integers, clamped to [0, math.MaxInt64] as Scale promises.
func exact(x, num, den int64) int64 {
	if x <= 0 || num <= 0 {
		return 0
	}
	if den <= 0 {
		return math.MaxInt64
	}
	v := new(big.Int).Mul(big.NewInt(x), big.NewInt(num))
	v.Quo(v, big.NewInt(den))
	if !v.IsInt64() {
		return math.MaxInt64
	}
	return v.Int64()
}

func FuzzScale(f *testing.F) {
	f.Add(int64(1e14), int64(100000), int64(1000))
	f.Add(int64(math.MaxInt64), int64(math.MaxInt64), int64(1))
	f.Add(int64(-1), int64(3), int64(-7))
	f.Fuzz(func(t *testing.T, x, num, den int64) {
		if got, want := Scale(x, num, den), exact(x, num, den); got != want {
			t.Fatalf("Scale(%d, %d, %d) = %d, want %d", x, num, den, got, want)
		}
		sum := new(big.Int).Add(big.NewInt(x), big.NewInt(num))
		want := sum.Int64()
		switch {
		case sum.Cmp(big.NewInt(math.MaxInt64)) > 0:
			want = math.MaxInt64
		case sum.Cmp(big.NewInt(math.MinInt64)) < 0:
			want = math.MinInt64
		}
		if got := Add(x, num); got != want {
			t.Fatalf("Add(%d, %d) = %d, want %d", x, num, got, want)
		}
	})
}

// FuzzCPUConversions: shares, weight and quota stay within the kernel's ranges, and never fall when
// their input rises.
func FuzzCPUConversions(f *testing.F) {
	f.Add(int64(500), int64(2000), int64(100000))
	f.Add(int64(1e16), int64(1e14), int64(100000))
	f.Add(int64(1), int64(9), int64(MinPeriod))
	f.Add(int64(math.MaxInt64), int64(math.MinInt64), int64(MaxPeriod))
	f.Fuzz(func(t *testing.T, a, b, period int64) {
		lo, hi := min(a, b), max(a, b)
		for _, v := range []int64{lo, hi} {
			if s := MilliCPUToShares(v); s < MinShares || s > MaxShares {
				t.Fatalf("MilliCPUToShares(%d) = %d, outside [%d, %d]", v, s, MinShares, MaxShares)
			}
			if w := SharesToWeight(v); w < MinWeight || w > MaxWeight {
				t.Fatalf("SharesToWeight(%d) = %d, outside [%d, %d]", v, w, MinWeight, MaxWeight)
			}
			q := MilliCPUToQuota(v, period)
			if v <= 0 && q != -1 || v > 0 && (q < MinQuota || q > MaxQuota) {
				t.Fatalf("MilliCPUToQuota(%d, %d) = %d: want -1 without a limit, else within [%d, %d]", v, period, q, MinQuota, MaxQuota)
			}
		}
		if MilliCPUToShares(lo) > MilliCPUToShares(hi) || SharesToWeight(lo) > SharesToWeight(hi) {
			t.Fatalf("shares or weight fall from %d to %d", lo, hi)
		}
		if lo > 0 && MilliCPUToQuota(lo, period) > MilliCPUToQuota(hi, period) {
			t.Fatalf("MilliCPUToQuota falls from %d to %d at period %d", lo, hi, period)
		}
	})
}
