package deploy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"maps"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	admissionregv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/klog/v2"
	schedulerv1 "k8s.io/kube-scheduler/config/v1"
	"sigs.k8s.io/yaml"

	"github.com/tandemkit/tandem/admission"
	schedv1alpha1 "github.com/tandemkit/tandem/apis/scheduling/v1alpha1"
	"github.com/tandemkit/tandem/config/slo"
	"github.com/tandemkit/tandem/hooks/policy/cpuset"
	"github.com/tandemkit/tandem/resource/batch"
	resqos "github.com/tandemkit/tandem/resource/qos"
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
	obj  runtime.Object // nil for a CustomResourceDefinition
	crd  *crd           // set for a CustomResourceDefinition only
}

// decodeAll decodes every YAML document of path strictly with client-go's
// scheme: an unknown kind or field fails. A CustomResourceDefinition, whose
// types client-go's scheme does not hold, is decoded strictly into crd.
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
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if tm.APIVersion == "apiextensions.k8s.io/v1" && tm.Kind == "CustomResourceDefinition" {
			var c crd
			if err := yaml.UnmarshalStrict(doc, &c); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			objs = append(objs, decoded{kind: tm.Kind, crd: &c})
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

// TestKustomizationListsEveryManifest: every manifest of this directory, of
// extender/, webhook/ and descheduler/ is installed by `kubectl apply -k`, except
// notInstalled, and everything it lists exists.
func TestKustomizationListsEveryManifest(t *testing.T) {
	k := readKustomization(t)
	if k.APIVersion != "kustomize.config.k8s.io/v1beta1" || k.Kind != "Kustomization" {
		t.Errorf("kustomization.yaml is %s %s, want kustomize.config.k8s.io/v1beta1 Kustomization", k.APIVersion, k.Kind)
	}
	var manifests []string
	for _, pattern := range []string{"*.yaml", "extender/*.yaml", "webhook/*.yaml", "descheduler/*.yaml"} {
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
	var crds []*crd
	for _, res := range readKustomization(t).Resources {
		for _, d := range decodeAll(t, res) {
			if d.crd != nil {
				crds = append(crds, d.crd)
				continue
			}
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
			t.Errorf("Namespaces %v, want [koordinator-system]: the node config Role and tandem-webhook live there", names)
		}
	})

	// Nodes act with their kubelet credentials; the Node authorizer gives
	// them their own node's objects. The only RBAC they need: read the
	// slo-controller-config ConfigMap, and nothing else.
	t.Run("NodeConfigRole", func(t *testing.T) {
		// One ServiceAccount per in-cluster component; none for the node agent.
		var sas []string
		for _, obj := range byKind["ServiceAccount"] {
			s := obj.(*corev1.ServiceAccount)
			sas = append(sas, s.Namespace+"/"+s.Name)
		}
		slices.Sort(sas)
		if want := []string{"koordinator-system/tandem-descheduler", "koordinator-system/tandem-webhook", "kube-system/tandem-extender"}; !slices.Equal(sas, want) {
			t.Errorf("ServiceAccounts %v, want exactly %v: the node agent uses the node's credentials", sas, want)
		}
		roles := map[string]*rbacv1.Role{}
		for _, obj := range byKind["Role"] {
			r := obj.(*rbacv1.Role)
			roles[r.Namespace+"/"+r.Name] = r
		}
		var role *rbacv1.Role
		nodeBindings := 0
		for _, obj := range byKind["RoleBinding"] {
			b := obj.(*rbacv1.RoleBinding)
			for _, s := range b.Subjects {
				if isNodeSubject(s) {
					nodeBindings++
					if b.RoleRef.Kind == "Role" {
						role = roles[b.Namespace+"/"+b.RoleRef.Name]
					}
				}
			}
		}
		if role == nil {
			t.Fatal("no RoleBinding binds group system:nodes to a Role of this directory")
		}
		if nodeBindings != 1 {
			t.Errorf("%d RoleBinding subjects are nodes, want only tandem-node-config-reader's", nodeBindings)
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
		// Nothing cluster-wide for nodes: every ClusterRoleBinding is a component's.
		for _, obj := range byKind["ClusterRoleBinding"] {
			b := obj.(*rbacv1.ClusterRoleBinding)
			for _, s := range b.Subjects {
				if isNodeSubject(s) {
					t.Errorf("ClusterRoleBinding %s gives nodes (%s %s) cluster-wide rights", b.Name, s.Kind, s.Name)
				}
			}
		}
		if len(byKind["Secret"]) != 0 {
			t.Error("a Secret is installed: the extender's keys are the operator's to create, the webhook makes its own")
		}
	})

	t.Run("Extender", func(t *testing.T) {
		if len(byKind["DaemonSet"]) != 1 {
			t.Fatalf("%d DaemonSets, want tandem-extender's", len(byKind["DaemonSet"]))
		}
		ds := byKind["DaemonSet"][0].(*appsv1.DaemonSet)
		spec := ds.Spec.Template.Spec
		if ds.Namespace != "kube-system" {
			t.Errorf("DaemonSet %s in %s, want kube-system", ds.Name, ds.Namespace)
		}
		// The extender is reached on loopback: nothing balances over its pods.
		for _, obj := range byKind["Service"] {
			svc := obj.(*corev1.Service)
			if len(svc.Spec.Selector) > 0 && labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(ds.Spec.Template.Labels)) {
				t.Errorf("Service %s/%s selects the extender's pods: kube-scheduler reaches the extender on loopback", svc.Namespace, svc.Name)
			}
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
		checkSecurityContext(t, "extender", spec, c)

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
		cluster, _ := boundRules(t, byKind, ds.Namespace, spec.ServiceAccountName)
		if len(cluster) == 0 {
			t.Fatal("no ClusterRoleBinding gives the extender's ServiceAccount a ClusterRole of this directory")
		}
		for _, r := range []string{"nodes", "pods"} {
			for _, verb := range []string{"get", "list", "watch"} {
				if !allows(cluster, "", r, verb) {
					t.Errorf("the extender may not %s %s", verb, r)
				}
			}
			for _, verb := range []string{"create", "update", "patch", "delete"} {
				if allows(cluster, "", r, verb) {
					t.Errorf("the extender may %s %s: it only reads", verb, r)
				}
			}
		}
	})

	t.Run("CRD", func(t *testing.T) { checkProfileCRD(t, crds) })
	t.Run("SchedulingCRDs", func(t *testing.T) { checkSchedulingCRDs(t, crds) })
	t.Run("Webhook", func(t *testing.T) { checkWebhook(t, byKind) })
}

// isNodeSubject reports whether s is the nodes' group or one node's user.
func isNodeSubject(s rbacv1.Subject) bool {
	return (s.Kind == rbacv1.GroupKind && s.Name == "system:nodes") ||
		(s.Kind == rbacv1.UserKind && strings.HasPrefix(s.Name, "system:node:"))
}

// checkSecurityContext: non-root as 65532 under the runtime's seccomp
// profile, a read-only root, no privilege escalation, no capabilities.
func checkSecurityContext(t *testing.T, what string, spec corev1.PodSpec, c corev1.Container) {
	t.Helper()
	psc, sc := spec.SecurityContext, c.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser != 65532 ||
		psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("%s pod securityContext %+v, want runAsNonRoot as 65532 with the RuntimeDefault seccomp profile", what, psc)
	}
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.Capabilities == nil ||
		!slices.Contains(sc.Capabilities.Drop, "ALL") || len(sc.Capabilities.Add) != 0 || (sc.Privileged != nil && *sc.Privileged) {
		t.Errorf("%s container securityContext %+v, want a read-only root, no privilege escalation, all capabilities dropped", what, sc)
	}
}

// boundRules returns the rules granted to ServiceAccount namespace/name:
// cluster-wide by ClusterRoleBindings, and by RoleBindings per namespace. A
// binding to a role this directory does not hold fails the test.
func boundRules(t *testing.T, byKind map[string][]runtime.Object, namespace, name string) (cluster []rbacv1.PolicyRule, namespaced map[string][]rbacv1.PolicyRule) {
	t.Helper()
	isSA := func(subjects []rbacv1.Subject) bool {
		return slices.ContainsFunc(subjects, func(s rbacv1.Subject) bool {
			return s.Kind == rbacv1.ServiceAccountKind && s.Name == name && s.Namespace == namespace
		})
	}
	clusterRole := func(n string) []rbacv1.PolicyRule {
		for _, obj := range byKind["ClusterRole"] {
			if r := obj.(*rbacv1.ClusterRole); r.Name == n {
				return r.Rules
			}
		}
		t.Fatalf("ClusterRole %s is bound to %s/%s and not installed", n, namespace, name)
		return nil
	}
	for _, obj := range byKind["ClusterRoleBinding"] {
		if b := obj.(*rbacv1.ClusterRoleBinding); isSA(b.Subjects) {
			cluster = append(cluster, clusterRole(b.RoleRef.Name)...)
		}
	}
	namespaced = map[string][]rbacv1.PolicyRule{}
	for _, obj := range byKind["RoleBinding"] {
		b := obj.(*rbacv1.RoleBinding)
		if !isSA(b.Subjects) {
			continue
		}
		if b.RoleRef.Kind == "ClusterRole" {
			namespaced[b.Namespace] = append(namespaced[b.Namespace], clusterRole(b.RoleRef.Name)...)
			continue
		}
		found := false
		for _, obj := range byKind["Role"] {
			if r := obj.(*rbacv1.Role); r.Namespace == b.Namespace && r.Name == b.RoleRef.Name {
				namespaced[b.Namespace] = append(namespaced[b.Namespace], r.Rules...)
				found = true
			}
		}
		if !found {
			t.Fatalf("RoleBinding %s/%s binds Role %s, which is not installed", b.Namespace, b.Name, b.RoleRef.Name)
		}
	}
	return cluster, namespaced
}

// crd is the part of an apiextensions.k8s.io/v1 CustomResourceDefinition that
// webhook/crd.yaml uses: client-go's scheme does not hold the type, and Tandem
// does not depend on k8s.io/apiextensions-apiserver. It is decoded strictly,
// so a misspelt field fails, and so does a field this struct does not know
// yet: add it here when the CRD starts using it.
type crd struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   metav1.ObjectMeta `json:"metadata"`
	Spec       struct {
		Group string `json:"group"`
		Names struct {
			Kind       string   `json:"kind"`
			ListKind   string   `json:"listKind"`
			Plural     string   `json:"plural"`
			Singular   string   `json:"singular"`
			ShortNames []string `json:"shortNames"`
		} `json:"names"`
		Scope    string `json:"scope"`
		Versions []struct {
			Name         string `json:"name"`
			Served       bool   `json:"served"`
			Storage      bool   `json:"storage"`
			Subresources *struct {
				Status *struct{} `json:"status"`
			} `json:"subresources"`
			AdditionalPrinterColumns []struct {
				Name     string `json:"name"`
				Type     string `json:"type"`
				JSONPath string `json:"jsonPath"`
			} `json:"additionalPrinterColumns"`
			Schema struct {
				OpenAPIV3Schema jsonSchema `json:"openAPIV3Schema"`
			} `json:"schema"`
		} `json:"versions"`
	} `json:"spec"`
}

