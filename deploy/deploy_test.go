package deploy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/klog/v2"
	schedulerv1 "k8s.io/kube-scheduler/config/v1"
	"sigs.k8s.io/yaml"

	"github.com/tandemkit/tandem/config/slo"
)

// kustomization is the part of kustomize's Kustomization this directory
// uses; decoding it strictly catches a misspelt field.
type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Resources  []string `json:"resources"`
}

func readKustomization(t *testing.T) kustomization {
	t.Helper()
	b, err := os.ReadFile("kustomization.yaml")
	if err != nil {
		t.Fatalf("read kustomization.yaml: %v", err)
	}
	var k kustomization
	if err := yaml.UnmarshalStrict(b, &k); err != nil {
		t.Fatalf("kustomization.yaml: %v", err)
	}
	return k
}

type decoded struct {
	kind string
	obj  runtime.Object
}

// decodeAll decodes every YAML document of path strictly with client-go's
// scheme: an unknown kind or field fails.
func decodeAll(t *testing.T, path string) []decoded {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	defer f.Close()
	dec := serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer()
	r := utilyaml.NewYAMLReader(bufio.NewReader(f))
	var objs []decoded
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: read document: %v", path, err)
		}
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		obj, gvk, err := dec.Decode(doc, nil, nil)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		objs = append(objs, decoded{kind: gvk.Kind, obj: obj})
	}
	if len(objs) == 0 {
		t.Fatalf("%s holds no object", path)
	}
	return objs
}

func stripComments(doc []byte) []byte {
	var out bytes.Buffer
	for _, l := range bytes.Split(doc, []byte("\n")) {
		if !bytes.HasPrefix(bytes.TrimSpace(l), []byte("#")) {
			out.Write(l)
			out.WriteByte('\n')
		}
	}
	return out.Bytes()
}

// notInstalled are the manifests of this directory that `kubectl apply -k`
// must not apply, each with the reason.
var notInstalled = map[string]string{
	"slo-controller-config.yaml":          "an example; a Koordinator user's own object must not be overwritten",
	"extender/kube-scheduler-config.yaml": "kube-scheduler's --config file, not an API object",
}

// TestKustomizationListsEveryManifest: every manifest of this directory and
// of extender/ is installed by `kubectl apply -k`, except notInstalled, and
// everything it lists exists.
func TestKustomizationListsEveryManifest(t *testing.T) {
	k := readKustomization(t)
	if k.APIVersion != "kustomize.config.k8s.io/v1beta1" || k.Kind != "Kustomization" {
		t.Errorf("kustomization.yaml is %s %s, want kustomize.config.k8s.io/v1beta1 Kustomization", k.APIVersion, k.Kind)
	}
	var manifests []string
	for _, pattern := range []string{"*.yaml", "extender/*.yaml"} {
		m, err := filepath.Glob(pattern)
		if err != nil {
			t.Fatal(err)
		}
		manifests = append(manifests, m...)
	}
	for name := range notInstalled {
		if !slices.Contains(manifests, name) {
			t.Errorf("%s is gone: update notInstalled", name)
		}
	}
	manifests = slices.DeleteFunc(manifests, func(s string) bool {
		_, skip := notInstalled[s]
		return s == "kustomization.yaml" || skip
	})
	slices.Sort(manifests)
	listed := slices.Sorted(slices.Values(k.Resources))
	if !slices.Equal(manifests, listed) {
		t.Errorf("kustomization.yaml lists %v, want %v (every manifest but %v)", listed, manifests, slices.Sorted(maps.Keys(notInstalled)))
	}
}

// makefileVersion returns VERSION from the Makefile, the tag `make images`
// gives the images.
func makefileVersion(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VERSION"); ok {
			if v, ok := strings.CutPrefix(strings.TrimSpace(v), "?="); ok {
				return strings.TrimSpace(v)
			}
		}
	}
	t.Fatal("the Makefile sets no VERSION ?= ...")
	return ""
}

