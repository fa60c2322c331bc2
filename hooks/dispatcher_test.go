package hooks

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/klog/v2/ktesting"
)

// fnHook is a hook whose PreCreateContainer and PostStartContainer are given by the test.
type fnHook struct {
	name   string
	create func(ctx context.Context, pod *PodInfo, ctr *ContainerInfo) (*Adjustment, error)
	post   func(ctx context.Context) error
	mu     sync.Mutex
	seen   []*ContainerInfo
}

func (h *fnHook) Name() string { return h.name }

func (h *fnHook) PreCreateContainer(ctx context.Context, pod *PodInfo, ctr *ContainerInfo) (*Adjustment, error) {
	h.mu.Lock()
	h.seen = append(h.seen, ctr.Clone())
	h.mu.Unlock()
	return h.create(ctx, pod, ctr)
}

func (h *fnHook) PostStartContainer(ctx context.Context, _ *PodInfo, _ *ContainerInfo) error {
	if h.post == nil {
		return nil
	}
	return h.post(ctx)
}

func reg(h *fnHook, order int, policy FailurePolicy, timeout time.Duration) Registration {
	return Registration{Name: h.name, Order: order, FailurePolicy: policy, Timeout: timeout, New: func() (Hook, error) { return h, nil }}
}

func shares(v int64) func(context.Context, *PodInfo, *ContainerInfo) (*Adjustment, error) {
	return func(context.Context, *PodInfo, *ContainerInfo) (*Adjustment, error) {
		return &Adjustment{Resources: &ResourceAdjustment{CPUShares: Int64(v)}}, nil
	}
}

func testPod() *PodInfo {
	return &PodInfo{Name: "web", Namespace: "default", Labels: map[string]string{"app": "web"}}
}

func testCtr() *ContainerInfo {
	return &ContainerInfo{Name: "app", Resources: &Resources{CPUShares: 2, MemoryLimitInBytes: 1 << 30}}
}

