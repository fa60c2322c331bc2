package extender

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"log"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2/ktesting"
	schedconfigv1 "k8s.io/kube-scheduler/config/v1"
	"sigs.k8s.io/yaml"
)

const manifestDir = "../deploy/extender"

// manifests are the objects of deploy/extender that the extender depends on.
type manifests struct {
	ds       *appsv1.DaemonSet
	cm       *corev1.ConfigMap
	role     *rbacv1.ClusterRole
	schedCfg *schedconfigv1.KubeSchedulerConfiguration
}

// readManifests decodes every document in deploy/extender strictly, so a misspelt field fails
// here instead of being dropped by the apiserver.
func readManifests(t *testing.T) manifests {
	t.Helper()
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
		m         manifests
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
				m.ds = o
			case *corev1.ConfigMap:
				m.cm = o
			case *rbacv1.ClusterRole:
				m.role = o
			case *schedconfigv1.KubeSchedulerConfiguration:
				m.schedCfg = o
			}
		}
	}
	if m.ds == nil || m.cm == nil || m.role == nil || m.schedCfg == nil {
		t.Fatalf("missing manifests among %d documents: daemonset %v configmap %v clusterrole %v scheduler config %v",
			documents, m.ds != nil, m.cm != nil, m.role != nil, m.schedCfg != nil)
	}
	return m
}

// TestManifests checks that the pieces of deploy/extender agree with each other and with the
// code: ports, paths, resource names, the config file, the TLS files.
func TestManifests(t *testing.T) {
	t.Parallel()
	m := readManifests(t)
	ds, cm, role, schedCfg := m.ds, m.cm, m.role, m.schedCfg

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
	// kube-scheduler calls the HTTPS listener; kubelet probes the plain one, since a probe
	// presents no client certificate.
	const listen, metricsListen = "127.0.0.1:10262", "127.0.0.1:10263"
	if !contains(ctr.Args, "--listen="+listen) || ctr.Ports[0].ContainerPort != 10262 {
		t.Errorf("args %v and container port %d disagree with %s", ctr.Args, ctr.Ports[0].ContainerPort, listen)
	}
	for _, p := range []*corev1.Probe{ctr.ReadinessProbe, ctr.LivenessProbe} {
		if !contains(ctr.Args, "--metrics-listen="+metricsListen) || p.HTTPGet.Host != "127.0.0.1" || p.HTTPGet.Port.IntValue() != 10263 ||
			p.HTTPGet.Scheme == corev1.URISchemeHTTPS {
			t.Errorf("args %v and probe %s://%s:%s disagree with the plain listener %s", ctr.Args, p.HTTPGet.Scheme, p.HTTPGet.Host, p.HTTPGet.Port.String(), metricsListen)
		}
	}
	tls := shippedTLSFiles(t, ds)
	if tls.CertFile == "" || tls.KeyFile == "" || tls.ClientCAFile == "" {
		t.Errorf("args %v: want HTTPS with client certificates from the tls Secret", ctr.Args)
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
	readsReservations := false
	for _, r := range role.Rules {
		readsReservations = readsReservations || contains(r.APIGroups, "scheduling.koordinator.sh") && contains(r.Resources, "reservations") &&
			contains(r.Verbs, "get") && contains(r.Verbs, "list") && contains(r.Verbs, "watch")
	}
	if !readsReservations {
		t.Errorf("ClusterRole %+v does not let the informer list and watch reservations.scheduling.koordinator.sh", role.Rules)
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
	if e.URLPrefix != "https://"+listen || "/"+e.FilterVerb != FilterPath || "/"+e.PrioritizeVerb != PrioritizePath {
		t.Errorf("extender %s %s %s does not reach the served paths at https://"+listen, e.URLPrefix, e.FilterVerb, e.PrioritizeVerb)
	}
	if !e.EnableHTTPS || e.TLSConfig == nil || e.TLSConfig.Insecure || e.TLSConfig.CAFile == "" || e.TLSConfig.CertFile == "" || e.TLSConfig.KeyFile == "" {
		t.Errorf("extender tlsConfig %+v: want HTTPS, the extender's CA and a client certificate", e.TLSConfig)
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

// shippedTLSFiles returns the TLS files the DaemonSet's arguments name, each of which must be in
// a mounted Secret volume.
func shippedTLSFiles(t *testing.T, ds *appsv1.DaemonSet) TLSFiles {
	t.Helper()
	spec := ds.Spec.Template.Spec
	var files TLSFiles
	for _, a := range spec.Containers[0].Args {
		for flag, into := range map[string]*string{"--tls-cert-file=": &files.CertFile, "--tls-private-key-file=": &files.KeyFile, "--tls-client-ca-file=": &files.ClientCAFile} {
			if v, ok := strings.CutPrefix(a, flag); ok {
				*into = v
			}
		}
	}
	for _, f := range []string{files.CertFile, files.KeyFile, files.ClientCAFile} {
		var inSecret bool
		for _, vm := range spec.Containers[0].VolumeMounts {
			for _, v := range spec.Volumes {
				if v.Name == vm.Name && v.Secret != nil && filepath.Dir(f) == vm.MountPath {
					inSecret = true
				}
			}
		}
		if f != "" && !inSecret {
			t.Errorf("%s is not in a mounted Secret", f)
		}
	}
	return files
}

// TestShippedTLS runs deploy/'s TLS setup: the extender serving the files its DaemonSet names,
// and kube-scheduler's side built from deploy/'s tlsConfig the way kube-scheduler builds its
// extender client (client-go's rest.TLSConfigFor), each file in a temporary directory.
func TestShippedTLS(t *testing.T) {
	t.Parallel()
	_, ctx := ktesting.NewTestContext(t)
	m := readManifests(t)
	dir := t.TempDir()
	put := func(side, path string, data []byte) string {
		t.Helper()
		p := filepath.Join(dir, side, filepath.Base(path))
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	serverCA, clientCA := newTestCA(t, "tandem-extender-ca"), newTestCA(t, "tandem-extender-client-ca")
	crt, key := serverCA.issue(t, 2, "tandem-extender", true)
	files := shippedTLSFiles(t, m.ds)
	files = TLSFiles{CertFile: put("server", files.CertFile, crt), KeyFile: put("server", files.KeyFile, key), ClientCAFile: put("server", files.ClientCAFile, clientCA.pem)}
	cfg, err := NewTLSConfig(ctx, files)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) }), ErrorLog: log.New(io.Discard, "", 0)}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(func() { _ = srv.Close() })

	e := m.schedCfg.Extenders[0]
	clientCrt, clientKey := clientCA.issue(t, 3, "kube-scheduler", false)
	rc := rest.TLSClientConfig{
		ServerName: e.TLSConfig.ServerName,
		CAFile:     put("client", e.TLSConfig.CAFile, serverCA.pem),
		CertFile:   put("client", e.TLSConfig.CertFile, clientCrt),
		KeyFile:    put("client", e.TLSConfig.KeyFile, clientKey),
	}
	get := func(rc rest.TLSClientConfig) error {
		tc, err := rest.TLSConfigFor(&rest.Config{TLSClientConfig: rc})
		if err != nil {
			t.Fatal(err)
		}
		client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: tc}}
		resp, err := client.Get("https://" + lis.Addr().String() + HealthzPath)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return errors.New(resp.Status)
		}
		return nil
	}
	if err := get(rc); err != nil {
		t.Errorf("kube-scheduler with deploy/'s tlsConfig: %v", err)
	}
	rc.CertFile, rc.KeyFile = "", ""
	if err := get(rc); err == nil {
		t.Error("a client without a certificate was served")
	}
}

