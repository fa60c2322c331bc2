//go:build e2e

package cluster_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	internalapi "k8s.io/cri-api/pkg/apis"
	"k8s.io/utils/cpuset"
	"k8s.io/utils/ptr"

	"github.com/tandemkit/tandem/e2e/cluster"
	"github.com/tandemkit/tandem/e2e/framework"
	"github.com/tandemkit/tandem/metrics/nodemetric"
)

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

func node(t *testing.T, name string) *cluster.Node {
	t.Helper()
	n := suite.c.Node(name)
	if n == nil {
		t.Fatalf("no node %s in the cluster", name)
	}
	return n
}

func proxyDaemon(node string) string { return cluster.NodeDaemon(cluster.TandemProxy, node) }

func kubeletDaemon(node string) string { return cluster.NodeDaemon(cluster.Kubelet, node) }

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
	// Where kubelet says why it refused the pod at admission.
	if p.Status.Reason != "" || p.Status.Message != "" {
		out = append(out, fmt.Sprintf("%s: %s", p.Status.Reason, p.Status.Message))
	}
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

// sleepPod is a pod that sleeps, for tests that need something running.
func sleepPod(name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceDefault, Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			Containers: []corev1.Container{{
				Name: "sleep", Image: framework.TestImage, ImagePullPolicy: corev1.PullNever,
				Command: []string{"/bin/sh", "-c", "exec sleep 3600"},
			}},
		},
	}
}

// deletePod deletes a pod of the default namespace at once and waits until it is gone.
func deletePod(ctx context.Context, t *testing.T, cs kubernetes.Interface, name string) {
	t.Helper()
	deletePodIn(ctx, t, cs, metav1.NamespaceDefault, name)
}

// deletePodIn deletes the pod ns/name at once and waits until it is gone.
func deletePodIn(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns, name string) {
	t.Helper()
	err := cs.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("delete pod %s/%s: %v", ns, name, err)
		return
	}
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Errorf("pod %s/%s not gone 2 minutes after its delete: %v", ns, name, err)
	}
}

// waitPodRunning waits until the pod of the default namespace runs and is Ready and returns it.
func waitPodRunning(ctx context.Context, t *testing.T, cs kubernetes.Interface, name string, timeout time.Duration) *corev1.Pod {
	t.Helper()
	return waitPodRunningIn(ctx, t, cs, metav1.NamespaceDefault, name, timeout)
}

// waitPodRunningIn waits until the pod ns/name runs and is Ready and returns it.
func waitPodRunningIn(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns, name string, timeout time.Duration) *corev1.Pod {
	t.Helper()
	p, err := podRunningIn(ctx, cs, ns, name, timeout)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// errPodFinished is podRunningIn's error for a pod that ended (refused by kubelet at admission,
// or its containers exited) instead of running: waiting on would not change it.
var errPodFinished = errors.New("pod finished instead of running")

// podRunningIn waits until the pod ns/name runs and is Ready and returns it. It returns at once,
// with the pod and an error wrapping errPodFinished, when the pod reaches Failed or Succeeded.
func podRunningIn(ctx context.Context, cs kubernetes.Interface, ns, name string, timeout time.Duration) (*corev1.Pod, error) {
	var p *corev1.Pod
	var last string
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		got, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		p = got
		last = fmt.Sprintf("%s on %q: %s", p.Status.Phase, p.Spec.NodeName, podProblem(p))
		if p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
			return false, errPodFinished
		}
		return p.Status.Phase == corev1.PodRunning && podReady(p), nil
	})
	switch {
	case errors.Is(err, errPodFinished):
		return p, fmt.Errorf("pod %s/%s: %w: %s", ns, name, err, last)
	case err != nil:
		return p, fmt.Errorf("pod %s/%s not Running within %s (last: %s): %w", ns, name, timeout, last, err)
	}
	return p, nil
}

