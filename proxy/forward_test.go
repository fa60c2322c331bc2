package proxy

import (
	"errors"
	"io"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/tandemkit/tandem/internal/polltest"
)

func TestForwardUnaryMatchesDirect(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	ctx := testCtx(t)
	direct := runtimeapi.NewRuntimeServiceClient(h.direct)
	tests := []struct {
		name string
		call func(c runtimeapi.RuntimeServiceClient) (proto.Message, error)
	}{
		{"Version", func(c runtimeapi.RuntimeServiceClient) (proto.Message, error) {
			return c.Version(ctx, &runtimeapi.VersionRequest{})
		}},
		{"ListContainers", func(c runtimeapi.RuntimeServiceClient) (proto.Message, error) {
			return c.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
		}},
		{"ContainerStatus not found with details", func(c runtimeapi.RuntimeServiceClient) (proto.Message, error) {
			return c.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: "nope"})
		}},
		{"method unknown to the runtime", func(c runtimeapi.RuntimeServiceClient) (proto.Message, error) {
			return c.CheckpointContainer(ctx, &runtimeapi.CheckpointContainerRequest{ContainerId: "x"})
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want, wantErr := tt.call(direct)
			got, gotErr := tt.call(h.rs())
			if !proto.Equal(status.Convert(wantErr).Proto(), status.Convert(gotErr).Proto()) {
				t.Fatalf("status through proxy = %v, direct = %v", status.Convert(gotErr).Proto(), status.Convert(wantErr).Proto())
			}
			if wantErr == nil && !proto.Equal(want, got) {
				t.Fatalf("response through proxy = %v, direct = %v", got, want)
			}
		})
	}
	// ImageService goes to the image endpoint (the same socket here).
	imgs, err := runtimeapi.NewImageServiceClient(h.client).ListImages(ctx, &runtimeapi.ListImagesRequest{})
	if err != nil || len(imgs.GetImages()) != 1 {
		t.Fatalf("ListImages through proxy = %v, %v; want one image", imgs, err)
	}
}

func TestForwardMetadataBothWays(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	ctx := metadata.AppendToOutgoingContext(testCtx(t), "x-test", "hello")
	var header, trailer metadata.MD
	if _, err := h.rs().Version(ctx, &runtimeapi.VersionRequest{}, grpc.Header(&header), grpc.Trailer(&trailer)); err != nil {
		t.Fatal(err)
	}
	if got := header.Get("x-echo"); len(got) != 1 || got[0] != "hello" {
		t.Errorf("header x-echo = %v, want [hello] (request metadata or response header lost)", got)
	}
	if got := trailer.Get("x-trailer"); len(got) != 1 || got[0] != "t" {
		t.Errorf("trailer x-trailer = %v, want [t]", got)
	}
}

func TestForwardMethodNewerThanVendoredAPI(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	ctx := testCtx(t)
	desc := &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}
	st, err := h.client.NewStream(ctx, desc, "/runtime.v1.FutureService/Echo")
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"a", "b", "c"} {
		if err := st.SendMsg(wrapperspb.String(v)); err != nil {
			t.Fatal(err)
		}
		var got wrapperspb.StringValue
		if err := st.RecvMsg(&got); err != nil {
			t.Fatal(err)
		}
		if got.GetValue() != "echo:"+v {
			t.Fatalf("echo = %q, want %q", got.GetValue(), "echo:"+v)
		}
	}
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	var m wrapperspb.StringValue
	if err := st.RecvMsg(&m); !errors.Is(err, io.EOF) {
		t.Fatalf("after CloseSend: %v, want io.EOF", err)
	}
}

func TestForwardServerStreamingEvents(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	ctx := testCtx(t)
	stream, err := h.rs().GetContainerEvents(ctx, &runtimeapi.GetEventsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		h.rt.events <- &runtimeapi.ContainerEventResponse{ContainerId: "c", ContainerEventType: runtimeapi.ContainerEventType(i)}
	}
	for i := range 3 {
		ev, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if ev.GetContainerEventType() != runtimeapi.ContainerEventType(i) {
			t.Fatalf("event %d type = %v", i, ev.GetContainerEventType())
		}
	}
}

