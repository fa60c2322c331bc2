package cpuburst

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/klog/v2/ktesting"

	"github.com/tandemkit/tandem/hooks"
	"github.com/tandemkit/tandem/hooks/policy/qos"
	"github.com/tandemkit/tandem/resource/cgroup"
)

// fakeTree lays out a cgroup hierarchy in a temporary directory: the real writer of resource/cgroup runs
// on it, but the files are plain files, because the kernel's cgroup files cannot be created outside
// /sys/fs/cgroup. TestRealKernel checks the kernel's own rules on this host.
func fakeTree(t *testing.T, version int, burstFile bool, cgroups ...string) (string, cgroup.Writer) {
	t.Helper()
	root := t.TempDir()
	base := filepath.Join(root, "cpu")
	file := FileV1
	if version == 2 {
		base, file = root, FileV2
		touch(t, filepath.Join(root, "cgroup.controllers"))
	}
	// v1 offers the file in the controller's root cgroup too; v2 only below the root.
	if burstFile && version == 1 {
		if err := os.MkdirAll(base, 0o755); err != nil {
			t.Fatal(err)
		}
		touch(t, filepath.Join(base, file))
	}
	for _, cg := range append([]string{"kubepods"}, cgroups...) {
		dir := filepath.Join(base, cg)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if burstFile {
			touch(t, filepath.Join(dir, file))
		}
	}
	w, err := cgroup.New(root)
	if err != nil {
		t.Fatal(err)
	}
	return base, w
}

func touch(t *testing.T, p string) {
	t.Helper()
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

func pod(class string, quota int64) *hooks.PodInfo {
	p := &hooks.PodInfo{Name: "p", Namespace: "ns", CgroupParent: "/kubepods/burstable/pod1",
		Annotations: map[string]string{qos.AnnotationClass: class}}
	if quota != 0 {
		p.Resources = &hooks.Resources{CPUPeriod: 100000, CPUQuota: quota}
	}
	return p
}

func ctr(quota int64) *hooks.ContainerInfo {
	return &hooks.ContainerInfo{ID: "c1", Name: "app", Resources: &hooks.Resources{CPUPeriod: 100000, CPUQuota: quota}}
}

func auto(percent int64) Config {
	c := DefaultConfig()
	c.Policy, c.CPUBurstPercent = PolicyAuto, percent
	return c
}

func TestNew(t *testing.T) {
	t.Parallel()
	bad := auto(100)
	bad.SharePoolThresholdPercent = 120
	tests := []struct {
		name     string
		cfg      Config
		version  int
		file     bool
		nilCG    bool
		wantSkip bool
		wantErr  string
	}{
		{name: "shipped default: policy none", cfg: DefaultConfig(), version: 1, file: true, wantSkip: true},
		{name: "quota burst only: nothing to do yet", cfg: Config{Policy: PolicyCFSQuotaBurstOnly, CFSQuotaBurstPercent: 400, CFSQuotaBurstPeriodSeconds: -1}, version: 1, file: true, wantSkip: true},
		{name: "kernel before 5.14", cfg: auto(100), version: 1, wantSkip: true},
		{name: "cgroup v2 without cpu.max.burst", cfg: auto(100), version: 2, wantSkip: true},
		{name: "no cgroups", cfg: auto(100), nilCG: true, wantSkip: true},
		{name: "invalid config names the field", cfg: bad, version: 1, file: true, wantErr: "sharePoolThresholdPercent"},
		{name: "quota burst below 100% is invalid", cfg: Config{Policy: PolicyAuto, CPUBurstPercent: 100, CFSQuotaBurstPercent: 50}, version: 1, file: true, wantErr: "cfsQuotaBurstPercent"},
		{name: "cpuBurstOnly without quota burst fields", cfg: Config{Policy: PolicyCPUBurstOnly, CPUBurstPercent: 100}, version: 1, file: true},
		{name: "unknown policy", cfg: Config{Policy: "always"}, version: 1, file: true, wantErr: "policy"},
		{name: "v1 with burst", cfg: auto(100), version: 1, file: true},
		{name: "v2 with burst", cfg: Config{Policy: PolicyCPUBurstOnly, CPUBurstPercent: 100}, version: 2, file: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var p cgroup.Prober
			if !tt.nilCG {
				_, p = fakeTree(t, max(tt.version, 1), tt.file, "x")
			}
			_, err := New(tt.cfg, p)
			switch {
			case tt.wantSkip:
				if !errors.Is(err, hooks.ErrSkip) {
					t.Fatalf("New = %v, want ErrSkip", err)
				}
			case tt.wantErr != "":
				if err == nil || errors.Is(err, hooks.ErrSkip) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("New = %v, want a config error naming %s", err, tt.wantErr)
				}
			case err != nil:
				t.Fatal(err)
			}
		})
	}
}

