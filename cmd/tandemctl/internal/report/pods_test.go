package report

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/tandemkit/tandem/hooks"
	"github.com/tandemkit/tandem/store"
)

// The cgroup trees here are fake because these are unit tests: they run without root and on any
// kernel, and cover the cgroup v2 and systemd layouts this machine does not have.

func tree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for name, content := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// TestFields checks how one container's kernel values are compared with what the proxy applied: equal
// values written differently agree, real differences are flagged, unset values are never flagged.
func TestFields(t *testing.T) {
	t.Parallel()
	page := int64(os.Getpagesize())
	const v1dir, v2dir = "/kubepods/pod1/c1", "/kubepods/pod1/c1"
	v1 := func(files map[string]string) map[string]string {
		out := map[string]string{}
		for k, v := range files {
			ctrl := map[string]string{"cpuset.cpus": "cpuset", "memory.limit_in_bytes": "memory"}[k]
			if ctrl == "" {
				ctrl = "cpu"
			}
			out[ctrl+v1dir+"/"+k] = v
		}
		out["cpu/kubepods/pod1/cpu.idle"] = "0"
		return out
	}
	v2 := func(files map[string]string) map[string]string {
		out := map[string]string{"cgroup.controllers": "cpu cpuset memory", "kubepods/pod1/cpu.idle": "1"}
		for k, v := range files {
			out[v2dir[1:]+"/"+k] = v
		}
		return out
	}
	tests := []struct {
		name   string
		files  map[string]string
		res    hooks.Resources
		podRes *hooks.Resources
		get    func(Container) Field
		want   Field
	}{
		{
			name: "cpuset written differently agrees", files: v1(map[string]string{"cpuset.cpus": "0-1,4"}),
			res: hooks.Resources{CpusetCpus: "0,1,4"}, get: func(c Container) Field { return c.Cpuset },
			want: Field{Kernel: "0-1,4", Applied: "0,1,4"},
		},
		{
			name: "cpuset moved behind the proxy's back", files: v1(map[string]string{"cpuset.cpus": "0-15"}),
			res: hooks.Resources{CpusetCpus: "4-15"}, get: func(c Container) Field { return c.Cpuset },
			want: Field{Kernel: "0-15", Applied: "4-15", Differs: true},
		},
		{
			name: "cpuset the proxy never set", files: v1(map[string]string{"cpuset.cpus": "0-15"}),
			get: func(c Container) Field { return c.Cpuset }, want: Field{Kernel: "0-15"},
		},
		{
			name: "v2 cpuset from the effective list", files: v2(map[string]string{"cpuset.cpus": "", "cpuset.cpus.effective": "2-3"}),
			res: hooks.Resources{CpusetCpus: "2-3"}, get: func(c Container) Field { return c.Cpuset },
			want: Field{Kernel: "2-3", Applied: "2-3"},
		},
		{
			name: "v1 unlimited quota, none applied", files: v1(map[string]string{"cpu.cfs_quota_us": "-1", "cpu.cfs_period_us": "100000"}),
			get: func(c Container) Field { return c.CPUQuota }, want: Field{Kernel: "max/100000"},
		},
		{
			name: "v1 unlimited quota applied as -1", files: v1(map[string]string{"cpu.cfs_quota_us": "-1", "cpu.cfs_period_us": "100000"}),
			res: hooks.Resources{CPUQuota: -1, CPUPeriod: 100000}, get: func(c Container) Field { return c.CPUQuota },
			want: Field{Kernel: "max/100000", Applied: "max/100000"},
		},
		{
			name: "v1 period differs", files: v1(map[string]string{"cpu.cfs_quota_us": "50000", "cpu.cfs_period_us": "100000"}),
			res: hooks.Resources{CPUQuota: 50000, CPUPeriod: 50000}, get: func(c Container) Field { return c.CPUQuota },
			want: Field{Kernel: "50000/100000", Applied: "50000/50000", Differs: true},
		},
		{
			name: "v2 quota lost", files: v2(map[string]string{"cpu.max": "max 100000"}),
			res: hooks.Resources{CPUQuota: 150000, CPUPeriod: 100000}, get: func(c Container) Field { return c.CPUQuota },
			want: Field{Kernel: "max/100000", Applied: "150000/100000", Differs: true},
		},
		{
			name: "v1 shares", files: v1(map[string]string{"cpu.shares": "1024"}),
			res: hooks.Resources{CPUShares: 1024}, get: func(c Container) Field { return c.CPUShares },
			want: Field{Kernel: "1024", Applied: "1024"},
		},
		{
			name: "v2 weight, an older runtime's linear mapping", files: v2(map[string]string{"cpu.weight": "39"}),
			res: hooks.Resources{CPUShares: 1024}, get: func(c Container) Field { return c.CPUShares },
			want: Field{Kernel: "39", Applied: "100"},
		},
		{
			name: "v2 weight, runc 1.3.2 mapping", files: v2(map[string]string{"cpu.weight": "100"}),
			res: hooks.Resources{CPUShares: 1024}, get: func(c Container) Field { return c.CPUShares },
			want: Field{Kernel: "100", Applied: "100"},
		},
		{
			name: "v2 weight changed by hand", files: v2(map[string]string{"cpu.weight": "500"}),
			res: hooks.Resources{CPUShares: 1024}, get: func(c Container) Field { return c.CPUShares },
			want: Field{Kernel: "500", Applied: "100", Differs: true},
		},
		{
			name: "memory rounded down to a page agrees", files: v1(map[string]string{"memory.limit_in_bytes": strconv.FormatInt(64<<20, 10)}),
			res: hooks.Resources{MemoryLimitInBytes: 64<<20 + page - 1}, get: func(c Container) Field { return c.MemoryLimit },
			want: Field{Kernel: "64Mi", Applied: strconv.FormatInt(64<<20+page-1, 10)},
		},
		{
			name: "v1 unlimited memory with a limit applied", files: v1(map[string]string{"memory.limit_in_bytes": "9223372036854771712"}),
			res: hooks.Resources{MemoryLimitInBytes: 1 << 30}, get: func(c Container) Field { return c.MemoryLimit },
			want: Field{Kernel: "max", Applied: "1Gi", Differs: true},
		},
		{
			name: "v2 memory", files: v2(map[string]string{"memory.max": "1536000"}),
			res: hooks.Resources{MemoryLimitInBytes: 1536000}, get: func(c Container) Field { return c.MemoryLimit },
			want: Field{Kernel: "1500Ki", Applied: "1500Ki"},
		},
		{
			name: "cpu.idle of the pod cleared behind the proxy's back", files: v1(nil),
			podRes: &hooks.Resources{Unified: map[string]string{"cpu.idle": "1"}}, get: func(c Container) Field { return c.CPUIdle },
			want: Field{Kernel: "0", Applied: "1", Differs: true},
		},
		{
			name: "v2 cpu.idle", files: v2(nil),
			podRes: &hooks.Resources{Unified: map[string]string{"cpu.idle": "1"}}, get: func(c Container) Field { return c.CPUIdle },
			want: Field{Kernel: "1", Applied: "1"},
		},
		{
			name: "kernel without cpu.idle", files: map[string]string{"cpu/kubepods/pod1/c1/cpu.shares": "2"},
			get:  func(c Container) Field { return c.CPUIdle },
			want: Field{Unread: "the kernel offers no cpu.idle in $ROOT/cpu/kubepods/pod1"},
		},
		{
			name: "container without a cpuset cgroup", files: v1(map[string]string{"cpu.shares": "2"}),
			res: hooks.Resources{CpusetCpus: "0"}, get: func(c Container) Field { return c.Cpuset },
			want: Field{Applied: "0", Unread: "no cgroup /kubepods/pod1/c1 or /kubepods/pod1/cri-containerd-c1.scope under $ROOT/cpuset"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			root := tree(t, tc.files)
			snap := &store.Snapshot{
				Pods:       []*store.Pod{{ID: "p1", Name: "pod", Namespace: "ns", UID: "1", CgroupParent: "/kubepods/pod1", Resources: tc.podRes}},
				Containers: []*store.Container{{ID: "c1", PodSandboxID: "p1", Name: "app", State: "CONTAINER_RUNNING", Resources: &tc.res}},
			}
			r := BuildPods(snap, NewKernel(root), false)
			if len(r.Containers) != 1 {
				t.Fatalf("%d rows, want 1", len(r.Containers))
			}
			got := tc.get(r.Containers[0])
			got.Unread = strings.ReplaceAll(got.Unread, root, "$ROOT")
			if got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestFormatBytes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   int64
		want string
	}{{-1, "max"}, {0, "0"}, {1000, "1000"}, {1024, "1Ki"}, {178257920, "170Mi"}, {1 << 30, "1Gi"}, {3 << 40, "3Ti"}, {1<<30 + 1, "1073741825"}} {
		if got := formatBytes(tc.in); got != tc.want {
			t.Errorf("formatBytes(%d) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestBuildPoolsRejectsBadLists(t *testing.T) {
	t.Parallel()
	for _, d := range []*PoolsDump{
		{LSE: "0-", LS: "0-1"},
		{LS: "0-1", Allocations: map[string]AllocationDump{"u/c": {Class: "LSE", CPUs: "3-1"}}},
	} {
		if _, err := BuildPools(d, nil); err == nil {
			t.Errorf("BuildPools(%+v) accepted a malformed CPU list", d)
		}
	}
}
