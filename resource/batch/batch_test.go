package batch

import (
	"math"
	"testing"

	"github.com/containerd/errdefs"

	"github.com/tandemkit/tandem/resource/cgroup"
)

func TestParseSpec(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		in      string
		want    map[string]Container
		wantErr bool
	}{
		{
			name: "koordinator's shape",
			in:   `{"containers":{"app":{"requests":{"kubernetes.io/batch-cpu":"2k","kubernetes.io/batch-memory":"1Gi"},"limits":{"kubernetes.io/batch-cpu":"4000","kubernetes.io/batch-memory":"2Gi"}}}}`,
			want: map[string]Container{"app": {CPURequestMilli: 2000, CPULimitMilli: 4000, MemoryRequest: 1 << 30, MemoryLimit: 2 << 30}},
		},
		{name: "requests only", in: `{"containers":{"a":{"requests":{"kubernetes.io/batch-cpu":"500"}}}}`, want: map[string]Container{"a": {CPURequestMilli: 500}}},
		{name: "empty", in: `{}`, want: map[string]Container{}},
		{name: "not json", in: `{containers`, wantErr: true},
		{name: "bad quantity", in: `{"containers":{"a":{"limits":{"kubernetes.io/batch-cpu":"lots"}}}}`, wantErr: true},
		{name: "fractional", in: `{"containers":{"a":{"limits":{"kubernetes.io/batch-cpu":"0.5"}}}}`, wantErr: true},
		{name: "negative", in: `{"containers":{"a":{"limits":{"kubernetes.io/batch-memory":"-1"}}}}`, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := ParseSpec(tt.in)
			if tt.wantErr {
				if !errdefs.IsInvalidArgument(err) {
					t.Fatalf("ParseSpec = %v, %v; want InvalidArgument", got, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("ParseSpec = %v, want %v", got, tt.want)
			}
			for k, v := range tt.want {
				if got[k] != v {
					t.Fatalf("container %s = %+v, want %+v", k, got[k], v)
				}
			}
		})
	}
}

func TestTranslation(t *testing.T) {
	t.Parallel()
	// The formulas of the issue: shares = request × 1024 / 1000 clamped to [2, 262144];
	// quota = limit × period / 1000, -1 without a limit.
	for _, tt := range []struct{ req, shares int64 }{{0, 2}, {1, 2}, {500, 512}, {2000, 2048}, {1 << 30, 262144}} {
		if got := CPUShares(tt.req); got != tt.shares {
			t.Errorf("CPUShares(%d) = %d, want %d", tt.req, got, tt.shares)
		}
	}
	for _, tt := range []struct{ limit, period, quota int64 }{{0, 100000, -1}, {2000, 100000, 200000}, {500, 0, 50000}, {1500, 50000, 75000}} {
		if got := CFSQuota(tt.limit, tt.period); got != tt.quota {
			t.Errorf("CFSQuota(%d, %d) = %d, want %d", tt.limit, tt.period, got, tt.quota)
		}
	}
	s := Sum(map[string]Container{"a": {CPURequestMilli: 500, CPULimitMilli: 1000, MemoryLimit: 1 << 20}, "b": {CPURequestMilli: 500, CPULimitMilli: 0, MemoryLimit: 1 << 20}})
	if s.CPURequestMilli != 1000 || s.CPULimitMilli != 0 || s.MemoryLimit != 2<<20 {
		t.Errorf("Sum = %+v: want requests added, cpu unlimited (b has no limit), memory added", s)
	}
}

// TestTranslationClamps: quantities far beyond any machine, and below what the kernel takes, give the
// kernel's bounds, as kubelet's conversion does; none wraps into a small or "unlimited" value.
func TestTranslationClamps(t *testing.T) {
	t.Parallel()
	shares := []struct {
		name string
		req  int64
		want int64
	}{
		{"batch-cpu 1e16 is the most shares, not the fewest", 1e16, MaxShares},
		{"the largest request", math.MaxInt64, MaxShares},
		{"just past where request × 1024 wraps", math.MaxInt64/1024 + 1, MaxShares},
		{"a negative request is the fewest shares", -5, MinShares},
	}
	for _, tt := range shares {
		if got := CPUShares(tt.req); got != tt.want {
			t.Errorf("%s: CPUShares(%d) = %d, want %d", tt.name, tt.req, got, tt.want)
		}
	}
	quotas := []struct {
		name          string
		limit, period int64
		want          int64
	}{
		{"a limit of 1e14 is the kernel's largest quota, not unlimited", 1e14, 100000, cgroup.MaxQuota},
		{"the largest limit", math.MaxInt64, 100000, cgroup.MaxQuota},
		{"the largest limit at the longest period", math.MaxInt64, cgroup.MaxPeriod, cgroup.MaxQuota},
		{"1m is raised to the kernel's 1 ms, as kubelet does", 1, 100000, cgroup.MinQuota},
		{"9m is raised to 1 ms", 9, 100000, cgroup.MinQuota},
		{"10m is 1 ms exactly", 10, 100000, 1000},
		{"11m is above it", 11, 100000, 1100},
		{"1m at the shortest period", 1, cgroup.MinPeriod, cgroup.MinQuota},
	}
	for _, tt := range quotas {
		if got := CFSQuota(tt.limit, tt.period); got != tt.want {
			t.Errorf("%s: CFSQuota(%d, %d) = %d, want %d", tt.name, tt.limit, tt.period, got, tt.want)
		}
	}
	// Two containers whose limits add up past int64: the pod keeps the largest limit, not a negative one
	// (which the pod cgroup would read as no limit at all).
	huge := Container{CPURequestMilli: 1 << 62, CPULimitMilli: 1 << 62, MemoryRequest: 1 << 62, MemoryLimit: 1 << 62}
	s := Sum(map[string]Container{"a": huge, "b": huge})
	if want := (Container{math.MaxInt64, math.MaxInt64, math.MaxInt64, math.MaxInt64}); s != want {
		t.Errorf("Sum of two 2^62 containers = %+v, want %+v", s, want)
	}
}

