package proxy

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/tandemkit/tandem/hooks"
	"github.com/tandemkit/tandem/hooks/remote"
	"github.com/tandemkit/tandem/hooks/remote/v1alpha1"
)

// bigAnswerServer is a hook server that answers every pod with 15 MB of annotations.
type bigAnswerServer struct {
	v1alpha1.UnimplementedRuntimeHookServiceServer
}

func (bigAnswerServer) PreRunPodSandboxHook(context.Context, *v1alpha1.PodSandboxHookRequest) (*v1alpha1.PodSandboxHookResponse, error) {
	return &v1alpha1.PodSandboxHookResponse{Annotations: map[string]string{"big.example.com/blob": strings.Repeat("x", 15<<20)}}, nil
}

// serveHookServer runs a RuntimeHookService on a unix socket for the test's life.
func serveHookServer(t *testing.T, path string, srv v1alpha1.RuntimeHookServiceServer) {
	t.Helper()
	lis, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(grpc.MaxSendMsgSize(16 << 20))
	v1alpha1.RegisterRuntimeHookServiceServer(gs, srv)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
}

func TestOversizedHookAnswerIsRefused(t *testing.T) {
	t.Parallel()
	tests := []struct {
		policy   hooks.FailurePolicy
		wantCode codes.Code
	}{
		{hooks.Ignore, codes.OK},
		{hooks.Fail, codes.ResourceExhausted},
	}
	for _, tt := range tests {
		t.Run(string(tt.policy), func(t *testing.T) {
			t.Parallel()
			sock := filepath.Join(t.TempDir(), "hook.sock")
			serveHookServer(t, sock, bigAnswerServer{})
			conn, err := remote.NewConn(sock)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = conn.Close() })
			reg := prometheus.NewRegistry()
			h := newHarness(t, harnessOpts{registerer: reg, hooks: []hooks.Registration{{
				Name: "bloat", Order: 1000, FailurePolicy: tt.policy, Timeout: 10 * time.Second, Remote: true,
				New: func() (hooks.Hook, error) { return remote.NewClient("bloat", conn), nil },
			}}})
			ctx := testCtx(t)
			_, err = h.rs().RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: podConfig("web", nil)})
			if status.Code(err) != tt.wantCode {
				t.Fatalf("RunPodSandbox = %v, want code %v", err, tt.wantCode)
			}
			if err != nil {
				if msg := status.Convert(err).Message(); !strings.Contains(msg, "hook bloat") || !strings.Contains(msg, "15728") {
					t.Fatalf("error %q does not name the hook and the size", msg)
				}
				return
			}
			pods, err := runtimeapi.NewRuntimeServiceClient(h.direct).ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if len(pods.Items) != 1 {
				t.Fatalf("runtime has %d pods, want 1", len(pods.Items))
			}
			if n := hooks.MetadataBytes(pods.Items[0].Labels, pods.Items[0].Annotations); n > 1<<10 {
				t.Fatalf("the runtime's pod carries %d bytes of labels and annotations: the oversized answer was merged", n)
			}
			if n, err := testutil.GatherAndCount(reg, "tandem_hook_oversized_answers_total"); err != nil || n != 1 {
				t.Fatalf("tandem_hook_oversized_answers_total series = %d (%v), want one", n, err)
			}
		})
	}
}