// jsonSchema is the part of JSONSchemaProps the CRD uses.
type jsonSchema struct {
	Type                  string                `json:"type"`
	Format                string                `json:"format"`
	Description           string                `json:"description"`
	Properties            map[string]jsonSchema `json:"properties"`
	Items                 *jsonSchema           `json:"items"`
	AdditionalProperties  *jsonSchema           `json:"additionalProperties"`
	Required              []string              `json:"required"`
	Enum                  []string              `json:"enum"`
	MapType               string                `json:"x-kubernetes-map-type"`
	IntOrString           bool                  `json:"x-kubernetes-int-or-string"`
	PreserveUnknownFields bool                  `json:"x-kubernetes-preserve-unknown-fields"`
}

// jsonFields returns the JSON names of a struct's fields, those of inline
// embedded structs included.
func jsonFields(t *testing.T, typ reflect.Type) []string {
	t.Helper()
	var out []string
	for i := range typ.NumField() {
		f := typ.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case name == "-" || !f.IsExported():
		case f.Anonymous && name == "" && opts == "inline":
			out = append(out, jsonFields(t, f.Type)...)
		case name == "":
			t.Fatalf("%s.%s has no JSON name", typ, f.Name)
		default:
			out = append(out, name)
		}
	}
	return out
}

// checkStructural: every node of the schema has a type (or is int-or-string),
// as the API server requires of a CRD's schema.
func checkStructural(t *testing.T, path string, s jsonSchema) {
	t.Helper()
	if s.Type == "" && !s.IntOrString {
		t.Errorf("schema %s has no type: the API server refuses a schema that is not structural", path)
	}
	for _, name := range slices.Sorted(maps.Keys(s.Properties)) {
		checkStructural(t, path+"."+name, s.Properties[name])
	}
	if s.Items != nil {
		checkStructural(t, path+"[]", *s.Items)
	}
	if s.AdditionalProperties != nil {
		checkStructural(t, path+"{}", *s.AdditionalProperties)
	}
}

