package memoryqos

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"k8s.io/klog/v2/ktesting"

	"github.com/tandemkit/tandem/hooks"
	"github.com/tandemkit/tandem/hooks/policy/qos"
	"github.com/tandemkit/tandem/resource/cgroup"
)

const gi = int64(1) << 30

// kernel is the shape of a fake cgroup tree. The real writer of resource/cgroup runs on it; the files are
// plain files because cgroup files cannot be created outside /sys/fs/cgroup, and this host's kernel (cgroup
// v1, mainline) has none of them. TestThisHost checks the detection against the real hierarchy.
type kernel struct {
	version int
	files   []string
}

var (
	v2         = kernel{2, []string{FileMin, FileLow, FileHigh}}
	anolisV1   = kernel{1, []string{FileMin, FileLow, FileHigh}}
	mainlineV1 = kernel{1, nil}
	highOnlyV1 = kernel{1, []string{FileHigh}}
)

// tree builds the kernel's hierarchy with the given cgroups and returns the memory controller's root.
func tree(t *testing.T, k kernel, cgroups ...string) (string, cgroup.Writer) {
	t.Helper()
	root := t.TempDir()
	base := filepath.Join(root, "memory")
	dirs := append([]string{"kubepods"}, cgroups...)
	if k.version == 2 {
		base = root
		write(t, filepath.Join(root, "cgroup.controllers"), "cpu memory")
	} else {
		if err := os.MkdirAll(filepath.Join(root, "cpu"), 0o755); err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, "") // v1 offers the files in the controller's root too
	}
	for _, d := range dirs {
		for _, f := range k.files {
			write(t, filepath.Join(base, d, f), "")
		}
		if err := os.MkdirAll(filepath.Join(base, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	w, err := cgroup.New(root)
	if err != nil {
		t.Fatal(err)
	}
	return base, w
}

func write(t *testing.T, p, s string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// koordExample is the class config of Koordinator's memory QoS example: full hard protection of the
// request, throttling at 80% of the limit.
var koordExample = ClassConfig{Enable: true, MinLimitPercent: 100, LowLimitPercent: 0, ThrottlingPercent: 80}

func lsOnly(cc ClassConfig) Config { return Config{LSClass: cc} }

func TestNew(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		cfg      Config
		kernel   kernel
		wantSkip bool
		wantErr  string
	}{
		{name: "shipped default: every class disabled", cfg: DefaultConfig(), kernel: v2, wantSkip: true},
		{name: "mainline cgroup v1", cfg: lsOnly(koordExample), kernel: mainlineV1, wantSkip: true},
		{name: "bad percent names the field", cfg: Config{BEClass: ClassConfig{Enable: true, ThrottlingPercent: 120}}, kernel: v2, wantErr: "beClass.memoryQOS.throttlingPercent"},
		{name: "cgroup v2", cfg: lsOnly(koordExample), kernel: v2},
		{name: "Anolis cgroup v1", cfg: lsOnly(koordExample), kernel: anolisV1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, w := tree(t, tt.kernel)
			_, err := New(tt.cfg, Deps{Cgroups: w})
			switch {
			case tt.wantSkip:
				if !errors.Is(err, hooks.ErrSkip) {
					t.Fatalf("New = %v, want ErrSkip", err)
				}
			case tt.wantErr != "":
				if err == nil || errors.Is(err, hooks.ErrSkip) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("New = %v, want an error naming %s", err, tt.wantErr)
				}
			case err != nil:
				t.Fatal(err)
			}
		})
	}
}

// TestThisHost: on a host whose memory controller has no memory.min (mainline cgroup v1, as here) the
// hook must switch itself off rather than fail every pod.
func TestThisHost(t *testing.T) {
	t.Parallel()
	w, err := cgroup.New("/sys/fs/cgroup")
	if err != nil {
		t.Skipf("no cgroup hierarchy here: %v", err)
	}
	_, err = New(lsOnly(koordExample), Deps{Cgroups: w})
	if w.Supports(FileMin) || w.Supports(FileLow) || w.Supports(FileHigh) {
		if err != nil {
			t.Fatalf("kernel offers memory QoS files, but New = %v", err)
		}
		return
	}
	if !errors.Is(err, hooks.ErrSkip) {
		t.Fatalf("kernel offers no memory QoS files, but New = %v, want ErrSkip", err)
	}
}