func TestRunMergesInOrder(t *testing.T) {
	t.Parallel()
	_, ctx := ktesting.NewTestContext(t)
	qos := &fnHook{name: "qos", create: func(context.Context, *PodInfo, *ContainerInfo) (*Adjustment, error) {
		return &Adjustment{Annotations: map[string]string{"tandem.io/qos": "BE"}, Resources: &ResourceAdjustment{CPUShares: Int64(2)}}, nil
	}}
	cpuset := &fnHook{name: "cpuset", create: func(_ context.Context, _ *PodInfo, c *ContainerInfo) (*Adjustment, error) {
		// A later hook sees what earlier hooks decided.
		if c.Annotations["tandem.io/qos"] != "BE" {
			return nil, errors.New("qos annotation missing: hooks ran out of order")
		}
		return &Adjustment{Resources: &ResourceAdjustment{CpusetCpus: String("2-15")}}, nil
	}}
	idle := &fnHook{name: "cpuidle", create: func(context.Context, *PodInfo, *ContainerInfo) (*Adjustment, error) {
		return &Adjustment{PodResources: &ResourceAdjustment{Unified: map[string]string{"cpu.idle": "1"}}}, nil
	}}
	// Registered out of order: Order decides, not the slice.
	d, err := NewDispatcher(ctx, []Registration{reg(cpuset, 200, Fail, 0), reg(idle, 300, Fail, 0), reg(qos, 100, Fail, 0)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctr := testCtr()
	adj, err := d.Run(ctx, PreCreateContainer, testPod(), ctr)
	if err != nil {
		t.Fatal(err)
	}
	if adj.Annotations["tandem.io/qos"] != "BE" || *adj.Resources.CpusetCpus != "2-15" || adj.PodResources.Unified["cpu.idle"] != "1" {
		t.Fatalf("merged = %+v", adj)
	}
	// qos set shares to the value kubelet already had: that is no change, so it is not in the result.
	if adj.Resources.CPUShares != nil {
		t.Fatalf("unchanged shares reported as a change: %d", *adj.Resources.CPUShares)
	}
	if ctr.Annotations != nil || ctr.Resources.CpusetCpus != "" {
		t.Fatalf("Run modified its input: %+v", ctr)
	}
	names := []string{}
	for _, h := range d.Hooks() {
		names = append(names, h.Name)
	}
	if strings.Join(names, ",") != "qos,cpuset,cpuidle" {
		t.Fatalf("hook order = %v", names)
	}
}

func TestRunConflictsAndFailurePolicies(t *testing.T) {
	t.Parallel()
	boom := func(context.Context, *PodInfo, *ContainerInfo) (*Adjustment, error) {
		return nil, fmt.Errorf("no free CPUs: %w", errdefs.ErrResourceExhausted)
	}
	hang := func(ctx context.Context, _ *PodInfo, _ *ContainerInfo) (*Adjustment, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	tests := []struct {
		name        string
		second      func(context.Context, *PodInfo, *ContainerInfo) (*Adjustment, error)
		policy      FailurePolicy
		wantErr     func(error) bool
		wantShares  int64 // in the merged result; 0 = unset
		wantIgnored float64
		wantTimeout float64
	}{
		{name: "same value is no conflict", second: shares(512), policy: Fail, wantShares: 512},
		{name: "conflict under Fail", second: shares(1024), policy: Fail, wantErr: errdefs.IsConflict},
		{name: "conflict under Ignore drops the second", second: shares(1024), policy: Ignore, wantShares: 512, wantIgnored: 1},
		{name: "error under Fail keeps its class", second: boom, policy: Fail, wantErr: errdefs.IsResourceExhausted},
		{name: "error under Ignore", second: boom, policy: Ignore, wantShares: 512, wantIgnored: 1},
		{name: "timeout under Fail", second: hang, policy: Fail, wantErr: func(err error) bool { return errors.Is(err, context.DeadlineExceeded) }, wantTimeout: 1},
		{name: "timeout under Ignore", second: hang, policy: Ignore, wantShares: 512, wantIgnored: 1, wantTimeout: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, ctx := ktesting.NewTestContext(t)
			first := &fnHook{name: "first", create: shares(512)}
			second := &fnHook{name: "second", create: tt.second}
			d, err := NewDispatcher(ctx, []Registration{reg(first, 100, Fail, 0), reg(second, 200, tt.policy, 50*time.Millisecond)}, prometheus.NewRegistry())
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			adj, err := d.Run(ctx, PreCreateContainer, testPod(), testCtr())
			if time.Since(start) > time.Second {
				t.Fatalf("Run took %v; the 50ms timeout did not bound it", time.Since(start))
			}
			if tt.wantErr != nil {
				if err == nil || !tt.wantErr(err) {
					t.Fatalf("Run = %v, want a classed error", err)
				}
				if !strings.Contains(err.Error(), "hook second") {
					t.Fatalf("error %q does not name the hook", err)
				}
				if errdefs.IsConflict(err) && !strings.Contains(err.Error(), "already set by first") {
					t.Fatalf("conflict %q does not name the first hook", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if adj == nil || adj.Resources.CPUShares == nil || *adj.Resources.CPUShares != tt.wantShares {
				t.Fatalf("merged = %+v, want shares %d", adj, tt.wantShares)
			}
			if got := testutil.ToFloat64(d.metrics.ignored.WithLabelValues("second", string(PreCreateContainer))); got != tt.wantIgnored {
				t.Fatalf("ignored failures = %v, want %v", got, tt.wantIgnored)
			}
			if got := testutil.ToFloat64(d.metrics.timeouts.WithLabelValues("second", string(PreCreateContainer))); got != tt.wantTimeout {
				t.Fatalf("timeouts = %v, want %v", got, tt.wantTimeout)
			}
		})
	}
}

func TestPostStageErrorsAreNotReturned(t *testing.T) {
	t.Parallel()
	_, ctx := ktesting.NewTestContext(t)
	h := &fnHook{name: "post", create: shares(2), post: func(context.Context) error { return errors.New("cleanup failed") }}
	d, err := NewDispatcher(ctx, []Registration{reg(h, 100, Fail, 0)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Run(ctx, PostStartContainer, testPod(), testCtr()); err != nil {
		t.Fatalf("post stage returned %v; the runtime already acted, so it must not fail the call", err)
	}
	if got := testutil.ToFloat64(d.metrics.errors.WithLabelValues("post", string(PostStartContainer))); got != 1 {
		t.Fatalf("post-stage errors counted = %v, want 1", got)
	}
}

func TestSkipLabelsSkipRemoteHooksOnly(t *testing.T) {
	t.Parallel()
	for _, label := range []string{LabelSkipHooks, LabelSkipHookServer} {
		t.Run(label, func(t *testing.T) {
			t.Parallel()
			_, ctx := ktesting.NewTestContext(t)
			local := &fnHook{name: "local", create: shares(512)}
			remote := &fnHook{name: "remote", create: func(context.Context, *PodInfo, *ContainerInfo) (*Adjustment, error) {
				return &Adjustment{Env: map[string]string{"X": "1"}}, nil
			}}
			d, err := NewDispatcher(ctx, []Registration{reg(local, 100, Fail, 0)}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := d.SetRemote(ctx, []Registration{reg(remote, 1000, Fail, 0)}); err != nil {
				t.Fatal(err)
			}
			pod := testPod()
			pod.Labels[label] = "true"
			adj, err := d.Run(ctx, PreCreateContainer, pod, testCtr())
			if err != nil {
				t.Fatal(err)
			}
			if len(remote.seen) != 0 || adj.Env != nil {
				t.Fatalf("remote hook ran for a pod labelled %s", label)
			}
			if len(local.seen) != 1 || *adj.Resources.CPUShares != 512 {
				t.Fatal("in-process hook did not run")
			}
		})
	}
}

func TestRegistrationErrors(t *testing.T) {
	t.Parallel()
	ok := func(name string) *fnHook { return &fnHook{name: name, create: shares(2)} }
	tests := []struct {
		name    string
		regs    []Registration
		wantErr func(error) bool
		want    int // hooks in force
	}{
		{name: "duplicate name", regs: []Registration{reg(ok("a"), 100, Fail, 0), reg(ok("a"), 200, Fail, 0)}, wantErr: errdefs.IsAlreadyExists},
		{name: "duplicate order", regs: []Registration{reg(ok("a"), 100, Fail, 0), reg(ok("b"), 100, Fail, 0)}, wantErr: errdefs.IsAlreadyExists},
		{name: "bad policy", regs: []Registration{reg(ok("a"), 100, "Sometimes", 0)}, wantErr: errdefs.IsInvalidArgument},
		{name: "stage not implemented", regs: []Registration{{Name: "a", Order: 1, Stages: []Stage{PreRunPodSandbox}, New: func() (Hook, error) { return ok("a"), nil }}}, wantErr: errdefs.IsInvalidArgument},
		{name: "skipped hook is left out", regs: []Registration{
			reg(ok("a"), 100, Fail, 0),
			{Name: "rdt", Order: 200, New: func() (Hook, error) { return nil, fmt.Errorf("no /sys/fs/resctrl: %w", ErrSkip) }},
		}, want: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, ctx := ktesting.NewTestContext(t)
			d, err := NewDispatcher(ctx, tt.regs, nil)
			if tt.wantErr != nil {
				if err == nil || !tt.wantErr(err) {
					t.Fatalf("NewDispatcher = %v, want a classed error", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(d.Hooks()) != tt.want {
				t.Fatalf("hooks = %v, want %d", d.Hooks(), tt.want)
			}
		})
	}
}

func TestSetRemoteKeepsOldSetOnError(t *testing.T) {
	t.Parallel()
	_, ctx := ktesting.NewTestContext(t)
	d, err := NewDispatcher(ctx, []Registration{reg(&fnHook{name: "qos", create: shares(2)}, 100, Fail, 0)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.SetRemote(ctx, []Registration{reg(&fnHook{name: "koordlet", create: shares(2)}, 1000, Ignore, 0)}); err != nil {
		t.Fatal(err)
	}
	// Order 100 is the built-in's: rejected, and the previous remote set stays.
	if err := d.SetRemote(ctx, []Registration{reg(&fnHook{name: "other", create: shares(2)}, 100, Ignore, 0)}); !errdefs.IsAlreadyExists(err) {
		t.Fatalf("SetRemote with a taken order = %v, want AlreadyExists", err)
	}
	hs := d.Hooks()
	if len(hs) != 2 || hs[1].Name != "koordlet" || !hs[1].Remote {
		t.Fatalf("hooks after a rejected reload = %+v", hs)
	}
}

func TestMergeSandboxAndMaps(t *testing.T) {
	t.Parallel()
	_, ctx := ktesting.NewTestContext(t)
	a := &sandboxHook{name: "a", adj: &Adjustment{Labels: map[string]string{"x": "1"}, CgroupParent: String("/kubepods/besteffort/pod1")}}
	b := &sandboxHook{name: "b", adj: &Adjustment{Labels: map[string]string{"x": "2", "y": "1"}}}
	d, err := NewDispatcher(ctx, []Registration{
		{Name: "a", Order: 1, New: func() (Hook, error) { return a, nil }},
		{Name: "b", Order: 2, FailurePolicy: Ignore, New: func() (Hook, error) { return b, nil }},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	adj, err := d.Run(ctx, PreRunPodSandbox, testPod(), nil)
	if err != nil {
		t.Fatal(err)
	}
	// b conflicts on labels[x]; all of b is dropped, including its non-conflicting y.
	if adj.Labels["x"] != "1" || adj.Labels["y"] != "" || *adj.CgroupParent != "/kubepods/besteffort/pod1" {
		t.Fatalf("merged = %+v", adj)
	}
}

type sandboxHook struct {
	name string
	adj  *Adjustment
}

func (h *sandboxHook) Name() string { return h.name }
func (h *sandboxHook) PreRunPodSandbox(context.Context, *PodInfo) (*Adjustment, error) {
	return h.adj, nil
}

func TestParseStage(t *testing.T) {
	t.Parallel()
	for _, in := range []string{"PreCreateContainer", "PreCreateContainerHook"} {
		if s, err := ParseStage(in); err != nil || s != PreCreateContainer {
			t.Errorf("ParseStage(%q) = %v, %v", in, s, err)
		}
	}
	if _, err := ParseStage("PreBoot"); err == nil {
		t.Error("ParseStage(PreBoot) accepted an unknown stage")
	}
}

// reserver reserves on PreCreateContainer and gives back on Rollback, like the cpuset policy.
type reserver struct {
	name     string
	fail     bool
	mu       sync.Mutex
	reserved int
}

func (r *reserver) Name() string { return r.name }
func (r *reserver) PreCreateContainer(context.Context, *PodInfo, *ContainerInfo) (*Adjustment, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reserved++
	if r.fail {
		return nil, fmt.Errorf("%s: %w", r.name, errdefs.ErrResourceExhausted)
	}
	return &Adjustment{Annotations: map[string]string{r.name: "1"}}, nil
}
func (r *reserver) Rollback(context.Context, Stage, *PodInfo, *ContainerInfo) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reserved--
}

func TestRollback(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		secondFails bool
		runtimeFail bool
		wantErr     bool
	}{
		{name: "a later hook fails: earlier reservations go back", secondFails: true, wantErr: true},
		{name: "the runtime refuses: every reservation goes back", runtimeFail: true},
		{name: "success keeps the reservations"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, ctx := ktesting.NewTestContext(t)
			a, b := &reserver{name: "a"}, &reserver{name: "b", fail: tt.secondFails}
			d, err := NewDispatcher(ctx, []Registration{
				{Name: "a", Order: 1, New: func() (Hook, error) { return a, nil }},
				{Name: "b", Order: 2, New: func() (Hook, error) { return b, nil }},
			}, nil)
			if err != nil {
				t.Fatal(err)
			}
			_, err = d.Run(ctx, PreCreateContainer, testPod(), testCtr())
			if (err != nil) != tt.wantErr {
				t.Fatalf("Run = %v, wantErr %v", err, tt.wantErr)
			}
			if tt.runtimeFail {
				d.Rollback(ctx, PreCreateContainer, testPod(), testCtr())
			}
			want := 1
			if tt.secondFails || tt.runtimeFail {
				want = 0
			}
			if a.reserved != want || b.reserved != want {
				t.Fatalf("reservations a=%d b=%d, want %d each", a.reserved, b.reserved, want)
			}
		})
	}
}

func TestPanickingHookFailsTheCallNotTheProxy(t *testing.T) {
	t.Parallel()
	_, ctx := ktesting.NewTestContext(t)
	h := &fnHook{name: "broken", create: func(context.Context, *PodInfo, *ContainerInfo) (*Adjustment, error) {
		panic("boom")
	}}
	d, err := NewDispatcher(ctx, []Registration{reg(h, 100, Fail, 0)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Run(ctx, PreCreateContainer, testPod(), testCtr()); !errdefs.IsInternal(err) || !strings.Contains(err.Error(), "panicked") {
		t.Fatalf("Run = %v, want an Internal error saying the hook panicked", err)
	}
}

func TestSetBuiltinKeepsRemoteHooks(t *testing.T) {
	t.Parallel()
	_, ctx := ktesting.NewTestContext(t)
	d, err := NewDispatcher(ctx, []Registration{reg(&fnHook{name: "qos", create: shares(512)}, 100, Fail, 0)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.SetRemote(ctx, []Registration{reg(&fnHook{name: "koordlet", create: shares(512)}, 1000, Ignore, 0)}); err != nil {
		t.Fatal(err)
	}
	// A reload with a new value for the built-in hook.
	if err := d.SetBuiltin(ctx, []Registration{reg(&fnHook{name: "qos", create: shares(1024)}, 100, Fail, 0)}); err != nil {
		t.Fatal(err)
	}
	adj, err := d.Run(ctx, PreCreateContainer, testPod(), testCtr())
	if err != nil {
		t.Fatal(err)
	}
	if *adj.Resources.CPUShares != 1024 {
		t.Fatalf("shares = %d, want the reloaded 1024", *adj.Resources.CPUShares)
	}
	if hs := d.Hooks(); len(hs) != 2 || hs[1].Name != "koordlet" {
		t.Fatalf("hooks after reload = %+v, want the remote hook kept", hs)
	}
	// A reload that collides with a remote hook's order is refused and changes nothing.
	if err := d.SetBuiltin(ctx, []Registration{reg(&fnHook{name: "qos", create: shares(2)}, 1000, Fail, 0)}); err == nil {
		t.Fatal("colliding reload accepted")
	}
	if adj, _ := d.Run(ctx, PreCreateContainer, testPod(), testCtr()); *adj.Resources.CPUShares != 1024 {
		t.Fatal("a refused reload changed the hooks in force")
	}
}

// annotations returns n bytes of annotations under one key.
func annotations(key string, n int) map[string]string {
	return map[string]string{key: strings.Repeat("x", n-len(key))}
}

func TestRunBoundsWhatHooksAdd(t *testing.T) {
	t.Parallel()
	adds := func(a *Adjustment) func(context.Context, *PodInfo, *ContainerInfo) (*Adjustment, error) {
		return func(context.Context, *PodInfo, *ContainerInfo) (*Adjustment, error) { return a, nil }
	}
	echo := func(_ context.Context, _ *PodInfo, c *ContainerInfo) (*Adjustment, error) {
		// A hook server that answers with everything it was sent, plus one annotation of its own.
		a := &Adjustment{Annotations: map[string]string{"example.com/seen": "1"}}
		for k, v := range c.Annotations {
			a.Annotations[k] = v
		}
		return a, nil
	}
	bigCtr := func() *ContainerInfo {
		c := testCtr()
		c.Annotations = annotations("kubelet.example/large", 300<<10)
		return c
	}
	tests := []struct {
		name        string
		ctr         func() *ContainerInfo
		first       func(context.Context, *PodInfo, *ContainerInfo) (*Adjustment, error)
		second      func(context.Context, *PodInfo, *ContainerInfo) (*Adjustment, error)
		policy      FailurePolicy
		wantErr     bool
		wantSize    string // in the error
		wantDropped bool   // the second hook's answer is not in the result
	}{
		{name: "15 MB of annotations under Fail", second: adds(&Adjustment{Annotations: annotations("big.example/a", 15<<20)}),
			policy: Fail, wantErr: true, wantSize: "15728640"},
		{name: "15 MB of annotations under Ignore", second: adds(&Adjustment{Annotations: annotations("big.example/a", 15<<20)}),
			policy: Ignore, wantDropped: true},
		{name: "environment counts", second: adds(&Adjustment{Env: map[string]string{"BIG": strings.Repeat("x", 300<<10)}}),
			policy: Ignore, wantDropped: true},
		{name: "cgroup files count", second: adds(&Adjustment{PodResources: &ResourceAdjustment{Unified: map[string]string{"x": strings.Repeat("1", 300<<10)}}}),
			policy: Fail, wantErr: true, wantSize: "307201"},
		{name: "each answer fits but together they exceed the metadata bound",
			first:  adds(&Adjustment{Annotations: annotations("first.example/a", 200<<10)}),
			second: adds(&Adjustment{Annotations: annotations("big.example/a", 200<<10)}),
			policy: Fail, wantErr: true, wantSize: "409600"},
		{name: "echoing kubelet's large annotations is not adding them", ctr: bigCtr, second: echo, policy: Fail},
		{name: "a small answer passes", second: adds(&Adjustment{Annotations: map[string]string{"example.com/x": "y"}}), policy: Fail},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, ctx := ktesting.NewTestContext(t)
			first := &fnHook{name: "first", create: shares(512)}
			if tt.first != nil {
				first.create = tt.first
			}
			second := &fnHook{name: "big", create: tt.second}
			r := prometheus.NewRegistry()
			d, err := NewDispatcher(ctx, []Registration{reg(first, 100, Fail, 0), reg(second, 200, tt.policy, 0)}, r)
			if err != nil {
				t.Fatal(err)
			}
			ctr := testCtr()
			if tt.ctr != nil {
				ctr = tt.ctr()
			}
			adj, err := d.Run(ctx, PreCreateContainer, testPod(), ctr)
			if tt.wantErr {
				if !errdefs.IsResourceExhausted(err) || !strings.Contains(err.Error(), "hook big") || !strings.Contains(err.Error(), tt.wantSize) {
					t.Fatalf("Run = %v, want ResourceExhausted naming hook big and the size %s", err, tt.wantSize)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			size := MetadataBytes(adj.Labels, adj.Annotations) + MetadataBytes(adj.Env)
			if adj.PodResources != nil {
				size += MetadataBytes(adj.PodResources.Unified)
			}
			if tt.wantDropped {
				if size > 1<<10 {
					t.Fatalf("merged adjustment carries %d bytes; the oversized answer was merged", size)
				}
				if n, err := testutil.GatherAndCount(r, "tandem_hook_oversized_answers_total"); err != nil || n != 1 {
					t.Fatalf("tandem_hook_oversized_answers_total series = %d (%v), want one for hook big", n, err)
				}
			}
		})
	}
}

func TestSetLimits(t *testing.T) {
	t.Parallel()
	_, ctx := ktesting.NewTestContext(t)
	h := &fnHook{name: "env", create: func(context.Context, *PodInfo, *ContainerInfo) (*Adjustment, error) {
		return &Adjustment{Env: map[string]string{"TANDEM": "0123456789"}}, nil
	}}
	d, err := NewDispatcher(ctx, []Registration{reg(h, 100, Fail, 0)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.SetLimits(Limits{MaxAnswerBytes: 0, MaxMetadataBytes: 1}); !errdefs.IsInvalidArgument(err) {
		t.Fatalf("SetLimits(zero answer bound) = %v, want InvalidArgument", err)
	}
	if _, err := d.Run(ctx, PreCreateContainer, testPod(), testCtr()); err != nil {
		t.Fatalf("Run with the defaults kept after a refused SetLimits = %v", err)
	}
	if err := d.SetLimits(Limits{MaxAnswerBytes: 8, MaxMetadataBytes: 1 << 10}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Run(ctx, PreCreateContainer, testPod(), testCtr()); !errdefs.IsResourceExhausted(err) {
		t.Fatalf("Run with an 8-byte answer bound = %v, want ResourceExhausted", err)
	}
}
