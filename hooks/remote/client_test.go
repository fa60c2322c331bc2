package remote

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"k8s.io/klog/v2/ktesting"

	"github.com/tandemkit/tandem/hooks"
	"github.com/tandemkit/tandem/hooks/remote/v1alpha1"
)

func testPod() *hooks.PodInfo {
	return &hooks.PodInfo{
		ID: "sandbox-1", Name: "web", Namespace: "shop", UID: "uid-1", Attempt: 2, RuntimeHandler: "runc",
		Labels:       map[string]string{"app": "web"},
		Annotations:  map[string]string{"team": "a"},
		CgroupParent: "/kubepods/burstable/poduid-1",
		Resources:    &hooks.Resources{CPUShares: 1024, CPUQuota: 200000, CPUPeriod: 100000, MemoryLimitInBytes: 1 << 30},
		Overhead:     &hooks.Resources{CPUShares: 10},
	}
}

func testContainer() *hooks.ContainerInfo {
	return &hooks.ContainerInfo{
		ID: "ctr-1", Name: "app", Attempt: 1,
		Annotations: map[string]string{"io.kubernetes.container.name": "app"},
		Resources: &hooks.Resources{CPUShares: 512, CpusetCpus: "0-3", OomScoreAdj: 900,
			HugepageLimits: map[string]uint64{"2MB": 0, "1GB": 0}, Unified: map[string]string{"memory.high": "max"}},
		Env: map[string]string{"LANG": "C"},
	}
}

var (
	wantPodMeta = &v1alpha1.PodSandboxMetadata{Name: "web", Uid: "uid-1", Namespace: "shop", Attempt: 2}
	wantPodRes  = &v1alpha1.LinuxContainerResources{CpuShares: 1024, CpuQuota: 200000, CpuPeriod: 100000, MemoryLimitInBytes: 1 << 30}
)

func wantContainerRequest() *v1alpha1.ContainerResourceHookRequest {
	return &v1alpha1.ContainerResourceHookRequest{
		PodMeta:              wantPodMeta,
		ContainerMata:        &v1alpha1.ContainerMetadata{Name: "app", Attempt: 1, Id: "ctr-1"},
		ContainerAnnotations: map[string]string{"io.kubernetes.container.name": "app"},
		ContainerResources: &v1alpha1.LinuxContainerResources{CpuShares: 512, CpusetCpus: "0-3", OomScoreAdj: 900,
			HugepageLimits: []*v1alpha1.HugepageLimit{{PageSize: "1GB"}, {PageSize: "2MB"}},
			Unified:        map[string]string{"memory.high": "max"}},
		PodResources:    wantPodRes,
		PodAnnotations:  map[string]string{"team": "a"},
		PodLabels:       map[string]string{"app": "web"},
		PodCgroupParent: "/kubepods/burstable/poduid-1",
		ContainerEnvs:   map[string]string{"LANG": "C"},
	}
}

