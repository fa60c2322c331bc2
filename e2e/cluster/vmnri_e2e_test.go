//go:build e2e

package cluster_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/tandemkit/tandem/e2e/cluster"
	"github.com/tandemkit/tandem/e2e/framework"
	"github.com/tandemkit/tandem/metrics/nodemetric"
)

// nriNodeLabel is the label docs/install.md's "Nodes of both kinds" gives the nodes that run
// tandem-nri where others run tandem-proxy.
const nriNodeLabel = "tandem.io/agent"

// TestVMNodeNRI installs tandem-nri on a running VM node (Debian 13, cgroup v2, containerd 2 with the
// systemd cgroup driver) as docs/install.md's NRI path says, beside a host node that runs
// tandem-proxy, and checks from the node's v2 files what its users see: the pods that ran before are
// adopted, the cpusets of Koordinator's QoS example and the batch pod's cgroups, burst and memory QoS, suppression engaged and
// undone, SIGKILL of the plugin keeps every cpuset; the imported images
// the docs pin outlive kubelet's image garbage collection; the uninstall leaves the pods running.
func TestVMNodeNRI(t *testing.T) {
	vm := requireVM(t)
	if vm.Flavor != framework.Flavor2 {
		t.Skipf("the VM node runs containerd %s; the NRI path is tested with containerd 2 (TANDEM_CLUSTER_VM=2)", vm.Flavor)
	}
	ctx := testContext(t, 40*time.Minute)
	cs := client(t)
	top := t

	t.Run("a node as kubeadm made it", func(t *testing.T) { checkKubeadmNode(ctx, t) })
	before := createVMPods(ctx, t, top, cs,
		vmPod("vm-before-ls", metav1.NamespaceDefault, "LS", cpuMem("500m", "64Mi"), cpuMem("1", "64Mi")),
		vmPod("vm-before-be", metav1.NamespaceDefault, "BE", nil, nil),
	)
	beforeStates := vmPodStates(ctx, t, cs, before)
	copyBinaries(ctx, t, vm)

	t.Run("images imported and pinned as docs/install.md says", func(t *testing.T) { importVMImages(ctx, t) })
	t.Run("installed on the running node as docs/install.md's NRI path says", func(t *testing.T) {
		installVMNRI(ctx, t, cs)
		sameVMPodStates(t, "the install", beforeStates, vmPodStates(ctx, t, cs, before))
		pods := vmRun(ctx, t, vmDir+"/tandemctl pods")
		t.Logf("tandemctl pods:\n%s", pods)
		for name, qos := range map[string]string{"vm-before-ls": "LS", "vm-before-be": "BE"} {
			if !regexpLine(pods, `default/`+name+`\s+main\s+`+qos+`\s`) {
				t.Errorf("tandemctl pods does not list the running pod %s as %s: the plugin must adopt the pods containerd runs", name, qos)
			}
		}
	})
	if t.Failed() {
		t.FailNow()
	}
	waitBatchCPU(ctx, t, cs, cluster.NodeVM, 3*time.Minute)

	seed, running, bePool := checkVMPools(ctx, t, cs, before)
	t.Run("CPU burst, the quota burst loop and memory QoS on cgroup v2", func(t *testing.T) { checkVMBurstAndMemoryQoS(ctx, t, cs) })
	t.Run("suppression of kubepods-besteffort.slice engaged and undone", func(t *testing.T) {
		checkVMSuppression(ctx, t, cs, []*corev1.Pod{seed["vm-be"], before["vm-before-be"]}, bePool)
	})
	t.Run("SIGKILL of tandem-nri keeps every cpuset", func(t *testing.T) { checkVMAgentKill(ctx, t, cs, running, nriAgent) })
	// Eviction, a node loop whatever the front end, is TestVMNode's on this kernel, and with the plugin's
	// ServiceAccount TestEvictThroughAPI's in the host NRI run.
	t.Run("pinned images outlive kubelet's image garbage collection", func(t *testing.T) { checkImageGC(ctx, t) })
	t.Run("uninstall as docs/install.md's NRI path says", func(t *testing.T) { uninstallVMNRI(ctx, t, cs, running) })
}

// nriAgent is tandem-nri as the DaemonSet runs it on the VM node.
var nriAgent = vmAgent{
	name: "tandem-nri",
	pid: func(ctx context.Context, t *testing.T) int {
		t.Helper()
		out := strings.TrimSpace(vmRun(ctx, t, "pgrep -x tandem-nri || true"))
		var pid int
		_, _ = fmt.Sscan(out, &pid) // 0 when it is not running
		return pid
	},
	kill: func(ctx context.Context, t *testing.T) { vmRun(ctx, t, "pkill -KILL -x tandem-nri") },
	logs: func(ctx context.Context, t *testing.T) string {
		t.Helper()
		p, err := nriPodOnVM(ctx, client(t))
		if err != nil {
			t.Fatal(err)
		}
		out, err := suite.c.RunKubectl(ctx, "-n", cluster.NRINamespace, "logs", p.Name)
		if err != nil {
			t.Fatal(err)
		}
		return string(out)
	},
}