// runPastAdmissionRace waits until the pod ns/name, already created, runs and returns it.
// kube-scheduler places a pod by the batch capacity its informer last saw, and kubelet admits it by
// what the Node says when the pod arrives. On this cluster both nodes and the control plane share
// the machine's 2 CPUs, and each node counts all of it as its own system usage, so published
// batch-cpu moves a lot within seconds (from 1734 to 786 in 10 s on node-b in one CI run, to 1 and
// 11 at busy moments), and a pod can be refused in between with OutOfkubernetes.io/batch-cpu. A bare
// pod refused so stays Failed; its owner creates it again, and so does this, with create, three
// attempts in all. A pod that fails for any other reason fails the test.
func runPastAdmissionRace(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns, name string, timeout time.Duration, create func() error) *corev1.Pod {
	t.Helper()
	const attempts = 3
	for attempt := 1; ; attempt++ {
		p, err := podRunningIn(ctx, cs, ns, name, timeout)
		if err == nil {
			return p
		}
		if attempt == attempts || !errors.Is(err, errPodFinished) || !refusedForBatch(p) {
			t.Fatal(err)
		}
		t.Logf("kubelet on %s refused pod %s/%s at admission, batch capacity having fallen since kube-scheduler placed it (%s: %s); creating it again", p.Spec.NodeName, ns, name, p.Status.Reason, p.Status.Message)
		deletePodIn(ctx, t, cs, ns, name)
		if err := create(); err != nil {
			t.Fatalf("create pod %s/%s again: %v", ns, name, err)
		}
	}
}

// refusedForBatch reports whether kubelet refused the pod at admission for want of a batch resource.
func refusedForBatch(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodFailed &&
		(p.Status.Reason == "Out"+string(nodemetric.ResourceBatchCPU) || p.Status.Reason == "Out"+string(nodemetric.ResourceBatchMemory))
}

// criClient connects to a node's containerd itself, bypassing the proxy,
// with the CRI client kubelet uses: the checks must not trust the component
// under test.
func criClient(ctx context.Context, t *testing.T, nodeName string) internalapi.RuntimeService {
	t.Helper()
	rs, _, err := framework.NewCRIClients(ctx, node(t, nodeName).ContainerdEndpoint())
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

// proxyJSON GETs path from a node's tandem-proxy (on its debug socket) and
// decodes the JSON answer into v.
func proxyJSON(ctx context.Context, t *testing.T, nodeName, path string, v any) {
	t.Helper()
	socket := proxyDebugSocket(t, nodeName)
	// The host is a name only: the transport dials the node's socket.
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://tandem-proxy"+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", socket)
	}}}
	defer client.CloseIdleConnections()
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("GET %s from tandem-proxy on %s: %v", path, nodeName, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s from tandem-proxy on %s: %s", path, nodeName, resp.Status)
	}
	// Decoding into a value that already holds a map adds to the map: a poll that reuses its variable
	// would keep keys the proxy no longer reports (an exclusive allocation already released). Each GET
	// starts from the zero value.
	reflect.ValueOf(v).Elem().SetZero()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("decode %s from tandem-proxy on %s: %v", path, nodeName, err)
	}
}

// proxyDebugSocket is where a node's Tandem agent serves /debug/*, to root
// alone: its --debug-socket, by default debug.sock in its --state-dir.
func proxyDebugSocket(t *testing.T, nodeName string) string {
	t.Helper()
	socket, err := suite.c.AgentDebugSocket(nodeName)
	if err != nil {
		t.Fatal(err)
	}
	return socket
}

// agentURL is the URL of path on the node's Tandem agent's metrics address
// (tandem-proxy's --metrics-addr, or the tandem-nri pod's).
func agentURL(ctx context.Context, t *testing.T, nodeName, path string) string {
	t.Helper()
	addr, err := suite.c.AgentMetrics(ctx, nodeName)
	if err != nil {
		t.Fatal(err)
	}
	return "http://" + addr + path
}