func TestFiles(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name           string
		cc             ClassConfig
		request, limit int64
		want           map[string]string
	}{
		{name: "Koordinator example", cc: koordExample, request: gi, limit: 2 * gi, want: map[string]string{FileMin: "1073741824", FileHigh: "1717986918"}},
		{name: "low and min", cc: ClassConfig{MinLimitPercent: 50, LowLimitPercent: 100}, request: 3 * gi, want: map[string]string{FileMin: "1610612736", FileLow: "3221225472"}},
		{name: "no request: limit-based only", cc: koordExample, limit: 2 * gi, want: map[string]string{FileHigh: "1717986918"}},
		{name: "no limit: high is max", cc: koordExample, request: gi, want: map[string]string{FileMin: "1073741824", FileHigh: "max"}},
		{name: "zero percentages leave files alone", cc: ClassConfig{Enable: true}, request: gi, limit: 2 * gi, want: map[string]string{}},
		{name: "the largest request and limit", cc: ClassConfig{MinLimitPercent: 100, LowLimitPercent: 99, ThrottlingPercent: 1}, request: math.MaxInt64, limit: math.MaxInt64,
			want: map[string]string{FileMin: "9223372036854775807", FileLow: "9131138316486228048", FileHigh: "92233720368547758"}},
		// Validate refuses percentages above 100; Files, called without it, saturates rather than wraps.
		{name: "a percentage past int64 arithmetic saturates", cc: ClassConfig{MinLimitPercent: math.MaxInt64, ThrottlingPercent: 1 << 40}, request: 64 * gi, limit: 64 * gi,
			want: map[string]string{FileMin: "9223372036854775807", FileHigh: "9223372036854775807"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := Files(tt.cc, tt.request, tt.limit)
			if !equal(got, tt.want) {
				t.Fatalf("Files = %v, want %v", got, tt.want)
			}
		})
	}
}

// FuzzFiles: every file is "max" or a byte count that is not negative, not above its base (request or
// limit) for percentages up to 100, and never falls as the base or the percentage rises.
func FuzzFiles(f *testing.F) {
	f.Add(gi, 2*gi, int64(80), int64(100))
	f.Add(int64(math.MaxInt64), int64(math.MaxInt64), int64(100), int64(1))
	f.Add(64*gi, 64*gi, int64(math.MaxInt64), int64(1<<40))
	f.Add(int64(1), int64(-1), int64(-5), int64(0))
	f.Fuzz(func(t *testing.T, base, base2, p, p2 int64) {
		files := func(b, p int64) map[string]string {
			return Files(ClassConfig{MinLimitPercent: p, LowLimitPercent: p, ThrottlingPercent: p}, b, b)
		}
		value := func(m map[string]string, file string) int64 {
			v, ok := m[file]
			if !ok || v == "max" {
				return -1
			}
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				t.Fatalf("%s = %q, want \"max\" or a byte count", file, v)
			}
			return n
		}
		lo, hi := files(min(base, base2), min(p, p2)), files(max(base, base2), max(p, p2))
		for _, file := range []string{FileMin, FileLow, FileHigh} {
			l, h := value(lo, file), value(hi, file)
			if min(p, p2) <= 100 && l > max(min(base, base2), 0) {
				t.Fatalf("%s = %d, above its base %d at %d%%", file, l, min(base, base2), min(p, p2))
			}
			if l >= 0 && h >= 0 && h < l {
				t.Fatalf("%s falls from %d to %d as its base and percentage rise", file, l, h)
			}
		}
	})
}

func equal(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range b {
		if a[k] != v {
			return false
		}
	}
	return true
}

// specRequests stands in for the pod spec the proxy reads through client-go.
type specRequests map[string]int64

func (s specRequests) MemoryRequest(_ context.Context, _ *hooks.PodInfo, ctr *hooks.ContainerInfo) (int64, bool) {
	name := ""
	if ctr != nil {
		name = ctr.Name
	}
	v, ok := s[name]
	return v, ok
}

func pod(class string) *hooks.PodInfo {
	return &hooks.PodInfo{Name: "p", Namespace: "ns", CgroupParent: "/kubepods/burstable/pod1",
		Annotations: map[string]string{qos.AnnotationClass: class},
		Resources:   &hooks.Resources{MemoryLimitInBytes: 4 * gi}}
}

