//go:build e2e

package cluster_test

import (
	"context"
	"fmt"
	"maps"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/cpuset"
	"k8s.io/utils/ptr"

	"github.com/tandemkit/tandem/e2e/cluster"
	"github.com/tandemkit/tandem/e2e/framework"
	"github.com/tandemkit/tandem/metrics/nodemetric"
)

// requireVM returns the cluster's VM node, or skips: only the VM runs of tier 2 have one
// (TANDEM_CLUSTER_VM, docs/e2e-cluster.md).
func requireVM(t *testing.T) *cluster.VMNode {
	t.Helper()
	if suite.c.VM == nil {
		t.Skip("no VM node in this cluster (TANDEM_CLUSTER_VM=debian or 2 adds one)")
	}
	return suite.c.VM
}

// vmRun runs a script on the VM node as root and fails the test if it fails.
func vmRun(ctx context.Context, t *testing.T, script string) string {
	t.Helper()
	out, err := suite.c.VM.Run(ctx, script)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// vmPod is a pod for the VM node: pinned there by its hostname and tolerating the VM's taint.
func vmPod(name, ns, qosClass string, requests, limits corev1.ResourceList) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{
			NodeSelector:                  map[string]string{corev1.LabelHostname: cluster.NodeVM},
			Tolerations:                   []corev1.Toleration{{Key: cluster.VMTaint, Operator: corev1.TolerationOpExists}},
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			Containers: []corev1.Container{{
				Name: "main", Image: framework.TestImage, ImagePullPolicy: corev1.PullNever,
				Command:   []string{"/bin/sh", "-c", "echo tandem-e2e $HOSTNAME; exec sleep 36000"},
				Resources: corev1.ResourceRequirements{Requests: requests, Limits: limits},
			}},
		},
	}
	if qosClass != "" {
		p.Labels["koordinator.sh/qosClass"] = qosClass
	}
	return p
}

func cpuMem(cpu, mem string) corev1.ResourceList {
	return corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)}
}

func batchResources(milliCPU int64, mem string) corev1.ResourceList {
	return corev1.ResourceList{
		nodemetric.ResourceBatchCPU:    *resource.NewQuantity(milliCPU, resource.DecimalSI),
		nodemetric.ResourceBatchMemory: resource.MustParse(mem),
	}
}

// createVMPods creates the pods and waits until each runs and is Ready, returning them by name. The
// pods are deleted when owner ends: a subtest's pods may outlive it, for the subtests after it.
func createVMPods(ctx context.Context, t, owner *testing.T, cs kubernetes.Interface, pods ...*corev1.Pod) map[string]*corev1.Pod {
	t.Helper()
	for _, p := range pods {
		if _, err := cs.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create pod %s/%s: %v", p.Namespace, p.Name, err)
		}
		owner.Cleanup(func() { deletePodIn(context.WithoutCancel(ctx), owner, cs, p.Namespace, p.Name) })
	}
	out := map[string]*corev1.Pod{}
	for _, p := range pods {
		// Emulated, the VM starts a pod in about ten seconds; batch pods wait for the node's first
		// report of batch capacity too.
		got := waitPodRunningIn(ctx, t, cs, p.Namespace, p.Name, 4*time.Minute)
		if got.Spec.NodeName != cluster.NodeVM {
			t.Fatalf("pod %s runs on %s, want %s", p.Name, got.Spec.NodeName, cluster.NodeVM)
		}
		out[p.Name] = got
	}
	return out
}

// containerID is the runtime's id of the pod's first container.
func containerID(t *testing.T, p *corev1.Pod) string {
	t.Helper()
	if len(p.Status.ContainerStatuses) == 0 || p.Status.ContainerStatuses[0].ContainerID == "" {
		t.Fatalf("pod %s has no container id yet", p.Name)
	}
	_, id, _ := strings.Cut(p.Status.ContainerStatuses[0].ContainerID, "://")
	return id
}

// vmCgroup returns the cgroup v2 directory of the pod's first container on the VM node: with the
// systemd driver, .../kubepods-<qos>-pod<uid>.slice/cri-containerd-<id>.scope.
func vmCgroup(ctx context.Context, t *testing.T, p *corev1.Pod) string {
	t.Helper()
	id := containerID(t, p)
	out := strings.TrimSpace(vmRun(ctx, t, "find /sys/fs/cgroup/kubepods.slice -type d -name 'cri-containerd-"+id+".scope'"))
	if out == "" || strings.Contains(out, "\n") {
		t.Fatalf("pod %s: container %s has %q as its cgroup on %s, want one directory", p.Name, id, out, cluster.NodeVM)
	}
	return out
}