// TestClientConversion drives every stage over a real socket: the hook server must receive the pod and
// container as the hook framework describes them, and its answer must come back as an Adjustment in
// which only the fields it set are changes.
func TestClientConversion(t *testing.T) {
	t.Parallel()
	fullResources := &v1alpha1.LinuxContainerResources{
		CpuPeriod: 100000, CpuQuota: 50000, CpuShares: 256, MemoryLimitInBytes: 1 << 29, OomScoreAdj: -5,
		CpusetCpus: "2-3", CpusetMems: "0", HugepageLimits: []*v1alpha1.HugepageLimit{{PageSize: "2MB", Limit: 1 << 21}},
		Unified: map[string]string{"cpu.idle": "1"}, MemorySwapLimitInBytes: 1 << 30,
	}
	fullAdjustment := &hooks.ResourceAdjustment{
		CPUPeriod: hooks.Int64(100000), CPUQuota: hooks.Int64(50000), CPUShares: hooks.Int64(256),
		MemoryLimitInBytes: hooks.Int64(1 << 29), OomScoreAdj: hooks.Int64(-5), CpusetCpus: hooks.String("2-3"),
		CpusetMems: hooks.String("0"), HugepageLimits: map[string]uint64{"2MB": 1 << 21},
		Unified: map[string]string{"cpu.idle": "1"}, MemorySwapLimitInBytes: hooks.Int64(1 << 30),
	}
	tests := []struct {
		name          string
		stage         hooks.Stage
		sandboxResp   *v1alpha1.PodSandboxHookResponse
		containerResp *v1alpha1.ContainerResourceHookResponse
		wantRPC       string
		wantReq       proto.Message
		want          *hooks.Adjustment
	}{{
		name:  "PreRunPodSandbox: labels, annotations, cgroup parent and pod resources",
		stage: hooks.PreRunPodSandbox,
		sandboxResp: &v1alpha1.PodSandboxHookResponse{Labels: map[string]string{"tier": "ls"}, Annotations: map[string]string{"x": "y"},
			CgroupParent: "/kubepods/ls/poduid-1", Resources: &v1alpha1.LinuxContainerResources{CpuShares: 2048}},
		wantRPC: "PreRunPodSandboxHook",
		wantReq: &v1alpha1.PodSandboxHookRequest{PodMeta: wantPodMeta, RuntimeHandler: "runc", Labels: map[string]string{"app": "web"},
			Annotations: map[string]string{"team": "a"}, CgroupParent: "/kubepods/burstable/poduid-1",
			Overhead: &v1alpha1.LinuxContainerResources{CpuShares: 10}, Resources: wantPodRes},
		want: &hooks.Adjustment{Labels: map[string]string{"tier": "ls"}, Annotations: map[string]string{"x": "y"},
			CgroupParent: hooks.String("/kubepods/ls/poduid-1"), PodResources: &hooks.ResourceAdjustment{CPUShares: hooks.Int64(2048)}},
	}, {
		name:        "PreRunPodSandbox: an empty answer changes nothing",
		stage:       hooks.PreRunPodSandbox,
		sandboxResp: &v1alpha1.PodSandboxHookResponse{Resources: &v1alpha1.LinuxContainerResources{}},
		wantRPC:     "PreRunPodSandboxHook",
	}, {
		name:          "PreCreateContainer: every resource field, annotations and env",
		stage:         hooks.PreCreateContainer,
		containerResp: &v1alpha1.ContainerResourceHookResponse{ContainerAnnotations: map[string]string{"a": "b"}, ContainerResources: fullResources, ContainerEnvs: map[string]string{"GOMAXPROCS": "2"}},
		wantRPC:       "PreCreateContainerHook",
		wantReq:       wantContainerRequest(),
		want:          &hooks.Adjustment{Annotations: map[string]string{"a": "b"}, Resources: fullAdjustment, Env: map[string]string{"GOMAXPROCS": "2"}},
	}, {
		name:          "PreStartContainer: only the fields set are changes",
		stage:         hooks.PreStartContainer,
		containerResp: &v1alpha1.ContainerResourceHookResponse{ContainerResources: &v1alpha1.LinuxContainerResources{CpusetCpus: "1"}},
		wantRPC:       "PreStartContainerHook",
		wantReq:       wantContainerRequest(),
		want:          &hooks.Adjustment{Resources: &hooks.ResourceAdjustment{CpusetCpus: hooks.String("1")}},
	}, {
		name:          "PreUpdateContainerResources: pod cgroup parent is not a container change",
		stage:         hooks.PreUpdateContainerResources,
		containerResp: &v1alpha1.ContainerResourceHookResponse{PodCgroupParent: "/elsewhere", ContainerResources: &v1alpha1.LinuxContainerResources{CpuQuota: -1}},
		wantRPC:       "PreUpdateContainerResourcesHook",
		wantReq:       wantContainerRequest(),
		want:          &hooks.Adjustment{Resources: &hooks.ResourceAdjustment{CPUQuota: hooks.Int64(-1)}},
	}, {
		name:          "PostStartContainer: the answer is not used",
		stage:         hooks.PostStartContainer,
		containerResp: &v1alpha1.ContainerResourceHookResponse{ContainerResources: fullResources},
		wantRPC:       "PostStartContainerHook",
		wantReq:       wantContainerRequest(),
	}, {
		name:          "PostStopContainer: the answer is not used",
		stage:         hooks.PostStopContainer,
		containerResp: &v1alpha1.ContainerResourceHookResponse{ContainerResources: fullResources},
		wantRPC:       "PostStopContainerHook",
		wantReq:       wantContainerRequest(),
	}, {
		name:        "PostStopPodSandbox: the answer is not used",
		stage:       hooks.PostStopPodSandbox,
		sandboxResp: &v1alpha1.PodSandboxHookResponse{CgroupParent: "/x"},
		wantRPC:     "PostStopPodSandboxHook",
	}}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, ctx := ktesting.NewTestContext(t)
			path := socketPath(t, "h.sock")
			srv := &testServer{
				sandbox: func(context.Context, string, *v1alpha1.PodSandboxHookRequest) (*v1alpha1.PodSandboxHookResponse, error) {
					return tt.sandboxResp, nil
				},
				container: func(context.Context, string, *v1alpha1.ContainerResourceHookRequest) (*v1alpha1.ContainerResourceHookResponse, error) {
					return tt.containerResp, nil
				},
			}
			serve(t, path, srv)
			conn, err := NewConn(path)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = conn.Close() })
			c := NewClient("h", conn)

			pod, ctr := testPod(), testContainer()
			var got *hooks.Adjustment
			switch tt.stage {
			case hooks.PreRunPodSandbox:
				got, err = c.PreRunPodSandbox(ctx, pod)
			case hooks.PostStopPodSandbox:
				err = c.PostStopPodSandbox(ctx, pod)
			case hooks.PreCreateContainer:
				got, err = c.PreCreateContainer(ctx, pod, ctr)
			case hooks.PreStartContainer:
				got, err = c.PreStartContainer(ctx, pod, ctr)
			case hooks.PreUpdateContainerResources:
				got, err = c.PreUpdateContainerResources(ctx, pod, ctr)
			case hooks.PostStartContainer:
				err = c.PostStartContainer(ctx, pod, ctr)
			case hooks.PostStopContainer:
				err = c.PostStopContainer(ctx, pod, ctr)
			default:
				t.Fatalf("test %d: no call for stage %s", i, tt.stage)
			}
			if err != nil {
				t.Fatalf("%s: %v", tt.stage, err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("adjustment = %s, want %s", dump(got), dump(tt.want))
			}
			rpcs, reqs := srv.calls()
			if len(rpcs) != 1 || rpcs[0] != tt.wantRPC {
				t.Fatalf("server received %v, want one %s", rpcs, tt.wantRPC)
			}
			if tt.wantReq != nil && !proto.Equal(reqs[0], tt.wantReq) {
				t.Errorf("server received\n%s\nwant\n%s", prototext.Format(reqs[0]), prototext.Format(tt.wantReq))
			}
			if !reflect.DeepEqual(pod, testPod()) || !reflect.DeepEqual(ctr, testContainer()) {
				t.Error("the call modified its pod or container argument")
			}
		})
	}
}

