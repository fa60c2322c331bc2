//go:build e2e

package cluster_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/tandemkit/tandem/apis/scheduling/v1alpha1"
	"github.com/tandemkit/tandem/config/batchwindow"
	"github.com/tandemkit/tandem/e2e/cluster"
	"github.com/tandemkit/tandem/e2e/framework"
)

const deschedNS = "tandem-desched"

// deschedulerConfig is the test's DeschedulerConfiguration: rounds of 5 s, the VM hot once its LS pods
// use half of it for two rounds (the hog's four threads, emulated on one host CPU, measure about 60%), node-a cold under 95% (it runs the control
// plane and the VM's emulator, capped at one of its two CPUs: busy, but with room), only the test's
// namespace.
//
// Until all is set, pods labelled e2e-phase (the last check's) are not chosen.
func deschedulerConfig(dryRun, all bool) string {
	selectors := `
          podSelectors:
            - name: not-yet
              selector:
                matchExpressions:
                  - {key: e2e-phase, operator: DoesNotExist}`
	if all {
		selectors = ""
	}
	return fmt.Sprintf(`apiVersion: descheduler/v1alpha2
kind: DeschedulerConfiguration
deschedulingInterval: 5s
dryRun: %v
leaderElection:
  leaderElect: true
  resourceName: tandem-descheduler
  resourceNamespace: koordinator-system
profiles:
  - name: e2e
    pluginConfig:
      - name: LowNodeLoad
        args:
          nodeMetricExpirationSeconds: 180
          evictableNamespaces:
            include: [%s]
          highThresholds:
            cpu: 99
          prodHighThresholds:
            cpu: 50
          lowThresholds:
            cpu: 95
          anomalyCondition:
            consecutiveAbnormalities: 2%s
      - name: MigrationController
        args:
          defaultJobTTL: 3m
          maxMigratingPerNode: 1
          maxMigratingPerNamespace: 2
          maxMigratingGlobally: 2
`, dryRun, deschedNS, selectors)
}

