package qos

import (
	"math"
	"testing"

	"github.com/containerd/errdefs"

	"github.com/tandemkit/tandem/resource/cgroup"
)

func TestResolve(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name         string
		in           Input
		want         Class
		wantSource   Source
		wantConflict bool
		wantErr      bool
	}{
		{name: "koordinator label", in: Input{Labels: map[string]string{LabelKoordinator: "LSE"}}, want: LSE, wantSource: FromLabel},
		{name: "label is case-insensitive", in: Input{Labels: map[string]string{LabelKoordinator: "be"}}, want: BE, wantSource: FromLabel},
		{name: "openfuyao HLS is LSR", in: Input{Annotations: map[string]string{AnnotationOpenFuyao: "HLS"}}, want: LSR, wantSource: FromAnnotation},
		{name: "openfuyao BE", in: Input{Annotations: map[string]string{AnnotationOpenFuyao: "BE"}}, want: BE, wantSource: FromAnnotation},
		{name: "label wins over annotation, noted", in: Input{Labels: map[string]string{LabelKoordinator: "LS"}, Annotations: map[string]string{AnnotationOpenFuyao: "BE"}}, want: LS, wantSource: FromLabel, wantConflict: true},
		{name: "agreeing dialects are no conflict", in: Input{Labels: map[string]string{LabelKoordinator: "LSR"}, Annotations: map[string]string{AnnotationOpenFuyao: "HLS"}}, want: LSR, wantSource: FromLabel},
		{name: "besteffort cgroup", in: Input{CgroupParent: "/kubepods/besteffort/pod123"}, want: BE, wantSource: FromKubernetes},
		{name: "burstable cgroup", in: Input{CgroupParent: "/kubepods/burstable/pod123"}, want: LS, wantSource: FromKubernetes},
		{name: "guaranteed cgroup", in: Input{CgroupParent: "/kubepods/pod123"}, want: LS, wantSource: FromKubernetes},
		{name: "guaranteed with static CPU manager", in: Input{CgroupParent: "/kubepods/pod123", StaticCPUManager: true}, want: LSR, wantSource: FromKubernetes},
		{name: "systemd besteffort", in: Input{CgroupParent: "kubepods-besteffort-pod123.slice"}, want: BE, wantSource: FromKubernetes},
		{name: "systemd guaranteed static", in: Input{CgroupParent: "kubepods-pod123.slice", StaticCPUManager: true}, want: LSR, wantSource: FromKubernetes},
		{name: "no layout", in: Input{}, want: LS, wantSource: FromKubernetes},
		{name: "bad label", in: Input{Labels: map[string]string{LabelKoordinator: "GOLD"}}, wantErr: true},
		{name: "bad annotation", in: Input{Annotations: map[string]string{AnnotationOpenFuyao: "X"}}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := Resolve(tt.in)
			if tt.wantErr {
				if !errdefs.IsInvalidArgument(err) {
					t.Fatalf("Resolve = %v, %v; want InvalidArgument", got, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Class != tt.want || got.Source != tt.wantSource || (got.Conflict != "") != tt.wantConflict {
				t.Fatalf("Resolve = %+v, want %s from %s (conflict %v)", got, tt.want, tt.wantSource, tt.wantConflict)
			}
		})
	}
}

func FuzzResolve(f *testing.F) {
	f.Add("LSE", "HLS", "/kubepods/pod1")
	f.Fuzz(func(t *testing.T, label, ann, parent string) {
		r, err := Resolve(Input{Labels: map[string]string{LabelKoordinator: label}, Annotations: map[string]string{AnnotationOpenFuyao: ann}, CgroupParent: parent})
		if err == nil {
			if _, perr := Parse(string(r.Class)); perr != nil {
				t.Fatalf("resolved an invalid class %q", r.Class)
			}
		}
	})
}

func TestExclusiveCPUs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name                  string
		quota, period, shares int64
		want                  int
		wantErr               bool
	}{
		{name: "2 CPUs, request == limit", quota: 200000, period: 100000, shares: 2048, want: 2},
		{name: "1 CPU", quota: 100000, period: 100000, shares: 1024, want: 1},
		{name: "fractional", quota: 150000, period: 100000, shares: 1536, wantErr: true},
		{name: "request below limit", quota: 200000, period: 100000, shares: 1024, wantErr: true},
		{name: "no limit", quota: -1, period: 100000, shares: 2048, wantErr: true},
		// Kubelet caps cpu.shares at the kernel's 262144 (256 CPUs), so a larger pod's shares say less
		// than its limit and still mean request == limit.
		{name: "300 CPUs, shares capped by kubelet", quota: 30000000, period: 100000, shares: cgroup.MaxShares, want: 300},
		{name: "256 CPUs, at the cap", quota: 25600000, period: 100000, shares: cgroup.MaxShares, want: 256},
		{name: "255 CPUs with capped shares asked for more than its limit", quota: 25500000, period: 100000, shares: cgroup.MaxShares, wantErr: true},
		{name: "a limit beyond the kernel's largest quota", quota: 1e16, period: 100000, shares: cgroup.MaxShares, wantErr: true},
		{name: "a limit where quota × 1000 wraps", quota: 1e17, period: 1e12, shares: 102400, wantErr: true},
	}
	for _, tt := range tests {
		got, err := ExclusiveCPUs(tt.quota, tt.period, tt.shares)
		if tt.wantErr {
			if !errdefs.IsInvalidArgument(err) {
				t.Errorf("%s: ExclusiveCPUs = %d, %v; want InvalidArgument", tt.name, got, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("%s: ExclusiveCPUs = %d, %v; want %d", tt.name, got, err, tt.want)
		}
	}
}

// FuzzExclusiveCPUs: what is accepted is a whole number of CPUs that the kernel can enforce and whose
// shares kubelet would have sent; everything else is InvalidArgument, whatever the numbers.
func FuzzExclusiveCPUs(f *testing.F) {
	f.Add(int64(200000), int64(100000), int64(2048))
	f.Add(int64(30000000), int64(100000), int64(cgroup.MaxShares))
	f.Add(int64(1e16), int64(100000), int64(cgroup.MaxShares))
	f.Add(int64(1e17), int64(1e12), int64(102400))
	f.Add(int64(math.MaxInt64), int64(1), int64(math.MaxInt64))
	f.Fuzz(func(t *testing.T, quota, period, shares int64) {
		n, err := ExclusiveCPUs(quota, period, shares)
		if err != nil {
			if !errdefs.IsInvalidArgument(err) {
				t.Fatalf("ExclusiveCPUs(%d, %d, %d): %v, want InvalidArgument", quota, period, shares, err)
			}
			return
		}
		if n < 1 || int64(n)*period != quota || quota > cgroup.MaxQuota {
			t.Fatalf("ExclusiveCPUs(%d, %d, %d) = %d CPUs", quota, period, shares, n)
		}
		if want := cgroup.MilliCPUToShares(int64(n) * 1000); shares != want {
			t.Fatalf("ExclusiveCPUs(%d, %d, %d) = %d CPUs, whose shares are %d", quota, period, shares, n, want)
		}
	})
}