func nriPodOnVM(ctx context.Context, cs kubernetes.Interface) (*corev1.Pod, error) {
	pods, err := cs.CoreV1().Pods(cluster.NRINamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + cluster.NRIDaemonSet, FieldSelector: "spec.nodeName=" + cluster.NodeVM})
	if err != nil {
		return nil, err
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			return &p, nil
		}
	}
	return nil, fmt.Errorf("no %s pod on %s", cluster.NRIDaemonSet, cluster.NodeVM)
}

// gcProbeImage is an image imported and left unpinned: kubelet's image garbage collection must take
// it, or the pinned images' survival would prove nothing.
const gcProbeImage = "docker.io/library/tandem-gc-probe:1"

// importVMImages imports tandem-nri's and tandem-webhook's images into the VM's containerd and pins
// them as docs/install.md says (tandem-webhook's runs on no pod there: only the label keeps it), and
// an unpinned probe image.
func importVMImages(ctx context.Context, t *testing.T) {
	vm := suite.c.VM
	for _, name := range []string{"tandem-nri", "tandem-webhook"} {
		if err := copyTo(repoPath(t, filepath.Join(cluster.ImagesDir, name+".tar")), filepath.Join(vm.Share, "images", name+".tar")); err != nil {
			t.Fatal(err)
		}
	}
	probe := filepath.Join(vm.Share, "images", "gc-probe.tar")
	build := exec.CommandContext(ctx, goCommand(), "run", "./hack/image", "--binary", filepath.Join(suite.c.Dir, "bin", "tandemctl"), "--name", gcProbeImage, "--out", probe)
	build.Dir = repoPath(t, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the probe image: %v: %s", err, out)
	}
	// docs/install.md's commands, run on the node instead of through ssh from an admin machine.
	label := ""
	for _, cmd := range docCommands(t, "2. The images onto the nodes") {
		if strings.Contains(cmd, "io.cri-containerd.pinned=pinned") {
			label = strings.TrimPrefix(cmd, "ssh node-1 ")
		}
	}
	if label == "" {
		t.Fatal("docs/install.md's step 2 does not pin the imported images")
	}
	out := vmRun(ctx, t, fmt.Sprintf(`set -e
cd %[1]s/images
ctr -n k8s.io images import tandem-nri.tar
ctr -n k8s.io images import tandem-webhook.tar
ctr -n k8s.io images import gc-probe.tar
%[2]s
ctr -n k8s.io images label ghcr.io/tandemkit/tandem-nri:v0.1.0 io.cri-containerd.pinned=pinned
ctr -n k8s.io images ls`, vm.ShareMount, label))
	t.Logf("images on %s:\n%s", cluster.NodeVM, out)
}

// installVMNRI does step 3 of docs/install.md's NRI path with the patch of "Nodes of both kinds",
// and, as for the host nodes (nri.go), points the plugin at the API server's address, since this
// cluster runs no kube-proxy.
func installVMNRI(ctx context.Context, t *testing.T, cs kubernetes.Interface) {
	if _, err := suite.c.RunKubectl(ctx, "label", "node", cluster.NodeVM, nriNodeLabel+"=nri", "--overwrite"); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(suite.c.Dir, "tandem-nri")
	deploy, err := filepath.Rel(dir, repoPath(t, "deploy"))
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := strings.Cut(strings.TrimPrefix(suite.c.APIServer, "https://"), ":")
	k := fmt.Sprintf(`apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - %[1]s
components:
  - %[1]s/nri
patches:
  - target: {kind: DaemonSet, name: tandem-nri}
    patch: |-
      - op: add
        path: /spec/template/spec/nodeSelector
        value: {%[2]s: nri}
      - op: add
        path: /spec/template/spec/containers/0/env/-
        value: {name: KUBERNETES_SERVICE_HOST, value: "%[3]s"}
      - op: add
        path: /spec/template/spec/containers/0/env/-
        value: {name: KUBERNETES_SERVICE_PORT, value: "%[4]s"}
`, deploy, nriNodeLabel, "10.198.0.1", port)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := suite.c.RunKubectl(ctx, "apply", "-k", dir); err != nil {
		t.Fatal(err)
	} else {
		t.Logf("kubectl apply -k:\n%s", out)
	}
	if out, err := suite.c.RunKubectl(ctx, "-n", cluster.NRINamespace, "rollout", "status", "daemonset/"+cluster.NRIDaemonSet, "--timeout=4m"); err != nil {
		p, _ := nriPodOnVM(ctx, cs)
		if p != nil {
			t.Logf("plugin pod %s: %s", p.Name, podProblem(p))
		}
		t.Fatalf("tandem-nri not ready on %s: %v: %s", cluster.NodeVM, err, out)
	}
	p, err := nriPodOnVM(ctx, cs)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(vmRun(ctx, t, "pgrep -x tandem-nri || true"), "\n"); n != 1 {
		t.Fatalf("%d tandem-nri processes on %s, want the DaemonSet's pod's one", n, cluster.NodeVM)
	}
	logs, err := suite.c.RunKubectl(ctx, "-n", cluster.NRINamespace, "logs", p.Name)
	if err != nil {
		t.Fatal(err)
	}
	// The plugin found kubelet's systemd driver itself: the DaemonSet passes no kubelet setting.
	for _, want := range []string{`"Kubelet settings followed"`, `cgroupDriver="systemd"`, "Registered with containerd", "Synchronized with containerd"} {
		if !strings.Contains(string(logs), want) {
			t.Errorf("tandem-nri's log has no %s", want)
		}
	}
}

