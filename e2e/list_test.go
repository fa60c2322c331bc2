//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestListsMatchDirect: kubelet's relist (ListPodSandbox, ListContainers,
// with and without filters) must read the same through the proxy as from the
// runtime, with running, exited and not-ready objects in the mix.
func TestListsMatchDirect(t *testing.T) {
	forEachRuntime(t, envOptions{}, func(t *testing.T, ctx context.Context, e *env) {
		var pods []string
		for i := range 3 {
			podID, _ := e.runPod(t, ctx, e.viaProxy, fmt.Sprintf("list-%d", i), true, 2)
			pods = append(pods, podID)
		}
		// One exited container and one stopped pod, so states differ.
		_, ids := e.runPod(t, ctx, e.viaProxy, "list-stopped", true, 1)
		if err := e.viaProxy.StopContainer(ctx, ids[0], 10); err != nil {
			t.Fatal(err)
		}
		stoppedPod, _ := e.runPod(t, ctx, e.viaProxy, "list-notready", true, 0)
		if err := e.viaProxy.StopPodSandbox(ctx, stoppedPod); err != nil {
			t.Fatal(err)
		}

		containerFilters := []struct {
			name   string
			filter *runtimeapi.ContainerFilter
			want   int
		}{
			{name: "all", filter: nil, want: 7},
			{name: "running", filter: &runtimeapi.ContainerFilter{State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING}}, want: 6},
			{name: "exited", filter: &runtimeapi.ContainerFilter{State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_EXITED}}, want: 1},
			{name: "one pod", filter: &runtimeapi.ContainerFilter{PodSandboxId: pods[1]}, want: 2},
			{name: "label", filter: &runtimeapi.ContainerFilter{LabelSelector: map[string]string{"io.kubernetes.container.name": "c1"}}, want: 3},
		}
		for _, tc := range containerFilters {
			t.Run("ListContainers/"+tc.name, func(t *testing.T) {
				got, err := e.viaProxy.ListContainers(ctx, tc.filter)
				if err != nil {
					t.Fatalf("through the proxy: %v", err)
				}
				want, err := e.direct.ListContainers(ctx, tc.filter)
				if err != nil {
					t.Fatalf("direct: %v", err)
				}
				if !equalSorted(got, want, (*runtimeapi.Container).GetId) {
					t.Errorf("through the proxy = %v\ndirect = %v", got, want)
				}
				if len(got) != tc.want {
					t.Errorf("got %d containers, want %d", len(got), tc.want)
				}
			})
		}

		podFilters := []struct {
			name   string
			filter *runtimeapi.PodSandboxFilter
			want   int
		}{
			{name: "all", filter: nil, want: 5},
			{name: "ready", filter: &runtimeapi.PodSandboxFilter{State: &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY}}, want: 4},
			{name: "not ready", filter: &runtimeapi.PodSandboxFilter{State: &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_NOTREADY}}, want: 1},
			{name: "by id", filter: &runtimeapi.PodSandboxFilter{Id: pods[0]}, want: 1},
			{name: "label", filter: &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{"io.kubernetes.pod.name": "list-2"}}, want: 1},
		}
		for _, tc := range podFilters {
			t.Run("ListPodSandbox/"+tc.name, func(t *testing.T) {
				got, err := e.viaProxy.ListPodSandbox(ctx, tc.filter)
				if err != nil {
					t.Fatalf("through the proxy: %v", err)
				}
				want, err := e.direct.ListPodSandbox(ctx, tc.filter)
				if err != nil {
					t.Fatalf("direct: %v", err)
				}
				if !equalSorted(got, want, (*runtimeapi.PodSandbox).GetId) {
					t.Errorf("through the proxy = %v\ndirect = %v", got, want)
				}
				if len(got) != tc.want {
					t.Errorf("got %d pods, want %d", len(got), tc.want)
				}
			})
		}
	})
}
