package cgroup

import (
	"math"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/containerd/errdefs"
)

func TestCPUMaxAbove(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name         string
		child, limit CPUMax
		want         bool
	}{
		{"1.5 CPUs under 1 CPU", CPUMax{150000, 100000}, CPUMax{100000, 100000}, true},
		{"equal is allowed", CPUMax{100000, 100000}, CPUMax{100000, 100000}, false},
		{"same ratio at another period", CPUMax{50000, 50000}, CPUMax{100000, 100000}, false},
		{"more at a shorter period", CPUMax{60000, 50000}, CPUMax{100000, 100000}, true},
		{"unlimited child inherits", CPUMax{-1, 100000}, CPUMax{100000, 100000}, false},
		{"unlimited parent", CPUMax{900000, 100000}, CPUMax{-1, 100000}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := tt.child.Above(tt.limit); got != tt.want {
				t.Fatalf("%+v.Above(%+v) = %v, want %v", tt.child, tt.limit, got, tt.want)
			}
			if under := tt.limit.Under(tt.child.Period); !tt.limit.Unlimited() && (CPUMax{under, tt.child.Period}).Above(tt.limit) {
				t.Fatalf("Under(%d) = %d, above %+v", tt.child.Period, under, tt.limit)
			}
		})
	}
	if got := (CPUMax{100000, 100000}).Under(30000); got != 30000 {
		t.Errorf("one CPU at period 30000 = %d, want 30000", got)
	}
	if got := (CPUMax{-1, 100000}).Under(100000); got != -1 {
		t.Errorf("unlimited Under = %d, want -1", got)
	}
}

// TestCPUMaxAtTheKernelsBounds: quotas and periods the kernel accepts, at its bounds, compare and
// convert without wrapping, and Under never gives a quota the kernel refuses as too large.
func TestCPUMaxAtTheKernelsBounds(t *testing.T) {
	t.Parallel()
	largest := CPUMax{MaxQuota, MaxPeriod}
	oneCPU := CPUMax{MaxPeriod, MaxPeriod}
	above := []struct {
		name         string
		child, limit CPUMax
		want         bool
	}{
		{"the largest quota is above one CPU", largest, oneCPU, true},
		{"one CPU is not above the largest quota", oneCPU, largest, false},
		{"the largest quota at the shortest period is above it at the longest", CPUMax{MaxQuota, MinPeriod}, largest, true},
		{"equal at the bounds", largest, largest, false},
	}
	for _, tt := range above {
		if got := tt.child.Above(tt.limit); got != tt.want {
			t.Errorf("%s: %+v.Above(%+v) = %v, want %v", tt.name, tt.child, tt.limit, got, tt.want)
		}
	}
	under := []struct {
		name   string
		limit  CPUMax
		period int64
		want   int64
	}{
		{"the largest quota at a longer period is capped, not wrapped", CPUMax{MaxQuota, MinPeriod}, MaxPeriod, MaxQuota},
		{"the largest quota at the default period is capped at what the kernel takes", CPUMax{MaxQuota, MinPeriod}, DefaultPeriod, MaxQuota},
		{"the largest quota at its own period", largest, MaxPeriod, MaxQuota},
		{"one CPU at the longest period", CPUMax{MinPeriod, MinPeriod}, MaxPeriod, MaxPeriod},
	}
	for _, tt := range under {
		got := tt.limit.Under(tt.period)
		if got != tt.want {
			t.Errorf("%s: %+v.Under(%d) = %d, want %d", tt.name, tt.limit, tt.period, got, tt.want)
		}
		if (CPUMax{got, tt.period}).Above(tt.limit) {
			t.Errorf("%s: Under(%d) = %d is above %+v", tt.name, tt.period, got, tt.limit)
		}
	}
}

// aboveExact is Above on big integers.
func aboveExact(m, limit CPUMax) bool {
	if m.Unlimited() || limit.Unlimited() || m.Period <= 0 || limit.Period <= 0 {
		return false
	}
	l := new(big.Int).Mul(big.NewInt(m.Quota), big.NewInt(limit.Period))
	r := new(big.Int).Mul(big.NewInt(limit.Quota), big.NewInt(m.Period))
	return l.Cmp(r) > 0
}