// checkImageGC waits for kubelet's image garbage collection (every 5 minutes; images unused for
// imageMaximumGCAge, 3 minutes on the VM node) to take the unpinned probe, and checks that the
// pinned tandem-webhook image, which no pod of the VM uses, is still there.
func checkImageGC(ctx context.Context, t *testing.T) {
	waitVM(ctx, t, 9*time.Minute, "kubelet's image garbage collection takes the unpinned probe image", func(ctx context.Context) (bool, string) {
		out := vmRun(ctx, t, "ctr -n k8s.io images ls -q")
		return !strings.Contains(out, gcProbeImage), out
	})
	if out := vmRun(ctx, t, "ctr -n k8s.io images ls -q"); !strings.Contains(out, "ghcr.io/tandemkit/tandem-webhook:v0.1.0") {
		t.Errorf("kubelet collected the pinned tandem-webhook image with the unpinned probe: %s", out)
	}
}

// uninstallVMNRI runs the uninstall of docs/install.md's NRI path: the pods keep running, and a new
// pod starts without the plugin.
func uninstallVMNRI(ctx context.Context, t *testing.T, cs kubernetes.Interface, pods map[string]*corev1.Pod) {
	states := vmPodStates(ctx, t, cs, pods)
	var cmds []string
	in := false
	for _, cmd := range docCommands(t, "The NRI path") {
		// The commands from "**Uninstall.**" on: the plugin's objects, then what it published on the Nodes.
		if strings.HasPrefix(cmd, "kubectl -n koordinator-system delete daemonset,serviceaccount tandem-nri") {
			in = true
		}
		if in {
			cmds = append(cmds, cmd)
		}
	}
	if len(cmds) != 5 {
		t.Fatalf("docs/install.md's NRI path has no uninstall of five commands: %q", cmds)
	}
	for _, cmd := range cmds {
		out, err := runDocShell(ctx, cmd)
		t.Logf("%s: %v\n%s", cmd, err, out)
		if err != nil {
			t.Fatal(err)
		}
	}
	checkWithdrawn(ctx, t, cs)
	waitVM(ctx, t, 2*time.Minute, "the plugin gone from the node", func(ctx context.Context) (bool, string) {
		out := strings.TrimSpace(vmRun(ctx, t, "pgrep -x tandem-nri || true"))
		return out == "", "tandem-nri pid " + out
	})
	nodeStaysReady(ctx, t, cs, cluster.NodeVM, 10*time.Second)
	sameVMPodStates(t, "the uninstall", states, vmPodStates(ctx, t, cs, pods))
	createVMPods(ctx, t, t, cs, vmPod("vm-after-uninstall", metav1.NamespaceDefault, "", nil, nil))
}

// runDocShell runs a shell command of the docs as an operator's admin machine would: kubectl on the
// PATH, the cluster's admin kubeconfig in KUBECONFIG.
func runDocShell(ctx context.Context, cmd string) ([]byte, error) {
	c := exec.CommandContext(ctx, "bash", "-c", cmd)
	c.Env = append(os.Environ(), "KUBECONFIG="+suite.c.Kubeconfig, "PATH="+filepath.Dir(suite.c.Kubectl)+":"+os.Getenv("PATH"))
	return c.CombinedOutput()
}

// checkWithdrawn checks that the VM's Node carries no batch resources and no node-metric annotation
// once Tandem is gone from it.
func checkWithdrawn(ctx context.Context, t *testing.T, cs kubernetes.Interface) {
	t.Helper()
	n, err := cs.CoreV1().Nodes().Get(ctx, cluster.NodeVM, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, r := range []corev1.ResourceName{nodemetric.ResourceBatchCPU, nodemetric.ResourceBatchMemory} {
		if _, ok := n.Status.Capacity[r]; ok {
			left = append(left, "capacity "+string(r))
		}
		if _, ok := n.Status.Allocatable[r]; ok {
			left = append(left, "allocatable "+string(r))
		}
	}
	if _, ok := n.Annotations[nodemetric.AnnotationKey]; ok {
		left = append(left, "annotation "+nodemetric.AnnotationKey)
	}
	if len(left) > 0 {
		t.Errorf("after the uninstall %s still carries %s: kube-scheduler and tandem-extender would act on what no agent serves", cluster.NodeVM, strings.Join(left, ", "))
	}
}