func TestBurst(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name           string
		quota, percent int64
		want           int64
	}{
		{name: "half a CPU at 50%", quota: 50000, percent: 50, want: 25000},
		{name: "the shipped 1000% is capped at the quota", quota: 200000, percent: 1000, want: 200000},
		{name: "odd quota rounds down", quota: 33333, percent: 33, want: 10999},
		{name: "no limit", quota: -1, percent: 100, want: 0},
		{name: "zero percent", quota: 100000, percent: 0, want: 0},
		{name: "quota near the kernel bound", quota: maxCFSRuntimeUs - 10, percent: maxPercent, want: 10},
		{name: "the kernel's largest quota leaves no room", quota: cgroup.MaxQuota, percent: 50, want: 0},
		{name: "half the kernel's bound bursts whole", quota: cgroup.MaxQuota / 2, percent: 100, want: cgroup.MaxQuota / 2},
		{name: "a quota past the kernel's bound bursts nothing, not a negative burst", quota: 1 << 62, percent: 50, want: 0},
		{name: "the largest quota", quota: math.MaxInt64, percent: maxPercent, want: 0},
		{name: "a percentage past int64 arithmetic is capped at the quota", quota: 100000, percent: math.MaxInt64, want: 100000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := Burst(tt.quota, tt.percent); got != tt.want {
				t.Fatalf("Burst(%d, %d) = %d, want %d", tt.quota, tt.percent, got, tt.want)
			}
		})
	}
}

func TestAdjustments(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		version int
		percent int64
		class   string
		quota   int64
		// want is the burst file's value in the container's adjustment and the pod's; "" is none. The
		// front end has the runtime write the container's on cgroup v2 and writes it itself on v1.
		wantCtr, wantPod string
	}{
		{name: "LS on v2", version: 2, percent: 50, class: "LS", quota: 200000, wantCtr: "100000", wantPod: "100000"},
		{name: "LS on v2, the shipped percent", version: 2, percent: 1000, class: "LS", quota: 150000, wantCtr: "150000", wantPod: "150000"},
		{name: "LS on v1", version: 1, percent: 50, class: "LS", quota: 200000, wantCtr: "100000", wantPod: "100000"},
		{name: "LS without limit", version: 2, percent: 50, class: "LS", quota: -1},
		{name: "LSR does not burst", version: 2, percent: 50, class: "LSR", quota: 200000},
		{name: "LSE does not burst", version: 2, percent: 50, class: "LSE", quota: 200000},
		{name: "BE does not burst", version: 2, percent: 50, class: "BE", quota: 200000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, ctx := ktesting.NewTestContext(t)
			_, w := fakeTree(t, tt.version, true)
			b, err := New(auto(tt.percent), w)
			if err != nil {
				t.Fatal(err)
			}
			file := map[int]string{1: FileV1, 2: FileV2}[tt.version]
			p := pod(tt.class, tt.quota)
			for _, stage := range []string{"create", "update"} {
				var adj *hooks.Adjustment
				if stage == "create" {
					adj, err = b.PreCreateContainer(ctx, p, ctr(tt.quota))
				} else {
					adj, err = b.PreUpdateContainerResources(ctx, p, ctr(tt.quota))
				}
				if err != nil {
					t.Fatal(err)
				}
				if got := unified(adj, false)[file]; got != tt.wantCtr {
					t.Errorf("%s: container %s = %q, want %q", stage, file, got, tt.wantCtr)
				}
			}
			adj, err := b.PreRunPodSandbox(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			if got := unified(adj, true)[file]; got != tt.wantPod {
				t.Errorf("pod %s = %q, want %q", file, got, tt.wantPod)
			}
		})
	}
}

func unified(a *hooks.Adjustment, pod bool) map[string]string {
	if a == nil {
		return nil
	}
	r := a.Resources
	if pod {
		r = a.PodResources
	}
	if r == nil {
		return nil
	}
	return r.Unified
}

// FuzzBurst: the burst is never negative, never above the quota, keeps quota + burst within the
// kernel's bound, and never falls as the percentage rises.
func FuzzBurst(f *testing.F) {
	f.Add(int64(50000), int64(50), int64(1000))
	f.Add(int64(cgroup.MaxQuota), int64(50), int64(maxPercent))
	f.Add(int64(1<<62), int64(50), int64(100))
	f.Add(int64(100000), int64(math.MaxInt64), int64(math.MaxInt64/100+1))
	f.Fuzz(func(t *testing.T, quota, p1, p2 int64) {
		lo, hi := min(p1, p2), max(p1, p2)
		b := Burst(quota, lo)
		if b < 0 || b > max(quota, 0) {
			t.Fatalf("Burst(%d, %d) = %d, outside [0, quota]", quota, lo, b)
		}
		if quota > 0 && quota+b > cgroup.MaxQuota && b != 0 {
			t.Fatalf("Burst(%d, %d) = %d: quota + burst beyond the kernel's %d", quota, lo, b, int64(cgroup.MaxQuota))
		}
		if b2 := Burst(quota, hi); b2 < b {
			t.Fatalf("Burst(%d, %d) = %d < Burst(%d, %d) = %d", quota, hi, b2, quota, lo, b)
		}
	})
}
