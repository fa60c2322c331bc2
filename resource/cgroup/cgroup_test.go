package cgroup

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/opencontainers/cgroups"
)

func i64(v int64) *int64   { return &v }
func str(v string) *string { return &v }

// fakeTree builds a cgroup tree with the given files, empty. Real cgroupfs cannot be created in a temp
// dir; the e2e suite writes the real files.
func fakeTree(t *testing.T, files ...string) string {
	t.Helper()
	root := t.TempDir()
	for _, f := range files {
		p := filepath.Join(root, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func read(t *testing.T, root, f string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, f))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestWrite(t *testing.T) {
	t.Parallel()
	pod := "kubepods/besteffort/pod1"
	tests := []struct {
		name     string
		files    []string
		parent   string
		settings Settings
		want     map[string]string
		wantErr  func(error) bool
	}{
		{
			name:   "v1 writes each file to its controller",
			files:  []string{"cpu/" + pod + "/cpu.shares", "cpu/" + pod + "/cpu.cfs_quota_us", "cpu/" + pod + "/cpu.idle", "cpuset/" + pod + "/cpuset.cpus", "memory/" + pod + "/memory.limit_in_bytes"},
			parent: "/" + pod,
			settings: Settings{CPUShares: i64(2), CPUQuota: i64(-1), CpusetCpus: str("2-15"), MemoryLimit: i64(1 << 30),
				Files: map[string]string{"cpu.idle": "1"}},
			want: map[string]string{"cpu/" + pod + "/cpu.shares": "2", "cpu/" + pod + "/cpu.cfs_quota_us": "-1", "cpu/" + pod + "/cpu.idle": "1",
				"cpuset/" + pod + "/cpuset.cpus": "2-15", "memory/" + pod + "/memory.limit_in_bytes": "1073741824"},
		},
		{
			name:     "v2 translates to the unified files",
			files:    []string{"cgroup.controllers", pod + "/cpu.weight", pod + "/cpu.max", pod + "/memory.max", pod + "/cpu.idle"},
			parent:   "/" + pod,
			settings: Settings{CPUShares: i64(1024), CPUQuota: i64(50000), MemoryLimit: i64(0), Files: map[string]string{"cpu.idle": "1"}},
			want:     map[string]string{pod + "/cpu.weight": "100", pod + "/cpu.max": "50000 100000", pod + "/memory.max": "max", pod + "/cpu.idle": "1"},
		},
		{
			name:     "systemd slice parent",
			files:    []string{"cgroup.controllers", "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1.slice/cpu.max"},
			parent:   "kubepods-besteffort-pod1.slice",
			settings: Settings{CPUQuota: i64(-1), CPUPeriod: i64(100000)},
			want:     map[string]string{"kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1.slice/cpu.max": "max 100000"},
		},
		{
			name:     "missing cgroup is NotFound and nothing is created",
			files:    []string{"cpu/other/cpu.shares"},
			parent:   "/" + pod,
			settings: Settings{CPUShares: i64(2)},
			wantErr:  errdefs.IsNotFound,
		},
		{
			name:     "file the kernel lacks is an error, not a new file",
			files:    []string{"cpu/" + pod + "/cpu.shares"},
			parent:   "/" + pod,
			settings: Settings{Files: map[string]string{"cpu.idle": "1"}},
			wantErr:  func(err error) bool { return err != nil && !errdefs.IsNotFound(err) },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			root := fakeTree(t, tt.files...)
			w, err := New(root)
			if err != nil {
				t.Fatal(err)
			}
			err = w.Write(tt.parent, tt.settings)
			if tt.wantErr != nil {
				if !tt.wantErr(err) {
					t.Fatalf("Write = %v, want a matching error", err)
				}
				if _, err := os.Stat(filepath.Join(root, "cpu", pod)); err == nil && tt.name == "missing cgroup is NotFound and nothing is created" {
					t.Fatal("Write created the missing cgroup")
				}
				if _, err := os.Stat(filepath.Join(root, "cpu", pod, "cpu.idle")); err == nil {
					t.Fatal("Write created a file the kernel does not offer")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for f, want := range tt.want {
				if got := read(t, root, f); got != want {
					t.Errorf("%s = %q, want %q", f, got, want)
				}
			}
		})
	}
}

func TestSharesToWeight(t *testing.T) {
	t.Parallel()
	// One CPU (1024 shares) weighs as much as a systemd service (100); the kernel's bounds map to
	// each other and what lies outside them is clamped.
	for _, tt := range []struct{ shares, want int64 }{{2, 1}, {0, 1}, {-5, 1}, {102, 17}, {1024, 100}, {262144, 10000}, {1 << 40, 10000}} {
		if got := SharesToWeight(tt.shares); got != tt.want {
			t.Errorf("SharesToWeight(%d) = %d, want %d", tt.shares, got, tt.want)
		}
	}
}

// The mapping is runc's: every share value in the kernel's range gets the weight
// opencontainers/cgroups gives it.
func TestSharesToWeightIsRuncs(t *testing.T) {
	t.Parallel()
	for shares := int64(MinShares); shares <= MaxShares; shares++ {
		if got, want := SharesToWeight(shares), int64(cgroups.ConvertCPUSharesToCgroupV2Value(uint64(shares))); got != want {
			t.Fatalf("SharesToWeight(%d) = %d, opencontainers/cgroups gives %d", shares, got, want)
		}
	}
}

func TestNewWithoutHierarchy(t *testing.T) {
	t.Parallel()
	if _, err := New(t.TempDir()); !errdefs.IsNotFound(err) {
		t.Fatalf("New(empty) = %v, want NotFound", err)
	}
}

func TestSupports(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		files []string
		file  string
		want  bool
	}{
		{"v1 has it", []string{"cpu/cpu.idle"}, "cpu.idle", true},
		{"v1 lacks it", []string{"cpu/cpu.shares"}, "cpu.idle", false},
		// Anolis hides memory.wmark_ratio from the root memory cgroup, as koordlet's check inside kubepods
		// assumes.
		{"v1 child has it", []string{"cpu/cpu.shares", "memory/kubepods/memory.wmark_ratio"}, "memory.wmark_ratio", true},
		{"v1 other controller's child", []string{"cpu/kubepods/memory.wmark_ratio", "memory/memory.limit_in_bytes"}, "memory.wmark_ratio", false},
		{"v2 child has it", []string{"cgroup.controllers", "kubepods/cpu.idle"}, "cpu.idle", true},
		{"v2 lacks it", []string{"cgroup.controllers", "kubepods/cpu.weight"}, "cpu.idle", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			w, err := New(fakeTree(t, tt.files...))
			if err != nil {
				t.Fatal(err)
			}
			if got := w.Supports(tt.file); got != tt.want {
				t.Fatalf("Supports(%s) = %v, want %v", tt.file, got, tt.want)
			}
		})
	}
}

// TestIdleWrittenLast checks the order a kernel needs: cpu.idle after cpu.shares and cpu.weight, which an
// idle group refuses (EINVAL). A fake tree cannot refuse, so the rule is tested on the order itself; the
// e2e suite writes a real idle pod cgroup.
func TestIdleWrittenLast(t *testing.T) {
	t.Parallel()
	got := writeOrder(map[string]string{"cpu.idle": "1", "cpu.shares": "2", "cpu.weight": "1", "cpu.cfs_quota_us": "-1", "memory.limit_in_bytes": "1"})
	want := []string{"cpu.cfs_quota_us", "cpu.shares", "cpu.weight", "memory.limit_in_bytes", "cpu.idle"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("write order %v, want %v", got, want)
	}
}
