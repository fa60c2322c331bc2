//go:build e2e

package e2e

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/tandemkit/tandem/e2e/framework"
)

// eventStream collects GetContainerEvents responses from one cri-client.
type eventStream struct {
	mu     sync.Mutex
	events []*runtimeapi.ContainerEventResponse
	ch     chan *runtimeapi.ContainerEventResponse
	done   chan error
	ready  chan struct{}
}

// watchEvents subscribes the way kubelet's evented PLEG does; the stream ends
// when ctx does.
func watchEvents(ctx context.Context, rs internalapi.RuntimeService) *eventStream {
	s := &eventStream{ch: make(chan *runtimeapi.ContainerEventResponse, 64), done: make(chan error, 1), ready: make(chan struct{})}
	var once sync.Once
	go func() {
		s.done <- rs.GetContainerEvents(ctx, s.ch, func(runtimeapi.RuntimeService_GetContainerEventsClient) { once.Do(func() { close(s.ready) }) })
	}()
	go func() {
		for {
			select {
			case ev := <-s.ch:
				s.mu.Lock()
				s.events = append(s.events, ev)
				s.mu.Unlock()
			case <-ctx.Done():
				return
			}
		}
	}()
	return s
}

// waitFor waits until the stream has delivered want (in order) for id.
func (s *eventStream) waitFor(ctx context.Context, id string, want []runtimeapi.ContainerEventType) ([]runtimeapi.ContainerEventType, error) {
	deadline := time.Now().Add(20 * time.Second)
	for {
		s.mu.Lock()
		var got []runtimeapi.ContainerEventType
		for _, ev := range s.events {
			if ev.GetContainerId() == id {
				got = append(got, ev.GetContainerEventType())
			}
		}
		s.mu.Unlock()
		if isSubsequence(want, got) {
			return got, nil
		}
		select {
		case err := <-s.done:
			return got, errors.Join(errors.New("event stream ended"), err)
		case <-ctx.Done():
			return got, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return got, errors.New("timed out")
		}
	}
}

func isSubsequence(want, got []runtimeapi.ContainerEventType) bool {
	i := 0
	for _, g := range got {
		if i < len(want) && g == want[i] {
			i++
		}
	}
	return i == len(want)
}

// TestContainerEvents: kubelet's evented PLEG subscribes to
// GetContainerEvents; through the proxy it must get the test pod's lifecycle
// events. containerd 1.6 lacks the RPC: then the proxy must hand back the
// runtime's own Unimplemented, code and message, unchanged.
func TestContainerEvents(t *testing.T) {
	forEachRuntime(t, envOptions{}, func(t *testing.T, ctx context.Context, e *env) {
		if e.flavor == framework.Flavor16 {
			eventsUnimplemented(t, ctx, e)
			return
		}
		sctx, cancel := context.WithCancel(ctx)
		defer cancel()
		stream := watchEvents(sctx, e.viaProxy)
		select {
		case <-stream.ready:
		case err := <-stream.done:
			t.Fatalf("GetContainerEvents through the proxy: %v", err)
		case <-time.After(10 * time.Second):
			t.Fatal("GetContainerEvents through the proxy did not open a stream within 10s")
		}

		cfg := framework.PodSandboxConfig("events", "e2e", true)
		podID, ids, err := framework.RunPod(ctx, e.viaProxy, cfg, 1)
		if err != nil {
			t.Fatal(err)
		}
		ctrID := ids[0]
		if err := e.viaProxy.StopContainer(ctx, ctrID, 10); err != nil {
			t.Fatalf("StopContainer: %v", err)
		}
		if err := framework.RemovePod(ctx, e.viaProxy, podID); err != nil {
			t.Fatal(err)
		}

		for _, tc := range []struct {
			name string
			id   string
			want []runtimeapi.ContainerEventType
		}{
			{name: "container", id: ctrID, want: []runtimeapi.ContainerEventType{
				runtimeapi.ContainerEventType_CONTAINER_CREATED_EVENT,
				runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT,
				runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT,
				runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT,
			}},
			{name: "sandbox", id: podID, want: []runtimeapi.ContainerEventType{
				runtimeapi.ContainerEventType_CONTAINER_CREATED_EVENT,
				runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT,
				runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT,
				runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT,
			}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				got, err := stream.waitFor(ctx, tc.id, tc.want)
				if err != nil {
					t.Errorf("events for %s %s through the proxy = %v, want %v in order: %v", tc.name, tc.id, got, tc.want, err)
				}
			})
		}
	})
}

func eventsUnimplemented(t *testing.T, ctx context.Context, e *env) {
	errOf := func(rs internalapi.RuntimeService) error {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		return rs.GetContainerEvents(ctx, make(chan *runtimeapi.ContainerEventResponse, 1), nil)
	}
	want := status.Convert(errOf(e.direct))
	got := status.Convert(errOf(e.viaProxy))
	if want.Code() != codes.Unimplemented {
		t.Fatalf("containerd 1.6 answered GetContainerEvents directly with %v, want Unimplemented", want)
	}
	if got.Code() != want.Code() || got.Message() != want.Message() {
		t.Errorf("GetContainerEvents through the proxy = %v %q, direct = %v %q", got.Code(), got.Message(), want.Code(), want.Message())
	}
}