// TestManifestsDecodeStrictly decodes each resource of the kustomization
// with the client-go scheme and checks the objects Tandem depends on.
func TestManifestsDecodeStrictly(t *testing.T) {
	byKind := map[string][]runtime.Object{}
	for _, res := range readKustomization(t).Resources {
		for _, d := range decodeAll(t, res) {
			byKind[d.kind] = append(byKind[d.kind], d.obj)
		}
	}

	t.Run("PriorityClasses", func(t *testing.T) {
		want := map[string]int32{"koord-prod": 9000, "koord-mid": 7000, "koord-batch": 5000, "koord-free": 3000}
		got := map[string]int32{}
		for _, obj := range byKind["PriorityClass"] {
			pc := obj.(*schedulingv1.PriorityClass)
			got[pc.Name] = pc.Value
			if pc.GlobalDefault {
				t.Errorf("PriorityClass %s is the global default; pods without a class must keep priority 0", pc.Name)
			}
		}
		for name, v := range want {
			if got[name] != v {
				t.Errorf("PriorityClass %s has value %d, want %d (Koordinator's)", name, got[name], v)
			}
		}
		if len(got) != len(want) {
			t.Errorf("PriorityClasses %v, want exactly %v", got, want)
		}
	})

	t.Run("Namespaces", func(t *testing.T) {
		var names []string
		for _, obj := range byKind["Namespace"] {
			ns := obj.(*corev1.Namespace)
			names = append(names, ns.Name)
			// Uninstalling by this label must leave Koordinator's namespace.
			if ns.Labels["app.kubernetes.io/part-of"] == "tandem" {
				t.Errorf("Namespace %s is labelled part-of tandem: uninstalling Tandem would delete it", ns.Name)
			}
		}
		if !slices.Equal(names, []string{"koordinator-system"}) {
			t.Errorf("Namespaces %v, want [koordinator-system]: the node config Role lives there", names)
		}
	})

	// Nodes act with their kubelet credentials; the Node authorizer gives
	// them their own node's objects. The only RBAC they need: read the
	// slo-controller-config ConfigMap, and nothing else.
	t.Run("NodeConfigRole", func(t *testing.T) {
		if sas := byKind["ServiceAccount"]; len(sas) != 1 || sas[0].(*corev1.ServiceAccount).Name != "tandem-extender" {
			t.Errorf("ServiceAccounts %v, want only tandem-extender: the node agent uses the node's credentials", sas)
		}
		roles := map[string]*rbacv1.Role{}
		for _, obj := range byKind["Role"] {
			r := obj.(*rbacv1.Role)
			roles[r.Namespace+"/"+r.Name] = r
		}
		var role *rbacv1.Role
		for _, obj := range byKind["RoleBinding"] {
			b := obj.(*rbacv1.RoleBinding)
			for _, s := range b.Subjects {
				if s.Kind == rbacv1.GroupKind && s.Name == "system:nodes" && b.RoleRef.Kind == "Role" {
					role = roles[b.Namespace+"/"+b.RoleRef.Name]
				}
			}
		}
		if role == nil {
			t.Fatal("no RoleBinding binds group system:nodes to a Role of this directory")
		}
		if role.Namespace != "koordinator-system" {
			t.Errorf("Role %s is in namespace %s, want koordinator-system", role.Name, role.Namespace)
		}
		want := []rbacv1.PolicyRule{{
			APIGroups:     []string{""},
			Resources:     []string{"configmaps"},
			ResourceNames: []string{"slo-controller-config"},
			Verbs:         []string{"get", "list", "watch"},
		}}
		if !reflect.DeepEqual(role.Rules, want) {
			t.Errorf("Role %s/%s rules %+v, want exactly %+v", role.Namespace, role.Name, role.Rules, want)
		}
		if len(byKind["ClusterRoleBinding"]) != 1 {
			t.Errorf("%d ClusterRoleBindings, want 1 (tandem-extender's)", len(byKind["ClusterRoleBinding"]))
		}
	})

	t.Run("Extender", func(t *testing.T) {
		if len(byKind["DaemonSet"]) != 1 {
			t.Fatalf("%d DaemonSets, want tandem-extender's", len(byKind["DaemonSet"]))
		}
		for _, kind := range []string{"Deployment", "Service", "PodDisruptionBudget"} {
			if len(byKind[kind]) != 0 {
				t.Errorf("a %s is installed: the extender is a DaemonSet reached on loopback", kind)
			}
		}
		ds := byKind["DaemonSet"][0].(*appsv1.DaemonSet)
		spec := ds.Spec.Template.Spec
		if ds.Namespace != "kube-system" {
			t.Errorf("DaemonSet %s in %s, want kube-system", ds.Name, ds.Namespace)
		}
		if !spec.HostNetwork {
			t.Error("extender DaemonSet: hostNetwork is off; kube-scheduler reaches it at 127.0.0.1")
		}
		if v, ok := spec.NodeSelector["node-role.kubernetes.io/control-plane"]; !ok || v != "" || len(spec.NodeSelector) != 1 {
			t.Errorf("extender nodeSelector %v, want only node-role.kubernetes.io/control-plane: \"\"", spec.NodeSelector)
		}
		tolerates := slices.ContainsFunc(spec.Tolerations, func(tol corev1.Toleration) bool {
			return tol.ToleratesTaint(klog.Background(), &corev1.Taint{Key: "node-role.kubernetes.io/control-plane", Effect: corev1.TaintEffectNoSchedule}, false)
		})
		if !tolerates {
			t.Errorf("extender tolerations %+v do not tolerate the control-plane taint", spec.Tolerations)
		}
		if len(spec.Containers) != 1 {
			t.Fatalf("extender pod has %d containers, want 1", len(spec.Containers))
		}
		c := spec.Containers[0]
		if want := "ghcr.io/tandemkit/tandem-extender:" + makefileVersion(t); c.Image != want {
			t.Errorf("extender image %s, want %s (what make images builds)", c.Image, want)
		}
		if c.ImagePullPolicy != corev1.PullIfNotPresent {
			t.Errorf("extender imagePullPolicy %q, want IfNotPresent: the image is imported, not pulled", c.ImagePullPolicy)
		}
		if !slices.Contains(c.Args, "--listen=127.0.0.1:10262") || !slices.Contains(c.Args, "--metrics-listen=127.0.0.1:10263") {
			t.Errorf("extender args %v lack --listen=127.0.0.1:10262 and --metrics-listen=127.0.0.1:10263", c.Args)
		}
		// kubelet's probes present no client certificate: they use the plain listener.
		for name, p := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
			if p == nil || p.HTTPGet == nil || p.HTTPGet.Host != "127.0.0.1" || p.HTTPGet.Port.IntValue() != 10263 || p.HTTPGet.Scheme == corev1.URISchemeHTTPS {
				t.Errorf("extender %s probe %+v, want an HTTP GET on 127.0.0.1:10263", name, p)
			}
		}
		// HTTPS with client certificates, from a Secret the operator creates: no key is shipped.
		var secret string
		for _, v := range spec.Volumes {
			if v.Secret != nil {
				secret = v.Secret.SecretName
			}
		}
		if secret != "tandem-extender-tls" || !slices.Contains(c.Args, "--tls-client-ca-file=/etc/tandem/tls/ca.crt") {
			t.Errorf("extender volumes %+v and args %v: want HTTPS and client certificates from Secret tandem-extender-tls", spec.Volumes, c.Args)
		}
		if len(byKind["Secret"]) != 0 {
			t.Error("a Secret is installed: the extender's keys are the operator's to create")
		}
		psc, sc := spec.SecurityContext, c.SecurityContext
		if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser != 65532 {
			t.Errorf("extender pod securityContext %+v, want runAsNonRoot as 65532", psc)
		}
		if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
			sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.Capabilities == nil ||
			!slices.Contains(sc.Capabilities.Drop, "ALL") {
			t.Errorf("extender container securityContext %+v, want a read-only root, no privilege escalation, all capabilities dropped", sc)
		}

		// What the pod refers to is installed alongside it.
		var cm, sa bool
		for _, obj := range byKind["ConfigMap"] {
			cm = cm || obj.(*corev1.ConfigMap).Name == spec.Volumes[0].ConfigMap.Name
		}
		for _, obj := range byKind["ServiceAccount"] {
			s := obj.(*corev1.ServiceAccount)
			sa = sa || (s.Name == spec.ServiceAccountName && s.Namespace == ds.Namespace)
		}
		if !cm || !sa {
			t.Errorf("extender's ConfigMap installed: %v, its ServiceAccount %s: %v", cm, spec.ServiceAccountName, sa)
		}
		var role *rbacv1.ClusterRole
		for _, obj := range byKind["ClusterRoleBinding"] {
			b := obj.(*rbacv1.ClusterRoleBinding)
			for _, s := range b.Subjects {
				if s.Kind == rbacv1.ServiceAccountKind && s.Name == spec.ServiceAccountName && s.Namespace == ds.Namespace {
					for _, obj := range byKind["ClusterRole"] {
						if r := obj.(*rbacv1.ClusterRole); r.Name == b.RoleRef.Name {
							role = r
						}
					}
				}
			}
		}
		if role == nil {
			t.Fatal("no ClusterRoleBinding gives the extender's ServiceAccount a ClusterRole of this directory")
		}
		for _, r := range []string{"nodes", "pods"} {
			for _, verb := range []string{"get", "list", "watch"} {
				if !allows(role.Rules, "", r, verb) {
					t.Errorf("ClusterRole %s does not allow %s %s", role.Name, verb, r)
				}
			}
			for _, verb := range []string{"create", "update", "patch", "delete"} {
				if allows(role.Rules, "", r, verb) {
					t.Errorf("ClusterRole %s allows %s %s: the extender only reads", role.Name, verb, r)
				}
			}
		}
	})
}

