package cpuidle

import (
	"errors"
	"testing"

	"k8s.io/klog/v2/ktesting"

	"github.com/tandemkit/tandem/hooks"
	"github.com/tandemkit/tandem/hooks/policy/qos"
)

// files is a fake kernel: the cgroup files it offers. The real probe is resource/cgroup's, tested there
// and on the real host by the e2e suite.
type files map[string]bool

func (f files) Supports(name string) bool { return f[name] }

func TestPreRunPodSandbox(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		kernel files
		class  string
		want   map[string]string
		skip   bool
	}{
		{name: "BE on mainline", kernel: files{"cpu.idle": true}, class: "BE", want: map[string]string{"cpu.idle": "1"}},
		{name: "LS on mainline: nothing", kernel: files{"cpu.idle": true}, class: "LS"},
		{name: "BE on Anolis", kernel: files{"cpu.idle": true, "cpu.bvt_warp_ns": true}, class: "BE", want: map[string]string{"cpu.idle": "1", "cpu.bvt_warp_ns": "-1"}},
		{name: "LSR on Anolis", kernel: files{"cpu.bvt_warp_ns": true}, class: "LSR", want: map[string]string{"cpu.bvt_warp_ns": "2"}},
		{name: "old kernel: hook off", kernel: files{}, skip: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, ctx := ktesting.NewTestContext(t)
			c, err := New(DefaultConfig(), tt.kernel, nil)
			if tt.skip {
				if !errors.Is(err, hooks.ErrSkip) {
					t.Fatalf("New = %v, want ErrSkip", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			adj, err := c.PreRunPodSandbox(ctx, &hooks.PodInfo{Annotations: map[string]string{qos.AnnotationClass: tt.class}})
			if err != nil {
				t.Fatal(err)
			}
			var got map[string]string
			if adj != nil {
				got = adj.PodResources.Unified
			}
			if len(got) != len(tt.want) {
				t.Fatalf("pod cgroup files = %v, want %v", got, tt.want)
			}
			for k, v := range tt.want {
				if got[k] != v {
					t.Fatalf("%s = %q, want %q", k, got[k], v)
				}
			}
		})
	}
}

// TestPostStartContainer: a started BE container, and only a BE one, wakes the yield loop; on an
// old kernel the hook still runs for that alone.
func TestPostStartContainer(t *testing.T) {
	t.Parallel()
	_, ctx := ktesting.NewTestContext(t)
	for _, tt := range []struct {
		class string
		kicks int
	}{{"BE", 1}, {"LS", 0}, {"LSR", 0}, {"", 0}} {
		kicks := 0
		c, err := New(DefaultConfig(), files{}, func() { kicks++ })
		if err != nil {
			t.Fatalf("New with a BE-started callback on an old kernel: %v, want the hook", err)
		}
		pod := &hooks.PodInfo{Annotations: map[string]string{qos.AnnotationClass: tt.class}}
		if err := c.PostStartContainer(ctx, pod, &hooks.ContainerInfo{ID: "c1", Name: "main"}); err != nil {
			t.Fatal(err)
		}
		if kicks != tt.kicks {
			t.Errorf("class %q: %d notices, want %d", tt.class, kicks, tt.kicks)
		}
		if adj, _ := c.PreRunPodSandbox(ctx, pod); adj != nil {
			t.Errorf("class %q on a kernel without cpu.idle: pod files %v, want none", tt.class, adj.PodResources.Unified)
		}
	}
}