// vmPodCgroup is the pod's own cgroup, the container cgroup's parent.
func vmPodCgroup(ctx context.Context, t *testing.T, p *corev1.Pod) string {
	t.Helper()
	dir := vmCgroup(ctx, t, p)
	return dir[:strings.LastIndexByte(dir, '/')]
}

// vmRead reads cgroup files of one directory on the VM, in one login: file name to its content.
func vmRead(ctx context.Context, t *testing.T, dir string, files ...string) map[string]string {
	t.Helper()
	var script strings.Builder
	for _, f := range files {
		fmt.Fprintf(&script, "printf '%%s=' %s; cat %s/%s 2>/dev/null | tr '\\n' ' '; echo\n", f, dir, f)
	}
	out := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(vmRun(ctx, t, script.String())), "\n") {
		k, v, _ := strings.Cut(line, "=")
		out[k] = strings.TrimSpace(v)
	}
	return out
}

// vmCPUSet reads the container's cpuset.cpus (what the runtime wrote; empty: the parent's).
func vmCPUSet(ctx context.Context, t *testing.T, p *corev1.Pod) cpuset.CPUSet {
	t.Helper()
	v := vmRead(ctx, t, vmCgroup(ctx, t, p), "cpuset.cpus.effective")["cpuset.cpus.effective"]
	set, err := cpuset.Parse(v)
	if err != nil {
		t.Fatalf("pod %s: cpuset.cpus.effective %q: %v", p.Name, v, err)
	}
	return set
}

// vmAllCPUs is every CPU of the VM.
func vmAllCPUs(ctx context.Context, t *testing.T) cpuset.CPUSet {
	t.Helper()
	v := strings.TrimSpace(vmRun(ctx, t, "cat /sys/fs/cgroup/cpuset.cpus.effective"))
	set, err := cpuset.Parse(v)
	if err != nil {
		t.Fatalf("the VM's cpuset.cpus.effective %q: %v", v, err)
	}
	return set
}

// pidOf returns the main pid of a systemd service on the VM, 0 when it does not run.
func vmServicePID(ctx context.Context, t *testing.T, unit string) int {
	t.Helper()
	v := strings.TrimSpace(vmRun(ctx, t, "systemctl show -p MainPID --value "+unit))
	pid, err := strconv.Atoi(v)
	if err != nil {
		t.Fatalf("MainPID of %s: %q", unit, v)
	}
	return pid
}

// vmPodState is what must not change while Tandem is installed, upgraded or removed under a pod.
type vmPodState struct {
	uid, containerID string
	restarts         int32
	startedAt        time.Time
}

func vmPodStates(ctx context.Context, t *testing.T, cs kubernetes.Interface, pods map[string]*corev1.Pod) map[string]vmPodState {
	t.Helper()
	out := map[string]vmPodState{}
	for name, p := range pods {
		got, err := cs.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("get pod %s: %v", name, err)
		}
		if got.Status.Phase != corev1.PodRunning || len(got.Status.ContainerStatuses) == 0 || got.Status.ContainerStatuses[0].State.Running == nil {
			t.Fatalf("pod %s is %s: %s", name, got.Status.Phase, podProblem(got))
		}
		st := got.Status.ContainerStatuses[0]
		out[name] = vmPodState{uid: string(got.UID), containerID: st.ContainerID, restarts: st.RestartCount, startedAt: st.State.Running.StartedAt.Time}
	}
	return out
}

func sameVMPodStates(t *testing.T, what string, before, after map[string]vmPodState) {
	t.Helper()
	for name, b := range before {
		if a := after[name]; a != b {
			t.Errorf("after %s, pod %s changed:\n  before %+v\n  after  %+v", what, name, b, a)
		}
	}
}

// waitVM polls cond on the VM node until it holds or timeout passes, and fails with what it saw last.
func waitVM(ctx context.Context, t *testing.T, timeout time.Duration, what string, cond func(ctx context.Context) (bool, string)) {
	t.Helper()
	var last string
	// cond runs its commands under ctx, not the poll's: one cut off by the poll's deadline would fail
	// the test with a killed ssh instead of what cond last saw.
	err := wait.PollUntilContextTimeout(ctx, time.Second, timeout, true, func(context.Context) (bool, error) {
		var ok bool
		ok, last = cond(ctx)
		return ok, nil
	})
	if err != nil {
		t.Fatalf("%s within %s: last %s", what, timeout, last)
	}
}