// TestSchedulerConfig decodes kube-scheduler's --config file strictly with
// kube-scheduler's own v1 types and checks it calls the extender where the
// DaemonSet listens, for Koordinator's scheduler name too. (e2e/cluster
// also validates it the way kube-scheduler does, and runs it.)
func TestSchedulerConfig(t *testing.T) {
	b, err := os.ReadFile("extender/kube-scheduler-config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cfg schedulerv1.KubeSchedulerConfiguration
	if err := yaml.UnmarshalStrict(b, &cfg); err != nil {
		t.Fatalf("kube-scheduler-config.yaml: %v", err)
	}
	if cfg.APIVersion != schedulerv1.SchemeGroupVersion.String() || cfg.Kind != "KubeSchedulerConfiguration" {
		t.Errorf("kube-scheduler-config.yaml is %s %s", cfg.APIVersion, cfg.Kind)
	}
	var names []string
	for _, p := range cfg.Profiles {
		if p.SchedulerName != nil {
			names = append(names, *p.SchedulerName)
		}
	}
	if !slices.Equal(names, []string{"default-scheduler", "koord-scheduler"}) {
		t.Errorf("profiles %v, want default-scheduler and koord-scheduler (seed 000's Deployments name it)", names)
	}
	if len(cfg.Extenders) != 1 {
		t.Fatalf("%d extenders, want tandem-extender", len(cfg.Extenders))
	}
	e := cfg.Extenders[0]
	if e.URLPrefix != "https://127.0.0.1:10262" || e.FilterVerb != "filter" || e.PrioritizeVerb != "prioritize" {
		t.Errorf("extender %s filter=%q prioritize=%q, want https://127.0.0.1:10262, filter, prioritize", e.URLPrefix, e.FilterVerb, e.PrioritizeVerb)
	}
	if e.TLSConfig == nil || e.TLSConfig.CertFile == "" || e.TLSConfig.KeyFile == "" || e.TLSConfig.CAFile == "" || e.TLSConfig.Insecure {
		t.Errorf("extender tlsConfig %+v, want a client certificate and the extender's CA", e.TLSConfig)
	}
	if !e.NodeCacheCapable || !e.Ignorable {
		t.Errorf("extender nodeCacheCapable=%v ignorable=%v, want both", e.NodeCacheCapable, e.Ignorable)
	}
}

// TestExampleSLOConfig: the example ConfigMap is Koordinator's object with
// colocation on and suppression present but off, and each section decodes
// strictly into Tandem's types.
func TestExampleSLOConfig(t *testing.T) {
	objs := decodeAll(t, "slo-controller-config.yaml")
	if len(objs) != 1 {
		t.Fatalf("slo-controller-config.yaml holds %d objects, want 1", len(objs))
	}
	cm, ok := objs[0].obj.(*corev1.ConfigMap)
	if !ok || cm.Namespace != "koordinator-system" || cm.Name != "slo-controller-config" {
		t.Fatalf("slo-controller-config.yaml holds %s %v, want ConfigMap koordinator-system/slo-controller-config", objs[0].kind, objs[0].obj)
	}
	// Parse decodes every section strictly: a key that is not Tandem's refuses its section.
	cfg := slo.Parse(cm.Data)
	if refused := cfg.Refused(); len(refused) != 0 {
		t.Fatalf("refused: %v", refused)
	}
	r, err := cfg.ForNode(nil)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Colocation.Enable {
		t.Errorf("%s enable = false, want true", slo.ColocationConfigKey)
	}
	var thr struct {
		ClusterStrategy map[string]any `json:"clusterStrategy"`
	}
	if err := json.Unmarshal([]byte(cm.Data[slo.ResourceThresholdConfigKey]), &thr); err != nil {
		t.Fatal(err)
	}
	if enable, ok := thr.ClusterStrategy["enable"]; !ok || enable != false || r.ResourceThreshold.Enable {
		t.Errorf("%s clusterStrategy.enable present and false, got %+v", slo.ResourceThresholdConfigKey, thr.ClusterStrategy)
	}
	if len(cm.Data) != 2 {
		t.Errorf("keys %v, want only %s and %s", slices.Sorted(maps.Keys(cm.Data)), slo.ColocationConfigKey, slo.ResourceThresholdConfigKey)
	}
}

func allows(rules []rbacv1.PolicyRule, group, resource, verb string) bool {
	for _, rule := range rules {
		if (slices.Contains(rule.APIGroups, group) || slices.Contains(rule.APIGroups, "*")) &&
			(slices.Contains(rule.Resources, resource) || slices.Contains(rule.Resources, "*")) &&
			(slices.Contains(rule.Verbs, verb) || slices.Contains(rule.Verbs, "*")) {
			return true
		}
	}
	return false
}

// unitDirectives reads a systemd unit into section -> key -> values.
func unitDirectives(t *testing.T, path string) map[string]map[string][]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	out := map[string]map[string][]string{}
	section := ""
	var cont strings.Builder
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if cont.Len() > 0 || strings.HasSuffix(line, `\`) {
			cont.WriteString(strings.TrimSuffix(line, `\`) + " ")
			if strings.HasSuffix(line, `\`) {
				continue
			}
			line = cont.String()
			cont.Reset()
		}
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = strings.Trim(line, "[]")
			if out[section] == nil {
				out[section] = map[string][]string{}
			}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" {
				t.Fatalf("%s: malformed line %q", path, line)
			}
			out[section][strings.TrimSpace(k)] = append(out[section][strings.TrimSpace(k)], strings.TrimSpace(v))
		}
	}
	return out
}

func hasWord(values []string, word string) bool {
	for _, v := range values {
		if slices.Contains(strings.Fields(v), word) {
			return true
		}
	}
	return false
}

// TestNodeFiles checks the systemd unit, kubelet's systemd drop-in and the
// KubeletConfiguration drop-in agree: the proxy starts after containerd and
// before kubelet, restarts always, and listens where kubelet looks.
func TestNodeFiles(t *testing.T) {
	const endpoint = NodeRuntimeEndpoint
	unit := unitDirectives(t, ProxyUnit)
	tests := []struct {
		section, key, word string
	}{
		{"Unit", "After", "containerd.service"},
		{"Unit", "Before", "kubelet.service"},
		{"Service", "Restart", "always"},
		{"Install", "WantedBy", "multi-user.target"},
		{"Install", "WantedBy", "kubelet.service"},
	}
	for _, tc := range tests {
		if !hasWord(unit[tc.section][tc.key], tc.word) {
			t.Errorf("tandem-proxy.service: [%s] %s= lacks %s (has %q)", tc.section, tc.key, tc.word, unit[tc.section][tc.key])
		}
	}
	exec := unit["Service"]["ExecStart"]
	if len(exec) != 1 {
		t.Fatalf("tandem-proxy.service has %d ExecStart= lines, want 1", len(exec))
	}
	args := strings.Fields(exec[0])
	flags := map[string]string{}
	for _, a := range args[1:] {
		k, v, _ := strings.Cut(a, "=")
		flags[k] = v
	}
	// Enabling must not make kubelet's lifetime follow the proxy's.
	if unit["Install"]["RequiredBy"] != nil {
		t.Errorf("tandem-proxy.service: [Install] RequiredBy=%q; a proxy restart would restart kubelet", unit["Install"]["RequiredBy"])
	}
	for _, f := range []string{"--listen", "--runtime-endpoint", "--kubeconfig", "--kubelet-cgroup-root", "--state-dir", "--metrics-addr", "--hooks-dir", "--cgroup-root"} {
		if _, ok := flags[f]; !ok {
			t.Errorf("tandem-proxy.service: ExecStart does not spell out %s", f)
		}
	}
	if flags["--kubeconfig"] != "/etc/kubernetes/kubelet.conf" {
		t.Errorf("tandem-proxy.service: --kubeconfig=%s, want the node's kubelet credentials /etc/kubernetes/kubelet.conf", flags["--kubeconfig"])
	}
	if "unix://"+flags["--listen"] != endpoint {
		t.Errorf("tandem-proxy.service listens on %q, kubelet is pointed at %s", flags["--listen"], endpoint)
	}

	dropIn := unitDirectives(t, "systemd/kubelet.service.d/10-tandem-proxy.conf")
	if !hasWord(dropIn["Unit"]["After"], "tandem-proxy.service") {
		t.Errorf("kubelet drop-in: [Unit] After= lacks tandem-proxy.service (has %q)", dropIn["Unit"]["After"])
	}
	// Requires= would restart kubelet with every proxy restart.
	if hasWord(dropIn["Unit"]["Requires"], "tandem-proxy.service") || hasWord(dropIn["Unit"]["BindsTo"], "tandem-proxy.service") {
		t.Error("kubelet drop-in ties kubelet's lifetime to the proxy's; use Wants=")
	}

	b, err := os.ReadFile("kubelet/50-tandem-runtime.conf")
	if err != nil {
		t.Fatal(err)
	}
	var kc struct {
		APIVersion               string `json:"apiVersion"`
		Kind                     string `json:"kind"`
		ContainerRuntimeEndpoint string `json:"containerRuntimeEndpoint"`
		ImageServiceEndpoint     string `json:"imageServiceEndpoint"`
	}
	// Strict against the fields used here; e2e/cluster decodes it strictly
	// with kubelet's own types and runs kubelet with it.
	if err := yaml.UnmarshalStrict(b, &kc); err != nil {
		t.Fatalf("kubelet/50-tandem-runtime.conf: %v", err)
	}
	if kc.APIVersion != "kubelet.config.k8s.io/v1beta1" || kc.Kind != "KubeletConfiguration" {
		t.Errorf("kubelet drop-in is %s %s, want kubelet.config.k8s.io/v1beta1 KubeletConfiguration", kc.APIVersion, kc.Kind)
	}
	if kc.ContainerRuntimeEndpoint != endpoint || kc.ImageServiceEndpoint != endpoint {
		t.Errorf("kubelet drop-in points at %q / %q, want %s for both", kc.ContainerRuntimeEndpoint, kc.ImageServiceEndpoint, endpoint)
	}
}

// TestNodeFilesEmbedded: what tandemctl carries is what this directory holds.
func TestNodeFilesEmbedded(t *testing.T) {
	for _, name := range []string{ProxyUnit, KubeletUnitDropIn, KubeletConfigDropIn} {
		want, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		got, err := fs.ReadFile(NodeFiles(), name)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("NodeFiles %s = %d bytes, %v; want the %d bytes of the file", name, len(got), err, len(want))
		}
	}
}
