//go:build e2e

package cluster_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/cpuset"

	"github.com/tandemkit/tandem/e2e/cluster"
	"github.com/tandemkit/tandem/e2e/framework"
	"github.com/tandemkit/tandem/resource/cgroup"
	"github.com/tandemkit/tandem/resource/sched"
)

// seedDeployments are the Deployments of Koordinator's documented QoS
// example, in testdata/seed-000.yaml,
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

// applyDeploy installs deploy/ with `kubectl apply -k`, as the README tells
// users to (in NRI mode, the kustomization of deploy/ and deploy/nri the
// cluster was installed with). It is idempotent, so every test that needs it
// calls it.
func applyDeploy(ctx context.Context, t *testing.T) {
	t.Helper()
	dir := repoPath(t, "deploy")
	if suite.c.NRI {
		dir = suite.c.NRIOverlay()
	}
	if out, err := suite.c.RunKubectl(ctx, "apply", "-k", dir); err != nil {
		t.Fatalf("apply -k %s: %v", dir, err)
	} else {
		t.Logf("kubectl apply -k %s:\n%s", dir, out)
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

}

// podSnapshot is what must not change across a proxy or containerd restart.
type podSnapshot struct {
	podName, uid, containerID, sandboxID string
	restarts                             int32
	startedAt                            int64 // from the runtime, ns
	cpuset                               string
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
			timeout, last, suite.c.Logs(""), suite.c.Logs(""), err)
	}
	return pods
}

// snapshot records, per seed Deployment, the pod's identity as the API
// server and the runtime see it.
func snapshot(ctx context.Context, t *testing.T, cs kubernetes.Interface) map[string]podSnapshot {
	t.Helper()
	pods := runningSeedPods(ctx, t, cs, 2*time.Minute)
	out := map[string]podSnapshot{}
	for name, p := range pods {
		rs := criClient(ctx, t, p.Spec.NodeName)
		st := p.Status.ContainerStatuses[0]
		id := strings.TrimPrefix(st.ContainerID, "containerd://")
		resp, err := rs.ContainerStatus(ctx, id, false)
		if err != nil {
			t.Fatalf("ContainerStatus %s (pod %s) from containerd: %v", id, p.Name, err)
		}
		out[name] = podSnapshot{
			podName: p.Name, uid: string(p.UID), containerID: st.ContainerID, restarts: st.RestartCount,
			startedAt: resp.GetStatus().GetStartedAt(),
			cpuset:    cpusetOf(t, p).String(),
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

// agentMetrics returns the text of the node agent's /metrics.
func agentMetrics(ctx context.Context, t *testing.T, nodeName string) string {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, agentURL(ctx, t, nodeName, "/metrics"), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("get the agent's /metrics: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read the agent's /metrics: %v", err)
	}
	return string(b)
}

// proxyOKCalls returns, from the proxy's /metrics, how many calls of each
// method it has answered with OK since it started.
func proxyOKCalls(ctx context.Context, t *testing.T, nodeName string) map[string]float64 {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, agentURL(ctx, t, nodeName, "/metrics"), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("get the agent's /metrics: %v", err)
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

// nodeStaysReady polls the node for d and fails if it is ever not Ready, or if the batch capacity it
// published when the window began leaves it.
func nodeStaysReady(ctx context.Context, t *testing.T, cs kubernetes.Interface, nodeName string, d time.Duration) {
	t.Helper()
	end := time.Now().Add(d)
	published := int64(-1) // batch-cpu at the start, -1 if the node published none
	for time.Now().Before(end) {
		n, err := cs.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
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
		// Batch capacity stays too: taking it off the Node, even for one report interval, leaves
		// batch pods Pending meanwhile.
		v, ok := batchCPU(n)
		switch {
		case published < 0 && ok && v > 0:
			published = v
		case published > 0 && (!ok || v == 0):
			t.Fatalf("%s: batch-cpu %d (published: %v) on the Node, which published %d when the window began", nodeName, v, ok, published)
		}
		time.Sleep(time.Second)
	}
}

// kubeletCallsSucceed waits until kubelet has made successful calls through
// the (restarted) proxy: its periodic relist and status calls. In NRI mode
// kubelet's calls do not pass through Tandem: the restarted plugin must be
// registered with containerd and have answered its Synchronize.
func kubeletCallsSucceed(ctx context.Context, t *testing.T, nodeName string) {
	t.Helper()
	if suite.c.NRI {
		var connected, synced bool
		err := wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
			m := agentMetrics(ctx, t, nodeName)
			connected = strings.Contains(m, "\ntandem_nri_connected 1\n")
			synced = regexp.MustCompile(`(?m)^tandem_nri_events_total\{event="Synchronize",result="ok"\} [1-9]`).MatchString(m)
			return connected && synced, nil
		})
		if err != nil {
			t.Fatalf("tandem-nri on %s after its restart: connected %v, Synchronize answered %v within a minute: %v", nodeName, connected, synced, err)
		}
		return
	}
	var last map[string]float64
	err := wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		last = proxyOKCalls(ctx, t, nodeName)
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
	_ = resp.Body.Close()
	if want := "hello from " + pod + "\n"; resp.StatusCode != http.StatusOK || string(body) != want {
		t.Fatalf("GET through kubectl port-forward %s: %d %q, want 200 %q", pod, resp.StatusCode, body, want)
	}
}

// deleteSeed deletes the QoS example's Deployments and waits until their pods are
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
		return fmt.Errorf("the QoS example's pods not gone (%s): %w", last, err)
	}
	return nil
}