// checkTranslation is the property every conversion keeps: within the kernel's range, monotonic in its
// input, no wrap.
func checkTranslation(t *testing.T, a, b, period int64) {
	t.Helper()
	lo, hi := min(a, b), max(a, b)
	for _, v := range []int64{lo, hi} {
		if s := CPUShares(v); s < MinShares || s > MaxShares {
			t.Fatalf("CPUShares(%d) = %d, outside [%d, %d]", v, s, MinShares, MaxShares)
		}
		q := CFSQuota(v, period)
		if (v <= 0) != (q == -1) {
			t.Fatalf("CFSQuota(%d, %d) = %d: want -1 exactly when there is no limit", v, period, q)
		}
		if v > 0 && (q < cgroup.MinQuota || q > cgroup.MaxQuota) {
			t.Fatalf("CFSQuota(%d, %d) = %d, outside [%d, %d]", v, period, q, cgroup.MinQuota, cgroup.MaxQuota)
		}
	}
	if CPUShares(lo) > CPUShares(hi) {
		t.Fatalf("CPUShares(%d) = %d > CPUShares(%d) = %d", lo, CPUShares(lo), hi, CPUShares(hi))
	}
	if lo > 0 && CFSQuota(lo, period) > CFSQuota(hi, period) {
		t.Fatalf("CFSQuota(%d) = %d > CFSQuota(%d) = %d", lo, CFSQuota(lo, period), hi, CFSQuota(hi, period))
	}
	if lo >= 0 {
		s := Sum(map[string]Container{"a": {CPURequestMilli: lo, CPULimitMilli: lo, MemoryLimit: lo}, "b": {CPURequestMilli: hi, CPULimitMilli: hi, MemoryLimit: hi}})
		if s.CPURequestMilli < hi {
			t.Fatalf("Sum of requests %d and %d = %d, below one of them", lo, hi, s.CPURequestMilli)
		}
		if lo > 0 && (s.CPULimitMilli < hi || s.MemoryLimit < hi) {
			t.Fatalf("Sum of limits %d and %d = %+v, below one of them", lo, hi, s)
		}
	}
}

func FuzzTranslation(f *testing.F) {
	f.Add(int64(500), int64(2000), int64(100000))
	f.Add(int64(1e16), int64(1e14), int64(100000))
	f.Add(int64(1), int64(9), int64(0))
	f.Add(int64(math.MaxInt64), int64(math.MaxInt64/1024+1), int64(cgroup.MaxPeriod))
	f.Add(int64(-1), int64(math.MinInt64), int64(-1))
	f.Fuzz(checkTranslation)
}

func FuzzParseSpec(f *testing.F) {
	f.Add(`{"containers":{"a":{"limits":{"kubernetes.io/batch-cpu":"1k"}}}}`)
	f.Add(`{"containers":{"a":{"requests":{"kubernetes.io/batch-cpu":"1e16"},"limits":{"kubernetes.io/batch-cpu":"1e14","kubernetes.io/batch-memory":"8Ei"}}}}`)
	f.Add(`{"containers":{"a":{"limits":{"kubernetes.io/batch-cpu":"9"}},"b":{"limits":{"kubernetes.io/batch-cpu":"9223372036854775807"}}}}`)
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ParseSpec(s)
		if err != nil && !errdefs.IsInvalidArgument(err) {
			t.Fatalf("error of the wrong class: %v", err)
		}
		for _, c := range got {
			if c.CPULimitMilli < 0 || c.MemoryLimit < 0 {
				t.Fatalf("negative value accepted: %+v", c)
			}
			checkTranslation(t, c.CPURequestMilli, c.CPULimitMilli, DefaultPeriod)
		}
		if sum := Sum(got); sum.CPURequestMilli < 0 || sum.CPULimitMilli < 0 || sum.MemoryLimit < 0 {
			t.Fatalf("Sum = %+v: negative", sum)
		}
	})
}