func dump(a *hooks.Adjustment) string {
	b, err := json.Marshal(a)
	if err != nil {
		return err.Error()
	}
	return string(b)
}

// newDispatcher returns a dispatcher with the given in-process hooks and, as hooks.d would give them,
// remote ones.
func newDispatcher(t *testing.T, ctx context.Context, builtin, remote []hooks.Registration) *hooks.Dispatcher {
	t.Helper()
	d, err := hooks.NewDispatcher(ctx, builtin, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.SetRemote(ctx, remote); err != nil {
		t.Fatal(err)
	}
	return d
}

// remoteReg registers the hook server at path as a hooks.d file would.
func remoteReg(t *testing.T, name, path string, order int, policy hooks.FailurePolicy, timeout time.Duration) hooks.Registration {
	t.Helper()
	conn, err := NewConn("unix://" + path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return hooks.Registration{Name: name, Order: order, FailurePolicy: policy, Timeout: timeout,
		Stages: []hooks.Stage{hooks.PreRunPodSandbox, hooks.PreCreateContainer},
		New:    func() (hooks.Hook, error) { return NewClient(name, conn), nil }}
}

// TestHangingServer: a server that never answers costs its hook's timeout, no more, and then the
// failure policy decides.
func TestHangingServer(t *testing.T) {
	t.Parallel()
	const timeout = 300 * time.Millisecond
	const slack = time.Second // the race detector and a loaded machine
	for _, policy := range []hooks.FailurePolicy{hooks.Fail, hooks.Ignore} {
		t.Run(string(policy), func(t *testing.T) {
			t.Parallel()
			_, ctx := ktesting.NewTestContext(t)
			path := socketPath(t, "h.sock")
			srv := &testServer{container: func(ctx context.Context, _ string, _ *v1alpha1.ContainerResourceHookRequest) (*v1alpha1.ContainerResourceHookResponse, error) {
				<-ctx.Done()
				return nil, ctx.Err()
			}}
			serve(t, path, srv)
			d := newDispatcher(t, ctx, nil, []hooks.Registration{remoteReg(t, "hang", path, 1000, policy, timeout)})

			start := time.Now()
			adj, err := d.Run(ctx, hooks.PreCreateContainer, testPod(), testContainer())
			elapsed := time.Since(start)
			if elapsed < timeout || elapsed > timeout+slack {
				t.Errorf("the call took %v, want between %v and %v", elapsed, timeout, timeout+slack)
			}
			if rpcs, _ := srv.calls(); len(rpcs) != 1 {
				t.Errorf("server received %d calls, want 1", len(rpcs))
			}
			switch policy {
			case hooks.Fail:
				if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "hang") {
					t.Errorf("err = %v, want a deadline error naming the hook", err)
				}
			case hooks.Ignore:
				if err != nil || adj != nil {
					t.Errorf("got %v, %v; want no adjustment and no error", dump(adj), err)
				}
			}
		})
	}
}

// TestServerRestart: a server killed in the middle of a call fails that call; once it listens again on
// the same socket, the next call reaches it through the same hook, without a reload.
func TestServerRestart(t *testing.T) {
	t.Parallel()
	_, ctx := ktesting.NewTestContext(t)
	path := socketPath(t, "h.sock")
	entered := make(chan struct{}, 1)
	first := &testServer{container: func(ctx context.Context, _ string, _ *v1alpha1.ContainerResourceHookRequest) (*v1alpha1.ContainerResourceHookResponse, error) {
		entered <- struct{}{}
		<-ctx.Done()
		return nil, ctx.Err()
	}}
	kill := serve(t, path, first)
	d := newDispatcher(t, ctx, nil, []hooks.Registration{remoteReg(t, "restarts", path, 1000, hooks.Fail, 5*time.Second)})

	errc := make(chan error, 1)
	go func() {
		_, err := d.Run(ctx, hooks.PreCreateContainer, testPod(), testContainer())
		errc <- err
	}()
	<-entered
	kill()
	select {
	case err := <-errc:
		if !errdefs.IsUnavailable(err) {
			t.Errorf("the call in flight failed with %v, want an Unavailable error", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("the call in flight did not fail when its server died")
	}

	second := &testServer{container: func(context.Context, string, *v1alpha1.ContainerResourceHookRequest) (*v1alpha1.ContainerResourceHookResponse, error) {
		return &v1alpha1.ContainerResourceHookResponse{ContainerResources: &v1alpha1.LinuxContainerResources{CpuShares: 700}}, nil
	}}
	serve(t, path, second)
	adj, err := d.Run(ctx, hooks.PreCreateContainer, testPod(), testContainer())
	if err != nil {
		t.Fatalf("first call after the server came back: %v", err)
	}
	if adj == nil || adj.Resources == nil || adj.Resources.CPUShares == nil || *adj.Resources.CPUShares != 700 {
		t.Errorf("adjustment = %s, want cpuShares 700 from the restarted server", dump(adj))
	}
}

// TestServerAway: while a server is away, calls fail fast instead of waiting for their timeout; once it
// is back, the first call reaches it, with no reload.
func TestServerAway(t *testing.T) {
	t.Parallel()
	_, ctx := ktesting.NewTestContext(t)
	path := socketPath(t, "h.sock")
	srv := &testServer{}
	kill := serve(t, path, srv)
	d := newDispatcher(t, ctx, nil, []hooks.Registration{remoteReg(t, "away", path, 1000, hooks.Fail, 2*time.Second)})
	if _, err := d.Run(ctx, hooks.PreCreateContainer, testPod(), testContainer()); err != nil {
		t.Fatalf("before the server went away: %v", err)
	}
	kill()
	for i := range 5 {
		start := time.Now()
		_, err := d.Run(ctx, hooks.PreCreateContainer, testPod(), testContainer())
		if !errdefs.IsUnavailable(err) {
			t.Fatalf("call %d while the server is away: err = %v, want Unavailable", i, err)
		}
		if elapsed := time.Since(start); elapsed > 500*time.Millisecond {
			t.Errorf("call %d while the server is away took %v; it must fail fast", i, elapsed)
		}
		time.Sleep(200 * time.Millisecond) // real time: a reconnect backoff would have set in by the last call
	}
	serve(t, path, srv)
	// The first call after the server is back reaches it: no reconnect backoff to wait out.
	if _, err := d.Run(ctx, hooks.PreCreateContainer, testPod(), testContainer()); err != nil {
		t.Fatalf("the first call after the server came back: %v", err)
	}
}

// TestCallErrors: what a failing server turns into, under each policy.
func TestCallErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		server  func(context.Context, string, *v1alpha1.ContainerResourceHookRequest) (*v1alpha1.ContainerResourceHookResponse, error)
		noSock  bool
		policy  hooks.FailurePolicy
		wantErr func(error) bool
		wantMsg []string
	}{
		{name: "no socket, Fail", noSock: true, policy: hooks.Fail, wantErr: errdefs.IsUnavailable,
			wantMsg: []string{"nohook", "missing.sock", "unreachable"}},
		{name: "no socket, Ignore", noSock: true, policy: hooks.Ignore},
		{name: "status kept, Fail", policy: hooks.Fail, wantErr: errdefs.IsInvalidArgument, wantMsg: []string{"annotation x is not a number"},
			server: func(context.Context, string, *v1alpha1.ContainerResourceHookRequest) (*v1alpha1.ContainerResourceHookResponse, error) {
				return nil, status.Error(codes.InvalidArgument, "annotation x is not a number")
			}},
		{name: "status, Ignore", policy: hooks.Ignore,
			server: func(context.Context, string, *v1alpha1.ContainerResourceHookRequest) (*v1alpha1.ContainerResourceHookResponse, error) {
				return nil, status.Error(codes.Internal, "boom")
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, ctx := ktesting.NewTestContext(t)
			path := socketPath(t, "missing.sock")
			if !tt.noSock {
				serve(t, path, &testServer{container: tt.server})
			}
			d := newDispatcher(t, ctx, nil, []hooks.Registration{remoteReg(t, "nohook", path, 1000, tt.policy, 2*time.Second)})
			start := time.Now()
			adj, err := d.Run(ctx, hooks.PreCreateContainer, testPod(), testContainer())
			if elapsed := time.Since(start); elapsed > time.Second {
				t.Errorf("the call took %v; a server that is down must fail fast, not wait for its timeout", elapsed)
			}
			if tt.wantErr == nil {
				if err != nil || adj != nil {
					t.Errorf("got %s, %v; want no adjustment and no error", dump(adj), err)
				}
				return
			}
			if !tt.wantErr(err) {
				t.Fatalf("err = %v, not of the expected class", err)
			}
			if _, ok := status.FromError(err); ok {
				t.Errorf("err %v carries a gRPC status; the proxy must map its class instead", err)
			}
			for _, m := range tt.wantMsg {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("err = %q, want it to mention %q", err, m)
				}
			}
		})
	}
}

