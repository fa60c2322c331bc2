//go:build e2e

package cluster_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/tandemkit/tandem/e2e/cluster"
	"github.com/tandemkit/tandem/e2e/framework"
)

// seedDeployments are seed 000's Deployments, in testdata/seed-000.yaml,
// with the Koordinator QoS class and PriorityClass each one carries and the
// Kubernetes QoS class its resources give it.
var seedDeployments = []struct {
	name, qos, priorityClass string
	priority                 int32
	k8sQoS                   corev1.PodQOSClass
}{
	{"nginx-lse", "LSE", "koord-prod", 9000, corev1.PodQOSBurstable},
	{"nginx-lsr", "LSR", "koord-prod", 9000, corev1.PodQOSBurstable},
	{"nginx-ls", "LS", "koord-prod", 9000, corev1.PodQOSBurstable},
	{"nginx-be", "BE", "koord-batch", 5000, corev1.PodQOSBestEffort},
}

func repoPath(t *testing.T, rel string) string {
	t.Helper()
	root, err := cluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(root, rel)
}

func client(t *testing.T) kubernetes.Interface {
	t.Helper()
	cs, err := suite.c.Client()
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// applyDeploy installs deploy/ with `kubectl apply -k`, as the README tells
// users to. It is idempotent, so every test that needs it calls it.
func applyDeploy(ctx context.Context, t *testing.T) {
	t.Helper()
	if out, err := suite.c.RunKubectl(ctx, "apply", "-k", repoPath(t, "deploy")); err != nil {
		t.Fatalf("apply deploy/: %v", err)
	} else {
		t.Logf("kubectl apply -k deploy/:\n%s", out)
	}
}

// TestDeployManifests applies deploy/ and checks that the cluster then has
// what Tandem's workloads and node agent rely on.
func TestDeployManifests(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	applyDeploy(ctx, t)
	cs := client(t)

	t.Run("PriorityClasses", func(t *testing.T) {
		for name, want := range map[string]int32{"koord-prod": 9000, "koord-mid": 7000, "koord-batch": 5000, "koord-free": 3000} {
			pc, err := cs.SchedulingV1().PriorityClasses().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Errorf("PriorityClass %s after kubectl apply -k deploy/: %v", name, err)
				continue
			}
			if pc.Value != want {
				t.Errorf("PriorityClass %s has value %d, want %d", name, pc.Value, want)
			}
		}
	})

	t.Run("ServiceAccount", func(t *testing.T) {
		if _, err := cs.CoreV1().ServiceAccounts("tandem-system").Get(ctx, "tandem-node", metav1.GetOptions{}); err != nil {
			t.Errorf("ServiceAccount tandem-system/tandem-node: %v", err)
		}
	})

	// The API server's own authorizer answers, for the node agent's
	// identity, whether each request it needs is allowed.
	const agent = "system:serviceaccount:tandem-system:tandem-node"
	tests := []struct {
		verb, group, resource, sub string
		allowed                    bool
	}{
		{"get", "", "nodes", "", true},
		{"list", "", "nodes", "", true},
		{"watch", "", "nodes", "", true},
		{"patch", "", "nodes", "", true},
		{"patch", "", "nodes", "status", true},
		{"get", "", "pods", "", true},
		{"list", "", "pods", "", true},
		{"watch", "", "pods", "", true},
		{"create", "", "pods", "eviction", true},
		{"create", "", "events", "", true},
		{"create", "events.k8s.io", "events", "", true},
		{"delete", "", "pods", "", false},
		{"update", "", "pods", "", false},
		{"get", "", "secrets", "", false},
		{"delete", "", "nodes", "", false},
	}
	for _, tc := range tests {
		name := fmt.Sprintf("%s %s/%s", tc.verb, tc.resource, tc.sub)
		t.Run("RBAC "+name, func(t *testing.T) {
			sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User:   agent,
				Groups: []string{"system:serviceaccounts", "system:serviceaccounts:tandem-system", "system:authenticated"},
				ResourceAttributes: &authorizationv1.ResourceAttributes{
					Verb: tc.verb, Group: tc.group, Resource: tc.resource, Subresource: tc.sub, Namespace: "default",
				},
			}}
			if tc.resource == "nodes" {
				sar.Spec.ResourceAttributes.Namespace = ""
			}
			got, err := cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
			if err != nil {
				t.Fatalf("SubjectAccessReview: %v", err)
			}
			if got.Status.Allowed != tc.allowed {
				t.Errorf("%s may %s: allowed=%v (%s), want %v", agent, name, got.Status.Allowed, got.Status.Reason, tc.allowed)
			}
		})
	}
}