// checkDescheduler runs tandem-descheduler, installed by `kubectl apply -k deploy/`, on the VM node and
// node-a, two kernels (TestVMNode runs it while Tandem's agent runs on the VM): a CPU hog in the VM
// makes it hot while node-a stays cold, and
//
//   - a batch Deployment's two pods move from the VM to node-a, each through a PodMigrationJob whose
//     Reservation on node-a was Available before the pod was evicted, and each replacement is bound on
//     node-a, on that reservation;
//   - a batch pod under a PodDisruptionBudget that allows no disruption stays: its job fails with the
//     Eviction API's refusal and its reservation is released;
//   - in a dry run a batch pod stays and gets a WouldMigrate Event, and no job is made for it;
//   - with node-a publishing no batch capacity (a batch window that never opens), nothing is evicted
//     and the pod gets a MigrationSkipped Event.
func checkDescheduler(ctx context.Context, t *testing.T, cs kubernetes.Interface) {
	rc, err := clientcmd.BuildConfigFromFlags("", suite.c.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	origSLO := maps.Clone(sloData(ctx, t, cs))
	t.Cleanup(func() { restoreSLO(context.WithoutCancel(ctx), t, cs, origSLO) })
	// node-a reclaims up to its whole CPU, so that the pods fit there next to the control plane.
	editSLO(ctx, t, cs, "colocation-config", func(v map[string]any) { v["cpuReclaimThresholdPercent"] = 100 })
	// Both nodes must publish their load and batch capacity (the descheduler reads nothing else), the
	// VM room for the test's three pods: a hog before this test leaves a predicted peak for minutes.
	for _, n := range []string{cluster.NodeVM, cluster.NodeA} {
		waitWindow(ctx, t, cs, n, 6*time.Minute, func(cpu int64, _ *batchwindow.State) bool { return cpu >= 400 }, "batch-cpu of at least 400m")
	}
	cm, err := cs.CoreV1().ConfigMaps("koordinator-system").Get(ctx, "tandem-descheduler", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("tandem-descheduler's ConfigMap (kubectl apply -k deploy/): %v", err)
	}
	origConfig := cm.Data["config.yaml"]
	t.Cleanup(func() { setDeschedulerConfig(context.WithoutCancel(ctx), t, cs, origConfig) })
	// Under the hog node-a runs the VM's emulator on one of its two CPUs: above tandem-extender's
	// default 65%, which would keep every new pod off it (the replacements, and the descheduler's own
	// at a restart). The test's cold node takes pods up to its whole CPU, as an operator sets a node
	// of its own.
	if out, err := suite.c.RunKubectl(ctx, "annotate", "node", cluster.NodeA, `tandem.io/usage-thresholds={"cpu":100}`, "--overwrite"); err != nil {
		t.Fatalf("annotate %s: %v: %s", cluster.NodeA, err, out)
	}
	t.Cleanup(func() {
		_, _ = suite.c.RunKubectl(context.WithoutCancel(ctx), "annotate", "node", cluster.NodeA, "tandem.io/usage-thresholds-")
	})
	setDeschedulerConfig(ctx, t, cs, deschedulerConfig(true, false))

	// A namespace of an earlier run may still be going.
	_ = wait.PollUntilContextTimeout(ctx, 2*time.Second, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := cs.CoreV1().Namespaces().Get(ctx, deschedNS, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: deschedNS}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.WithoutCancel(ctx)
		_ = cs.CoreV1().Namespaces().Delete(ctx, deschedNS, metav1.DeleteOptions{})
		// The jobs and reservations are cluster-scoped: they outlive the namespace.
		for _, j := range migrationJobs(ctx, t, dyn) {
			if o := j.Spec.ReservationOptions; o != nil && o.ReservationRef != nil {
				_ = dyn.Resource(v1alpha1.ReservationsResource).Delete(ctx, o.ReservationRef.Name, metav1.DeleteOptions{})
			}
			_ = dyn.Resource(v1alpha1.PodMigrationJobsResource).Delete(ctx, j.Name, metav1.DeleteOptions{})
		}
	})
	// The batch pods start on the VM: node-a refuses new pods meanwhile.
	// All start before the hog, which leaves the VM no batch capacity for new ones.
	onVM(ctx, t, cs, func() {
		createBatchDeployment(ctx, t, cs, "move", 2, false)
		createBatchDeployment(ctx, t, cs, "guarded", 1, false)
		createBatchDeployment(ctx, t, cs, "full", 1, true)
		waitDeployment(ctx, t, cs, "move", 2, cluster.NodeVM)
		waitDeployment(ctx, t, cs, "guarded", 1, cluster.NodeVM)
		waitDeployment(ctx, t, cs, "full", 1, cluster.NodeVM)
	})
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "guarded", Namespace: deschedNS},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(1)), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "guarded"}}}}
	if _, err := cs.PolicyV1().PodDisruptionBudgets(deschedNS).Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	guarded := podsOf(ctx, t, cs, "guarded")[0]
	moving := podsOf(ctx, t, cs, "move")

	// Dry run: decided and reported, nothing made, nothing evicted.
	startVMHog(ctx, t, cs)
	// One pod at a time leaves a node (maxMigratingPerNode 1): the first in line is reported.
	wantEventIn(ctx, t, cs, deschedNS, "", "WouldMigrate", "would reserve room on "+cluster.NodeA)
	for _, p := range append(moving, guarded) {
		assertStays(ctx, t, cs, dyn, p, 5*time.Second)
	}

	// For real: the two pods of "move" leave the VM for node-a, one migration at a time.
	setDeschedulerConfig(ctx, t, cs, deschedulerConfig(false, false))
	start := time.Now()
	var jobs []v1alpha1.PodMigrationJob
	err = wait.PollUntilContextTimeout(ctx, 2*time.Second, 8*time.Minute, true, func(ctx context.Context) (bool, error) {
		jobs = migrationJobs(ctx, t, dyn)
		pods := podsOf(ctx, t, cs, "move")
		onA := 0
		for _, p := range pods {
			if p.Spec.NodeName == cluster.NodeA && p.Status.Phase == corev1.PodRunning {
				onA++
			}
		}
		return onA == 2 && succeeded(jobs, "move") == 2, nil
	})
	if err != nil {
		t.Fatalf("the Deployment's pods did not both move to %s within 8 minutes of the restart; jobs: %s; see kubectl -n koordinator-system logs deploy/tandem-descheduler", cluster.NodeA, describeJobs(jobs))
	}
	t.Logf("both pods moved %s after the descheduler restarted for real: %s", time.Since(start).Round(time.Second), describeJobs(jobs))
	for _, j := range jobs {
		if !strings.HasPrefix(j.Spec.PodRef.Name, "move-") {
			continue
		}
		reserved, evicted := condTime(j, "ReservationScheduled"), condTime(j, "Eviction")
		if reserved.IsZero() || evicted.IsZero() || evicted.Before(reserved) {
			t.Errorf("job %s: reserved at %v, evicted at %v: the room must be reserved before the eviction", j.Name, reserved, evicted)
		}
		r := reservation(ctx, t, dyn, j.Spec.ReservationOptions.ReservationRef.Name)
		if r.Status.NodeName != cluster.NodeA || r.Status.Phase != v1alpha1.ReservationSucceeded || len(r.Status.CurrentOwners) != 1 ||
			j.Status.PodRef == nil || r.Status.CurrentOwners[0].Name != j.Status.PodRef.Name {
			t.Errorf("reservation %s: node %s, phase %s, owners %v; job's replacement %v", r.Name, r.Status.NodeName, r.Status.Phase, r.Status.CurrentOwners, j.Status.PodRef)
		}
		p, err := cs.CoreV1().Pods(deschedNS).Get(ctx, j.Status.PodRef.Name, metav1.GetOptions{})
		if err != nil || p.Spec.NodeName != cluster.NodeA {
			t.Errorf("replacement %s: %v, on %q", j.Status.PodRef.Name, err, p.Spec.NodeName)
		}
	}

	// The guarded pod's move was refused by its budget: the job failed, the room was released, the
	// pod still runs on the VM.
	err = wait.PollUntilContextTimeout(ctx, 2*time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, j := range migrationJobs(ctx, t, dyn) {
			if j.Spec.PodRef.Name == guarded.Name && j.Status.Phase == v1alpha1.PodMigrationJobFailed {
				if j.Status.Reason != v1alpha1.PodMigrationJobReasonFailedEvict || !strings.Contains(j.Status.Message, "PodDisruptionBudget") {
					return false, fmt.Errorf("job %s failed for %s: %s", j.Name, j.Status.Reason, j.Status.Message)
				}
				if r := reservation(ctx, t, dyn, j.Spec.ReservationOptions.ReservationRef.Name); r.Status.Phase != v1alpha1.ReservationFailed {
					return false, fmt.Errorf("reservation %s is %s after the refusal, want Failed", r.Name, r.Status.Phase)
				}
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Errorf("no failed migration of the PodDisruptionBudget's pod %s: %v; jobs: %s", guarded.Name, err, describeJobs(migrationJobs(ctx, t, dyn)))
	}
	if p, err := cs.CoreV1().Pods(deschedNS).Get(ctx, guarded.Name, metav1.GetOptions{}); err != nil || p.UID != guarded.UID || p.DeletionTimestamp != nil {
		t.Errorf("the guarded pod was taken down: %v", err)
	}

	// node-a full: a batch window that never opens leaves it no batch capacity; nothing is evicted.
	b, _ := json.Marshal(map[string]any{"nodeConfigs": []map[string]any{{"name": "node-a-full",
		"nodeSelector": map[string]any{"matchLabels": map[string]string{"kubernetes.io/hostname": cluster.NodeA}}, "enable": true, "windows": []any{}}}})
	setSLO(ctx, t, cs, "batch-window-config", string(b))
	waitWindow(ctx, t, cs, cluster.NodeA, time.Minute, func(cpu int64, _ *batchwindow.State) bool { return cpu == 0 }, "node-a publishing no batch capacity")
	full := podsOf(ctx, t, cs, "full")[0]
	setDeschedulerConfig(ctx, t, cs, deschedulerConfig(false, true))
	wantEventIn(ctx, t, cs, deschedNS, full.Name, "MigrationSkipped", "no cold node has")
	assertStays(ctx, t, cs, dyn, full, 15*time.Second)
	stopVMHog(ctx, t, cs)
}

// setDeschedulerConfig writes the descheduler's configuration and restarts it, as an operator would
// (it reads the file at start), and waits for the rollout.
func setDeschedulerConfig(ctx context.Context, t *testing.T, cs kubernetes.Interface, config string) {
	t.Helper()
	cm, err := cs.CoreV1().ConfigMaps("koordinator-system").Get(ctx, "tandem-descheduler", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data["config.yaml"] = config
	if _, err := cs.CoreV1().ConfigMaps("koordinator-system").Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"-n", "koordinator-system", "rollout", "restart", "deployment/tandem-descheduler"},
		{"-n", "koordinator-system", "rollout", "status", "deployment/tandem-descheduler", "--timeout=3m"},
	} {
		if out, err := suite.c.RunKubectl(ctx, args...); err != nil {
			pods, _ := suite.c.RunKubectl(ctx, "-n", "koordinator-system", "describe", "pods", "-l", "app.kubernetes.io/name=tandem-descheduler")
			t.Fatalf("kubectl %s: %v: %s\n%s", strings.Join(args, " "), err, out, pods)
		}
	}
}