// checkProfileCRD: the CRD serves admission.ClusterColocationProfile where
// the webhook watches it, with Koordinator's names, and its schema's spec has
// exactly the fields of admission.ClusterColocationProfileSpec.
func checkProfileCRD(t *testing.T, crds []*crd) {
	var profiles []*crd
	for _, c := range crds {
		if c.Spec.Names.Kind == "ClusterColocationProfile" {
			profiles = append(profiles, c)
		}
	}
	if len(profiles) != 1 {
		t.Fatalf("%d CustomResourceDefinitions of ClusterColocationProfile, want one", len(profiles))
	}
	c := profiles[0]
	gvr := admission.ProfileResource
	if c.Spec.Group != "config.koordinator.sh" || c.Spec.Group != gvr.Group {
		t.Errorf("CRD group %s, want config.koordinator.sh (Koordinator's; admission.ProfileResource has %s)", c.Spec.Group, gvr.Group)
	}
	if want := c.Spec.Names.Plural + "." + c.Spec.Group; c.Metadata.Name != want {
		t.Errorf("CRD name %s, want %s: the API server refuses any other", c.Metadata.Name, want)
	}
	n := c.Spec.Names
	if n.Kind != "ClusterColocationProfile" || n.ListKind != "ClusterColocationProfileList" || n.Plural != gvr.Resource || n.Singular != "clustercolocationprofile" {
		t.Errorf("CRD names %+v, want kind ClusterColocationProfile served as %s", n, gvr.Resource)
	}
	if c.Spec.Scope != "Cluster" {
		t.Errorf("CRD scope %s, want Cluster (Koordinator's profiles are cluster-scoped)", c.Spec.Scope)
	}
	if len(c.Spec.Versions) != 1 {
		t.Fatalf("CRD has %d versions, want only %s", len(c.Spec.Versions), gvr.Version)
	}
	v := c.Spec.Versions[0]
	if v.Name != "v1alpha1" || v.Name != gvr.Version || !v.Served || !v.Storage {
		t.Errorf("CRD version %s served=%v storage=%v, want v1alpha1 (admission.ProfileResource has %s), served and stored", v.Name, v.Served, v.Storage, gvr.Version)
	}
	root := v.Schema.OpenAPIV3Schema
	checkStructural(t, "openAPIV3Schema", root)
	for _, f := range jsonFields(t, reflect.TypeFor[admission.ClusterColocationProfile]()) {
		if _, ok := root.Properties[f]; !ok {
			t.Errorf("CRD schema lacks %s, a field of admission.ClusterColocationProfile", f)
		}
	}
	spec := root.Properties["spec"]
	specType := reflect.TypeFor[admission.ClusterColocationProfileSpec]()
	want := jsonFields(t, specType)
	if got := slices.Sorted(maps.Keys(spec.Properties)); !slices.Equal(got, slices.Sorted(slices.Values(want))) {
		t.Errorf("CRD spec properties %v, want exactly the JSON fields of admission.ClusterColocationProfileSpec %v", got, slices.Sorted(slices.Values(want)))
	}
	// Each property has the schema of its Go field's type, so that what the API
	// server stores is what the webhook decodes.
	for i := range specType.NumField() {
		f := specType.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		p, ok := spec.Properties[name]
		if !ok {
			continue // reported above
		}
		var bad bool
		switch f.Type {
		case reflect.TypeFor[string]():
			bad = p.Type != "string"
		case reflect.TypeFor[*int32]():
			bad = p.Type != "integer" || p.Format != "int32"
		case reflect.TypeFor[map[string]string]():
			bad = p.Type != "object" || p.AdditionalProperties == nil || p.AdditionalProperties.Type != "string" || p.Properties != nil
		case reflect.TypeFor[*metav1.LabelSelector]():
			bad = p.Type != "object" || !slices.Equal(slices.Sorted(maps.Keys(p.Properties)), slices.Sorted(slices.Values(jsonFields(t, reflect.TypeFor[metav1.LabelSelector]()))))
		case reflect.TypeFor[*intstr.IntOrString]():
			bad = !p.IntOrString || p.Type != ""
		case reflect.TypeFor[json.RawMessage]():
			bad = p.Type != "object" || !p.PreserveUnknownFields
		default:
			t.Errorf("spec.%s: no rule for Go type %s in this test; add one", name, f.Type)
		}
		if bad {
			t.Errorf("CRD spec.%s schema %+v does not fit its Go type %s", name, p, f.Type)
		}
	}
	classes := []string{string(resqos.LSE), string(resqos.LSR), string(resqos.LS), string(resqos.BE), string(resqos.System)}
	if got := spec.Properties["qosClass"].Enum; !slices.Equal(got, classes) {
		t.Errorf("qosClass enum %v, want %v", got, classes)
	}
	// A strategic merge patch of a Pod: the API server must keep every field of it.
	if p := spec.Properties["patch"]; !p.PreserveUnknownFields {
		t.Errorf("spec.patch %+v lacks x-kubernetes-preserve-unknown-fields: true; the API server would prune the patch", p)
	}
}