// FuzzCPUMax: Above is the exact comparison whatever the values; Under is never above its limit, never
// beyond what the kernel takes, and never falls as the period grows.
func FuzzCPUMax(f *testing.F) {
	f.Add(int64(150000), int64(100000), int64(100000), int64(100000), int64(50000))
	f.Add(int64(MaxQuota), int64(MaxPeriod), int64(MaxPeriod), int64(MaxPeriod), int64(MinPeriod))
	f.Add(int64(MaxQuota), int64(MinPeriod), int64(-1), int64(MaxPeriod), int64(MaxPeriod))
	f.Add(int64(math.MaxInt64), int64(1), int64(math.MaxInt64), int64(math.MaxInt64), int64(math.MaxInt64))
	f.Fuzz(func(t *testing.T, q, p, lq, lp, period int64) {
		m, limit := CPUMax{q, p}, CPUMax{lq, lp}
		if got, want := m.Above(limit), aboveExact(m, limit); got != want {
			t.Fatalf("%+v.Above(%+v) = %v, want %v", m, limit, got, want)
		}
		if period <= 0 || limit.Unlimited() || limit.Period <= 0 {
			return
		}
		u := limit.Under(period)
		if u < 0 || u > MaxQuota {
			t.Fatalf("%+v.Under(%d) = %d, outside [0, %d]", limit, period, u, MaxQuota)
		}
		if aboveExact(CPUMax{u, period}, limit) {
			t.Fatalf("%+v.Under(%d) = %d is above the limit", limit, period, u)
		}
		if period < math.MaxInt64 && limit.Under(period+1) < u {
			t.Fatalf("%+v.Under falls from period %d to %d", limit, period, period+1)
		}
	})
}

// writeTree builds a tree with files holding the given contents.
func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for f, v := range files {
		p := filepath.Join(root, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestTree(t *testing.T) {
	t.Parallel()
	be := "node-a/kubepods/besteffort"
	tests := []struct {
		name      string
		files     map[string]string
		parent    string
		want      CPUMax
		wantBelow []string
	}{
		{
			name: "v1",
			files: map[string]string{
				"cpu/" + be + "/cpu.cfs_quota_us": "100000", "cpu/" + be + "/cpu.cfs_period_us": "100000",
				"cpu/" + be + "/pod1/cpu.cfs_quota_us": "-1", "cpu/" + be + "/pod1/c1/cpu.cfs_quota_us": "150000",
				"cpu/" + be + "/pod2/cpu.cfs_quota_us": "-1",
			},
			parent:    "/" + be,
			want:      CPUMax{100000, 100000},
			wantBelow: []string{"/" + be + "/pod1/c1", "/" + be + "/pod1", "/" + be + "/pod2"},
		},
		{
			name:      "v2 max",
			files:     map[string]string{"cgroup.controllers": "cpu", be + "/cpu.max": "max 100000", be + "/pod1/cpu.max": "max 100000"},
			parent:    "/" + be,
			want:      CPUMax{-1, 100000},
			wantBelow: []string{"/" + be + "/pod1"},
		},
		{
			name:      "v2 quota",
			files:     map[string]string{"cgroup.controllers": "cpu", be + "/cpu.max": "250000 100000"},
			parent:    "/" + be,
			want:      CPUMax{250000, 100000},
			wantBelow: nil,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			w, err := New(writeTree(t, tt.files))
			if err != nil {
				t.Fatal(err)
			}
			tr := w.(Tree)
			got, err := tr.CPUMax(tt.parent)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("CPUMax = %+v, want %+v", got, tt.want)
			}
			below, err := tr.Descendants(tt.parent, "cpu")
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(below, tt.wantBelow) {
				t.Errorf("Descendants = %v, want %v", below, tt.wantBelow)
			}
			// What Descendants names, Write and CPUMax accept.
			for _, d := range below {
				if err := w.Write(d, Settings{CPUQuota: i64(50000)}); err != nil {
					t.Errorf("Write(%s): %v", d, err)
				}
			}
		})
	}
	w, err := New(writeTree(t, map[string]string{"cpu/cpu.shares": "1024"}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.(Tree).CPUMax("/missing"); !errdefs.IsNotFound(err) {
		t.Errorf("CPUMax(missing) = %v, want NotFound", err)
	}
	if _, err := w.(Tree).Descendants("/missing", "cpu"); !errdefs.IsNotFound(err) {
		t.Errorf("Descendants(missing) = %v, want NotFound", err)
	}
}