// podSnapshot is what must not change across a proxy or containerd restart.
type podSnapshot struct {
	podName, uid, containerID, sandboxID string
	restarts                             int32
	startedAt                            int64 // from the runtime, ns
}

// runningSeedPods waits until each seed Deployment has exactly one Ready pod
// and returns them by Deployment name.
func runningSeedPods(ctx context.Context, t *testing.T, cs kubernetes.Interface, timeout time.Duration) map[string]*corev1.Pod {
	t.Helper()
	var pods map[string]*corev1.Pod
	var last string
	err := wait.PollUntilContextTimeout(ctx, time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		pods = map[string]*corev1.Pod{}
		for _, d := range seedDeployments {
			list, err := cs.CoreV1().Pods(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{LabelSelector: "app=" + d.name})
			if err != nil {
				last = err.Error()
				return false, nil
			}
			var live []corev1.Pod
			for _, p := range list.Items {
				if p.DeletionTimestamp == nil {
					live = append(live, p)
				}
			}
			if len(live) != 1 {
				last = fmt.Sprintf("%s has %d pods", d.name, len(live))
				return false, nil
			}
			p := live[0]
			if p.Status.Phase != corev1.PodRunning || !podReady(&p) {
				last = fmt.Sprintf("pod %s is %s, ready=%v: %s", p.Name, p.Status.Phase, podReady(&p), podProblem(&p))
				return false, nil
			}
			pods[d.name] = &p
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("seed pods not Running and Ready within %s (last: %s); see %s and %s: %v",
			timeout, last, suite.c.Logs(cluster.Kubelet), suite.c.Logs(cluster.TandemProxy), err)
	}
	return pods
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// podProblem says why a pod is not running yet, from its conditions and
// container states.
func podProblem(p *corev1.Pod) string {
	var out []string
	for _, c := range p.Status.Conditions {
		if c.Status != corev1.ConditionTrue && c.Message != "" {
			out = append(out, fmt.Sprintf("%s: %s", c.Type, c.Message))
		}
	}
	for _, s := range p.Status.ContainerStatuses {
		if w := s.State.Waiting; w != nil {
			out = append(out, fmt.Sprintf("container %s waiting: %s %s", s.Name, w.Reason, w.Message))
		}
		if term := s.State.Terminated; term != nil {
			out = append(out, fmt.Sprintf("container %s terminated: %s exit %d", s.Name, term.Reason, term.ExitCode))
		}
	}
	return strings.Join(out, "; ")
}

// criClient connects to containerd itself, bypassing the proxy, with the CRI
// client kubelet uses: the checks must not trust the component under test.
func criClient(ctx context.Context, t *testing.T) internalapi.RuntimeService {
	t.Helper()
	rs, _, err := framework.NewCRIClients(ctx, suite.c.ContainerdEndpoint())
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

// snapshot records, per seed Deployment, the pod's identity as the API
// server and the runtime see it.
func snapshot(ctx context.Context, t *testing.T, cs kubernetes.Interface, rs internalapi.RuntimeService) map[string]podSnapshot {
	t.Helper()
	pods := runningSeedPods(ctx, t, cs, 2*time.Minute)
	out := map[string]podSnapshot{}
	for name, p := range pods {
		st := p.Status.ContainerStatuses[0]
		id := strings.TrimPrefix(st.ContainerID, "containerd://")
		resp, err := rs.ContainerStatus(ctx, id, false)
		if err != nil {
			t.Fatalf("ContainerStatus %s (pod %s) from containerd: %v", id, p.Name, err)
		}
		out[name] = podSnapshot{
			podName: p.Name, uid: string(p.UID), containerID: st.ContainerID, restarts: st.RestartCount,
			startedAt: resp.GetStatus().GetStartedAt(),
		}
		sandboxes, err := rs.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{"io.kubernetes.pod.uid": string(p.UID)}})
		if err != nil {
			t.Fatalf("ListPodSandbox for pod %s from containerd: %v", p.Name, err)
		}
		var ids []string
		for _, s := range sandboxes {
			if s.GetState() == runtimeapi.PodSandboxState_SANDBOX_READY {
				ids = append(ids, s.GetId())
			}
		}
		if len(ids) != 1 {
			t.Fatalf("pod %s has %d ready sandboxes in containerd, want 1: %v", p.Name, len(ids), ids)
		}
		snap := out[name]
		snap.sandboxID = ids[0]
		out[name] = snap
	}
	return out
}

// sameSnapshots fails unless every pod kept its uid, sandbox, container
// (same id, same start time) and restart count.
func sameSnapshots(t *testing.T, what string, before, after map[string]podSnapshot) {
	t.Helper()
	for name, b := range before {
		a, ok := after[name]
		switch {
		case !ok:
			t.Errorf("after %s: %s has no running pod", what, name)
		case a != b:
			t.Errorf("after %s: %s changed:\n  before %+v\n  after  %+v", what, name, b, a)
		}
	}
}

// proxyOKCalls returns, from the proxy's /metrics, how many calls of each
// method it has answered with OK since it started.
func proxyOKCalls(ctx context.Context, t *testing.T) map[string]float64 {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+suite.c.ProxyMetrics+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("get tandem-proxy /metrics: %v", err)
	}
	defer resp.Body.Close()
	re := regexp.MustCompile(`^tandem_proxy_requests_total\{code="OK",method="([^"]+)"\} (\S+)$`)
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if m := re.FindStringSubmatch(sc.Text()); m != nil {
			v, _ := strconv.ParseFloat(m[2], 64)
			out[m[1]] = v
		}
	}
	return out
}

