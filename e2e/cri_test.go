//go:build e2e

package e2e

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/tandemkit/tandem/e2e/framework"
)

// TestVersionAndImages: kubelet's first calls (Version, ListImages,
// ImageStatus) answer through the proxy exactly as the runtime answers them.
func TestVersionAndImages(t *testing.T) {
	forEachRuntime(t, envOptions{}, func(t *testing.T, ctx context.Context, e *env) {
		want, err := e.direct.Version(ctx, "v1")
		if err != nil {
			t.Fatalf("Version direct: %v", err)
		}
		got, err := e.viaProxy.Version(ctx, "v1")
		if err != nil {
			t.Fatalf("Version through the proxy: %v", err)
		}
		if !proto.Equal(got, want) {
			t.Errorf("Version through the proxy = %v, direct = %v", got, want)
		}
		if got.GetRuntimeName() != "containerd" || got.GetRuntimeApiVersion() != "v1" {
			t.Errorf("Version through the proxy = %v, want runtime containerd with CRI v1", got)
		}

		images, err := e.viaProxyImages.ListImages(ctx, nil)
		if err != nil {
			t.Fatalf("ListImages through the proxy: %v", err)
		}
		directImages, err := e.directImages.ListImages(ctx, nil)
		if err != nil {
			t.Fatalf("ListImages direct: %v", err)
		}
		if !equalSorted(images, directImages, (*runtimeapi.Image).GetId) {
			t.Errorf("ListImages through the proxy = %v, direct = %v", images, directImages)
		}
		if !slices.ContainsFunc(images, func(im *runtimeapi.Image) bool { return slices.Contains(im.GetRepoTags(), framework.TestImage) }) {
			t.Errorf("ListImages through the proxy does not list %s: %v", framework.TestImage, images)
		}

		for _, tc := range []struct {
			name    string
			image   string
			present bool
		}{
			{name: "imported image", image: framework.TestImage, present: true},
			{name: "unknown image", image: "docker.io/library/no-such-image:0", present: false},
		} {
			t.Run(tc.name, func(t *testing.T) {
				spec := &runtimeapi.ImageSpec{Image: tc.image}
				got, err := e.viaProxyImages.ImageStatus(ctx, spec, true)
				if err != nil {
					t.Fatalf("ImageStatus through the proxy: %v", err)
				}
				want, err := e.directImages.ImageStatus(ctx, spec, true)
				if err != nil {
					t.Fatalf("ImageStatus direct: %v", err)
				}
				if !proto.Equal(got, want) {
					t.Errorf("ImageStatus through the proxy = %v, direct = %v", got, want)
				}
				if (got.GetImage() != nil) != tc.present {
					t.Errorf("ImageStatus(%s).Image = %v, want present=%v", tc.image, got.GetImage(), tc.present)
				}
			})
		}
	})
}

// TestPodLifecycle walks one pod through every lifecycle call kubelet makes,
// through the proxy, checking what kubelet would see after each step.
func TestPodLifecycle(t *testing.T) {
	cniInstalled := fileExists("/usr/lib/cni/bridge") && fileExists("/usr/lib/cni/host-local")
	forEachRuntime(t, envOptions{cni: cniInstalled}, func(t *testing.T, ctx context.Context, e *env) {
		for _, tc := range []struct {
			name        string
			hostNetwork bool
		}{
			{name: "host-network", hostNetwork: true},
			{name: "pod-network", hostNetwork: false},
		} {
			t.Run(tc.name, func(t *testing.T) {
				if !tc.hostNetwork && !cniInstalled {
					t.Skip("SKIPPED: pod networking needs containernetworking-plugins in /usr/lib/cni")
				}
				lifecycle(t, ctx, e, tc.hostNetwork)
			})
		}
	})
}

