//go:build e2e

package cluster_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/tandemkit/tandem/e2e/cluster"
)

// TestInstalledAsDocumented checks that the cluster runs Tandem the way
// docs/install.md installs it: every step done as documented (no fallback),
// each node's tandem-proxy running the ExecStart of the unit `tandemctl node
// install` wrote, with the node's kubelet credentials (in NRI mode: the
// tandem-nri DaemonSet's pod on each node, kubelet talking to containerd),
// and tandem-extender running in the cluster from its image on the
// control-plane node, where kube-scheduler calls it.
func TestInstalledAsDocumented(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	cs := client(t)
	for _, p := range suite.c.Problems {
		t.Errorf("not installed as documented: %s", p)
	}
	if suite.c.NRI {
		checkNRIInstalled(ctx, t, cs)
	} else {
		checkProxyInstalled(t)
	}
	pods, err := cs.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=tandem-extender"})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 1 {
		t.Fatalf("%d tandem-extender pods, want one, on the control-plane node %s", len(pods.Items), cluster.NodeA)
	}
	p := pods.Items[0]
	if p.Spec.NodeName != cluster.NodeA || p.Status.Phase != corev1.PodRunning || !podReady(&p) {
		t.Errorf("tandem-extender pod %s on %q is %s (ready %v): %s; want Running and Ready on %s",
			p.Name, p.Spec.NodeName, p.Status.Phase, podReady(&p), podProblem(&p), cluster.NodeA)
	}
}

// checkProxyInstalled: each node's tandem-proxy runs the ExecStart of the
// unit `tandemctl node install` wrote, with the node's kubelet credentials,
// and kubelet has the drop-in that points it at the proxy.
func checkProxyInstalled(t *testing.T) {
	t.Helper()
	for _, n := range suite.c.Nodes {
		args := procArgs(t, suite.c.PID(proxyDaemon(n.Name)))
		if n.Unit == "" {
			t.Errorf("%s: tandem-proxy was not installed by tandemctl node install", n.Name)
			continue
		}
		b, err := os.ReadFile(n.Unit)
		if err != nil {
			t.Fatal(err)
		}
		words, err := cluster.ExecStart(b)
		if err != nil {
			t.Fatal(err)
		}
		// Options.Policies may add --policies; the rest is the unit's.
		if !slices.Equal(words, args[:min(len(words), len(args))]) {
			t.Errorf("%s: tandem-proxy runs %q, want the unit's ExecStart %q", n.Name, args, words)
		}
		for _, want := range []string{"--kubeconfig=" + n.Kubeconfig, "--node-name=" + n.Name, "--kubelet-cgroup-root=" + n.CgroupRoot} {
			if !slices.Contains(args, want) {
				t.Errorf("%s: tandem-proxy runs without %s: %q", n.Name, want, args)
			}
		}
		drops, _ := filepath.Glob(filepath.Join(n.KubeletConfigDir, "*.conf"))
		if len(drops) == 0 {
			t.Errorf("%s: no kubelet drop-in in %s", n.Name, n.KubeletConfigDir)
		}
	}
}

// procArgs returns a process's command line.
func procArgs(t *testing.T, pid int) []string {
	t.Helper()
	if pid == 0 {
		t.Fatal("process not running")
	}
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
}