// pools is tandem-proxy's /debug/pools, what `tandemctl pools` shows.
type pools struct {
	LSE, LSR, LS, BE string
	Allocations      map[string]struct{ Class, CPUs string }
}

// containerCgroup is the directory of a running pod's first container in
// one cgroup v1 hierarchy, found the way get_cpuset.sh of Koordinator's
// QoS example finds it:
// from the pod's UID, its Kubernetes QoS class and container ID, below the
// node's kubepods (cgroupfs driver: kubepods/<qos>/pod<uid>/<id>).
func containerCgroup(t *testing.T, p *corev1.Pod, controller string) string {
	t.Helper()
	n := node(t, p.Spec.NodeName)
	if len(p.Status.ContainerStatuses) == 0 {
		t.Fatalf("pod %s has no container status", p.Name)
	}
	id := strings.TrimPrefix(p.Status.ContainerStatuses[0].ContainerID, "containerd://")
	var qos string
	switch p.Status.QOSClass {
	case corev1.PodQOSGuaranteed:
		qos = ""
	case corev1.PodQOSBurstable:
		qos = "burstable"
	case corev1.PodQOSBestEffort:
		qos = "besteffort"
	default:
		t.Fatalf("pod %s: unknown QoS class %q", p.Name, p.Status.QOSClass)
	}
	return filepath.Join("/sys/fs/cgroup", controller, n.CgroupRoot, "kubepods", qos, "pod"+string(p.UID), id)
}

// readCgroup reads one cgroup file of the pod's first container.
func readCgroup(t *testing.T, p *corev1.Pod, controller, file string) string {
	t.Helper()
	path := filepath.Join(containerCgroup(t, p, controller), file)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("pod %s on %s: %v", p.Name, p.Spec.NodeName, err)
	}
	return strings.TrimSpace(string(b))
}

// cpusetOf returns the cpuset.cpus of the pod's container, as get_cpuset.sh prints it.
func cpusetOf(t *testing.T, p *corev1.Pod) cpuset.CPUSet {
	t.Helper()
	s := readCgroup(t, p, "cpuset", "cpuset.cpus")
	set, err := cpuset.Parse(s)
	if err != nil {
		t.Fatalf("pod %s: cpuset.cpus %q: %v", p.Name, s, err)
	}
	return set
}

// machineCPUs is every online CPU: what each node reports and shares.
func machineCPUs(t *testing.T) cpuset.CPUSet {
	t.Helper()
	b, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		t.Fatal(err)
	}
	set, err := cpuset.Parse(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// createPDB creates a PodDisruptionBudget allowing no disruption of the pods labelled app=name in the
// default namespace, deleted when the test ends.
func createPDB(ctx context.Context, t *testing.T, cs kubernetes.Interface, name string) {
	t.Helper()
	one := intstr.FromInt32(1)
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceDefault},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable: &one,
			Selector:     &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
		},
	}
	if _, err := cs.PolicyV1().PodDisruptionBudgets(metav1.NamespaceDefault).Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.PolicyV1().PodDisruptionBudgets(metav1.NamespaceDefault).Delete(context.WithoutCancel(ctx), name, metav1.DeleteOptions{})
	})
}

// waitPDBCounts waits until the PodDisruptionBudget name has counted its pod healthy: before that,
// the Eviction API would refuse for another reason than the budget.
func waitPDBCounts(ctx context.Context, t *testing.T, cs kubernetes.Interface, name string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := cs.PolicyV1().PodDisruptionBudgets(metav1.NamespaceDefault).Get(ctx, name, metav1.GetOptions{})
		return err == nil && p.Status.ObservedGeneration == p.Generation && p.Status.CurrentHealthy == 1, nil
	})
	if err != nil {
		t.Fatalf("PodDisruptionBudget %s never counted its pod: %v", name, err)
	}
}