func TestForwardOversizeMessage(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	ctx := testCtx(t)
	// Request above 16 MiB: rejected by the proxy, which must stay up.
	big := &runtimeapi.ExecSyncRequest{ContainerId: "c", Cmd: []string{string(make([]byte, 17<<20))}}
	_, err := h.rs().ExecSync(ctx, big)
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("oversize request: %v, want ResourceExhausted", err)
	}
	// Response above 16 MiB (the runtime answers 1 KiB per argument).
	_, err = h.rs().ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: "c", Cmd: make([]string, 17<<10)})
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("oversize response: %v, want ResourceExhausted", err)
	}
	if _, err := h.rs().Version(ctx, &runtimeapi.VersionRequest{}); err != nil {
		t.Fatalf("proxy unusable after oversize messages: %v", err)
	}
}

// Messages just under kubelet's 16 MiB limit pass both ways, although the proxy's flow-control windows
// (localWindow, requestWindow) are a fraction of that: the window is refilled as the message moves.
func TestForwardLargeMessages(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	ctx := testCtx(t)
	for _, tc := range []struct {
		name    string
		req     *runtimeapi.ExecSyncRequest
		wantOut int
	}{
		{"15 MiB request", &runtimeapi.ExecSyncRequest{ContainerId: "c", Cmd: []string{string(make([]byte, 15<<20))}}, 1 << 10},
		{"15 MiB response", &runtimeapi.ExecSyncRequest{ContainerId: "c", Cmd: make([]string, 15<<10)}, 15 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := h.rs().ExecSync(ctx, tc.req)
			if err != nil {
				t.Fatalf("ExecSync: %v", err)
			}
			if got := len(resp.GetStdout()); got != tc.wantOut {
				t.Fatalf("stdout is %d bytes, want %d", got, tc.wantOut)
			}
		})
	}
}

func TestRuntimeDownFailsFastWithUnavailable(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	ctx := testCtx(t)
	h.rtServer.Stop()
	start := time.Now()
	var err error
	// The connection may take a moment to notice; every call must fail fast either way.
	polltest.Within(t, 3*time.Second, "calls to fail with Unavailable while the runtime is down", func() bool {
		_, err = h.rs().Version(ctx, &runtimeapi.VersionRequest{})
		return status.Code(err) == codes.Unavailable
	})
	if time.Since(start) > 3*time.Second {
		t.Fatalf("calls took %v to fail; want fast failure", time.Since(start))
	}
	if err := h.srv.Ready(ctx); err == nil {
		t.Fatal("Ready() = nil with the runtime down")
	}
	// The runtime returns on the same socket: calls recover without restarting the proxy.
	h.rtServer = startRuntime(t, h.rt, h.rtSock, 0)
	t.Cleanup(h.rtServer.Stop)
	polltest.Within(t, 5*time.Second, "calls to recover after the runtime returned", func() bool {
		_, err = h.rs().Version(ctx, &runtimeapi.VersionRequest{})
		return err == nil
	})
}

func TestGracefulStopEndsStreams(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	ctx := testCtx(t)
	stream, err := h.rs().GetContainerEvents(ctx, &runtimeapi.GetEventsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	h.rt.events <- &runtimeapi.ContainerEventResponse{ContainerId: "c"}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	h.stop()
	select {
	case err := <-h.done:
		if err != nil {
			t.Fatalf("Serve returned %v, want nil", err)
		}
		h.done <- nil // for the cleanup
	case <-time.After(3 * time.Second):
		t.Fatal("Serve did not return after stop with an open event stream")
	}
	if _, err := stream.Recv(); status.Code(err) != codes.Unavailable {
		t.Fatalf("open stream after stop: %v, want Unavailable", err)
	}
}
