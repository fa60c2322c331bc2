package cluster

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// TestNRIOverlay writes the kustomization the cluster applies in NRI mode
// and, where the cached kubectl is there, renders it with `kubectl
// kustomize` as `kubectl apply -k` does: deploy/nri's DaemonSet keeps its
// arguments but for the per-node paths, which name $(NODE_NAME) below this
// cluster's directories, runs on the pod network with the API server's
// address, and mounts those directories.
func TestNRIOverlay(t *testing.T) {
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	c := &Cluster{Dir: dir, NRI: true, HostIP: "192.0.2.7", APIServer: "https://127.0.0.1:6443"}
	for _, name := range []string{NodeA, NodeB} {
		c.Nodes = append(c.Nodes, &Node{Name: name, ContainerdDir: filepath.Join(dir, name, "c")})
	}
	overlay, err := c.writeNRIOverlay(root)
	if err != nil {
		t.Fatal(err)
	}
	if overlay != c.NRIOverlay() || c.NRIMetricsPort != 9316 {
		t.Errorf("overlay %s, metrics port %d; want %s and deploy/nri's 9316", overlay, c.NRIMetricsPort, c.NRIOverlay())
	}
	kubectl := filepath.Join(KubernetesBinDir(), Kubectl)
	if _, err := os.Stat(kubectl); err != nil {
		t.Skipf("no cached kubectl to render the kustomization with (%v): `cluster build` makes one", err)
	}
	out, err := exec.Command(kubectl, "kustomize", overlay).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl kustomize %s: %v: %s", overlay, err, out)
	}
	var ds *appsv1.DaemonSet
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(string(out)), 4096)
	for {
		var obj map[string]any
		if err := dec.Decode(&obj); err != nil {
			break
		}
		if obj["kind"] != "DaemonSet" {
			continue
		}
		b, _ := yaml.Marshal(obj)
		var d appsv1.DaemonSet
		if err := yaml.UnmarshalStrict(b, &d); err != nil {
			t.Fatal(err)
		}
		if d.Name == NRIDaemonSet {
			ds = &d
		}
	}
	if ds == nil {
		t.Fatalf("the kustomization renders no DaemonSet %s:\n%s", NRIDaemonSet, out)
	}
	spec := ds.Spec.Template.Spec
	ctr := spec.Containers[0]
	for _, want := range []string{
		"--nri-socket=/var/run/nri/$(NODE_NAME)/nri.sock",
		"--runtime-endpoint=unix:///run/containerd/$(NODE_NAME)/c/containerd.sock",
		"--state-dir=/var/lib/tandem/$(NODE_NAME)",
		"--kubelet-cgroup-root=/$(NODE_NAME)",
		"--metrics-addr=0.0.0.0:9316",
		"--cgroup-root=/sys/fs/cgroup", // deploy/nri's, unchanged
	} {
		if !slices.Contains(ctr.Args, want) {
			t.Errorf("args %q lack %s", ctr.Args, want)
		}
	}
	if spec.HostNetwork {
		t.Error("hostNetwork is on: both nodes' plugins would listen on one network namespace")
	}
	env := map[string]string{}
	for _, e := range ctr.Env {
		env[e.Name] = e.Value
	}
	if env["KUBERNETES_SERVICE_HOST"] != "192.0.2.7" || env["KUBERNETES_SERVICE_PORT"] != "6443" || !slices.ContainsFunc(ctr.Env, func(e corev1.EnvVar) bool { return e.Name == "NODE_NAME" }) {
		t.Errorf("env %+v: want the API server at 192.0.2.7:6443, and deploy/nri's NODE_NAME", ctr.Env)
	}
	for name, p := range map[string]*corev1.Probe{"readiness": ctr.ReadinessProbe, "liveness": ctr.LivenessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Host != "" {
			t.Errorf("%s probe %+v: want deploy/nri's, on the pod's address", name, p)
		}
	}
	hostPaths := map[string]string{}
	for _, v := range spec.Volumes {
		if v.HostPath != nil {
			hostPaths[v.Name] = v.HostPath.Path
		}
	}
	for vol, want := range map[string]string{"nri": filepath.Join(dir, "nri"), "containerd": dir, "state": filepath.Join(dir, "nri-state"), "sys": "/sys"} {
		if hostPaths[vol] != want {
			t.Errorf("volume %s is the host's %q, want %q (volumes %v)", vol, hostPaths[vol], want, hostPaths)
		}
	}
}