// TestSkipLabels: a pod labelled to skip hook servers never reaches one.
func TestSkipLabels(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		labels    map[string]string
		wantCalls int
	}{
		{name: "no label", wantCalls: 2},
		{name: "tandem label", labels: map[string]string{hooks.LabelSkipHooks: "true"}},
		{name: "koordinator label", labels: map[string]string{"runtimeproxy.koordinator.sh/skip-hookserver": "true"}},
		{name: "label not true", labels: map[string]string{hooks.LabelSkipHooks: "false"}, wantCalls: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, ctx := ktesting.NewTestContext(t)
			path := socketPath(t, "h.sock")
			srv := &testServer{}
			serve(t, path, srv)
			var inProcess atomic.Int32
			builtin := []hooks.Registration{{Name: "local", Order: 100, New: func() (hooks.Hook, error) { return countingHook{&inProcess}, nil }}}
			d := newDispatcher(t, ctx, builtin, []hooks.Registration{remoteReg(t, "remote", path, 1000, hooks.Fail, 0)})
			pod := testPod()
			pod.Labels = tt.labels
			if _, err := d.Run(ctx, hooks.PreRunPodSandbox, pod, nil); err != nil {
				t.Fatal(err)
			}
			if _, err := d.Run(ctx, hooks.PreCreateContainer, pod, testContainer()); err != nil {
				t.Fatal(err)
			}
			if rpcs, _ := srv.calls(); len(rpcs) != tt.wantCalls {
				t.Errorf("hook server saw %d calls (%v), want %d", len(rpcs), rpcs, tt.wantCalls)
			}
			if n := inProcess.Load(); n != 1 {
				t.Errorf("in-process hook ran %d times, want 1: skip labels concern hook servers only", n)
			}
		})
	}
}

