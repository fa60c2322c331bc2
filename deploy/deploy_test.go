package deploy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"
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

// TestKustomizationListsEveryManifest: every manifest in this directory is
// installed by `kubectl apply -k`, and everything it lists exists.
func TestKustomizationListsEveryManifest(t *testing.T) {
	k := readKustomization(t)
	if k.APIVersion != "kustomize.config.k8s.io/v1beta1" || k.Kind != "Kustomization" {
		t.Errorf("kustomization.yaml is %s %s, want kustomize.config.k8s.io/v1beta1 Kustomization", k.APIVersion, k.Kind)
	}
	manifests, err := filepath.Glob("*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	manifests = slices.DeleteFunc(manifests, func(s string) bool { return s == "kustomization.yaml" })
	slices.Sort(manifests)
	listed := slices.Sorted(slices.Values(k.Resources))
	if !slices.Equal(manifests, listed) {
		t.Errorf("kustomization.yaml lists %v, the directory holds %v", listed, manifests)
	}
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

	t.Run("ServiceAccount", func(t *testing.T) {
		var found bool
		for _, obj := range byKind["ServiceAccount"] {
			sa := obj.(*corev1.ServiceAccount)
			if sa.Name == "tandem-node" && sa.Namespace == "tandem-system" {
				found = true
			}
		}
		if !found {
			t.Error("no ServiceAccount tandem-system/tandem-node")
		}
		var ns bool
		for _, obj := range byKind["Namespace"] {
			if obj.(*corev1.Namespace).Name == "tandem-system" {
				ns = true
			}
		}
		if !ns {
			t.Error("no Namespace tandem-system")
		}
	})

	t.Run("RBAC", func(t *testing.T) {
		roles := map[string]*rbacv1.ClusterRole{}
		for _, obj := range byKind["ClusterRole"] {
			r := obj.(*rbacv1.ClusterRole)
			roles[r.Name] = r
		}
		var role *rbacv1.ClusterRole
		for _, obj := range byKind["ClusterRoleBinding"] {
			b := obj.(*rbacv1.ClusterRoleBinding)
			for _, s := range b.Subjects {
				if s.Kind == rbacv1.ServiceAccountKind && s.Name == "tandem-node" && s.Namespace == "tandem-system" && b.RoleRef.Kind == "ClusterRole" {
					role = roles[b.RoleRef.Name]
				}
			}
		}
		if role == nil {
			t.Fatal("no ClusterRoleBinding binds tandem-system/tandem-node to a ClusterRole of this directory")
		}
		needs := []struct{ group, resource, verb string }{
			{"", "nodes", "get"}, {"", "nodes", "list"}, {"", "nodes", "watch"}, {"", "nodes", "patch"},
			{"", "nodes/status", "patch"},
			{"", "pods", "get"}, {"", "pods", "list"}, {"", "pods", "watch"},
			{"", "pods/eviction", "create"},
			{"", "events", "create"}, {"events.k8s.io", "events", "create"},
		}
		for _, n := range needs {
			if !allows(role, n.group, n.resource, n.verb) {
				t.Errorf("ClusterRole %s does not allow %s %s (group %q)", role.Name, n.verb, n.resource, n.group)
			}
		}
		// The agent must not be able to change pods or read secrets.
		for _, n := range []struct{ group, resource, verb string }{
			{"", "pods", "delete"}, {"", "pods", "update"}, {"", "secrets", "get"}, {"", "nodes", "delete"},
		} {
			if allows(role, n.group, n.resource, n.verb) {
				t.Errorf("ClusterRole %s allows %s %s, more than the node agent needs", role.Name, n.verb, n.resource)
			}
		}
	})
}

func allows(r *rbacv1.ClusterRole, group, resource, verb string) bool {
	for _, rule := range r.Rules {
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
	const endpoint = "unix:///var/run/tandem/tandem.sock"
	unit := unitDirectives(t, "systemd/tandem-proxy.service")
	tests := []struct {
		section, key, word string
	}{
		{"Unit", "After", "containerd.service"},
		{"Unit", "Before", "kubelet.service"},
		{"Service", "Restart", "always"},
		{"Install", "WantedBy", "multi-user.target"},
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
	for _, f := range []string{"--listen", "--runtime-endpoint", "--state-dir", "--metrics-addr", "--hooks-dir", "--cgroup-root"} {
		if _, ok := flags[f]; !ok {
			t.Errorf("tandem-proxy.service: ExecStart does not spell out %s", f)
		}
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