// TestSeed000 applies the four nginx Deployments of Koordinator's documented
// QoS example (image and CPU amounts scaled, see testdata/seed-000.yaml) and
// checks what its users check a colocation system against: the pods run,
// each with the cpuset the example prescribes, read from the real cgroup
// files the way the example's get_cpuset.sh reads them; kubectl
// logs, exec and port-forward work; a SIGKILLed node agent (tandem-proxy, or
// the tandem-nri plugin in NRI mode) costs no pod a restart and changes no
// cpuset, and its pools are right at once; so does a containerd restart;
// deleting the Deployments leaves no exclusive CPU allocated. The steps
// share the pods, so a failing step ends the test; the clean-up deletes the
// Deployments whatever happened.
func TestSeed000(t *testing.T) {
	ctx := testContext(t, 15*time.Minute)
	cs := client(t)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if err := deleteSeed(ctx, cs); err != nil {
			t.Errorf("clean-up: %v", err)
		}
	})

	start := time.Now()
	if out, err := suite.c.RunKubectl(ctx, "apply", "-f", repoPath(t, "e2e/cluster/testdata/seed-000.yaml")); err != nil {
		t.Fatalf("apply Koordinator's QoS example: %v", err)
	} else {
		t.Logf("%s", out)
	}
	// BE waits for batch capacity: the reporter publishes it once its
	// warm-up (metricReportIntervalSeconds, 60s) has passed.
	pods := runningSeedPods(ctx, t, cs, 4*time.Minute)
	t.Logf("4 seed pods Running and Ready in %s", time.Since(start).Round(100*time.Millisecond))
	for _, d := range seedDeployments {
		t.Logf("%s: pod %s on %s, cpuset %s", d.name, pods[d.name].Name, pods[d.name].Spec.NodeName, cpusetOf(t, pods[d.name]))
	}

	t.Run("placed by koord-scheduler with their classes", func(t *testing.T) {
		for _, d := range seedDeployments {
			p := pods[d.name]
			if p.Spec.SchedulerName != "koord-scheduler" {
				t.Errorf("pod %s has schedulerName %q, want the example's koord-scheduler", p.Name, p.Spec.SchedulerName)
			}
			if p.Labels["koordinator.sh/qosClass"] != d.qos {
				t.Errorf("pod %s has koordinator.sh/qosClass %q, want %q", p.Name, p.Labels["koordinator.sh/qosClass"], d.qos)
			}
			if p.Spec.PriorityClassName != d.priorityClass || p.Spec.Priority == nil || *p.Spec.Priority != d.priority {
				t.Errorf("pod %s has priority class %q value %v, want %q %d", p.Name, p.Spec.PriorityClassName, p.Spec.Priority, d.priorityClass, d.priority)
			}
			if p.Status.QOSClass != d.k8sQoS {
				t.Errorf("pod %s has QoS class %s, want %s", p.Name, p.Status.QOSClass, d.k8sQoS)
			}
		}
		if a, b := pods["nginx-lse"].Spec.NodeName, pods["nginx-lsr"].Spec.NodeName; a == b {
			t.Errorf("LSE and LSR both on %s: with 1900m allocatable per node they cannot share one", a)
		}
	})

	t.Run("cpusets as Koordinator's QoS example prescribes", func(t *testing.T) {
		checkSeedCPUSets(ctx, t, pods)
	})

	t.Run("BE gets batch cgroups from the webhook's annotation", func(t *testing.T) {
		// tandem-webhook, which `kubectl apply -k deploy/` installs, annotates every batch pod with
		// Koordinator's extended-resource-spec, and the agent reads that. (A batch pod no webhook
		// sees, whose resources the agent reads from its spec, runs on the VM node: TestVMNode.)
		// batch-cpu 100 (milli-cores) gives shares 100*1024/1000 and a quota of a tenth of a period.
		if _, ok := pods["nginx-be"].Annotations["node.koordinator.sh/extended-resource-spec"]; !ok {
			t.Errorf("pod %s has no node.koordinator.sh/extended-resource-spec annotation: tandem-webhook did not see it", pods["nginx-be"].Name)
		}
		checkBatchCgroups(t, pods["nginx-be"], 100)
	})

	t.Run("BE and LS threads keep the kernel's default scheduling", func(t *testing.T) {
		// beClass.cpuQOS.yieldThreads is off by default (it cost LS pods latency in bench/colocation):
		// BE pods get cpu.idle, their threads SCHED_OTHER. TestVMNode switches it on, on a kernel that
		// honours it.
		want := sched.Default
		checkThreads(ctx, t, pods["nginx-be"], func(a sched.Attr) bool { return a.Policy == want.Policy && (want.Slice == 0 || a.Slice == want.Slice) }, want.String())
		for _, name := range []string{"nginx-lse", "nginx-lsr", "nginx-ls"} {
			checkThreads(ctx, t, pods[name], func(a sched.Attr) bool { return a.Policy == sched.Other }, "SCHED_OTHER")
		}
	})

	t.Run("kubectl logs, exec and port-forward", func(t *testing.T) {
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
		execEcho(ctx, t, pods["nginx-lse"].Name)
		execEcho(ctx, t, pods["nginx-lsr"].Name)
		portForward(ctx, t, pods["nginx-ls"].Name)
	})
	if t.Failed() {
		t.FailNow()
	}

	t.Run("SIGKILL the node agent with the policies on", func(t *testing.T) {
		for _, nodeName := range suite.c.NodeNames() {
			before := snapshot(ctx, t, cs)
			var poolsBefore pools
			proxyJSON(ctx, t, nodeName, "/debug/pools", &poolsBefore)
			nodeBefore, err := cs.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			batchBefore, _ := batchCPU(nodeBefore)
			// tandem-proxy is started again as systemd would; tandem-nri's container is restarted by kubelet.
			oldPID, newPID, err := suite.c.KillAgent(ctx, nodeName)
			if err != nil {
				t.Fatalf("SIGKILL the agent on %s and start it again: %v", nodeName, err)
			}
			if newPID == 0 || newPID == oldPID {
				t.Fatalf("agent on %s: pid %d after restart, was %d", nodeName, newPID, oldPID)
			}
			// At once, before any lifecycle call: what `tandemctl pools`
			// shows must be what it showed before the kill.
			var poolsAfter pools
			proxyJSON(ctx, t, nodeName, "/debug/pools", &poolsAfter)
			if fmt.Sprint(poolsAfter) != fmt.Sprint(poolsBefore) {
				t.Errorf("%s: /debug/pools right after the restart:\n  %+v\nwant what it was before the SIGKILL:\n  %+v", nodeName, poolsAfter, poolsBefore)
			}
			out, err := exec.CommandContext(ctx, tandemctl(ctx, t), "--proxy-debug-socket", proxyDebugSocket(t, nodeName), "pools").CombinedOutput()
			if err != nil {
				t.Errorf("tandemctl pools on %s after the restart: %v: %s", nodeName, err, out)
			} else {
				t.Logf("tandemctl pools on %s right after the restart:\n%s", nodeName, out)
			}
			kubeletCallsSucceed(ctx, t, nodeName)
			// Two node status updates (every 5s) and a runtime status
			// check happen in this window.
			nodeStaysReady(ctx, t, cs, nodeName, 12*time.Second)
			// The restarted reporter has no history yet; the Node keeps what the killed one published
			// instead of losing its batch capacity until the new one's warm-up has passed.
			if nodeAfter, err := cs.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{}); err != nil {
				t.Fatal(err)
			} else if v, ok := batchCPU(nodeAfter); batchBefore > 0 && (!ok || v == 0) {
				t.Errorf("%s: batch-cpu %d (published: %v) after the restart, %d before: the restart took batch capacity off the Node", nodeName, v, ok, batchBefore)
			}
			after := snapshot(ctx, t, cs)
			sameSnapshots(t, "SIGKILL of the agent on "+nodeName, before, after)
			checkSeedCPUSets(ctx, t, runningSeedPods(ctx, t, cs, time.Minute))
		}
		// Streaming calls go through the new processes too.
		execEcho(ctx, t, pods["nginx-lse"].Name)
	})
	if t.Failed() {
		t.FailNow()
	}

	t.Run("restart containerd", func(t *testing.T) {
		nodeName := pods["nginx-lse"].Spec.NodeName
		before := snapshot(ctx, t, cs)
		ctrd, err := suite.c.Containerd(ctx, nodeName)
		if err != nil {
			t.Fatal(err)
		}
		oldPID := ctrd.PID()
		if err := ctrd.Restart(ctx); err != nil {
			t.Fatalf("restart containerd of %s: %v", nodeName, err)
		}
		if ctrd.PID() == oldPID {
			t.Fatalf("containerd of %s: pid unchanged (%d) after restart", nodeName, oldPID)
		}
		// tandem-proxy outlives containerd. tandem-nri's connection ends with containerd's restart:
		// whether it connects again or exits and kubelet starts it again, it must be ready again.
		daemons := []string{kubeletDaemon(nodeName)}
		if !suite.c.NRI {
			daemons = append(daemons, proxyDaemon(nodeName))
		}
		for _, d := range daemons {
			if suite.c.PID(d) == 0 {
				t.Fatalf("%s died with containerd: see %s", d, suite.c.Logs(d))
			}
		}
		// The proxy is ready again once containerd answers through it; the plugin once registered again.
		var last error
		err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			last = suite.c.AgentReady(ctx, nodeName)
			return last == nil, nil
		})
		if err != nil {
			t.Fatalf("agent on %s not ready within a minute of containerd's restart (last: %v): see %s", nodeName, last, suite.c.AgentLogs(nodeName))
		}
		nodeStaysReady(ctx, t, cs, nodeName, 12*time.Second)
		sameSnapshots(t, "containerd restart on "+nodeName, before, snapshot(ctx, t, cs))
		execEcho(ctx, t, pods["nginx-lse"].Name)
		portForward(ctx, t, pods["nginx-be"].Name)
	})
	if t.Failed() {
		t.FailNow()
	}

	t.Run("deleting the Deployments frees every exclusive CPU", func(t *testing.T) {
		if err := deleteSeed(ctx, cs); err != nil {
			t.Fatal(err)
		}
		// The CPUs are freed when kubelet removes the dead containers (RemoveContainer), which its
		// container garbage collection does on a one-minute period after the pods left the API: measured
		// 31-61 s here, so two minutes.
		for _, nodeName := range suite.c.NodeNames() {
			var last pools
			err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
				// A GET of its own: the poll's deadline cutting one short would fail the test with
				// "context deadline exceeded" instead of saying what is still allocated.
				pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
				defer cancel()
				proxyJSON(pctx, t, nodeName, "/debug/pools", &last)
				return len(last.Allocations) == 0 && last.LSE == "" && last.LSR == "", nil
			})
			if err != nil {
				t.Errorf("%s: exclusive CPUs still allocated two minutes after every seed pod was deleted: %+v", nodeName, last)
			}
		}
	})
}

