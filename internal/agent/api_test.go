package agent

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2/ktesting"

	"github.com/tandemkit/tandem/hooks"
	"github.com/tandemkit/tandem/hooks/policy/cpuset"
	alloc "github.com/tandemkit/tandem/resource/cpuset"
	resqos "github.com/tandemkit/tandem/resource/qos"
	"github.com/tandemkit/tandem/resource/topology"
	"github.com/tandemkit/tandem/store"
)

func kubeconfigFor(server string) []byte {
	return []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "` + server + `"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`)
}

// TestConnectAPI: the proxy waits, standalone, for a kubeconfig that kubelet has not written yet and for
// an API server that does not answer, and connects as soon as both are there.
func TestConnectAPI(t *testing.T) {
	t.Parallel()
	_, ctx := ktesting.NewTestContext(t)
	// Any answer from the server counts: a 404 (the Node not registered yet) or 403 is still the server.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_ = json.NewEncoder(w).Encode(metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
			Status: metav1.StatusFailure, Reason: metav1.StatusReasonNotFound, Code: http.StatusNotFound})
	}))
	t.Cleanup(srv.Close)
	dir := t.TempDir()

	t.Run("kubeconfig appears later", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(dir, "kubelet.conf")
		time.AfterFunc(300*time.Millisecond, func() { _ = os.WriteFile(path, kubeconfigFor(srv.URL), 0o600) })
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		start := time.Now()
		if c := connectAPI(ctx, path, "node-1", 50*time.Millisecond); c == nil {
			t.Fatal("not connected after the kubeconfig appeared")
		}
		if d := time.Since(start); d < 300*time.Millisecond {
			t.Fatalf("connected after %v, before the kubeconfig existed", d)
		}
	})
	t.Run("API server unreachable", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(dir, "down.conf")
		// A port nothing listens on: the server is down.
		down := httptest.NewServer(http.NotFoundHandler())
		down.Close()
		if err := os.WriteFile(path, kubeconfigFor(down.URL), 0o600); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
		if c := connectAPI(ctx, path, "node-1", 50*time.Millisecond); c != nil {
			t.Fatal("connected to an API server that does not answer")
		}
	})
}

// TestRestoreExclusive: right after Recover the allocator holds the exclusive CPUs the store recorded,
// so /debug/pools and tandemctl pools show them before any lifecycle call.
func TestRestoreExclusive(t *testing.T) {
	t.Parallel()
	_, ctx := ktesting.NewTestContext(t)
	topo, err := topology.Discover(filepath.Join("..", "..", "resource", "topology", "testdata", "16cpu-2socket-smt"))
	if err != nil {
		t.Fatal(err)
	}
	cpus, err := alloc.New(topo, alloc.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	st := store.New()
	st.PutPod(&store.Pod{ID: "sb1", UID: "u1"})
	st.PutContainer(&store.Container{ID: "c1", PodSandboxID: "sb1", Name: "lse", State: "CONTAINER_RUNNING",
		Annotations: map[string]string{"tandem.io/qos-class": "LSE"}, Resources: resourcesWithCpuset("2-3")})
	st.PutContainer(&store.Container{ID: "c2", PodSandboxID: "sb1", Name: "gone", State: store.ContainerExited,
		Annotations: map[string]string{"tandem.io/qos-class": "LSR"}, Resources: resourcesWithCpuset("4-5")})
	recorded := recordedCPUs(st.Snapshot())
	if len(recorded) != 1 || recorded[0].Class != resqos.LSE {
		t.Fatalf("recorded = %+v, want the running LSE container only", recorded)
	}
	if n := restoreExclusive(ctx, cpus, st.Snapshot()); n != 1 {
		t.Fatalf("restored %d, want 1", n)
	}
	if got := cpus.Pools().LSE.String(); got != "2-3" {
		t.Fatalf("LSE pool = %q, want 2-3 at once", got)
	}
	a, ok := cpus.Allocations()[cpuset.Owner("u1", "lse")]
	if !ok || a.CPUs.String() != "2-3" {
		t.Fatalf("allocations = %v, want u1/lse on 2-3", cpus.Allocations())
	}
	if n := restoreExclusive(ctx, nil, st.Snapshot()); n != 0 {
		t.Fatalf("restored %d without a CPU topology, want 0", n)
	}
}

func resourcesWithCpuset(cpus string) *hooks.Resources { return &hooks.Resources{CpusetCpus: cpus} }