type countingHook struct{ n *atomic.Int32 }

func (countingHook) Name() string { return "local" }

func (h countingHook) PreCreateContainer(context.Context, *hooks.PodInfo, *hooks.ContainerInfo) (*hooks.Adjustment, error) {
	h.n.Add(1)
	return nil, nil
}

// annotatingHook is an in-process hook that records the annotations it was shown and adds its own.
type annotatingHook struct{ seen chan map[string]string }

func (annotatingHook) Name() string { return "local" }

func (h annotatingHook) PreCreateContainer(_ context.Context, _ *hooks.PodInfo, ctr *hooks.ContainerInfo) (*hooks.Adjustment, error) {
	h.seen <- ctr.Annotations
	return &hooks.Adjustment{Annotations: map[string]string{"local": "1"}}, nil
}

// TestOrdering: hooks run by order whether in-process or remote, and each sees the container as the
// hooks before it left it.
func TestOrdering(t *testing.T) {
	t.Parallel()
	_, ctx := ktesting.NewTestContext(t)
	annotate := func(key string) *testServer {
		return &testServer{container: func(_ context.Context, _ string, _ *v1alpha1.ContainerResourceHookRequest) (*v1alpha1.ContainerResourceHookResponse, error) {
			return &v1alpha1.ContainerResourceHookResponse{ContainerAnnotations: map[string]string{key: "1"}}, nil
		}}
	}
	first, last := annotate("first"), annotate("last")
	pathFirst, pathLast := socketPath(t, "a.sock"), socketPath(t, "b.sock")
	serve(t, pathFirst, first)
	serve(t, pathLast, last)
	seen := make(chan map[string]string, 1)
	builtin := []hooks.Registration{{Name: "local", Order: 100, New: func() (hooks.Hook, error) { return annotatingHook{seen}, nil }}}
	// Given out of order on purpose: the order field decides.
	d := newDispatcher(t, ctx, builtin, []hooks.Registration{
		remoteReg(t, "last", pathLast, 2000, hooks.Fail, 0),
		remoteReg(t, "first", pathFirst, 50, hooks.Fail, 0),
	})

	adj, err := d.Run(ctx, hooks.PreCreateContainer, testPod(), testContainer())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, h := range d.Hooks() {
		names = append(names, h.Name)
	}
	if want := []string{"first", "local", "last"}; !reflect.DeepEqual(names, want) {
		t.Errorf("hooks in order %v, want %v", names, want)
	}
	if got := <-seen; got["first"] != "1" {
		t.Errorf("in-process hook saw annotations %v, want the first hook server's", got)
	}
	_, reqs := last.calls()
	if got := reqs[0].(*v1alpha1.ContainerResourceHookRequest).GetContainerAnnotations(); got["first"] != "1" || got["local"] != "1" {
		t.Errorf("last hook server saw annotations %v, want those of both earlier hooks", got)
	}
	want := map[string]string{"first": "1", "local": "1", "last": "1"}
	if adj == nil || !reflect.DeepEqual(adj.Annotations, want) {
		t.Errorf("merged annotations = %v, want %v", adj, want)
	}
}

