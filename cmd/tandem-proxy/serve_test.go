package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2/ktesting"

	"github.com/tandemkit/tandem/e2e/framework"
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
	// Short: unix socket paths stay under 108 bytes.
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
	sock := filepath.Join(dir, "t.sock")
	args := []string{
		"--listen", sock, "--runtime-endpoint", ctrd.Endpoint, "--state-dir", filepath.Join(dir, "s"),
		"--metrics-addr", "", "--hooks-dir", filepath.Join(dir, "h"), "--slo-config", sloFile,
		"--kubeconfig", filepath.Join(dir, "kubelet.conf"), "--node-name", "test-node",
		// A BE parent that does not exist: the suppress loop must not touch this host's kubepods.
		"--kubelet-cgroup-root", "/tandem-test-absent",
	}
	runCtx, stop := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- run(runCtx, args) }()
	t.Cleanup(stop)

	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(sock); err == nil {
			break
		}
		select {
		case err := <-errc:
			t.Fatalf("tandem-proxy exited before serving: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("no CRI socket within 30 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
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
	stop()
	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("tandem-proxy stopped with %v, want a clean stop", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("tandem-proxy did not stop within a minute")
	}
}