// onVM runs create with node-a tainted NoSchedule, so that what it creates lands on the VM.
func onVM(ctx context.Context, t *testing.T, cs kubernetes.Interface, create func()) {
	t.Helper()
	const taint = "tandem.io/e2e-descheduler"
	if out, err := suite.c.RunKubectl(ctx, "taint", "node", cluster.NodeA, taint+"=:NoSchedule"); err != nil {
		t.Fatalf("taint %s: %v: %s", cluster.NodeA, err, out)
	}
	defer func() {
		if out, err := suite.c.RunKubectl(context.WithoutCancel(ctx), "taint", "node", cluster.NodeA, taint+":NoSchedule-"); err != nil {
			t.Errorf("untaint %s: %v: %s", cluster.NodeA, err, out)
		}
	}()
	create()
}

// createBatchDeployment creates a Deployment of BE pods asking 100m batch-cpu each, tolerating the VM;
// later labels them e2e-phase, which the descheduler skips until the last check.
func createBatchDeployment(ctx context.Context, t *testing.T, cs kubernetes.Interface, name string, replicas int32, later bool) {
	t.Helper()
	p := batchPod(name, 100)
	if later {
		p.Labels["e2e-phase"] = "last"
	}
	p.Spec.Tolerations = []corev1.Toleration{{Key: cluster.VMTaint, Operator: corev1.TolerationOpExists}}
	p.Spec.Containers[0].Image = framework.TestImage
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: deschedNS},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: p.Labels}, Spec: p.Spec},
		},
	}
	if _, err := cs.AppsV1().Deployments(deschedNS).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitDeployment waits until the Deployment's replicas run, all on node.