// checkSeedCPUSets checks the cpusets Koordinator's documented QoS example
// prescribes, scaled to two 2-CPU nodes that share the machine's CPUs: LSE
// holds one CPU no other pod of its node uses (example: 0-1); LSR one CPU
// that only BE may share (example: 2-3); LS the rest of its node's CPUs,
// without LSE's and LSR's (example: 4-15); BE every CPU of its node but
// LSE's (example: 2,4-12).
func checkSeedCPUSets(ctx context.Context, t *testing.T, pods map[string]*corev1.Pod) {
	t.Helper()
	all := machineCPUs(t)
	lse, lsr, ls, be := pods["nginx-lse"], pods["nginx-lsr"], pods["nginx-ls"], pods["nginx-be"]
	exclusive := map[string]cpuset.CPUSet{} // per node: LSE's and LSR's CPUs
	lseOn := map[string]cpuset.CPUSet{}
	for _, p := range []*corev1.Pod{lse, lsr} {
		set := cpusetOf(t, p)
		if set.Size() != 1 {
			t.Errorf("%s on %s: cpuset %q, want one CPU of its own (the example's 2 CPUs, scaled)", p.Name, p.Spec.NodeName, set)
		}
		exclusive[p.Spec.NodeName] = exclusive[p.Spec.NodeName].Union(set)
	}
	lseOn[lse.Spec.NodeName] = cpusetOf(t, lse)
	if want := all.Difference(exclusive[ls.Spec.NodeName]); !cpusetOf(t, ls).Equals(want) {
		t.Errorf("LS pod %s on %s: cpuset %q, want %q (the node's CPUs without LSE's and LSR's)", ls.Name, ls.Spec.NodeName, cpusetOf(t, ls), want)
	}
	if want := all.Difference(lseOn[be.Spec.NodeName]); !cpusetOf(t, be).Equals(want) {
		t.Errorf("BE pod %s on %s: cpuset %q, want %q (every CPU but LSE's)", be.Name, be.Spec.NodeName, cpusetOf(t, be), want)
	}
	// The proxy's own account, what `tandemctl pools` prints, agrees.
	for _, p := range []*corev1.Pod{lse, lsr} {
		var pl pools
		proxyJSON(ctx, t, p.Spec.NodeName, "/debug/pools", &pl)
		key := string(p.UID) + "/" + p.Spec.Containers[0].Name
		if got := pl.Allocations[key].CPUs; got != cpusetOf(t, p).String() {
			t.Errorf("%s: the agent's pools give %s CPUs %q, the cgroup has %q (pools %+v)", p.Spec.NodeName, key, got, cpusetOf(t, p), pl)
		}
		if len(pl.Allocations) != 1 {
			t.Errorf("%s: the agent holds %d exclusive allocations, want 1 (%s's): %+v", p.Spec.NodeName, len(pl.Allocations), p.Name, pl.Allocations)
		}
	}
}