func TestContainerV2(t *testing.T) {
	t.Parallel()
	all := Config{LSRClass: koordExample, LSClass: koordExample, BEClass: ClassConfig{Enable: true, ThrottlingPercent: 50}}
	tests := []struct {
		name     string
		cfg      Config
		class    string
		unified  map[string]string // what kubelet sent
		ann      map[string]string // the container's annotations
		requests Requests
		limit    int64
		want     map[string]string
		wantReq  string // recorded request annotation
	}{
		{name: "LS with kubelet's MemoryQoS request", cfg: all, class: "LS", unified: map[string]string{FileMin: "1073741824"}, limit: 2 * gi,
			want: map[string]string{FileMin: "1073741824", FileHigh: "1717986918"}, wantReq: "1073741824"},
		{name: "LS request from the pod spec wins", cfg: all, class: "LS", unified: map[string]string{FileMin: "1073741824"}, requests: specRequests{"app": 2 * gi}, limit: 4 * gi,
			want: map[string]string{FileMin: "2147483648", FileHigh: "3435973836"}, wantReq: "2147483648"},
		{name: "LS without a known request", cfg: all, class: "LS", limit: 2 * gi, want: map[string]string{FileHigh: "1717986918"}},
		{name: "LSE uses the LSR class", cfg: Config{LSRClass: koordExample}, class: "LSE", unified: map[string]string{FileMin: "1073741824"}, limit: gi,
			want: map[string]string{FileMin: "1073741824", FileHigh: "858993459"}, wantReq: "1073741824"},
		{name: "BE throttled at half its limit", cfg: all, class: "BE", limit: 2 * gi, want: map[string]string{FileHigh: "1073741824"}},
		{name: "BE without a limit", cfg: all, class: "BE", want: map[string]string{FileHigh: "max"}},
		{name: "disabled class untouched", cfg: lsOnly(koordExample), class: "BE", limit: 2 * gi},
		{name: "SYSTEM untouched", cfg: all, class: "SYSTEM", limit: 2 * gi},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, ctx := ktesting.NewTestContext(t)
			_, w := tree(t, v2)
			m, err := New(tt.cfg, Deps{Cgroups: w, Requests: tt.requests})
			if err != nil {
				t.Fatal(err)
			}
			c := &hooks.ContainerInfo{ID: "c1", Name: "app", Annotations: tt.ann,
				Resources: &hooks.Resources{MemoryLimitInBytes: tt.limit, Unified: tt.unified}}
			adj, err := m.PreCreateContainer(ctx, pod(tt.class), c)
			if err != nil {
				t.Fatal(err)
			}
			var got map[string]string
			if adj != nil && adj.Resources != nil {
				got = adj.Resources.Unified
			}
			if !equal(got, tt.want) {
				t.Fatalf("container files = %v, want %v", got, tt.want)
			}
			var gotReq string
			if adj != nil {
				gotReq = adj.Annotations[AnnotationMemoryRequest]
			}
			if gotReq != tt.wantReq {
				t.Fatalf("recorded request = %q, want %q", gotReq, tt.wantReq)
			}
		})
	}
}

// TestUpdateUsesRecordedRequest: an update that carries the hook's own memory.min must not compound it.
func TestUpdateUsesRecordedRequest(t *testing.T) {
	t.Parallel()
	_, ctx := ktesting.NewTestContext(t)
	_, w := tree(t, v2)
	m, err := New(lsOnly(ClassConfig{Enable: true, MinLimitPercent: 50}), Deps{Cgroups: w})
	if err != nil {
		t.Fatal(err)
	}
	c := &hooks.ContainerInfo{ID: "c1", Name: "app",
		Annotations: map[string]string{AnnotationMemoryRequest: "2147483648"},
		Resources:   &hooks.Resources{Unified: map[string]string{FileMin: "1073741824"}}}
	adj, err := m.PreUpdateContainerResources(ctx, pod("LS"), c)
	if err != nil {
		t.Fatal(err)
	}
	if got := adj.Resources.Unified[FileMin]; got != "1073741824" {
		t.Fatalf("memory.min after update = %s, want 1073741824 (50%% of the recorded 2Gi)", got)
	}
}

func TestPodAndContainerFiles(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		kernel  kernel
		wantPod map[string]string
		// wantCtr are the container's files in its adjustment: the front end has the runtime write them on
		// cgroup v2 and writes them itself on v1, so the policy answers the same on both.
		wantCtr map[string]string
	}{
		{name: "Anolis v1", kernel: anolisV1,
			wantPod: map[string]string{FileMin: "3221225472", FileHigh: "3435973836"},
			wantCtr: map[string]string{FileMin: "1073741824", FileHigh: "1717986918"}},
		{name: "v1 with memory.high only", kernel: highOnlyV1,
			wantPod: map[string]string{FileHigh: "3435973836"},
			wantCtr: map[string]string{FileHigh: "1717986918"}},
		{name: "v2", kernel: v2,
			wantPod: map[string]string{FileMin: "3221225472", FileHigh: "3435973836"},
			wantCtr: map[string]string{FileMin: "1073741824", FileHigh: "1717986918"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, ctx := ktesting.NewTestContext(t)
			p := pod("LS")
			c := &hooks.ContainerInfo{ID: "c1", Name: "app", Resources: &hooks.Resources{MemoryLimitInBytes: 2 * gi}}
			_, w := tree(t, tt.kernel, "ctr")
			m, err := New(lsOnly(koordExample), Deps{Cgroups: w, Requests: specRequests{"": 3 * gi, "app": gi}})
			if err != nil {
				t.Fatal(err)
			}
			adj, err := m.PreRunPodSandbox(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			if got := adj.PodResources.Unified; !equal(got, tt.wantPod) {
				t.Fatalf("pod files = %v, want %v", got, tt.wantPod)
			}
			adj, err = m.PreCreateContainer(ctx, p, c)
			if err != nil {
				t.Fatal(err)
			}
			if got := adj.Resources.Unified; !equal(got, tt.wantCtr) {
				t.Fatalf("container files = %v, want %v", got, tt.wantCtr)
			}
		})
	}
}