// tandem-webhook's flag defaults. They live in cmd/tandem-webhook/main.go
// (func load), a main package this test cannot import, so they are written
// here; TestWebhookFlagDefaults reads that source and fails when the two
// differ. namespace's default is $POD_NAMESPACE, falling back to this.
var webhookFlagDefaults = map[string]string{
	"listen":                ":9443",
	"metrics-listen":        ":9080",
	"namespace":             "koordinator-system",
	"service-name":          "tandem-webhook",
	"secret-name":           "tandem-webhook-tls",
	"webhook-configuration": "tandem-webhook",
	"excluded-namespaces":   "kube-system,koordinator-system",
}

// TestWebhookFlagDefaults: webhookFlagDefaults are the defaults in
// cmd/tandem-webhook/main.go: the string flags' literal defaults (a
// StringSliceVar's joined with commas), or, for a default held in a variable,
// the string literal assigned to it (namespace's fallback).
func TestWebhookFlagDefaults(t *testing.T) {
	const path = "../cmd/tandem-webhook/main.go"
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	literal := func(e ast.Expr) (string, bool) {
		if l, ok := e.(*ast.BasicLit); ok && l.Kind == token.STRING {
			s, err := strconv.Unquote(l.Value)
			return s, err == nil
		}
		return "", false
	}
	assigned := map[string]string{} // variable -> last string literal assigned to it
	got := map[string]string{}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.AssignStmt:
			for i, lhs := range n.Lhs {
				if id, ok := lhs.(*ast.Ident); ok && i < len(n.Rhs) {
					if s, ok := literal(n.Rhs[i]); ok {
						assigned[id.Name] = s
					}
				}
			}
		case *ast.CallExpr:
			sel, ok := n.Fun.(*ast.SelectorExpr)
			if !ok || (sel.Sel.Name != "StringVar" && sel.Sel.Name != "StringSliceVar") || len(n.Args) < 3 {
				return true
			}
			flag, ok := literal(n.Args[1])
			if !ok {
				return true
			}
			switch d := n.Args[2].(type) {
			case *ast.Ident:
				if s, ok := assigned[d.Name]; ok {
					got[flag] = s
				}
			case *ast.CompositeLit:
				var elems []string
				for _, e := range d.Elts {
					if s, ok := literal(e); ok {
						elems = append(elems, s)
					}
				}
				got[flag] = strings.Join(elems, ",")
			default:
				if s, ok := literal(d); ok {
					got[flag] = s
				}
			}
		}
		return true
	})
	for flag, want := range webhookFlagDefaults {
		if g, ok := got[flag]; !ok || g != want {
			t.Errorf("%s: --%s defaults to %q (found: %v), this test to %q: update webhookFlagDefaults and the manifests together", path, flag, g, ok, want)
		}
	}
}

// deref prints what p points to, or "unset".
func deref[T any](p *T) string {
	if p == nil {
		return "unset"
	}
	return fmt.Sprint(*p)
}

// containerPort resolves a port of c given by number or by name.
func containerPort(c corev1.Container, p intstr.IntOrString) int32 {
	if p.Type == intstr.Int {
		return p.IntVal
	}
	for _, cp := range c.Ports {
		if cp.Name == p.StrVal {
			return cp.ContainerPort
		}
	}
	return 0
}

// find returns the object of this kind named namespace/name.
func find[T metav1.Object](t *testing.T, byKind map[string][]runtime.Object, kind, namespace, name string) T {
	t.Helper()
	for _, obj := range byKind[kind] {
		if o, ok := obj.(T); ok && o.GetNamespace() == namespace && o.GetName() == name {
			return o
		}
	}
	t.Fatalf("no %s %s/%s is installed", kind, namespace, name)
	var zero T
	return zero
}

