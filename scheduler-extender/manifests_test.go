package extender

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/kubernetes/scheme"
	schedconfigv1 "k8s.io/kube-scheduler/config/v1"
	"sigs.k8s.io/yaml"
)

const manifestDir = "../deploy/extender"

// TestManifests decodes every document in deploy/extender strictly, so a misspelt field fails
// here instead of being dropped by the apiserver, and checks that the pieces agree with each
// other and with the code: ports, paths, resource names, the config file.
func TestManifests(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join(manifestDir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in %s: %v", manifestDir, err)
	}
	k8s := serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer()
	schedScheme := runtime.NewScheme()
	if err := schedconfigv1.AddToScheme(schedScheme); err != nil {
		t.Fatal(err)
	}
	sched := serializer.NewCodecFactory(schedScheme, serializer.EnableStrict).UniversalDeserializer()

	var (
		ds        *appsv1.DaemonSet
		cm        *corev1.ConfigMap
		role      *rbacv1.ClusterRole
		schedCfg  *schedconfigv1.KubeSchedulerConfiguration
		documents int
	)
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range bytes.Split(data, []byte("\n---\n")) {
			if len(bytes.TrimSpace(doc)) == 0 {
				continue
			}
			documents++
			decoder := k8s
			if bytes.Contains(doc, []byte("kind: KubeSchedulerConfiguration")) {
				decoder = sched
			}
			obj, _, err := decoder.Decode(doc, nil, nil)
			if err != nil {
				t.Errorf("%s document %d: %v", f, i, err)
				continue
			}
			switch o := obj.(type) {
			case *appsv1.DaemonSet:
				ds = o
			case *corev1.ConfigMap:
				cm = o
			case *rbacv1.ClusterRole:
				role = o
			case *schedconfigv1.KubeSchedulerConfiguration:
				schedCfg = o
			}
		}
	}
	if ds == nil || cm == nil || role == nil || schedCfg == nil {
		t.Fatalf("missing manifests among %d documents: daemonset %v configmap %v clusterrole %v scheduler config %v",
			documents, ds != nil, cm != nil, role != nil, schedCfg != nil)
	}

	// kube-scheduler calls the extender beside it over loopback: the DaemonSet must run where
	// kube-scheduler does, on the host's network, and listen where the scheduler config points.
	pod := ds.Spec.Template.Spec
	if !pod.HostNetwork {
		t.Error("daemonset: hostNetwork is off, so kube-scheduler cannot reach it on 127.0.0.1")
	}
	if _, ok := pod.NodeSelector["node-role.kubernetes.io/control-plane"]; !ok {
		t.Errorf("daemonset nodeSelector %v does not pick the control-plane nodes, where kube-scheduler runs", pod.NodeSelector)
	}
	ctr := pod.Containers[0]
	if ctr.ReadinessProbe.HTTPGet.Path != ReadyzPath || ctr.LivenessProbe.HTTPGet.Path != HealthzPath {
		t.Errorf("probes use %s and %s, want %s and %s", ctr.ReadinessProbe.HTTPGet.Path, ctr.LivenessProbe.HTTPGet.Path, ReadyzPath, HealthzPath)
	}
	const listen = "127.0.0.1:10262"
	if !contains(ctr.Args, "--listen="+listen) || ctr.ReadinessProbe.HTTPGet.Host != "127.0.0.1" ||
		ctr.ReadinessProbe.HTTPGet.Port.IntValue() != 10262 || ctr.Ports[0].ContainerPort != 10262 {
		t.Errorf("args %v, readiness probe %s:%s and container port %d disagree with %s",
			ctr.Args, ctr.ReadinessProbe.HTTPGet.Host, ctr.ReadinessProbe.HTTPGet.Port.String(), ctr.Ports[0].ContainerPort, listen)
	}

	var readsNodes, readsPods bool
	for _, r := range role.Rules {
		if contains(r.Verbs, "list") && contains(r.Verbs, "watch") {
			readsNodes = readsNodes || contains(r.Resources, "nodes")
			readsPods = readsPods || contains(r.Resources, "pods")
		}
	}
	if !readsNodes || !readsPods {
		t.Errorf("ClusterRole %+v does not let the informers list and watch nodes and pods", role.Rules)
	}

	// The mounted file must decode into Config with no unknown key and validate.
	raw, err := yaml.YAMLToJSON([]byte(cm.Data["extender.yaml"]))
	if err != nil {
		t.Fatal(err)
	}
	var cfg Config
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cfg); err != nil {
		t.Fatalf("configmap extender.yaml: %v", err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("configmap extender.yaml: %v", err)
	}
	if cfg != DefaultConfig() {
		t.Errorf("configmap says it writes out the defaults, but %+v != %+v", cfg, DefaultConfig())
	}

	if len(schedCfg.Extenders) != 1 {
		t.Fatalf("extenders = %+v", schedCfg.Extenders)
	}
	e := schedCfg.Extenders[0]
	if e.URLPrefix != "http://"+listen || "/"+e.FilterVerb != FilterPath || "/"+e.PrioritizeVerb != PrioritizePath {
		t.Errorf("extender %s %s %s does not reach the served paths at http://"+listen, e.URLPrefix, e.FilterVerb, e.PrioritizeVerb)
	}
	if !e.NodeCacheCapable || e.Weight <= 0 || e.HTTPTimeout.Duration <= 0 {
		t.Errorf("extender = %+v, want nodeCacheCapable, a positive weight and httpTimeout", e)
	}
	// kube-scheduler refuses kubernetes.io/ names in managedResources (they are not extended resource
	// names), so the shipped config must list none; the tier-2 test loads it with kube-scheduler's own
	// validation.
	for _, r := range e.ManagedResources {
		if strings.HasPrefix(r.Name, "kubernetes.io/") {
			t.Errorf("managed resource %s: kube-scheduler refuses kubernetes.io/ names there and would not start", r.Name)
		}
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