// TestConflict: two hook servers setting cpu_shares differently conflict; the second one's policy
// decides. Setting the same value is no conflict.
func TestConflict(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name         string
		secondValue  int64
		policy       hooks.FailurePolicy
		wantConflict bool
		wantShares   int64
	}{
		{name: "Fail", secondValue: 3000, policy: hooks.Fail, wantConflict: true},
		{name: "Ignore", secondValue: 3000, policy: hooks.Ignore, wantShares: 2000},
		{name: "same value", secondValue: 2000, policy: hooks.Fail, wantShares: 2000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, ctx := ktesting.NewTestContext(t)
			shares := func(v int64) *testServer {
				return &testServer{container: func(context.Context, string, *v1alpha1.ContainerResourceHookRequest) (*v1alpha1.ContainerResourceHookResponse, error) {
					return &v1alpha1.ContainerResourceHookResponse{ContainerResources: &v1alpha1.LinuxContainerResources{CpuShares: v}}, nil
				}}
			}
			pa, pb := socketPath(t, "a.sock"), socketPath(t, "b.sock")
			serve(t, pa, shares(2000))
			serve(t, pb, shares(tt.secondValue))
			d := newDispatcher(t, ctx, nil, []hooks.Registration{
				remoteReg(t, "tuner-a", pa, 1000, hooks.Fail, 0),
				remoteReg(t, "tuner-b", pb, 2000, tt.policy, 0),
			})
			adj, err := d.Run(ctx, hooks.PreCreateContainer, testPod(), testContainer())
			if tt.wantConflict {
				if !errdefs.IsConflict(err) || !strings.Contains(err.Error(), "tuner-a") || !strings.Contains(err.Error(), "tuner-b") {
					t.Errorf("err = %v, want a conflict naming tuner-a and tuner-b", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if adj == nil || adj.Resources == nil || adj.Resources.CPUShares == nil || *adj.Resources.CPUShares != tt.wantShares {
				t.Errorf("adjustment = %s, want cpuShares %d", dump(adj), tt.wantShares)
			}
		})
	}
}

// garbageServer listens on path and answers every connection with what answer does to it.
func garbageServer(t *testing.T, path string, answer func(net.Conn)) {
	t.Helper()
	lis, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		_ = lis.Close()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				answer(c)
			})
		}
	})
}