func TestOversizedRequestsAreRefused(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	ctx := testCtx(t)
	rs := h.rs()
	huge := podConfig("huge", nil)
	huge.Annotations = map[string]string{"example.com/blob": strings.Repeat("x", 16_700_000)}
	_, err := rs.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: huge})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("16.7 MB RunPodSandbox = %v, want InvalidArgument", err)
	}
	for _, want := range []string{"default/huge", "16700016", fmt.Sprint(hooks.DefaultMaxMetadataBytes)} {
		if !strings.Contains(status.Convert(err).Message(), want) {
			t.Fatalf("error %q does not say %q", status.Convert(err).Message(), want)
		}
	}
	if h.rt.podCount() != 0 {
		t.Fatal("the refused pod reached the runtime")
	}

	pod, err := rs.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: podConfig("web", nil)})
	if err != nil {
		t.Fatal(err)
	}
	cfg := ctrConfig("app")
	cfg.Annotations = map[string]string{"example.com/blob": strings.Repeat("x", 1<<20)}
	_, err = rs.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: pod.PodSandboxId, Config: cfg})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), "default/web") ||
		!strings.Contains(status.Convert(err).Message(), "app") {
		t.Fatalf("CreateContainer with 1 MiB of annotations = %v, want InvalidArgument naming default/web and app", err)
	}
	// At the bound, both pass.
	cfg.Annotations = map[string]string{"example.com/blob": strings.Repeat("x", 200<<10)}
	if _, err := rs.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: pod.PodSandboxId, Config: cfg}); err != nil {
		t.Fatalf("CreateContainer with 200 KiB of annotations = %v, want it accepted", err)
	}
}

func TestReconcileSaysWhenTheListingIsTooLarge(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		rtMaxSend int
		wantLimit string
	}{
		{name: "the runtime cannot send it", wantLimit: "the runtime's send limit"},
		{name: "the proxy cannot receive it", rtMaxSend: 64 << 20, wantLimit: "tandem-proxy's max-msg-size"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rt := newFakeRuntime()
			ctx := testCtx(t)
			// Three pods that reached the runtime some other way, 6 MB of annotations each: the listing
			// exceeds kubelet's 16 MiB.
			for i := range 3 {
				cfg := podConfig(fmt.Sprintf("fat%d", i), nil)
				cfg.Annotations = map[string]string{"example.com/blob": strings.Repeat("x", 6<<20)}
				if _, err := rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg}); err != nil {
					t.Fatal(err)
				}
			}
			h := newHarness(t, harnessOpts{rt: rt, rtMaxSend: tt.rtMaxSend})
			logs := h.logs.String()
			if strings.Contains(logs, "not reachable") {
				t.Errorf("log blames reachability for a listing that was too large:\n%s", logs)
			}
			for _, want := range []string{"message limit", "16777216", tt.wantLimit} {
				if !strings.Contains(logs, want) {
					t.Errorf("log does not say %q:\n%s", want, logs)
				}
			}
		})
	}
}

func TestInflightWaitsWithinTheCallsDeadline(t *testing.T) {
	t.Parallel()
	// Room for two requests of the largest size.
	f := newInflight(16, 8)
	var release []func()
	for range 2 {
		if err := f.admit(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		release = append(release, f.settle(8))
	}
	ctx, cancel := context.WithTimeout(testCtx(t), 50*time.Millisecond)
	defer cancel()
	err := f.admit(ctx)
	if status.Code(err) != codes.DeadlineExceeded || !strings.Contains(err.Error(), "max-inflight-bytes") {
		t.Fatalf("admit with the budget full = %v, want DeadlineExceeded naming max-inflight-bytes", err)
	}
	// A waiting call goes on as soon as one in flight finishes.
	admitted := make(chan error, 1)
	go func() { admitted <- f.admit(testCtx(t)) }()
	// Time for the goroutine to start waiting, which nothing outside the semaphore shows: without it the
	// test still passes, but may not exercise the wait.
	time.Sleep(10 * time.Millisecond)
	release[0]()
	if err := <-admitted; err != nil {
		t.Fatalf("admit after a release = %v", err)
	}
	// A small request gives back what it does not need: with the other large one done, two more fit
	// beside it, each reserving the largest size while it is read.
	f.settle(1)
	release[1]()
	for range 2 {
		ctx, cancel := context.WithTimeout(testCtx(t), time.Second)
		if err := f.admit(ctx); err != nil {
			t.Fatalf("admit beside a small request = %v", err)
		}
		cancel()
		f.settle(1)
	}
}
