package podcgroup

import (
	"os"
	"testing"
)

func TestSharesToWeight(t *testing.T) {
	t.Parallel()
	for shares, want := range map[int64]int64{2: 1, 1024: 39, 262144: 10000} {
		if got := SharesToWeight(shares); got != want {
			t.Errorf("SharesToWeight(%d) = %d, want %d", shares, got, want)
		}
	}
}

// TestMakeAndRemove makes a cgroup tree on the real host, as the benchmarks do, and removes it.
func TestMakeAndRemove(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to make cgroups")
	}
	root := "/tdm-podcgroup-test"
	tests := []struct {
		path   string
		shares int64
	}{{root, 2048}, {root + "/kubepods", 0}, {root + "/kubepods/besteffort", 2}}
	t.Cleanup(func() {
		if err := RemoveTree(root); err != nil {
			t.Error(err)
		}
	})
	for _, tt := range tests {
		if err := Make(tt.path, tt.shares); err != nil {
			t.Fatalf("Make(%s, %d): %v", tt.path, tt.shares, err)
		}
		if _, err := CPUUsage(tt.path); err != nil {
			t.Errorf("CPUUsage(%s): %v", tt.path, err)
		}
	}
	if err := RemoveTree(root); err != nil {
		t.Fatal(err)
	}
	if _, err := CPUUsage(root); err == nil {
		t.Error("the tree is still there after RemoveTree")
	}
	if Own() == "?" {
		t.Error("Own() did not find this process's cgroup")
	}
}