// webhook is what a MutatingWebhook and a ValidatingWebhook have in common.
type webhook struct {
	kind, config, name string
	failurePolicy      *admissionregv1.FailurePolicyType
	sideEffects        *admissionregv1.SideEffectClass
	reviewVersions     []string
	client             admissionregv1.WebhookClientConfig
	rules              []admissionregv1.RuleWithOperations
	namespaceSelector  *metav1.LabelSelector
}

// checkWebhook: tandem-webhook's Deployment, Service, PodDisruptionBudget,
// RBAC and webhook configurations agree with each other, with the binary's
// flag defaults and with package admission.
func checkWebhook(t *testing.T, byKind map[string][]runtime.Object) {
	def := webhookFlagDefaults
	ns, svcName := def["namespace"], def["service-name"]
	dep := find[*appsv1.Deployment](t, byKind, "Deployment", ns, "tandem-webhook")
	spec := dep.Spec.Template.Spec
	podLabels := labels.Set(dep.Spec.Template.Labels)
	if len(spec.Containers) != 1 {
		t.Fatalf("webhook pod has %d containers, want 1", len(spec.Containers))
	}
	c := spec.Containers[0]
	// The names below are the binary's defaults: no argument may change them.
	for _, a := range c.Args {
		for _, name := range []string{"namespace", "service-name", "secret-name", "webhook-configuration", "excluded-namespaces"} {
			if strings.HasPrefix(a, "--"+name+"=") || a == "--"+name {
				t.Errorf("webhook arg %s: the manifests are written for the default --%s=%s", a, name, def[name])
			}
		}
	}
	// The value the binary runs with: the argument, else the default.
	flag := func(name string) string {
		for _, a := range c.Args {
			if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
				return v
			}
		}
		return def[name]
	}
	port := func(name string) int32 {
		_, p, err := net.SplitHostPort(flag(name))
		n, err2 := strconv.Atoi(p)
		if err != nil || err2 != nil {
			t.Fatalf("--%s=%s: not host:port", name, flag(name))
		}
		return int32(n)
	}
	webhookPort, metricsPort := port("listen"), port("metrics-listen")

	t.Run("Deployment", func(t *testing.T) {
		if dep.Spec.Replicas == nil || *dep.Spec.Replicas != 2 {
			t.Errorf("webhook replicas %s, want 2: every pod is admitted through it", deref(dep.Spec.Replicas))
		}
		sel, err := metav1.LabelSelectorAsSelector(dep.Spec.Selector)
		if err != nil || sel.Empty() || !sel.Matches(podLabels) {
			t.Errorf("webhook Deployment selector %v does not select its pods' labels %v (%v)", dep.Spec.Selector, podLabels, err)
		}
		if spec.HostNetwork {
			t.Error("webhook pods use hostNetwork: two replicas on a node would collide on its port; the API server reaches them through the Service")
		}
		find[*corev1.ServiceAccount](t, byKind, "ServiceAccount", ns, spec.ServiceAccountName)
		if spec.ServiceAccountName != "tandem-webhook" {
			t.Errorf("webhook serviceAccountName %q, want tandem-webhook", spec.ServiceAccountName)
		}
		if want := "ghcr.io/tandemkit/tandem-webhook:" + makefileVersion(t); c.Image != want {
			t.Errorf("webhook image %s, want %s (what make images builds)", c.Image, want)
		}
		if c.ImagePullPolicy != corev1.PullIfNotPresent {
			t.Errorf("webhook imagePullPolicy %q, want IfNotPresent: the image is imported, not pulled", c.ImagePullPolicy)
		}
		for name, want := range map[string]int32{"webhook": webhookPort, "metrics": metricsPort} {
			if got := containerPort(c, intstr.FromString(name)); got != want {
				t.Errorf("webhook containerPort %s is %d, the binary listens on %d (--listen, --metrics-listen)", name, got, want)
			}
		}
		// The probes use the plain listener, where /readyz waits for the caches and a certificate.
		for _, p := range []struct {
			name, path string
			probe      *corev1.Probe
		}{{"readiness", "/readyz", c.ReadinessProbe}, {"liveness", "/healthz", c.LivenessProbe}} {
			g := p.probe
			if g == nil || g.HTTPGet == nil || g.HTTPGet.Path != p.path || containerPort(c, g.HTTPGet.Port) != metricsPort || g.HTTPGet.Scheme == corev1.URISchemeHTTPS {
				t.Errorf("webhook %s probe %+v, want an HTTP GET of %s on the metrics port %d", p.name, g, p.path, metricsPort)
			}
		}
		// --namespace defaults to $POD_NAMESPACE: the Deployment's own namespace.
		var podNS bool
		for _, e := range c.Env {
			podNS = podNS || (e.Name == "POD_NAMESPACE" && e.Value == "" && e.ValueFrom != nil &&
				e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.namespace")
		}
		if !podNS {
			t.Errorf("webhook env %+v: want POD_NAMESPACE from the downward API's metadata.namespace", c.Env)
		}
		// By default the webhook makes its own certificates (cert-manager is an overlay: docs/colocation-profile.md).
		for _, a := range c.Args {
			if strings.HasPrefix(a, "--tls-cert-file") || strings.HasPrefix(a, "--tls-private-key-file") {
				t.Errorf("webhook arg %s: the installed webhook makes its own certificates", a)
			}
		}
		checkSecurityContext(t, "webhook", spec, c)
	})

	svc := find[*corev1.Service](t, byKind, "Service", ns, svcName)
	// servesWebhook reports whether the Service's port leads to the webhook's listener.
	servesWebhook := func(port int32) bool {
		return slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool {
			return p.Port == port && containerPort(c, p.TargetPort) == webhookPort
		})
	}
	t.Run("Service", func(t *testing.T) {
		if len(svc.Spec.Selector) == 0 || !labels.SelectorFromSet(svc.Spec.Selector).Matches(podLabels) {
			t.Errorf("Service %s selector %v does not select the webhook's pods %v", svc.Name, svc.Spec.Selector, podLabels)
		}
		if !servesWebhook(443) {
			t.Errorf("Service %s ports %+v: 443 does not lead to the webhook's container port %d", svc.Name, svc.Spec.Ports, webhookPort)
		}
		pdb := find[*policyv1.PodDisruptionBudget](t, byKind, "PodDisruptionBudget", ns, "tandem-webhook")
		sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err != nil || sel.Empty() || !sel.Matches(podLabels) {
			t.Errorf("PodDisruptionBudget selector %v does not select the webhook's pods %v (%v)", pdb.Spec.Selector, podLabels, err)
		}
		if m := pdb.Spec.MinAvailable; m == nil || *m != intstr.FromInt32(1) || pdb.Spec.MaxUnavailable != nil {
			t.Errorf("PodDisruptionBudget minAvailable %v maxUnavailable %v, want minAvailable 1", m, pdb.Spec.MaxUnavailable)
		} else if dep.Spec.Replicas != nil && *dep.Spec.Replicas <= 1 {
			t.Errorf("PodDisruptionBudget minAvailable 1 with %d replicas: no node could be drained", *dep.Spec.Replicas)
		}
	})

	t.Run("RBAC", func(t *testing.T) {
		cluster, namespaced := boundRules(t, byKind, ns, spec.ServiceAccountName)
		reads := []struct{ group, resource string }{
			{admission.ProfileResource.Group, admission.ProfileResource.Resource},
			{"", "namespaces"}, {"", "pods"}, {"scheduling.k8s.io", "priorityclasses"},
		}
		for _, r := range reads {
			for _, verb := range []string{"get", "list", "watch"} {
				if !allows(cluster, r.group, r.resource, verb) {
					t.Errorf("the webhook may not %s %s: its informers need it", verb, r.resource)
				}
			}
		}
		configs := []string{"mutatingwebhookconfigurations", "validatingwebhookconfigurations"}
		for _, res := range configs {
			if !slices.ContainsFunc(cluster, func(r rbacv1.PolicyRule) bool {
				return slices.Equal(r.APIGroups, []string{"admissionregistration.k8s.io"}) && slices.Contains(r.Resources, res) &&
					slices.Equal(r.ResourceNames, []string{def["webhook-configuration"]}) && slices.Contains(r.Verbs, "get") && slices.Contains(r.Verbs, "update")
			}) {
				t.Errorf("the webhook may not get and update %s %s: it keeps their caBundle", res, def["webhook-configuration"])
			}
		}
		// Writable cluster-wide: its own two webhook configurations, by name, and nothing else.
		for _, r := range cluster {
			for _, list := range [][]string{r.APIGroups, r.Resources, r.Verbs, r.ResourceNames} {
				if slices.Contains(list, "*") {
					t.Errorf("webhook ClusterRole rule %+v has a wildcard", r)
				}
			}
			for _, v := range r.Verbs {
				switch {
				case v == "get" || v == "list" || v == "watch":
				case v == "update" && slices.Equal(r.APIGroups, []string{"admissionregistration.k8s.io"}) &&
					slices.Equal(r.ResourceNames, []string{def["webhook-configuration"]}) &&
					!slices.ContainsFunc(r.Resources, func(res string) bool { return !slices.Contains(configs, res) }):
				default:
					t.Errorf("webhook ClusterRole rule %+v allows %s: it writes only the caBundle of its own webhook configurations", r, v)
				}
			}
		}
		// Secrets: none cluster-wide, and in its namespace only its own.
		for _, verb := range []string{"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"} {
			if allows(cluster, "", "secrets", verb) {
				t.Errorf("a ClusterRoleBinding lets the webhook %s secrets in every namespace", verb)
			}
			for n, rules := range namespaced {
				if n != ns && allows(rules, "", "secrets", verb) {
					t.Errorf("a RoleBinding lets the webhook %s secrets in namespace %s", verb, n)
				}
			}
		}
		want := []rbacv1.PolicyRule{{
			APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{def["secret-name"]},
			Verbs: []string{"get", "list", "watch", "update"},
		}, {
			// create cannot be limited by name.
			APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"create"},
		}}
		if got := namespaced[ns]; !reflect.DeepEqual(got, want) {
			t.Errorf("the webhook's rules in %s are %+v, want exactly %+v", ns, got, want)
		}
	})

	t.Run("WebhookConfigurations", func(t *testing.T) {
		var hooks []webhook
		for _, obj := range byKind["MutatingWebhookConfiguration"] {
			m := obj.(*admissionregv1.MutatingWebhookConfiguration)
			for _, w := range m.Webhooks {
				hooks = append(hooks, webhook{"Mutating", m.Name, w.Name, w.FailurePolicy, w.SideEffects, w.AdmissionReviewVersions, w.ClientConfig, w.Rules, w.NamespaceSelector})
			}
		}
		for _, obj := range byKind["ValidatingWebhookConfiguration"] {
			v := obj.(*admissionregv1.ValidatingWebhookConfiguration)
			for _, w := range v.Webhooks {
				hooks = append(hooks, webhook{"Validating", v.Name, w.Name, w.FailurePolicy, w.SideEffects, w.AdmissionReviewVersions, w.ClientConfig, w.Rules, w.NamespaceSelector})
			}
		}
		pods := admissionregv1.RuleWithOperations{
			Operations: []admissionregv1.OperationType{admissionregv1.Create},
			Rule:       admissionregv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
		}
		profiles := admissionregv1.RuleWithOperations{
			Operations: []admissionregv1.OperationType{admissionregv1.Create, admissionregv1.Update},
			Rule: admissionregv1.Rule{APIGroups: []string{admission.ProfileResource.Group}, APIVersions: []string{admission.ProfileResource.Version},
				Resources: []string{admission.ProfileResource.Resource}},
		}
		want := []struct {
			kind, name, path string
			rule             admissionregv1.RuleWithOperations
		}{
			{"Mutating", "pods.mutate.tandem.io", admission.MutatePodPath, pods},
			{"Validating", "pods.validate.tandem.io", admission.ValidatePodPath, pods},
			{"Validating", "clustercolocationprofiles.validate.tandem.io", admission.ValidateProfilePath, profiles},
		}
		if len(hooks) != len(want) {
			t.Errorf("%d webhooks, want %d", len(hooks), len(want))
		}
		// The pod validation is called only for pods carrying a key some rule of
		// admission.ValidatePod checks; each key must be in its matchConditions, or pods breaking
		// that rule would never be checked.
		for _, obj := range byKind["ValidatingWebhookConfiguration"] {
			for _, w := range obj.(*admissionregv1.ValidatingWebhookConfiguration).Webhooks {
				if w.Name != "pods.validate.tandem.io" {
					if len(w.MatchConditions) != 0 {
						t.Errorf("webhook %s has matchConditions; only the pod validation narrows its calls", w.Name)
					}
					continue
				}
				if len(w.MatchConditions) != 1 {
					t.Fatalf("webhook %s has %d matchConditions, want 1", w.Name, len(w.MatchConditions))
				}
				expr := w.MatchConditions[0].Expression
				for _, key := range []string{resqos.LabelKoordinator, resqos.AnnotationOpenFuyao, cpuset.AnnotationResourceSpec,
					batch.AnnotationExtendedResourceSpec, batch.CPU, batch.Memory} {
					if !strings.Contains(expr, "'"+key+"'") {
						t.Errorf("webhook %s matchConditions leave out %s, which a validation rule checks: %s", w.Name, key, expr)
					}
				}
				for _, part := range []string{"object.spec.containers.exists", "object.spec.initContainers.exists", "c.resources.requests", "c.resources.limits"} {
					if !strings.Contains(expr, part) {
						t.Errorf("webhook %s matchConditions do not look at %s", w.Name, part)
					}
				}
			}
		}
		for _, obj := range byKind["MutatingWebhookConfiguration"] {
			for _, w := range obj.(*admissionregv1.MutatingWebhookConfiguration).Webhooks {
				if len(w.MatchConditions) != 0 {
					t.Errorf("webhook %s has matchConditions: every new pod may match a profile", w.Name)
				}
			}
		}
		excluded := strings.Split(def["excluded-namespaces"], ",")
		for _, w := range want {
			i := slices.IndexFunc(hooks, func(h webhook) bool { return h.kind == w.kind && h.name == w.name })
			if i < 0 {
				t.Errorf("no %sWebhookConfiguration holds webhook %s", w.kind, w.name)
				continue
			}
			h := hooks[i]
			if h.config != def["webhook-configuration"] {
				t.Errorf("webhook %s is in %sWebhookConfiguration %s; the binary keeps the caBundle of %s (--webhook-configuration)", h.name, h.kind, h.config, def["webhook-configuration"])
			}
			if h.failurePolicy == nil || *h.failurePolicy != admissionregv1.Ignore {
				t.Errorf("webhook %s failurePolicy %s, want Ignore: pods are admitted while no replica answers", h.name, deref(h.failurePolicy))
			}
			if h.sideEffects == nil || *h.sideEffects != admissionregv1.SideEffectClassNone {
				t.Errorf("webhook %s sideEffects %s, want None", h.name, deref(h.sideEffects))
			}
			if !slices.Equal(h.reviewVersions, []string{"v1"}) {
				t.Errorf("webhook %s admissionReviewVersions %v, want [v1]: the handler speaks admission.k8s.io/v1", h.name, h.reviewVersions)
			}
			s := h.client.Service
			if h.client.URL != nil || s == nil || s.Namespace != svc.Namespace || s.Name != svc.Name || s.Port == nil || !servesWebhook(*s.Port) {
				t.Errorf("webhook %s clientConfig %+v, want Service %s/%s on its port leading to the webhook's %d", h.name, h.client, svc.Namespace, svc.Name, webhookPort)
			} else if s.Path == nil || *s.Path != w.path {
				t.Errorf("webhook %s path %s, want %s (package admission serves it)", h.name, deref(s.Path), w.path)
			}
			if len(h.client.CABundle) != 0 {
				t.Errorf("webhook %s has a caBundle: the webhook writes it, and `kubectl apply` would put this one back", h.name)
			}
			if len(h.rules) != 1 || !reflect.DeepEqual(h.rules[0].Operations, w.rule.Operations) ||
				!reflect.DeepEqual(h.rules[0].APIGroups, w.rule.APIGroups) || !reflect.DeepEqual(h.rules[0].APIVersions, w.rule.APIVersions) ||
				!reflect.DeepEqual(h.rules[0].Resources, w.rule.Resources) {
				t.Errorf("webhook %s rules %+v, want only %v %v", h.name, h.rules, w.rule.Operations, w.rule.Resources)
			}
			if w.rule.Resources[0] != "pods" {
				continue
			}
			// Pods: every namespace but the excluded ones, which are the binary's --excluded-namespaces.
			sel, err := metav1.LabelSelectorAsSelector(h.namespaceSelector)
			if err != nil {
				t.Errorf("webhook %s namespaceSelector: %v", h.name, err)
				continue
			}
			for _, n := range append(slices.Clone(excluded), "default", "batch") {
				in := sel.Matches(labels.Set{corev1.LabelMetadataName: n})
				if in == slices.Contains(excluded, n) {
					t.Errorf("webhook %s takes pods of namespace %s: %v, want %v", h.name, n, in, !in)
				}
			}
			var notIn []string
			for _, e := range h.namespaceSelector.MatchExpressions {
				if e.Key == corev1.LabelMetadataName && e.Operator == metav1.LabelSelectorOpNotIn {
					notIn = append(notIn, e.Values...)
				}
			}
			if !slices.Equal(notIn, excluded) {
				t.Errorf("webhook %s leaves out namespaces %v, the binary's --excluded-namespaces (its audit) %v", h.name, notIn, excluded)
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
		t.Errorf("profiles %v, want default-scheduler and koord-scheduler (Deployments written for Koordinator name it)", names)
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
	// One unit serves every node: the proxy finds each node's kubelet settings itself (its running
	// kubelet, else --kubelet-config).
	for _, f := range []string{"--cgroup-driver", "--cpu-manager-policy"} {
		if v, ok := flags[f]; ok {
			t.Errorf("tandem-proxy.service: ExecStart pins %s=%s for every node; leave it out so that the proxy reads kubelet's", f, v)
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

// checkSchedulingCRDs: Reservation and PodMigrationJob are served where
// apis/scheduling/v1alpha1 reads and writes them, with Koordinator's names,
// scope, short names and printer columns, and a schema that keeps every field
// of spec and status (Koordinator's objects hold fields Tandem does not model).
func checkSchedulingCRDs(t *testing.T, crds []*crd) {
	want := []struct {
		gvr                       schema.GroupVersionResource
		kind, singular, shortName string
		columns                   map[string]string // name: jsonPath
	}{
		{schedv1alpha1.ReservationsResource, "Reservation", "reservation", "rsv", map[string]string{
			"Phase": ".status.phase", "Node": ".status.nodeName", "TTL": ".spec.ttl", "Age": ".metadata.creationTimestamp"}},
		{schedv1alpha1.PodMigrationJobsResource, "PodMigrationJob", "podmigrationjob", "pmj", map[string]string{
			"Phase": ".status.phase", "Status": ".status.status", "Node": ".status.nodeName", "Age": ".metadata.creationTimestamp"}},
	}
	byName := map[string]*crd{}
	for _, c := range crds {
		byName[c.Metadata.Name] = c
	}
	for _, w := range want {
		name := w.gvr.Resource + "." + w.gvr.Group
		c, ok := byName[name]
		if !ok {
			t.Errorf("no CustomResourceDefinition %s", name)
			continue
		}
		if c.Spec.Group != w.gvr.Group || c.Spec.Scope != "Cluster" {
			t.Errorf("%s: group %s scope %s, want %s Cluster (Koordinator's)", name, c.Spec.Group, c.Spec.Scope, w.gvr.Group)
		}
		n := c.Spec.Names
		if n.Kind != w.kind || n.ListKind != w.kind+"List" || n.Plural != w.gvr.Resource || n.Singular != w.singular || !slices.Equal(n.ShortNames, []string{w.shortName}) {
			t.Errorf("%s: names %+v, want kind %s, plural %s, short name %s", name, n, w.kind, w.gvr.Resource, w.shortName)
		}
		if len(c.Spec.Versions) != 1 {
			t.Errorf("%s: %d versions, want only %s", name, len(c.Spec.Versions), w.gvr.Version)
			continue
		}
		v := c.Spec.Versions[0]
		if v.Name != w.gvr.Version || !v.Served || !v.Storage || v.Subresources == nil || v.Subresources.Status == nil {
			t.Errorf("%s: version %s served=%v storage=%v subresources %+v, want %s served, stored, with the status subresource",
				name, v.Name, v.Served, v.Storage, v.Subresources, w.gvr.Version)
		}
		got := map[string]string{}
		for _, col := range v.AdditionalPrinterColumns {
			got[col.Name] = col.JSONPath
		}
		if !maps.Equal(got, w.columns) {
			t.Errorf("%s: printer columns %v, want %v", name, got, w.columns)
		}
		root := v.Schema.OpenAPIV3Schema
		checkStructural(t, name, root)
		for _, f := range []string{"spec", "status"} {
			if p, ok := root.Properties[f]; !ok || p.Type != "object" || !p.PreserveUnknownFields {
				t.Errorf("%s: %s schema %+v, want an object with x-kubernetes-preserve-unknown-fields: true", name, f, p)
			}
		}
	}
}