// nodeStaysReady polls the node for d and fails if it is ever not Ready.
func nodeStaysReady(ctx context.Context, t *testing.T, cs kubernetes.Interface, d time.Duration) {
	t.Helper()
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		n, err := cs.CoreV1().Nodes().Get(ctx, cluster.NodeName, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("get node: %v", err)
		}
		if !cluster.NodeReady(n) {
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady {
					t.Fatalf("node turned %s: %s: %s", c.Status, c.Reason, c.Message)
				}
			}
		}
		time.Sleep(time.Second)
	}
}

// kubeletCallsSucceed waits until kubelet has made successful calls through
// the (restarted) proxy: its periodic relist and status calls.
func kubeletCallsSucceed(ctx context.Context, t *testing.T) {
	t.Helper()
	var last map[string]float64
	err := wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		last = proxyOKCalls(ctx, t)
		return last["/runtime.v1.RuntimeService/ListPodSandbox"] > 0 &&
			last["/runtime.v1.RuntimeService/ListContainers"] > 0 &&
			last["/runtime.v1.RuntimeService/Status"] > 0, nil
	})
	if err != nil {
		t.Fatalf("kubelet made no successful ListPodSandbox, ListContainers and Status calls through the restarted proxy within a minute (OK counts: %v): %v", last, err)
	}
}

// execEcho runs a command in pod through kubectl exec, with stdin, and
// checks both directions of the stream.
func execEcho(ctx context.Context, t *testing.T, pod string) {
	t.Helper()
	cmd := suite.c.KubectlCommand(ctx, "exec", "-i", pod, "--", "sh", "-c", "echo $((6*7)); hostname; cat")
	cmd.Stdin = strings.NewReader("from stdin\n")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl exec %s: %v: %s", pod, err, out)
	}
	if want := "42\n" + pod + "\nfrom stdin\n"; string(out) != want {
		t.Fatalf("kubectl exec %s printed %q, want %q", pod, out, want)
	}
}

var forwarding = regexp.MustCompile(`Forwarding from 127\.0\.0\.1:(\d+) -> 8080`)