func lifecycle(t *testing.T, ctx context.Context, e *env, hostNetwork bool) {
	rs := e.viaProxy
	cfg := framework.PodSandboxConfig("lifecycle", "e2e", hostNetwork)
	t.Cleanup(func() { _ = os.RemoveAll(cfg.GetLogDirectory()) })

	podID, err := rs.RunPodSandbox(ctx, cfg, "")
	if err != nil {
		t.Fatalf("RunPodSandbox: %v", err)
	}
	t.Cleanup(func() {
		// A no-op when the test got to the end; after a failure it stops leaks.
		_ = e.direct.StopPodSandbox(context.WithoutCancel(ctx), podID)
		_ = e.direct.RemovePodSandbox(context.WithoutCancel(ctx), podID)
	})
	pst, err := rs.PodSandboxStatus(ctx, podID, false)
	if err != nil {
		t.Fatalf("PodSandboxStatus: %v", err)
	}
	if pst.GetStatus().GetState() != runtimeapi.PodSandboxState_SANDBOX_READY {
		t.Fatalf("pod state = %v, want SANDBOX_READY", pst.GetStatus().GetState())
	}
	if ip := pst.GetStatus().GetNetwork().GetIp(); hostNetwork != (ip == "") {
		t.Errorf("pod IP = %q with hostNetwork=%v: a pod on the pod network needs an IP, one on the host network none", ip, hostNetwork)
	}

	ctrID, err := rs.CreateContainer(ctx, podID, framework.ContainerConfig("app", framework.SleepCommand()...), cfg)
	if err != nil {
		t.Fatalf("CreateContainer: %v", err)
	}
	wantState(t, ctx, e, ctrID, runtimeapi.ContainerState_CONTAINER_CREATED)
	if err := rs.StartContainer(ctx, ctrID); err != nil {
		t.Fatalf("StartContainer: %v", err)
	}
	st := wantState(t, ctx, e, ctrID, runtimeapi.ContainerState_CONTAINER_RUNNING)
	if st.GetStartedAt() == 0 || st.GetImage().GetImage() == "" {
		t.Errorf("ContainerStatus of a running container = %v, want StartedAt and image set", st)
	}

	stdout, stderr, err := rs.ExecSync(ctx, ctrID, []string{"echo", "hello from tandem"}, 10*time.Second)
	if err != nil {
		t.Fatalf("ExecSync: %v (stderr %q)", err, stderr)
	}
	if string(stdout) != "hello from tandem\n" {
		t.Errorf("ExecSync stdout = %q, want %q", stdout, "hello from tandem\n")
	}
	if !hostNetwork {
		// The container shares the sandbox's network namespace and its IP.
		out, _, err := rs.ExecSync(ctx, ctrID, []string{"ip", "-4", "addr", "show", "eth0"}, 10*time.Second)
		if ip := pst.GetStatus().GetNetwork().GetIp(); err != nil || !strings.Contains(string(out), ip+"/") {
			t.Errorf("eth0 in the container = %q (err %v), want the pod IP %s", out, err, ip)
		}
	}

	store := storeOf(t, ctx, e)
	if p := findPod(store, podID); p == nil || p.State != "SANDBOX_READY" || p.UID != cfg.GetMetadata().GetUid() {
		t.Errorf("/debug/store pod %s = %+v, want SANDBOX_READY with uid %s", podID, p, cfg.GetMetadata().GetUid())
	}
	if c := findContainer(store, ctrID); c == nil || c.State != "CONTAINER_RUNNING" || c.PodSandboxID != podID {
		t.Errorf("/debug/store container %s = %+v, want CONTAINER_RUNNING in pod %s", ctrID, c, podID)
	}

	if err := rs.StopContainer(ctx, ctrID, 10); err != nil {
		t.Fatalf("StopContainer: %v", err)
	}
	st = wantState(t, ctx, e, ctrID, runtimeapi.ContainerState_CONTAINER_EXITED)
	if st.GetExitCode() != 0 {
		t.Errorf("exit code after a graceful stop = %d, want 0 (the container traps SIGTERM)", st.GetExitCode())
	}
	if err := rs.RemoveContainer(ctx, ctrID); err != nil {
		t.Fatalf("RemoveContainer: %v", err)
	}
	if _, err := rs.ContainerStatus(ctx, ctrID, false); status.Code(err) != codes.NotFound {
		t.Errorf("ContainerStatus after RemoveContainer: %v, want NotFound", err)
	}

	if err := rs.StopPodSandbox(ctx, podID); err != nil {
		t.Fatalf("StopPodSandbox: %v", err)
	}
	pst, err = rs.PodSandboxStatus(ctx, podID, false)
	if err != nil {
		t.Fatalf("PodSandboxStatus after stop: %v", err)
	}
	if pst.GetStatus().GetState() != runtimeapi.PodSandboxState_SANDBOX_NOTREADY {
		t.Errorf("pod state after StopPodSandbox = %v, want SANDBOX_NOTREADY", pst.GetStatus().GetState())
	}
	if err := rs.RemovePodSandbox(ctx, podID); err != nil {
		t.Fatalf("RemovePodSandbox: %v", err)
	}
	pods, err := rs.ListPodSandbox(ctx, nil)
	if err != nil {
		t.Fatalf("ListPodSandbox: %v", err)
	}
	if slices.ContainsFunc(pods, func(p *runtimeapi.PodSandbox) bool { return p.GetId() == podID }) {
		t.Errorf("ListPodSandbox still lists removed pod %s", podID)
	}
	store = storeOf(t, ctx, e)
	if p, c := findPod(store, podID), findContainer(store, ctrID); p != nil || c != nil {
		t.Errorf("/debug/store still holds removed pod %+v / container %+v", p, c)
	}
}

// wantState checks a container's state through the proxy.
func wantState(t *testing.T, ctx context.Context, e *env, id string, want runtimeapi.ContainerState) *runtimeapi.ContainerStatus {
	t.Helper()
	resp, err := e.viaProxy.ContainerStatus(ctx, id, false)
	if err != nil {
		t.Fatalf("ContainerStatus %s: %v", id, err)
	}
	if got := resp.GetStatus().GetState(); got != want {
		t.Fatalf("container %s state = %v, want %v", id, got, want)
	}
	return resp.GetStatus()
}

func storeOf(t *testing.T, ctx context.Context, e *env) *framework.StoreDump {
	t.Helper()
	s, err := e.proxy.Store(ctx)
	if err != nil {
		t.Fatalf("read the proxy's store: %v", err)
	}
	return s
}

func findPod(s *framework.StoreDump, id string) *framework.StorePod {
	for i := range s.Pods {
		if s.Pods[i].ID == id {
			return &s.Pods[i]
		}
	}
	return nil
}

func findContainer(s *framework.StoreDump, id string) *framework.StoreContainer {
	for i := range s.Containers {
		if s.Containers[i].ID == id {
			return &s.Containers[i]
		}
	}
	return nil
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// equalSorted compares two lists of CRI messages regardless of order (the
// runtime lists from a map).
func equalSorted[T proto.Message](a, b []T, key func(T) string) bool {
	if len(a) != len(b) {
		return false
	}
	a, b = slices.Clone(a), slices.Clone(b)
	cmp := func(x, y T) int { return strings.Compare(key(x), key(y)) }
	slices.SortFunc(a, cmp)
	slices.SortFunc(b, cmp)
	for i := range a {
		if !proto.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}