// TestPlainHTTPComponent applies deploy/plain-http's patch to the DaemonSet as kustomize does (a
// strategic merge patch) and checks that the result serves plain HTTP, without the Secret. It is a
// component, used beside deploy/ from a kustomization of the operator's: kustomize refuses an overlay of
// ../ inside deploy/ ("cycle detected").
func TestPlainHTTPComponent(t *testing.T) {
	t.Parallel()
	const overlay = "../deploy/plain-http"
	var k struct {
		APIVersion string   `json:"apiVersion"`
		Kind       string   `json:"kind"`
		Resources  []string `json:"resources"`
		Patches    []struct {
			Path string `json:"path"`
		} `json:"patches"`
	}
	b, err := os.ReadFile(filepath.Join(overlay, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(b, &k); err != nil {
		t.Fatal(err)
	}
	if k.APIVersion != "kustomize.config.k8s.io/v1alpha1" || k.Kind != "Component" || len(k.Resources) != 0 || len(k.Patches) != 1 {
		t.Fatalf("plain-http %+v: want a kustomize Component with no resources and one patch", k)
	}
	patch, err := os.ReadFile(filepath.Join(overlay, k.Patches[0].Path))
	if err != nil {
		t.Fatal(err)
	}
	patchJSON, err := yaml.YAMLToJSON(patch)
	if err != nil {
		t.Fatal(err)
	}
	ds := readManifests(t).ds
	original, err := json.Marshal(ds)
	if err != nil {
		t.Fatal(err)
	}
	patched, err := strategicpatch.StrategicMergePatch(original, patchJSON, appsv1.DaemonSet{})
	if err != nil {
		t.Fatal(err)
	}
	var out appsv1.DaemonSet
	dec := json.NewDecoder(bytes.NewReader(patched))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&out); err != nil {
		t.Fatal(err)
	}
	spec := out.Spec.Template.Spec
	ctr := spec.Containers[0]
	if files := shippedTLSFiles(t, &out); files != (TLSFiles{}) || !contains(ctr.Args, "--listen=127.0.0.1:10262") ||
		!contains(ctr.Args, "--metrics-listen=127.0.0.1:10263") || !contains(ctr.Args, "--config=/etc/tandem/extender.yaml") {
		t.Errorf("patched args %v: want the shipped ones without the TLS files", ctr.Args)
	}
	for _, v := range spec.Volumes {
		if v.Secret != nil {
			t.Errorf("patched DaemonSet still mounts Secret %s", v.Secret.SecretName)
		}
	}
	if len(spec.Volumes) != 1 || len(ctr.VolumeMounts) != 1 || ctr.VolumeMounts[0].Name != spec.Volumes[0].Name {
		t.Errorf("patched volumes %+v, mounts %+v: want the config only", spec.Volumes, ctr.VolumeMounts)
	}
	if len(ctr.Env) == 0 || ctr.ReadinessProbe == nil || out.Name != ds.Name || out.Namespace != ds.Namespace {
		t.Errorf("the patch lost more than TLS: %+v", out)
	}
}