// portForward runs kubectl port-forward to the pod's httpd and fetches the
// page the pod wrote at start.
func portForward(ctx context.Context, t *testing.T, pod string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cmd := suite.c.KubectlCommand(ctx, "port-forward", "pod/"+pod, ":8080")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start kubectl port-forward: %v", err)
	}
	defer func() {
		cancel()
		cmd.Wait() //nolint:errcheck // killed on purpose
	}()
	port := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := forwarding.FindStringSubmatch(sc.Text()); m != nil {
				port <- m[1]
			}
		}
		io.Copy(io.Discard, stdout) //nolint:errcheck // drain
	}()
	var p string
	select {
	case p = <-port:
	case <-ctx.Done():
		t.Fatalf("kubectl port-forward %s never said where it listens: %s", pod, stderr.String())
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1:"+p+"/index.html", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET through kubectl port-forward %s: %v (kubectl: %s)", pod, err, stderr.String())
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := "hello from " + pod + "\n"; resp.StatusCode != http.StatusOK || string(body) != want {
		t.Fatalf("GET through kubectl port-forward %s: %d %q, want 200 %q", pod, resp.StatusCode, body, want)
	}
}

// deleteSeed deletes the seed Deployments and waits until their pods are
// gone from the API server.
func deleteSeed(ctx context.Context, cs kubernetes.Interface) error {
	fg := metav1.DeletePropagationForeground
	for _, d := range seedDeployments {
		err := cs.AppsV1().Deployments(metav1.NamespaceDefault).Delete(ctx, d.name, metav1.DeleteOptions{PropagationPolicy: &fg})
		if err != nil && !cluster.IsNotFound(err) {
			return fmt.Errorf("delete deployment %s: %w", d.name, err)
		}
	}
	var last string
	err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, d := range seedDeployments {
			list, err := cs.CoreV1().Pods(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{LabelSelector: "app=" + d.name})
			if err != nil {
				last = err.Error()
				return false, nil
			}
			if len(list.Items) > 0 {
				last = fmt.Sprintf("%d pods of %s remain", len(list.Items), d.name)
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("seed pods not gone (%s): %w", last, err)
	}
	return nil
}

// TestSeed000 runs seed 000's four Deployments through kubelet → tandem-proxy
// → containerd and checks what a user would: they run, kubectl logs, exec and
// port-forward work, a killed proxy or a restarted containerd costs no pod a
// restart, and deleting them leaves nothing in the runtime. The steps share
// the pods, so a failing step ends the test; the clean-up deletes the
// Deployments whatever happened.
func TestSeed000(t *testing.T) {
	ctx := testContext(t, 15*time.Minute)
	cs := client(t)
	rs := criClient(ctx, t)
	applyDeploy(ctx, t)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if err := deleteSeed(ctx, cs); err != nil {
			t.Errorf("clean-up: %v", err)
		}
	})

	start := time.Now()
	if out, err := suite.c.RunKubectl(ctx, "apply", "-f", repoPath(t, "e2e/cluster/testdata/seed-000.yaml")); err != nil {
		t.Fatalf("apply seed 000: %v", err)
	} else {
		t.Logf("%s", out)
	}
	pods := runningSeedPods(ctx, t, cs, 3*time.Minute)
	t.Logf("4 seed pods Running and Ready in %s", time.Since(start).Round(100*time.Millisecond))

	t.Run("pods run through the proxy", func(t *testing.T) {
		for _, d := range seedDeployments {
			p := pods[d.name]
			if p.Labels["koordinator.sh/qosClass"] != d.qos {
				t.Errorf("pod %s has koordinator.sh/qosClass %q, want %q", p.Name, p.Labels["koordinator.sh/qosClass"], d.qos)
			}
			if p.Spec.PriorityClassName != d.priorityClass || p.Spec.Priority == nil || *p.Spec.Priority != d.priority {
				t.Errorf("pod %s has priority class %q value %v, want %q %d", p.Name, p.Spec.PriorityClassName, p.Spec.Priority, d.priorityClass, d.priority)
			}
			if p.Status.QOSClass != d.k8sQoS {
				t.Errorf("pod %s has QoS class %s, want %s", p.Name, p.Status.QOSClass, d.k8sQoS)
			}
			if p.Spec.NodeName != cluster.NodeName {
				t.Errorf("pod %s runs on %q, want %s", p.Name, p.Spec.NodeName, cluster.NodeName)
			}
		}
		// The proxy saw every sandbox and container kubelet created: its
		// store is filled from the lifecycle calls it carried.
		st := proxyStore(ctx, t)
		for _, d := range seedDeployments {
			p := pods[d.name]
			var sandbox string
			for _, sp := range st.Pods {
				if sp.UID == string(p.UID) && sp.State == "SANDBOX_READY" {
					sandbox = sp.ID
				}
			}
			if sandbox == "" {
				t.Errorf("tandem-proxy's store has no ready sandbox for pod %s (uid %s): kubelet did not go through the proxy", p.Name, p.UID)
				continue
			}
			id := strings.TrimPrefix(p.Status.ContainerStatuses[0].ContainerID, "containerd://")
			var found bool
			for _, sc := range st.Containers {
				if sc.ID == id && sc.PodSandboxID == sandbox {
					found = true
				}
			}
			if !found {
				t.Errorf("tandem-proxy's store lacks container %s of pod %s", id, p.Name)
			}
		}
		// Faithful carrying: without policies, the CPU limit kubelet asked
		// for is what runc wrote (250m = 25ms per 100ms period).
		if os.Getenv("TANDEM_CLUSTER_POLICIES") == "" {
			for _, d := range seedDeployments {
				p := pods[d.name]
				id := strings.TrimPrefix(p.Status.ContainerStatuses[0].ContainerID, "containerd://")
				qosDir := map[corev1.PodQOSClass]string{corev1.PodQOSBurstable: "burstable", corev1.PodQOSBestEffort: "besteffort"}[d.k8sQoS]
				f := filepath.Join("/sys/fs/cgroup/cpu", suite.c.CgroupRoot, "kubepods", qosDir, "pod"+string(p.UID), id, "cpu.cfs_quota_us")
				b, err := os.ReadFile(f)
				if err != nil {
					t.Errorf("read %s: %v", f, err)
					continue
				}
				want := "25000"
				if d.k8sQoS == corev1.PodQOSBestEffort {
					want = "-1"
				}
				if got := strings.TrimSpace(string(b)); got != want {
					t.Errorf("pod %s: %s = %s, want %s", p.Name, f, got, want)
				}
			}
		}
		// Pod networking: the readiness probe reached httpd on the pod IP,
		// and each pod has a veth on the cluster's bridge.
		if v := suite.c.Veths(); len(v) < len(seedDeployments) {
			t.Errorf("bridge %s has %d veths (%v), want at least %d", suite.c.Bridge(), len(v), v, len(seedDeployments))
		}
	})

	t.Run("kubectl logs", func(t *testing.T) {
		for _, d := range seedDeployments {
			p := pods[d.name]
			out, err := suite.c.RunKubectl(ctx, "logs", p.Name)
			if err != nil {
				t.Fatal(err)
			}
			if want := "tandem-e2e " + p.Name + " serving on :8080"; !strings.Contains(string(out), want) {
				t.Errorf("kubectl logs %s printed %q, want a line %q", p.Name, out, want)
			}
		}
	})

	t.Run("kubectl exec", func(t *testing.T) {
		for _, d := range seedDeployments {
			execEcho(ctx, t, pods[d.name].Name)
		}
	})

	t.Run("kubectl port-forward", func(t *testing.T) {
		portForward(ctx, t, pods["nginx-ls"].Name)
	})
	if t.Failed() {
		t.FailNow()
	}

	t.Run("SIGKILL tandem-proxy and restart it", func(t *testing.T) {
		before := snapshot(ctx, t, cs, rs)
		oldPID := suite.c.PID(cluster.TandemProxy)
		if err := suite.c.KillDaemon(ctx, cluster.TandemProxy); err != nil {
			t.Fatalf("SIGKILL tandem-proxy: %v", err)
		}
		if err := suite.c.StartDaemon(ctx, cluster.TandemProxy); err != nil {
			t.Fatalf("restart tandem-proxy: %v", err)
		}
		if newPID := suite.c.PID(cluster.TandemProxy); newPID == 0 || newPID == oldPID {
			t.Fatalf("tandem-proxy pid %d after restart, was %d", newPID, oldPID)
		}
		kubeletCallsSucceed(ctx, t)
		// Two node status updates (every 5s) and a runtime status check
		// happen in this window.
		nodeStaysReady(ctx, t, cs, 12*time.Second)
		sameSnapshots(t, "SIGKILL of tandem-proxy", before, snapshot(ctx, t, cs, rs))
		// Streaming calls go through the new process too.
		execEcho(ctx, t, pods["nginx-lse"].Name)
	})

	t.Run("restart containerd", func(t *testing.T) {
		before := snapshot(ctx, t, cs, rs)
		ctrd, err := suite.c.Containerd(ctx)
		if err != nil {
			t.Fatal(err)
		}
		oldPID := ctrd.PID()
		if err := ctrd.Restart(ctx); err != nil {
			t.Fatalf("restart containerd: %v", err)
		}
		if ctrd.PID() == oldPID {
			t.Fatalf("containerd pid unchanged (%d) after restart", oldPID)
		}
		if suite.c.PID(cluster.TandemProxy) == 0 {
			t.Fatalf("tandem-proxy died with containerd: see %s", suite.c.Logs(cluster.TandemProxy))
		}
		if suite.c.PID(cluster.Kubelet) == 0 {
			t.Fatalf("kubelet died with containerd: see %s", suite.c.Logs(cluster.Kubelet))
		}
		// The proxy is ready again once containerd answers through it.
		err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+suite.c.ProxyMetrics+"/readyz", nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return false, nil
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK, nil
		})
		if err != nil {
			t.Fatalf("tandem-proxy not ready within a minute of containerd's restart: see %s", suite.c.Logs(cluster.TandemProxy))
		}
		nodeStaysReady(ctx, t, cs, 12*time.Second)
		sameSnapshots(t, "containerd restart", before, snapshot(ctx, t, cs, rs))
		execEcho(ctx, t, pods["nginx-lsr"].Name)
		portForward(ctx, t, pods["nginx-be"].Name)
	})
	if t.Failed() {
		t.FailNow()
	}

	t.Run("deleting the Deployments removes every container and sandbox", func(t *testing.T) {
		uids := map[string]string{}
		for _, d := range seedDeployments {
			uids[string(pods[d.name].UID)] = pods[d.name].Name
		}
		t0 := time.Now()
		if err := deleteSeed(ctx, cs); err != nil {
			t.Fatal(err)
		}
		// kubelet stops containers at once; its garbage collector removes
		// the stopped containers and sandboxes of deleted pods within about
		// a minute.
		var last []string
		err := wait.PollUntilContextTimeout(ctx, 2*time.Second, 4*time.Minute, true, func(ctx context.Context) (bool, error) {
			last = nil
			ctrs, err := rs.ListContainers(ctx, &runtimeapi.ContainerFilter{})
			if err != nil {
				last = []string{err.Error()}
				return false, nil
			}
			for _, c := range ctrs {
				if name, ok := uids[c.GetLabels()["io.kubernetes.pod.uid"]]; ok {
					last = append(last, fmt.Sprintf("container %s of %s (%s)", c.GetId()[:12], name, c.GetState()))
				}
			}
			sbs, err := rs.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{})
			if err != nil {
				last = []string{err.Error()}
				return false, nil
			}
			for _, s := range sbs {
				if name, ok := uids[s.GetMetadata().GetUid()]; ok {
					last = append(last, fmt.Sprintf("sandbox %s of %s (%s)", s.GetId()[:12], name, s.GetState()))
				}
			}
			sort.Strings(last)
			return len(last) == 0, nil
		})
		if err != nil {
			t.Fatalf("containerd still holds, %s after the delete: %s", time.Since(t0).Round(time.Second), strings.Join(last, ", "))
		}
		t.Logf("every container and sandbox removed %s after the delete", time.Since(t0).Round(time.Second))
		// The proxy forgets them too, and CNI released their veths.
		st := proxyStore(ctx, t)
		for _, p := range st.Pods {
			if name, ok := uids[p.UID]; ok {
				t.Errorf("tandem-proxy's store still lists sandbox %s of deleted pod %s", p.ID, name)
			}
		}
		if v := suite.c.Veths(); len(v) != 0 {
			t.Errorf("veths left on bridge %s after every pod was removed: %v", suite.c.Bridge(), v)
		}
	})
}

// proxyStore returns tandem-proxy's /debug/store.
func proxyStore(ctx context.Context, t *testing.T) *framework.StoreDump {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+suite.c.ProxyMetrics+"/debug/store", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("get tandem-proxy /debug/store: %v", err)
	}
	defer resp.Body.Close()
	var d framework.StoreDump
	if err := json.NewDecoder(resp.Body).Decode(&d); err != nil {
		t.Fatalf("decode tandem-proxy /debug/store: %v", err)
	}
	return &d
}