// TestNodeCredentials makes, with node-a's own credentials (the kubeconfig
// tandem-proxy runs with), every request tandem-proxy needs: watch the pods
// of its node, read one, patch its Node's annotations and status, evict a
// pod of its node through the Eviction API, create an Event, read and watch
// the slo-controller-config ConfigMap. Then the requests it must not be able
// to make: patch node-b, read a Secret, evict a pod of node-b.
func TestNodeCredentials(t *testing.T) {
	if suite.c.NRI {
		t.Skip("NRI mode: the plugin acts as its ServiceAccount, not with the node's credentials (TestNRIServiceAccount)")
	}
	ctx := testContext(t, 3*time.Minute)
	admin := client(t)
	self, err := suite.c.NodeClient(cluster.NodeA)
	if err != nil {
		t.Fatal(err)
	}
	onA, onB := sleepPod("tandem-perm-a"), sleepPod("tandem-perm-b")
	onA.Spec.NodeName, onB.Spec.NodeName = cluster.NodeA, cluster.NodeB
	for _, p := range []*corev1.Pod{onA, onB} {
		if _, err := admin.CoreV1().Pods(metav1.NamespaceDefault).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create pod %s: %v", p.Name, err)
		}
		t.Cleanup(func() { deletePod(context.WithoutCancel(ctx), t, admin, p.Name) })
	}
	t.Cleanup(func() {
		// Undo the patches below.
		_, _ = admin.CoreV1().Nodes().Patch(context.WithoutCancel(ctx), cluster.NodeA, types.MergePatchType,
			[]byte(`{"metadata":{"annotations":{"tandem.io/e2e-permission":null}}}`), metav1.PatchOptions{})
		_, _ = admin.CoreV1().Nodes().Patch(context.WithoutCancel(ctx), cluster.NodeA, types.MergePatchType,
			[]byte(`{"status":{"capacity":{"tandem.io/e2e-permission":null}}}`), metav1.PatchOptions{}, "status")
	})
	podA := waitPodRunning(ctx, t, admin, onA.Name, 2*time.Minute)
	onNodeA := fields.OneTermEqualSelector("spec.nodeName", cluster.NodeA).String()

	allowed := []struct {
		name string
		do   func(context.Context) error
	}{
		{"list the pods of its node", func(ctx context.Context) error {
			l, err := self.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: onNodeA})
			if err == nil && !slices.ContainsFunc(l.Items, func(p corev1.Pod) bool { return p.UID == podA.UID }) {
				t.Errorf("the list of node-a's pods lacks %s", podA.Name)
			}
			return err
		}},
		{"watch the pods of its node", func(ctx context.Context) error {
			w, err := self.CoreV1().Pods(metav1.NamespaceAll).Watch(ctx, metav1.ListOptions{FieldSelector: onNodeA})
			if err == nil {
				w.Stop()
			}
			return err
		}},
		{"get a pod of its node", func(ctx context.Context) error {
			_, err := self.CoreV1().Pods(metav1.NamespaceDefault).Get(ctx, podA.Name, metav1.GetOptions{})
			return err
		}},
		{"patch its Node's annotations", func(ctx context.Context) error {
			_, err := self.CoreV1().Nodes().Patch(ctx, cluster.NodeA, types.MergePatchType,
				[]byte(`{"metadata":{"annotations":{"tandem.io/e2e-permission":"yes"}}}`), metav1.PatchOptions{})
			return err
		}},
		{"patch its Node's status", func(ctx context.Context) error {
			_, err := self.CoreV1().Nodes().Patch(ctx, cluster.NodeA, types.MergePatchType,
				[]byte(`{"status":{"capacity":{"tandem.io/e2e-permission":"1"}}}`), metav1.PatchOptions{}, "status")
			return err
		}},
		{"create an Event", func(ctx context.Context) error {
			ev := &corev1.Event{
				ObjectMeta:     metav1.ObjectMeta{GenerateName: "tandem-perm-", Namespace: metav1.NamespaceDefault},
				InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: podA.Namespace, Name: podA.Name, UID: podA.UID},
				Reason:         "TandemE2E", Message: "permission check", Type: corev1.EventTypeNormal,
				Source: corev1.EventSource{Component: "tandem-proxy", Host: cluster.NodeA},
			}
			_, err := self.CoreV1().Events(metav1.NamespaceDefault).Create(ctx, ev, metav1.CreateOptions{})
			return err
		}},
		{"read the slo-controller-config", func(ctx context.Context) error {
			_, err := self.CoreV1().ConfigMaps(sloNamespace).Get(ctx, sloName, metav1.GetOptions{})
			return err
		}},
		{"watch the slo-controller-config", func(ctx context.Context) error {
			w, err := self.CoreV1().ConfigMaps(sloNamespace).Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", sloName).String()})
			if err == nil {
				w.Stop()
			}
			return err
		}},
		{"evict a pod of its node", func(ctx context.Context) error {
			return self.PolicyV1().Evictions(metav1.NamespaceDefault).Evict(ctx, &policyv1.Eviction{
				ObjectMeta: metav1.ObjectMeta{Name: podA.Name, Namespace: metav1.NamespaceDefault},
			})
		}},
	}
	for _, a := range allowed {
		t.Run("may "+a.name, func(t *testing.T) {
			if err := a.do(ctx); err != nil {
				t.Errorf("as system:node:%s: %v", cluster.NodeA, err)
			}
		})
	}
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := admin.CoreV1().Pods(metav1.NamespaceDefault).Get(ctx, podA.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Errorf("pod %s still there a minute after node-a's eviction", podA.Name)
	}

	denied := []struct {
		name string
		do   func(context.Context) error
	}{
		{"patch the other Node", func(ctx context.Context) error {
			_, err := self.CoreV1().Nodes().Patch(ctx, cluster.NodeB, types.MergePatchType,
				[]byte(`{"metadata":{"annotations":{"tandem.io/e2e-permission":"yes"}}}`), metav1.PatchOptions{})
			return err
		}},
		{"patch the other Node's status", func(ctx context.Context) error {
			_, err := self.CoreV1().Nodes().Patch(ctx, cluster.NodeB, types.MergePatchType,
				[]byte(`{"status":{"capacity":{"tandem.io/e2e-permission":"1"}}}`), metav1.PatchOptions{}, "status")
			return err
		}},
		{"evict a pod of the other node", func(ctx context.Context) error {
			return self.PolicyV1().Evictions(metav1.NamespaceDefault).Evict(ctx, &policyv1.Eviction{
				ObjectMeta: metav1.ObjectMeta{Name: onB.Name, Namespace: metav1.NamespaceDefault},
			})
		}},
		{"read a Secret", func(ctx context.Context) error {
			_, err := self.CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{})
			return err
		}},
		{"delete a pod", func(ctx context.Context) error {
			return self.CoreV1().Pods(metav1.NamespaceDefault).Delete(ctx, onB.Name, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
		}},
	}
	for _, d := range denied {
		t.Run("may not "+d.name, func(t *testing.T) {
			if err := d.do(ctx); !apierrors.IsForbidden(err) {
				t.Errorf("as system:node:%s: got %v, want Forbidden", cluster.NodeA, err)
			}
		})
	}
}
