package deploy

import (
	"flag"
	"go/ast"
	"go/parser"
	"go/token"
	"net"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	admissionregv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"
	"sigs.k8s.io/yaml"
)

// component is the part of kustomize's Component that nri/ uses, decoded
// strictly.
type component struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Resources  []string `json:"resources"`
}

// nriObjects decodes deploy/ and the nri component together, as a
// kustomization listing both installs them: the component's RoleBinding
// names deploy/'s Role.
func nriObjects(t *testing.T) (byKind map[string][]runtime.Object, own map[string][]runtime.Object) {
	t.Helper()
	b, err := os.ReadFile("nri/kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var c component
	if err := yaml.UnmarshalStrict(b, &c); err != nil {
		t.Fatalf("nri/kustomization.yaml: %v", err)
	}
	if c.APIVersion != "kustomize.config.k8s.io/v1alpha1" || c.Kind != "Component" {
		t.Errorf("nri/kustomization.yaml is %s %s, want kustomize.config.k8s.io/v1alpha1 Component: it is used beside deploy/, not alone", c.APIVersion, c.Kind)
	}
	manifests, err := filepath.Glob("nri/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	manifests = slices.DeleteFunc(manifests, func(s string) bool { return s == "nri/kustomization.yaml" })
	var listed []string
	for _, r := range c.Resources {
		listed = append(listed, path.Join("nri", r))
	}
	slices.Sort(listed)
	if !slices.Equal(listed, manifests) {
		t.Errorf("nri/kustomization.yaml lists %v, want every manifest of nri/: %v", listed, manifests)
	}
	byKind, own = map[string][]runtime.Object{}, map[string][]runtime.Object{}
	for _, res := range readKustomization(t).Resources {
		for _, d := range decodeAll(t, res) {
			if d.obj != nil {
				byKind[d.kind] = append(byKind[d.kind], d.obj)
			}
		}
	}
	for _, res := range listed {
		for _, d := range decodeAll(t, res) {
			byKind[d.kind] = append(byKind[d.kind], d.obj)
			own[d.kind] = append(own[d.kind], d.obj)
		}
	}
	return byKind, own
}

// TestNRIComponent checks the DaemonSet that runs tandem-nri, its RBAC and
// the policy that keeps each plugin to its own Node, against each other and
// against tandem-nri's flags.
func TestNRIComponent(t *testing.T) {
	byKind, own := nriObjects(t)
	for kind, objs := range own {
		for _, obj := range objs {
			m := obj.(interface{ GetLabels() map[string]string })
			if m.GetLabels()["app.kubernetes.io/part-of"] != "tandem" {
				t.Errorf("%s %v lacks app.kubernetes.io/part-of: tandem; docs/install.md uninstalls by that label", kind, obj)
			}
		}
	}
	if len(own["DaemonSet"]) != 1 {
		t.Fatalf("nri/ holds %d DaemonSets, want tandem-nri's", len(own["DaemonSet"]))
	}
	ds := own["DaemonSet"][0].(*appsv1.DaemonSet)
	spec := ds.Spec.Template.Spec
	if ds.Namespace != "koordinator-system" {
		t.Errorf("DaemonSet %s in %s, want koordinator-system (tandem-webhook leaves its pods alone)", ds.Name, ds.Namespace)
	}
	if len(spec.Containers) != 1 {
		t.Fatalf("%s has %d containers, want 1", ds.Name, len(spec.Containers))
	}
	c := spec.Containers[0]
	args := map[string]string{}
	for _, a := range c.Args {
		name, value, ok := strings.Cut(a, "=")
		if !strings.HasPrefix(name, "-") || !ok {
			t.Errorf("%s arg %q: write --flag=value", ds.Name, a)
		}
		args[strings.TrimLeft(name, "-")] = value
	}

	t.Run("flags", func(t *testing.T) {
		known, ignored := agentFlags(t, "tandem-nri")
		for name := range args {
			switch {
			case !known[name]:
				t.Errorf("%s passes --%s, which tandem-nri does not define", ds.Name, name)
			case ignored[name]:
				t.Errorf("%s passes --%s, which tandem-nri accepts and ignores (a CRI proxy's flag)", ds.Name, name)
			}
		}
		if args["node-name"] != "$(NODE_NAME)" {
			t.Errorf("%s --node-name=%q, want $(NODE_NAME)", ds.Name, args["node-name"])
		}
		for _, name := range []string{"nri-socket", "runtime-endpoint", "state-dir", "cgroup-root", "sysfs-root", "kubelet-cgroup-root", "metrics-addr"} {
			if _, ok := args[name]; !ok {
				t.Errorf("%s does not spell out --%s: an operator patching it should see the value in force", ds.Name, name)
			}
		}
		// kubelet expands $(NODE_NAME) from the container's environment.
		var nodeName bool
		for _, e := range c.Env {
			nodeName = nodeName || (e.Name == "NODE_NAME" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "spec.nodeName")
		}
		if !nodeName {
			t.Errorf("%s env %+v: want NODE_NAME from the downward API's spec.nodeName", ds.Name, c.Env)
		}
		if _, ok := args["kubeconfig"]; ok {
			t.Errorf("%s passes --kubeconfig: in a pod the plugin uses its ServiceAccount (in-cluster configuration)", ds.Name)
		}
		// The plugin follows the node's running kubelet through /proc: a value here would be the same
		// on every node, whatever each kubelet says, and --kubelet-config would name a file of the
		// container and stop the lookup.
		for _, name := range []string{"cgroup-driver", "cpu-manager-policy", "kubelet-config"} {
			if v, ok := args[name]; ok {
				t.Errorf("%s passes --%s=%s: leave it out, so that the plugin reads the running kubelet's settings (docs/nri.md)", ds.Name, name, v)
			}
		}
	})

	t.Run("host paths", func(t *testing.T) {
		// Every path the plugin reads or serves on is the host's.
		paths := map[string]string{
			"nri-socket":       path.Dir(args["nri-socket"]),
			"runtime-endpoint": path.Dir(strings.TrimPrefix(args["runtime-endpoint"], "unix://")),
			"state-dir":        args["state-dir"],
			"cgroup-root":      args["cgroup-root"],
			"sysfs-root":       args["sysfs-root"],
		}
		for flag, p := range paths {
			m, v := mountOf(spec, c, p)
			switch {
			case m == nil:
				t.Errorf("--%s: %s is not on a volume: it would be the container's own", flag, p)
			case v.HostPath == nil || v.HostPath.Path != p || m.MountPath != p:
				t.Errorf("--%s: %s is on volume %s at %s (%+v), want the host's %s at the same path", flag, p, v.Name, m.MountPath, v.VolumeSource, p)
			}
		}
		// containerd's defaults, where an operator's containerd has them.
		if args["nri-socket"] != "/var/run/nri/nri.sock" || args["runtime-endpoint"] != "unix:///run/containerd/containerd.sock" {
			t.Errorf("--nri-socket=%s --runtime-endpoint=%s, want containerd's defaults /var/run/nri/nri.sock and unix:///run/containerd/containerd.sock", args["nri-socket"], args["runtime-endpoint"])
		}
		// Kubelet's files are read through /proc/<kubelet's pid>/root; a mount of them would create a
		// directory where the file is absent, or hold every pod's volume mounts (daemonset.yaml says why).
		for _, v := range spec.Volumes {
			if v.HostPath != nil && (v.HostPath.Path == "/var/lib/kubelet" || strings.HasPrefix(v.HostPath.Path, "/var/lib/kubelet/")) {
				t.Errorf("volume %s mounts the host's %s: the plugin reads kubelet's files through /proc", v.Name, v.HostPath.Path)
			}
		}
		// A socket is replaced when containerd restarts: a mount of the file would keep the old one.
		for _, v := range spec.Volumes {
			if v.HostPath != nil && v.HostPath.Type != nil && *v.HostPath.Type == corev1.HostPathSocket {
				t.Errorf("volume %s mounts the socket %s: mount its directory", v.Name, v.HostPath.Path)
			}
		}
		// containerd mounts and unmounts containers' root file systems below its directory: the
		// pod's copies must follow the host's.
		m, _ := mountOf(spec, c, paths["runtime-endpoint"])
		if m != nil && (m.MountPropagation == nil || *m.MountPropagation != corev1.MountPropagationHostToContainer) {
			t.Errorf("mount %s has propagation %s, want HostToContainer", m.MountPath, deref(m.MountPropagation))
		}
	})

	t.Run("pod", func(t *testing.T) {
		if want := "ghcr.io/tandemkit/tandem-nri:" + makefileVersion(t); c.Image != want {
			t.Errorf("%s image %s, want %s (what make images builds)", ds.Name, c.Image, want)
		}
		if c.ImagePullPolicy != corev1.PullIfNotPresent {
			t.Errorf("%s imagePullPolicy %q, want IfNotPresent: the image is imported, not pulled", ds.Name, c.ImagePullPolicy)
		}
		if spec.PriorityClassName != "system-node-critical" {
			t.Errorf("%s priorityClassName %q, want system-node-critical", ds.Name, spec.PriorityClassName)
		}
		if !spec.HostPID || !spec.HostNetwork {
			t.Errorf("%s hostPID %v hostNetwork %v, want both: the host's pids in cgroup files and kubelet's in /proc, and the node's loopback for /metrics", ds.Name, spec.HostPID, spec.HostNetwork)
		}
		sc := c.SecurityContext
		if sc == nil || sc.Privileged == nil || !*sc.Privileged || sc.RunAsUser == nil || *sc.RunAsUser != 0 {
			t.Errorf("%s securityContext %+v, want privileged as root (the image's user is 65532)", ds.Name, sc)
		}
		// Every taint of every node, NoExecute too.
		for _, effect := range []corev1.TaintEffect{corev1.TaintEffectNoSchedule, corev1.TaintEffectNoExecute, corev1.TaintEffectPreferNoSchedule} {
			taint := &corev1.Taint{Key: "example.com/any", Value: "x", Effect: effect}
			if !slices.ContainsFunc(spec.Tolerations, func(tol corev1.Toleration) bool { return tol.ToleratesTaint(klog.Background(), taint, false) }) {
				t.Errorf("%s tolerations %+v do not tolerate %s", ds.Name, spec.Tolerations, taint.ToString())
			}
		}
		if len(spec.NodeSelector) != 0 || spec.Affinity != nil {
			t.Errorf("%s selects nodes (%v, %+v): it must run on every node", ds.Name, spec.NodeSelector, spec.Affinity)
		}
		// SIGTERM lifts CPU suppression before the plugin exits (the unit allows the proxy 45 s).
		if g := spec.TerminationGracePeriodSeconds; g == nil || *g < 45 {
			t.Errorf("%s terminationGracePeriodSeconds %s, want at least 45", ds.Name, deref(g))
		}
		_, port, err := net.SplitHostPort(args["metrics-addr"])
		if err != nil || !strings.HasPrefix(args["metrics-addr"], "127.0.0.1:") {
			t.Errorf("--metrics-addr=%s, want 127.0.0.1:<port> (%v)", args["metrics-addr"], err)
		}
		for _, p := range []struct {
			name, path string
			probe      *corev1.Probe
		}{{"readiness", "/readyz", c.ReadinessProbe}, {"liveness", "/healthz", c.LivenessProbe}} {
			g := p.probe
			if g == nil || g.HTTPGet == nil || g.HTTPGet.Path != p.path || g.HTTPGet.Host != "127.0.0.1" || strconv.Itoa(int(containerPort(c, g.HTTPGet.Port))) != port {
				t.Errorf("%s %s probe %+v, want an HTTP GET of %s on 127.0.0.1:%s (--metrics-addr)", ds.Name, p.name, g, p.path, port)
			}
		}
		req := c.Resources.Requests
		if req.Cpu().IsZero() || req.Memory().IsZero() || req.Cpu().Cmp(resource.MustParse("100m")) > 0 || req.Memory().Cmp(resource.MustParse("128Mi")) > 0 {
			t.Errorf("%s requests %v, want small ones (at most 100m and 128Mi): it runs on every node", ds.Name, req)
		}
		if spec.ServiceAccountName != "tandem-nri" {
			t.Errorf("%s serviceAccountName %q, want tandem-nri", ds.Name, spec.ServiceAccountName)
		}
		find[*corev1.ServiceAccount](t, byKind, "ServiceAccount", ds.Namespace, spec.ServiceAccountName)
	})

	t.Run("RBAC", func(t *testing.T) {
		cluster, namespaced := boundRules(t, byKind, ds.Namespace, spec.ServiceAccountName)
		// What tandem-proxy's API client (package kubeclient) calls, and nothing else.
		type grant struct{ group, resource, verb, name string }
		want := []grant{
			{"", "nodes", "get", ""}, {"", "nodes", "list", ""}, {"", "nodes", "watch", ""}, {"", "nodes", "patch", ""},
			{"", "nodes/status", "patch", ""},
			{"", "pods", "get", ""}, {"", "pods", "list", ""}, {"", "pods", "watch", ""},
			{"", "pods/eviction", "create", ""},
			{"", "events", "create", ""},
		}
		flatten := func(rules []rbacv1.PolicyRule) []grant {
			var out []grant
			for _, r := range rules {
				names := r.ResourceNames
				if len(names) == 0 {
					names = []string{""}
				}
				for _, g := range r.APIGroups {
					for _, res := range r.Resources {
						for _, v := range r.Verbs {
							for _, n := range names {
								out = append(out, grant{g, res, v, n})
							}
						}
					}
				}
			}
			slices.SortFunc(out, func(a, b grant) int {
				return strings.Compare(a.group+a.resource+a.verb+a.name, b.group+b.resource+b.verb+b.name)
			})
			return out
		}
		slices.SortFunc(want, func(a, b grant) int {
			return strings.Compare(a.group+a.resource+a.verb+a.name, b.group+b.resource+b.verb+b.name)
		})
		if got := flatten(cluster); !reflect.DeepEqual(got, want) {
			t.Errorf("cluster-wide, the plugin may\n  %v\nwant exactly\n  %v", got, want)
		}
		wantNS := []grant{{"", "configmaps", "get", "slo-controller-config"}, {"", "configmaps", "list", "slo-controller-config"}, {"", "configmaps", "watch", "slo-controller-config"}}
		for ns, rules := range namespaced {
			if got := flatten(rules); ns != "koordinator-system" || !reflect.DeepEqual(got, wantNS) {
				t.Errorf("in namespace %s the plugin may %v; want only %v in koordinator-system", ns, got, wantNS)
			}
		}
		if len(namespaced) != 1 {
			t.Errorf("the plugin is bound to roles in %d namespaces, want koordinator-system's config reader", len(namespaced))
		}
	})

	t.Run("own Node only", func(t *testing.T) {
		user := "system:serviceaccount:" + ds.Namespace + ":" + spec.ServiceAccountName
		var policy *admissionregv1.ValidatingAdmissionPolicy
		for _, obj := range own["ValidatingAdmissionPolicy"] {
			p := obj.(*admissionregv1.ValidatingAdmissionPolicy)
			if slices.ContainsFunc(p.Spec.MatchConditions, func(m admissionregv1.MatchCondition) bool { return strings.Contains(m.Expression, `"`+user+`"`) }) {
				policy = p
			}
		}
		if policy == nil {
			t.Fatalf("no ValidatingAdmissionPolicy of nri/ matches requests of %s", user)
		}
		if policy.Spec.FailurePolicy == nil || *policy.Spec.FailurePolicy != admissionregv1.Fail {
			t.Errorf("policy %s failurePolicy %s, want Fail", policy.Name, deref(policy.Spec.FailurePolicy))
		}
		var covered []string
		for _, r := range policy.Spec.MatchConstraints.ResourceRules {
			if slices.Equal(r.APIGroups, []string{""}) && slices.Contains(r.Operations, admissionregv1.Update) {
				covered = append(covered, r.Resources...)
			}
		}
		// Every write on Nodes the ClusterRole grants.
		for _, res := range []string{"nodes", "nodes/status"} {
			if !slices.Contains(covered, res) {
				t.Errorf("policy %s does not check UPDATE of %s, which the plugin may patch", policy.Name, res)
			}
		}
		var exprs []string
		for _, v := range policy.Spec.Variables {
			exprs = append(exprs, v.Expression)
		}
		for _, v := range policy.Spec.Validations {
			exprs = append(exprs, v.Expression)
		}
		if all := strings.Join(exprs, "\n"); !strings.Contains(all, "authentication.kubernetes.io/node-name") || !strings.Contains(all, "object.metadata.name") {
			t.Errorf("policy %s does not compare the token's node (authentication.kubernetes.io/node-name) with the Node's name: %s", policy.Name, all)
		}
		bound := false
		for _, obj := range own["ValidatingAdmissionPolicyBinding"] {
			b := obj.(*admissionregv1.ValidatingAdmissionPolicyBinding)
			bound = bound || (b.Spec.PolicyName == policy.Name && slices.Equal(b.Spec.ValidationActions, []admissionregv1.ValidationAction{admissionregv1.Deny}) && b.Spec.MatchResources == nil)
		}
		if !bound {
			t.Errorf("no ValidatingAdmissionPolicyBinding puts policy %s in force for every Node with validationActions [Deny]", policy.Name)
		}
	})
}

// mountOf returns the container's mount holding path p (the longest such
// mount path) and its volume.
func mountOf(spec corev1.PodSpec, c corev1.Container, p string) (*corev1.VolumeMount, *corev1.Volume) {
	var best *corev1.VolumeMount
	for i, m := range c.VolumeMounts {
		if (p == m.MountPath || strings.HasPrefix(p, strings.TrimSuffix(m.MountPath, "/")+"/")) && (best == nil || len(m.MountPath) > len(best.MountPath)) {
			best = &c.VolumeMounts[i]
		}
	}
	if best == nil {
		return nil, nil
	}
	for i, v := range spec.Volumes {
		if v.Name == best.Name {
			return best, &spec.Volumes[i]
		}
	}
	return best, &corev1.Volume{Name: best.Name}
}

// agentFlags returns the names of command bin's flags, and those it accepts
// but ignores (a var proxyOnly of names). They are the flags its package
// (cmd/<bin>) and the packages of this module it imports directly declare
// with a string literal or constant name, and klog's, which the node agent
// adds.
func agentFlags(t *testing.T, bin string) (known, ignored map[string]bool) {
	t.Helper()
	fset := token.NewFileSet()
	dirs := []string{filepath.Join("..", "cmd", bin)}
	var files []*ast.File
	for i := 0; i < len(dirs); i++ {
		names, err := filepath.Glob(filepath.Join(dirs[i], "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		if len(names) == 0 {
			t.Fatalf("no Go files in %s", dirs[i])
		}
		for _, name := range names {
			if strings.HasSuffix(name, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, name, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			files = append(files, f)
			if i > 0 {
				continue
			}
			for _, imp := range f.Imports {
				path, _ := strconv.Unquote(imp.Path.Value)
				if rel, ok := strings.CutPrefix(path, "github.com/tandemkit/tandem/"); ok {
					dirs = append(dirs, filepath.Join("..", filepath.FromSlash(rel)))
				}
			}
		}
	}
	consts := map[string]string{}
	ignored = map[string]bool{}
	for _, f := range files {
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || (g.Tok != token.CONST && g.Tok != token.VAR) {
				continue
			}
			for _, s := range g.Specs {
				vs := s.(*ast.ValueSpec)
				for i, n := range vs.Names {
					if i >= len(vs.Values) {
						continue
					}
					if s, ok := stringLit(vs.Values[i]); ok && g.Tok == token.CONST {
						consts[n.Name] = s
					}
					if lit, ok := vs.Values[i].(*ast.CompositeLit); ok && n.Name == "proxyOnly" {
						for _, e := range lit.Elts {
							if s, ok := stringLit(e); ok {
								ignored[s] = true
							}
						}
					}
				}
			}
		}
	}
	// pflag's definers: the name is the first argument, or the second for the *Var forms.
	definers := map[string]int{}
	for _, m := range []string{"String", "Int", "Int64", "Uint32", "Bool", "Duration", "StringSlice", "StringToString", "Float64"} {
		definers[m], definers[m+"P"], definers[m+"Var"], definers[m+"VarP"] = 0, 0, 1, 1
	}
	known = map[string]bool{}
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			i, ok := definers[sel.Sel.Name]
			if !ok || len(call.Args) <= i+1 {
				return true
			}
			if s, ok := stringLit(call.Args[i]); ok {
				known[s] = true
			} else if id, ok := call.Args[i].(*ast.Ident); ok && consts[id.Name] != "" {
				known[consts[id.Name]] = true
			}
			return true
		})
	}
	if len(known) < 10 {
		t.Fatalf("found only %v as %s's flags in %v: update agentFlags for how it defines them", known, bin, dirs)
	}
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	klogFlags.VisitAll(func(f *flag.Flag) { known[f.Name] = true })
	return known, ignored
}

func stringLit(e ast.Expr) (string, bool) {
	if l, ok := e.(*ast.BasicLit); ok && l.Kind == token.STRING {
		s, err := strconv.Unquote(l.Value)
		return s, err == nil
	}
	return "", false
}