// TestHookAnswersGarbage: a socket that answers something that is not gRPC is a broken hook server,
// not an unreachable one: the error says so, names the socket, and has the class (Internal) that
// kubelet, the logs and tandem_proxy_requests_total{code} then show, apart from Unavailable (down).
func TestHookAnswersGarbage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		listen func(t *testing.T, path string)
	}{
		{name: "writes a line and closes", listen: func(t *testing.T, path string) {
			garbageServer(t, path, func(c net.Conn) { _, _ = c.Write([]byte("hello\n")) })
		}},
		{name: "writes a line and stays", listen: func(t *testing.T, path string) {
			garbageServer(t, path, func(c net.Conn) {
				_, _ = c.Write([]byte("this is not HTTP/2\n"))
				_, _ = io.Copy(io.Discard, c) // until the client gives up
			})
		}},
		{name: "an HTTP/1.1 server", listen: func(t *testing.T, path string) {
			lis, err := net.Listen("unix", path)
			if err != nil {
				t.Fatal(err)
			}
			srv := &http.Server{Handler: http.NotFoundHandler(), ReadHeaderTimeout: time.Second}
			go func() { _ = srv.Serve(lis) }()
			t.Cleanup(func() { _ = srv.Close() })
		}},
		{name: "a valid frame header that is not the server's SETTINGS", listen: func(t *testing.T, path string) {
			garbageServer(t, path, func(c net.Conn) {
				// A PING on stream 0, well formed, where HTTP/2 requires the server's SETTINGS first.
				_, _ = c.Write([]byte{0, 0, 8, 6, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8})
				_, _ = io.Copy(io.Discard, c)
			})
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, ctx := ktesting.NewTestContext(t)
			path := socketPath(t, "g.sock")
			tt.listen(t, path)
			d := newDispatcher(t, ctx, nil, []hooks.Registration{remoteReg(t, "garbled", path, 1000, hooks.Fail, 2*time.Second)})
			for i := range 3 { // a new connection each time: the first call and the ones after fail alike
				start := time.Now()
				_, err := d.Run(ctx, hooks.PreCreateContainer, testPod(), testContainer())
				if elapsed := time.Since(start); elapsed > time.Second {
					t.Errorf("call %d took %v; a server that answers garbage must fail fast, not at its timeout", i, elapsed)
				}
				if !errdefs.IsInternal(err) || errdefs.IsUnavailable(err) {
					t.Fatalf("call %d: err = %v; want Internal (the hook server is broken), not Unavailable (down)", i, err)
				}
				for _, m := range []string{"garbled", path, "not gRPC", "protocol error"} {
					if !strings.Contains(err.Error(), m) {
						t.Errorf("call %d: err = %q, want it to mention %q", i, err, m)
					}
				}
				if strings.Contains(err.Error(), "unreachable") {
					t.Errorf("call %d: err = %q calls a server that answered unreachable", i, err)
				}
			}
		})
	}
}