// checkBatchCgroups checks a BE pod's container cgroup against Koordinator's
// batch translation of its kubernetes.io/batch-cpu (milli-cores, request =
// limit): cpu.shares = batchCPU*1024/1000, cpu.cfs_quota_us = batchCPU% of
// the 100ms period.
func checkBatchCgroups(t *testing.T, p *corev1.Pod, batchCPU int64) {
	t.Helper()
	if got, want := readCgroup(t, p, "cpu", "cpu.shares"), fmt.Sprint(batchCPU*1024/1000); got != want {
		t.Errorf("BE pod %s on %s: cpu.shares %s, want %s from batch-cpu %d", p.Name, p.Spec.NodeName, got, want, batchCPU)
	}
	if got, want := readCgroup(t, p, "cpu", "cpu.cfs_quota_us"), fmt.Sprint(batchCPU*100); got != want {
		t.Errorf("BE pod %s on %s: cpu.cfs_quota_us %s, want %s from batch-cpu %d", p.Name, p.Spec.NodeName, got, want, batchCPU)
	}
}

// tandemctl builds (once per test binary) this checkout's tandemctl.
func tandemctl(ctx context.Context, t *testing.T) string {
	t.Helper()
	bin, err := framework.BuildCommand(ctx, filepath.Join(suite.c.Dir, "bin"), "tandemctl")
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// checkThreads waits up to five seconds for every thread of the pod's container (its cpu cgroup's
// tasks, read on the node) to have the scheduling ok accepts, and fails naming the first that has not.
func checkThreads(ctx context.Context, t *testing.T, p *corev1.Pod, ok func(sched.Attr) bool, want string) {
	t.Helper()
	dir := containerCgroup(t, p, "cpu")
	var last string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		tids, err := cgroup.Threads(dir)
		if err != nil || len(tids) == 0 {
			last = fmt.Sprintf("no threads listed (%v)", err)
			return false, nil
		}
		for _, tid := range tids {
			a, err := sched.Of(tid)
			if err != nil {
				last = err.Error()
				return false, nil
			}
			if !ok(a) {
				last = fmt.Sprintf("thread %d has %s", tid, a)
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Errorf("pod %s on %s: %s, want %s", p.Name, p.Spec.NodeName, last, want)
	}
}