func waitDeployment(ctx context.Context, t *testing.T, cs kubernetes.Interface, name string, replicas int, node string) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(ctx, 2*time.Second, 4*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods := podsOf(ctx, t, cs, name)
		var on []string
		running := 0
		for _, p := range pods {
			on = append(on, p.Name+"@"+p.Spec.NodeName+"/"+string(p.Status.Phase))
			if p.Status.Phase == corev1.PodRunning && p.Spec.NodeName == node {
				running++
			}
		}
		last = strings.Join(on, " ")
		return running == replicas && len(pods) == replicas, nil
	})
	if err != nil {
		t.Fatalf("Deployment %s: %d pods not running on %s within 4 minutes: %s", name, replicas, node, last)
	}
}

// podsOf lists the Deployment's pods that are not leaving.
func podsOf(ctx context.Context, t *testing.T, cs kubernetes.Interface, app string) []corev1.Pod {
	t.Helper()
	list, err := cs.CoreV1().Pods(deschedNS).List(ctx, metav1.ListOptions{LabelSelector: "app=" + app})
	if err != nil {
		t.Fatal(err)
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	return out
}

// startVMHog runs an LS pod spinning on the VM's four CPUs, until stopVMHog or the test's end.
func startVMHog(ctx context.Context, t *testing.T, cs kubernetes.Interface) {
	t.Helper()
	hog := vmPod("desched-hog", deschedNS, "LS", cpuMem("100m", "16Mi"), nil)
	hog.Spec.Containers[0].Command = []string{"/bin/sh", "-c", "for i in 1 2 3 4; do (while :; do :; done) & done; wait"}
	createVMPods(ctx, t, t, cs, hog)
}

// stopVMHog deletes the hog.
func stopVMHog(ctx context.Context, t *testing.T, cs kubernetes.Interface) {
	t.Helper()
	deletePodIn(ctx, t, cs, deschedNS, "desched-hog")
}

func migrationJobs(ctx context.Context, t *testing.T, dyn dynamic.Interface) []v1alpha1.PodMigrationJob {
	t.Helper()
	list, err := dyn.Resource(v1alpha1.PodMigrationJobsResource).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list PodMigrationJobs (the CRD from kubectl apply -k deploy/): %v", err)
	}
	var out []v1alpha1.PodMigrationJob
	for i := range list.Items {
		var j v1alpha1.PodMigrationJob
		if err := v1alpha1.FromUnstructured(&list.Items[i], &j); err == nil && j.Spec.PodRef != nil && j.Spec.PodRef.Namespace == deschedNS {
			out = append(out, j)
		}
	}
	return out
}

