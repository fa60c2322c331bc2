package agent

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2/ktesting"

	"github.com/tandemkit/tandem/e2e/framework"
	"github.com/tandemkit/tandem/internal/polltest"
)

// TestBadSLOConfigStillServes starts tandem-proxy, in front of a real containerd, with an slo-config file
// that has a typo in one section and Koordinator-invalid JSON in another, and a kubeconfig kubelet has
// not written yet. The CRI socket must serve (today's first start with such a file exited 1) and the
// proxy must stop cleanly.
func TestBadSLOConfigStillServes(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("runs a private containerd: needs root")
	}
	_, ctx := ktesting.NewTestContext(t)
	dir, runtimeEndpoint := privateContainerd(t, ctx)

	sloFile := filepath.Join(dir, "slo.yaml")
	if err := os.WriteFile(sloFile, []byte(`cpu-burst-config: '{"clusterStrategy": {"polcy": "auto"}}'
system-config: |
  {"clusterStrategy": {"minFreeKbytesFactor": 100}
   "nodeStrategies": []}
colocation-config: '{"enable": true}'
not-a-section: '{}'
`), 0o600); err != nil {
		t.Fatal(err)
	}
	sock, stop := startRun(t, ctx, dir, runtimeEndpoint, "--metrics-addr", "", "--slo-config", sloFile)
	rs, _, err := framework.NewCRIClients(ctx, "unix://"+sock)
	if err != nil {
		t.Fatal(err)
	}
	v, err := rs.Version(ctx, "")
	if err != nil {
		t.Fatalf("CRI Version through the proxy: %v", err)
	}
	if v.RuntimeName != "containerd" {
		t.Fatalf("runtime %q, want containerd behind the proxy", v.RuntimeName)
	}
	if _, err := rs.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{}); err != nil {
		t.Fatalf("ListPodSandbox through the proxy: %v", err)
	}
	if err := stop(); err != nil {
		t.Fatalf("tandem-proxy stopped with %v, want a clean stop", err)
	}
}

// privateContainerd starts containerd 1.6 in a new temporary directory, which it returns with the
// runtime endpoint. The directory's path is short: unix socket paths stay under 108 bytes.
func privateContainerd(t *testing.T, ctx context.Context) (string, string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "tp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	ctrd, err := framework.StartContainerd(ctx, framework.ContainerdOptions{Flavor: framework.Flavor16, Dir: filepath.Join(dir, "c")})
	if err != nil {
		t.Fatalf("start containerd: %v", err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := ctrd.Stop(sctx); err != nil {
			t.Errorf("stop containerd: %v", err)
		}
	})
	return dir, ctrd.Endpoint
}

// startRun runs tandem-proxy's run in front of runtimeEndpoint with its files in dir (CRI socket
// t.sock, state dir s, hooks.d h), a kubeconfig kubelet has not written yet, and the cgroupfs driver
// with a BE parent that does not exist so that the suppress loop does not touch this host's kubepods
// (pinned by flags: a kubelet running on the test machine is not followed); extra comes last, and a flag
// given again there wins. It returns once the CRI socket exists, with it and a func that stops the
// proxy and returns what run returned, called at the end of the test too.
func startRun(t *testing.T, ctx context.Context, dir, runtimeEndpoint string, extra ...string) (string, func() error) {
	t.Helper()
	sock := filepath.Join(dir, "t.sock")
	args := append([]string{
		"--listen", sock, "--runtime-endpoint", runtimeEndpoint, "--state-dir", filepath.Join(dir, "s"),
		"--hooks-dir", filepath.Join(dir, "h"), "--kubeconfig", filepath.Join(dir, "kubelet.conf"),
		"--node-name", "test-node", "--kubelet-cgroup-root", "/tandem-test-absent",
		"--cgroup-driver", "cgroupfs", "--cpu-manager-policy", "none",
	}, extra...)
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	var runErr error
	go func() {
		defer close(done)
		runErr = run(runCtx, proxyBinary, args)
	}()
	stop := func() error {
		cancel()
		select {
		case <-done:
			return runErr
		case <-time.After(time.Minute):
			return errors.New("tandem-proxy did not stop within a minute")
		}
	}
	t.Cleanup(func() { _ = stop() })

	polltest.Within(t, 30*time.Second, "tandem-proxy's CRI socket", func() bool {
		select {
		case <-done:
			t.Fatalf("tandem-proxy exited before serving: %v", runErr)
		default:
		}
		_, err := os.Stat(sock)
		return err == nil
	})
	return sock, stop
}