// docCommands returns the commands of the sh blocks in the section of docs/install.md whose heading
// starts with heading: what an operator runs there, and what the VM tests run, word for word.
func docCommands(t *testing.T, heading string) []string {
	t.Helper()
	b, err := os.ReadFile(repoPath(t, "docs/install.md"))
	if err != nil {
		t.Fatal(err)
	}
	var cmds []string
	in, block := false, false
	for _, line := range strings.Split(string(b), "\n") {
		switch {
		case strings.HasPrefix(line, "## "):
			in = strings.HasPrefix(strings.TrimPrefix(line, "## "), heading)
		case in && line == "```sh":
			block = true
		case block && line == "```":
			block = false
		case in && block && strings.TrimSpace(line) != "" && !strings.HasPrefix(strings.TrimSpace(line), "#"):
			cmds = append(cmds, strings.TrimSpace(line))
		}
	}
	if len(cmds) == 0 {
		t.Fatalf("docs/install.md has no sh block under a heading %q", heading)
	}
	return cmds
}

// checkVMPools runs what both VM tests check once the agent runs on the VM node and publishes batch
// capacity: an LSE pod arrives and the pods that ran before the agent (before, "vm-before-ls" and
// "vm-before-be") move off its CPU; then the other pods of Koordinator's QoS example, and their cpusets and
// the batch pod's cgroups on v2. It returns the example's pods and every running pod by name, and the BE pool (every CPU
// but LSE's); it ends the test when a step failed, since the rest builds on them.
func checkVMPools(ctx context.Context, t *testing.T, cs kubernetes.Interface, before map[string]*corev1.Pod) (seed, running map[string]*corev1.Pod, bePool cpuset.CPUSet) {
	t.Helper()
	top := t
	all := vmAllCPUs(ctx, t)
	var lse, batchPod *corev1.Pod
	t.Run("running pods leave the CPU an LSE pod gets", func(t *testing.T) {
		// The QoS example's batch pod comes now, while no other pod placed since the node's last report adds
		// to the usage the extender expects there: later it would wait for a report.
		got := createVMPods(ctx, t, top, cs,
			batchVMPod("vm-be", metav1.NamespaceSystem, 100),
			vmPod("vm-lse", metav1.NamespaceDefault, "LSE", cpuMem("1", "64Mi"), cpuMem("1", "64Mi")))
		lse, batchPod = got["vm-lse"], got["vm-be"]
		set := vmCPUSet(ctx, t, lse)
		if set.Size() != 1 {
			t.Fatalf("LSE pod: cpuset %s, want one CPU of its own", set)
		}
		bePool = all.Difference(set)
		waitVM(ctx, t, 30*time.Second, "the pods that ran before the agent move to the CPUs LSE left", func(ctx context.Context) (bool, string) {
			ls, be := vmCPUSet(ctx, t, before["vm-before-ls"]), vmCPUSet(ctx, t, before["vm-before-be"])
			return ls.Equals(bePool) && be.Equals(bePool), fmt.Sprintf("LS %s, BE %s; want %s (LSE has %s)", ls, be, bePool, set)
		})
	})
	if t.Failed() || lse == nil || batchPod == nil {
		t.FailNow()
	}
	t.Run("Koordinator's QoS example on cgroup v2", func(t *testing.T) {
		// The batch pod runs in kube-system: the profile webhook sees no pod there, so the agent reads
		// its batch resources from the spec.
		seed = createVMPods(ctx, t, top, cs,
			vmPod("vm-lsr", metav1.NamespaceDefault, "LSR", cpuMem("1", "64Mi"), cpuMem("1", "64Mi")),
			vmPod("vm-ls", metav1.NamespaceDefault, "LS", cpuMem("500m", "64Mi"), cpuMem("1", "64Mi")),
		)
		seed["vm-lse"], seed["vm-be"] = lse, batchPod
		checkVMSeedCPUSets(ctx, t, seed, before["vm-before-ls"])
		checkVMBatchCgroups(ctx, t, seed["vm-be"], 100)
		checkVMBEThreads(ctx, t, cs, seed["vm-be"])
	})
	if seed == nil {
		t.FailNow()
	}
	running = map[string]*corev1.Pod{"vm-before-ls": before["vm-before-ls"], "vm-before-be": before["vm-before-be"]}
	maps.Copy(running, seed)
	return seed, running, bePool
}