func reservation(ctx context.Context, t *testing.T, dyn dynamic.Interface, name string) *v1alpha1.Reservation {
	t.Helper()
	u, err := dyn.Resource(v1alpha1.ReservationsResource).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reservation %s: %v", name, err)
	}
	r, err := v1alpha1.ReservationFrom(u)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func succeeded(jobs []v1alpha1.PodMigrationJob, app string) int {
	n := 0
	for _, j := range jobs {
		if strings.HasPrefix(j.Spec.PodRef.Name, app+"-") && j.Status.Phase == v1alpha1.PodMigrationJobSucceeded {
			n++
		}
	}
	return n
}

func condTime(j v1alpha1.PodMigrationJob, typ string) time.Time {
	for _, c := range j.Status.Conditions {
		if c.Type == typ && c.Status == "True" {
			return c.LastTransitionTime.Time
		}
	}
	return time.Time{}
}

func describeJobs(jobs []v1alpha1.PodMigrationJob) string {
	var out []string
	for _, j := range jobs {
		out = append(out, fmt.Sprintf("%s(%s→%s %s %s: %s)", j.Name, j.Spec.PodRef.Name, j.Status.NodeName, j.Status.Phase, j.Status.Reason, j.Status.Message))
	}
	return strings.Join(out, "; ")
}

// assertStays checks that p keeps running where it is, with no job made for it, for d.
func assertStays(ctx context.Context, t *testing.T, cs kubernetes.Interface, dyn dynamic.Interface, p corev1.Pod, d time.Duration) {
	t.Helper()
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		got, err := cs.CoreV1().Pods(deschedNS).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil || got.UID != p.UID || got.DeletionTimestamp != nil {
			t.Fatalf("pod %s was evicted: %v", p.Name, err)
		}
		for _, j := range migrationJobs(ctx, t, dyn) {
			if j.Spec.PodRef.UID == p.UID {
				t.Fatalf("a PodMigrationJob %s was made for %s", j.Name, p.Name)
			}
		}
		time.Sleep(2 * time.Second)
	}
}

// wantEventIn waits for an Event of reason on pod name in ns (any pod there when name is "") whose
// message contains text.
func wantEventIn(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns, name, reason, text string) {
	t.Helper()
	var seen []string
	err := wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		sel := "reason=" + reason
		if name != "" {
			sel += ",involvedObject.name=" + name
		}
		evs, err := cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: sel})
		if err != nil {
			return false, nil
		}
		seen = seen[:0]
		for _, e := range evs.Items {
			seen = append(seen, e.Message)
			if strings.Contains(e.Message, text) {
				t.Logf("Event %s on %s: %s", reason, e.InvolvedObject.Name, e.Message)
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no %s Event on %s saying %q within 3 minutes; seen %q", reason, name, text, seen)
	}
}
