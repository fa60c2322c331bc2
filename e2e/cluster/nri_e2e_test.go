//go:build e2e

package cluster_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/tandemkit/tandem/e2e/cluster"
)

// checkNRIInstalled: in NRI mode every node runs a Ready pod of deploy/nri's
// DaemonSet from the image the manifest names, whose process has the node's
// own values for what the cluster's patch sets per node; kubelet talks to
// its containerd, with no drop-in and no tandem-proxy beside it.
func checkNRIInstalled(ctx context.Context, t *testing.T, cs kubernetes.Interface) {
	t.Helper()
	b, err := os.ReadFile(repoPath(t, "deploy/nri/daemonset.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var shipped appsv1.DaemonSet
	if err := yaml.Unmarshal(b, &shipped); err != nil {
		t.Fatal(err)
	}
	for _, n := range suite.c.Nodes {
		p, err := suite.c.AgentPod(ctx, n.Name)
		if err != nil {
			t.Errorf("%s: %v", n.Name, err)
			continue
		}
		if p.Status.Phase != corev1.PodRunning || !podReady(p) {
			t.Errorf("%s: %s pod %s is %s (ready %v): %s", n.Name, cluster.NRIDaemonSet, p.Name, p.Status.Phase, podReady(p), podProblem(p))
		}
		if got, want := p.Spec.Containers[0].Image, shipped.Spec.Template.Spec.Containers[0].Image; got != want {
			t.Errorf("%s: %s runs image %s, want deploy/nri's %s", n.Name, p.Name, got, want)
		}
		args := procArgs(t, suite.c.AgentPID(n.Name))
		for _, want := range []string{"--node-name=" + n.Name, "--kubelet-cgroup-root=" + n.CgroupRoot, "--nri-socket=/var/run/nri/" + n.Name + "/nri.sock"} {
			if !slices.Contains(args, want) {
				t.Errorf("%s: tandem-nri runs without %s: %q", n.Name, want, args)
			}
		}
		if suite.c.PID(proxyDaemon(n.Name)) != 0 {
			t.Errorf("%s: a tandem-proxy runs beside the NRI plugin", n.Name)
		}
		if drops, _ := filepath.Glob(filepath.Join(n.KubeletConfigDir, "*.conf")); len(drops) != 0 {
			t.Errorf("%s: kubelet drop-ins %v: in NRI mode kubelet is not changed", n.Name, drops)
		}
		kc, err := os.ReadFile(filepath.Join(n.Dir, "kubelet-config.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		var cfg struct {
			ContainerRuntimeEndpoint string `json:"containerRuntimeEndpoint"`
		}
		if err := yaml.Unmarshal(kc, &cfg); err != nil || cfg.ContainerRuntimeEndpoint != n.ContainerdEndpoint() {
			t.Errorf("%s: kubelet's containerRuntimeEndpoint %q (%v), want its containerd's %s", n.Name, cfg.ContainerRuntimeEndpoint, err, n.ContainerdEndpoint())
		}
	}
}

// TestNRIServiceAccount makes, with a token of the tandem-nri
// ServiceAccount bound to node-a's plugin pod (what that pod's projected
// token is), every request the plugin needs, then those it must not be able
// to make: RBAC refuses what deploy/nri's ClusterRole does not grant, and its
// ValidatingAdmissionPolicy refuses changes to any Node but the plugin's
// own, and any Node change with a token bound to no pod.
func TestNRIServiceAccount(t *testing.T) {
	if !suite.c.NRI {
		t.Skip("tandem-proxy acts with its node's credentials (TestNodeCredentials)")
	}
	ctx := testContext(t, 3*time.Minute)
	admin := client(t)
	agent, err := suite.c.AgentPod(ctx, cluster.NodeA)
	if err != nil {
		t.Fatal(err)
	}
	sa := agent.Spec.ServiceAccountName
	bound := saClient(ctx, t, admin, sa, agent)
	unbound := saClient(ctx, t, admin, sa, nil)

	onA, onB := sleepPod("tandem-nri-perm-a"), sleepPod("tandem-nri-perm-b")
	onA.Spec.NodeName, onB.Spec.NodeName = cluster.NodeA, cluster.NodeB
	for _, p := range []*corev1.Pod{onA, onB} {
		if _, err := admin.CoreV1().Pods(metav1.NamespaceDefault).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create pod %s: %v", p.Name, err)
		}
		t.Cleanup(func() { deletePod(context.WithoutCancel(ctx), t, admin, p.Name) })
	}
	t.Cleanup(func() {
		ctx := context.WithoutCancel(ctx)
		_, _ = admin.CoreV1().Nodes().Patch(ctx, cluster.NodeA, types.MergePatchType,
			[]byte(`{"metadata":{"annotations":{"tandem.io/e2e-permission":null}}}`), metav1.PatchOptions{})
		_, _ = admin.CoreV1().Nodes().Patch(ctx, cluster.NodeA, types.MergePatchType,
			[]byte(`{"status":{"capacity":{"tandem.io/e2e-permission":null}}}`), metav1.PatchOptions{}, "status")
	})
	podA := waitPodRunning(ctx, t, admin, onA.Name, 2*time.Minute)
	onNodeA := fields.OneTermEqualSelector("spec.nodeName", cluster.NodeA).String()
	annotate := []byte(`{"metadata":{"annotations":{"tandem.io/e2e-permission":"yes"}}}`)
	capacity := []byte(`{"status":{"capacity":{"tandem.io/e2e-permission":"1"}}}`)

	allowed := []struct {
		name string
		do   func(context.Context) error
	}{
		{"list and watch the pods of its node", func(ctx context.Context) error {
			if _, err := bound.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: onNodeA}); err != nil {
				return err
			}
			w, err := bound.CoreV1().Pods(metav1.NamespaceAll).Watch(ctx, metav1.ListOptions{FieldSelector: onNodeA})
			if err == nil {
				w.Stop()
			}
			return err
		}},
		{"get a pod of its node", func(ctx context.Context) error {
			_, err := bound.CoreV1().Pods(metav1.NamespaceDefault).Get(ctx, podA.Name, metav1.GetOptions{})
			return err
		}},
		{"get, list and watch its Node", func(ctx context.Context) error {
			if _, err := bound.CoreV1().Nodes().Get(ctx, cluster.NodeA, metav1.GetOptions{}); err != nil {
				return err
			}
			w, err := bound.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", cluster.NodeA).String()})
			if err == nil {
				w.Stop()
			}
			return err
		}},
		{"patch its Node's annotations", func(ctx context.Context) error {
			_, err := bound.CoreV1().Nodes().Patch(ctx, cluster.NodeA, types.MergePatchType, annotate, metav1.PatchOptions{})
			return err
		}},
		{"patch its Node's status", func(ctx context.Context) error {
			_, err := bound.CoreV1().Nodes().Patch(ctx, cluster.NodeA, types.MergePatchType, capacity, metav1.PatchOptions{}, "status")
			return err
		}},
		{"create an Event", func(ctx context.Context) error {
			ev := &corev1.Event{
				ObjectMeta:     metav1.ObjectMeta{GenerateName: "tandem-nri-perm-", Namespace: metav1.NamespaceDefault},
				InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: podA.Namespace, Name: podA.Name, UID: podA.UID},
				Reason:         "TandemE2E", Message: "permission check", Type: corev1.EventTypeNormal,
				Source: corev1.EventSource{Component: cluster.NRIBinary, Host: cluster.NodeA},
			}
			_, err := bound.CoreV1().Events(metav1.NamespaceDefault).Create(ctx, ev, metav1.CreateOptions{})
			return err
		}},
		{"list and watch the slo-controller-config", func(ctx context.Context) error {
			byName := metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", sloName).String()}
			if _, err := bound.CoreV1().ConfigMaps(sloNamespace).List(ctx, byName); err != nil {
				return err
			}
			w, err := bound.CoreV1().ConfigMaps(sloNamespace).Watch(ctx, byName)
			if err == nil {
				w.Stop()
			}
			return err
		}},
		{"evict a pod", func(ctx context.Context) error {
			return bound.PolicyV1().Evictions(metav1.NamespaceDefault).Evict(ctx, &policyv1.Eviction{
				ObjectMeta: metav1.ObjectMeta{Name: podA.Name, Namespace: metav1.NamespaceDefault},
			})
		}},
	}
	for _, a := range allowed {
		t.Run("may "+a.name, func(t *testing.T) {
			if err := a.do(ctx); err != nil {
				t.Errorf("as tandem-nri on %s: %v", cluster.NodeA, err)
			}
		})
	}

	// What refuses: RBAC (Forbidden), or the ValidatingAdmissionPolicy of deploy/nri (Invalid, naming it).
	rbac := apierrors.IsForbidden
	ownNode := func(err error) bool {
		return apierrors.IsInvalid(err) && strings.Contains(err.Error(), "tandem-nri-own-node")
	}
	denied := []struct {
		name    string
		refused func(error) bool
		do      func(context.Context) error
	}{
		{"patch the other Node", ownNode, func(ctx context.Context) error {
			_, err := bound.CoreV1().Nodes().Patch(ctx, cluster.NodeB, types.MergePatchType, annotate, metav1.PatchOptions{})
			return err
		}},
		{"patch the other Node's status", ownNode, func(ctx context.Context) error {
			_, err := bound.CoreV1().Nodes().Patch(ctx, cluster.NodeB, types.MergePatchType, capacity, metav1.PatchOptions{}, "status")
			return err
		}},
		{"patch a Node with a token bound to no pod", ownNode, func(ctx context.Context) error {
			_, err := unbound.CoreV1().Nodes().Patch(ctx, cluster.NodeA, types.MergePatchType, annotate, metav1.PatchOptions{})
			return err
		}},
		{"read a Secret", rbac, func(ctx context.Context) error {
			_, err := bound.CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{})
			return err
		}},
		{"read another ConfigMap of its namespace", rbac, func(ctx context.Context) error {
			_, err := bound.CoreV1().ConfigMaps(sloNamespace).Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
			return err
		}},
		{"delete a pod", rbac, func(ctx context.Context) error {
			return bound.CoreV1().Pods(metav1.NamespaceDefault).Delete(ctx, onB.Name, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
		}},
	}
	for _, d := range denied {
		t.Run("may not "+d.name, func(t *testing.T) {
			if err := d.do(ctx); !d.refused(err) {
				t.Errorf("as tandem-nri on %s: got %v, want it refused", cluster.NodeA, err)
			} else {
				t.Logf("refused: %v", err)
			}
		})
	}
}

// saClient returns a client acting as ServiceAccount sa of tandem-nri's
// namespace with a token bound to pod, as kubelet projects it into the pod,
// or bound to nothing when pod is nil.
func saClient(ctx context.Context, t *testing.T, admin kubernetes.Interface, sa string, pod *corev1.Pod) kubernetes.Interface {
	t.Helper()
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)}}
	if pod != nil {
		req.Spec.BoundObjectRef = &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}
	}
	tok, err := admin.CoreV1().ServiceAccounts(cluster.NRINamespace).CreateToken(ctx, sa, req, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token for ServiceAccount %s/%s: %v", cluster.NRINamespace, sa, err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", suite.c.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.BearerToken, cfg.BearerTokenFile = tok.Status.Token, ""
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}