// garbledCodec sends, for every answer, bytes that are a valid gRPC frame whose message decodes as no
// protocol buffer: a field tag cut short.
type garbledCodec struct{}

func (garbledCodec) Marshal(any) ([]byte, error) { return []byte{0xff}, nil }

func (garbledCodec) Unmarshal(data []byte, v any) error {
	return proto.Unmarshal(data, v.(proto.Message))
}

func (garbledCodec) Name() string { return "proto" }

// TestUndecodableAnswer: a gRPC answer whose message does not decode as the hook's response is the
// client's Internal error, as grpc-go makes it, and the message says what happened; it does not claim
// the server answered Internal, which it did not.
func TestUndecodableAnswer(t *testing.T) {
	t.Parallel()
	_, ctx := ktesting.NewTestContext(t)
	path := socketPath(t, "u.sock")
	srv := &testServer{}
	serve(t, path, srv, grpc.ForceServerCodec(garbledCodec{}))
	for _, policy := range []hooks.FailurePolicy{hooks.Fail, hooks.Ignore} {
		d := newDispatcher(t, ctx, nil, []hooks.Registration{remoteReg(t, "garbled", path, 1000, policy, 2*time.Second)})
		adj, err := d.Run(ctx, hooks.PreCreateContainer, testPod(), testContainer())
		if rpcs, _ := srv.calls(); len(rpcs) == 0 {
			t.Fatal("the hook server was not called")
		}
		if policy == hooks.Ignore {
			if err != nil || adj != nil {
				t.Errorf("Ignore: got %s, %v; want no adjustment and no error", dump(adj), err)
			}
			continue
		}
		if !errdefs.IsInternal(err) {
			t.Fatalf("err = %v, want Internal", err)
		}
		for _, m := range []string{"garbled", path, "protocol error", "does not decode", "ContainerResourceHookResponse"} {
			if !strings.Contains(err.Error(), m) {
				t.Errorf("err = %q, want it to mention %q", err, m)
			}
		}
		if strings.Contains(err.Error(), "answered Internal") {
			t.Errorf("err = %q says the server answered Internal; it answered a message that does not decode", err)
		}
	}
}
