package cgroup

import (
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
