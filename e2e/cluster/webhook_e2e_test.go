//go:build e2e

package cluster_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/tandemkit/tandem/e2e/framework"
	"github.com/tandemkit/tandem/resource/batch"
)

// Where deploy/webhook/ installs tandem-webhook.
const (
	tandemWebhookNS   = "koordinator-system"
	tandemWebhookName = "tandem-webhook"
	// seedNamespace carries the namespace label Koordinator's colocation-profile-example selects,
	// so that profile takes its pods.
	seedNamespace = "tandem-seed-001"
	seedProfile   = "colocation-profile-example"
)

// TestColocationProfile runs the webhook `kubectl apply -k deploy/` installed: Koordinator's
// colocation-profile-example turns the pod its documentation creates with it into the pod
// Koordinator's webhook makes of it, which is then placed on published batch capacity and runs with
// batch cgroups; a Job of 4 executors (init container and two containers each) and a Deployment
// become BE and run; an LSE pod asking for 1500m is refused by `kubectl apply` naming the rule;
// with the webhook's Deployment scaled to zero, pods are still admitted (failurePolicy Ignore), the
// API server counts the bypass, and the webhook, back, counts and logs the pod it missed.
func TestColocationProfile(t *testing.T) {
	ctx := testContext(t, 15*time.Minute)
	cs := client(t)
	waitWebhook(ctx, t, cs)

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: seedNamespace, Labels: map[string]string{"koordinator.sh/enable-colocation": "true"}}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.WithoutCancel(ctx)
		_, _ = suite.c.RunKubectl(ctx, "delete", "clustercolocationprofile", seedProfile, "--ignore-not-found")
		_ = cs.CoreV1().Namespaces().Delete(ctx, seedNamespace, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		err := wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
			_, err := cs.CoreV1().Namespaces().Get(ctx, seedNamespace, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
		if err != nil {
			t.Errorf("namespace %s not gone 3 minutes after its delete", seedNamespace)
		}
	})
	if out, err := suite.c.RunKubectl(ctx, "apply", "-f", repoPath(t, "admission/testdata/seed-001-profile.yaml")); err != nil {
		t.Fatalf("kubectl apply Koordinator's colocation-profile-example: %v: %s", err, out)
	}
	// The webhook's informer sees the profile a moment after the API server stored it.
	waitProfileApplied(ctx, t, cs)

	t.Run("the profile example's pod comes out as Koordinator's webhook makes it, runs on batch capacity", func(t *testing.T) {
		pod := seedPod(t)
		out, err := kubectlApply(ctx, pod)
		if err != nil {
			t.Fatalf("kubectl apply the profile example's pod: %v: %s", err, out)
		}
		p, err := cs.CoreV1().Pods(seedNamespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range map[string]string{"koordinator.sh/qosClass": "BE", "koordinator.sh/priority": "1000", "koordinator.sh/mutated": "true", "koordinator.sh/enable-colocation": "true"} {
			if p.Labels[k] != v {
				t.Errorf("label %s=%q, want %q (labels %v)", k, p.Labels[k], v, p.Labels)
			}
		}
		if p.Annotations["koordinator.sh/intercepted"] != "true" {
			t.Errorf("annotations %v lack koordinator.sh/intercepted: true", p.Annotations)
		}
		if p.Spec.Priority == nil || *p.Spec.Priority != 5000 || p.Spec.PriorityClassName != "koord-batch" || p.Spec.SchedulerName != "koord-scheduler" {
			t.Errorf("priority %v, priorityClassName %q, schedulerName %q; want 5000, koord-batch, koord-scheduler", p.Spec.Priority, p.Spec.PriorityClassName, p.Spec.SchedulerName)
		}
		if g := p.Spec.TerminationGracePeriodSeconds; g == nil || *g != 30 {
			t.Errorf("terminationGracePeriodSeconds %v, want 30 from the profile's patch", g)
		}
		r := p.Spec.Containers[0].Resources
		for name, list := range map[string]corev1.ResourceList{"requests": r.Requests, "limits": r.Limits} {
			cpu, mem := list["kubernetes.io/batch-cpu"], list["kubernetes.io/batch-memory"]
			if len(list) != 2 || cpu.Value() != 1000 || mem.Value() != 3456<<20 {
				t.Errorf("%s %v, want exactly kubernetes.io/batch-cpu 1000 and kubernetes.io/batch-memory 3456Mi", name, list)
			}
		}
		// As the node reads it.
		spec, err := batch.ParseSpec(p.Annotations[batch.AnnotationExtendedResourceSpec])
		if want := (batch.Container{CPURequestMilli: 1000, CPULimitMilli: 1000, MemoryRequest: 3456 << 20, MemoryLimit: 3456 << 20}); err != nil || spec["app"] != want {
			t.Errorf("%s: %+v (%v), want container app %+v", batch.AnnotationExtendedResourceSpec, spec, err, want)
		}
		p = runPastAdmissionRace(ctx, t, cs, pod.Namespace, pod.Name, 4*time.Minute, func() error {
			if out, err := kubectlApply(ctx, pod); err != nil {
				return fmt.Errorf("kubectl apply: %w: %s", err, out)
			}
			return nil
		})
		n, err := cs.CoreV1().Nodes().Get(ctx, p.Spec.NodeName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// kube-scheduler checked the 1000 against what the node published when it placed the pod. What
		// the node publishes now follows its usage since then, and on this small node it sits near 1000
		// (990 was read once): a node still in colocation is what can be checked here.
		if v, ok := batchCPU(n); !ok || v <= 0 {
			t.Errorf("placed on %s, which publishes batch-cpu %d (present %v): no batch capacity", n.Name, v, ok)
		}
		checkBatchCgroups(t, p, 1000)
		if got, want := readCgroup(t, p, "memory", "memory.limit_in_bytes"), fmt.Sprint(3456<<20); got != want {
			t.Errorf("memory.limit_in_bytes %s, want %s from batch-memory 3456Mi", got, want)
		}
	})

	t.Run("a Job of 4 executors and a Deployment become BE and run", func(t *testing.T) {
		job := executorJob()
		if _, err := cs.BatchV1().Jobs(seedNamespace).Create(ctx, job, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := cs.AppsV1().Deployments(seedNamespace).Create(ctx, webDeployment(), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		var last string
		err := wait.PollUntilContextTimeout(ctx, time.Second, 4*time.Minute, true, func(ctx context.Context) (bool, error) {
			j, err := cs.BatchV1().Jobs(seedNamespace).Get(ctx, job.Name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			last = fmt.Sprintf("succeeded %d, failed %d, active %d", j.Status.Succeeded, j.Status.Failed, j.Status.Active)
			return j.Status.Succeeded == 4, nil
		})
		if err != nil {
			t.Errorf("Job %s not complete in 4 minutes: %s", job.Name, last)
		}
		pods, err := cs.CoreV1().Pods(seedNamespace).List(ctx, metav1.ListOptions{LabelSelector: "job-name=" + job.Name})
		if err != nil {
			t.Fatal(err)
		}
		if len(pods.Items) < 4 {
			t.Errorf("%d executor pods, want 4", len(pods.Items))
		}
		for _, p := range pods.Items {
			checkBatchPod(t, &p, []string{"setup", "executor", "shuffle"})
			// The retries are for kubelet's refusals alone: an executor that failed otherwise fails the test.
			if p.Status.Phase == corev1.PodFailed && !refusedForBatch(&p) {
				t.Errorf("executor pod %s failed: %s", p.Name, podProblem(&p))
			}
		}
		err = wait.PollUntilContextTimeout(ctx, time.Second, 4*time.Minute, true, func(ctx context.Context) (bool, error) {
			ps, err := cs.CoreV1().Pods(seedNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
			if err != nil {
				return false, nil
			}
			// A pod kubelet refused at admission (runPastAdmissionRace) stays, Failed, beside the
			// one its ReplicaSet made instead.
			var live []*corev1.Pod
			for i := range ps.Items {
				if p := &ps.Items[i]; !refusedForBatch(p) {
					live = append(live, p)
				}
			}
			if len(live) != 1 {
				last = fmt.Sprintf("%d pods of Deployment web besides those refused for batch capacity", len(live))
				return false, nil
			}
			p := live[0]
			last = fmt.Sprintf("%s on %q: %s", p.Status.Phase, p.Spec.NodeName, podProblem(p))
			if p.Status.Phase == corev1.PodRunning && podReady(p) {
				checkBatchPod(t, p, []string{"web"})
				return true, nil
			}
			return false, nil
		})
		if err != nil {
			t.Errorf("Deployment web's pod not Running in 4 minutes: %s", last)
		}
	})

	t.Run("an LSE pod asking for 1500m is refused by kubectl apply", func(t *testing.T) {
		pod := sleepPod("lse-fractional")
		pod.Labels["koordinator.sh/qosClass"] = "LSE"
		cpu := resource.MustParse("1500m")
		pod.Spec.Containers[0].Resources = corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: cpu}, Limits: corev1.ResourceList{corev1.ResourceCPU: cpu},
		}
		out, err := kubectlApply(ctx, pod)
		if err == nil {
			t.Fatalf("kubectl apply created it: %s", out)
		}
		for _, want := range []string{"denied the request", "pod default/lse-fractional, container sleep: rule exclusive-cpus", "1500m"} {
			if !bytes.Contains(out, []byte(want)) {
				t.Errorf("kubectl apply said %q, want it to contain %q", out, want)
			}
		}
		if _, err := cs.CoreV1().Pods(metav1.NamespaceDefault).Get(ctx, pod.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("refused pod exists anyway: %v", err)
		}
	})

	t.Run("a pod no rule concerns is not sent for validation", func(t *testing.T) {
		series := func(path, decision string) string {
			return fmt.Sprintf(`tandem_webhook_admission_requests_total{decision=%q,webhook=%q}`, decision, path)
		}
		count := func() (mutated, validated float64) {
			m := webhookMetrics(ctx, t, cs)
			return sumOf(m, series("/mutate-pod", "allowed"), series("/mutate-pod", "patched")),
				sumOf(m, series("/validate-pod", "allowed"), series("/validate-pod", "denied"))
		}
		m0, v0 := count()
		for i := range 5 {
			p := sleepPod(fmt.Sprintf("plain-%d", i))
			if _, err := cs.CoreV1().Pods(metav1.NamespaceDefault).Create(ctx, p, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
				t.Fatal(err)
			}
		}
		m1, v1 := count()
		if m1-m0 != 5 || v1 != v0 {
			t.Errorf("5 plain pods: %v mutating and %v validating reviews, want 5 and 0 (matchConditions skip pods no rule concerns)", m1-m0, v1-v0)
		}
	})

	t.Run("webhook down: pods still admitted, the bypass counted", func(t *testing.T) {
		before := failOpen(ctx, t, cs)
		scaleWebhook(ctx, t, cs, 0)
		t.Cleanup(func() { scaleWebhook(context.WithoutCancel(ctx), t, cs, 2) })
		pod := sleepPod("missed")
		pod.Namespace = seedNamespace
		pod.Labels["koordinator.sh/enable-colocation"] = "true"
		created, err := cs.CoreV1().Pods(seedNamespace).Create(ctx, pod, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("with the webhook down, a pod was refused (failurePolicy must be Ignore): %v", err)
		}
		if _, ok := created.Labels["koordinator.sh/qosClass"]; ok {
			t.Fatalf("pod mutated with no webhook replica: %v", created.Labels)
		}
		if after := failOpen(ctx, t, cs); after <= before {
			t.Errorf("apiserver_admission_webhook_fail_open_count for pods.mutate.tandem.io %v, before %v: want it to grow", after, before)
		}
		scaleWebhook(ctx, t, cs, 2)
		waitWebhook(ctx, t, cs)
		var last float64
		err = wait.PollUntilContextTimeout(ctx, 2*time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			last = maxOf(webhookMetrics(ctx, t, cs), `tandem_webhook_unadmitted_pods{check="profiles"}`)
			return last >= 1, nil
		})
		if err != nil {
			t.Errorf(`tandem_webhook_unadmitted_pods{check="profiles"} = %v 2 minutes after the webhook came back, want >= 1`, last)
		}
		// Every replica audits, so each one logs the pod it finds.
		logs, err := suite.c.RunKubectl(ctx, "-n", tandemWebhookNS, "logs", "-l", "app.kubernetes.io/name="+tandemWebhookName, "--tail=-1")
		if err != nil {
			t.Fatal(err)
		}
		missed := false
		for _, l := range strings.Split(string(logs), "\n") {
			missed = missed || (strings.Contains(l, "Pod admitted without tandem-webhook") && strings.Contains(l, seedNamespace+"/missed"))
		}
		if !missed {
			t.Errorf("no replica logged the pod admitted without it:\n%s", tailBytes(logs, 2000))
		}
	})
}

// waitWebhook waits until both replicas are ready and both webhook configurations carry a caBundle.
func waitWebhook(ctx context.Context, t *testing.T, cs kubernetes.Interface) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(ctx, time.Second, 4*time.Minute, true, func(ctx context.Context) (bool, error) {
		d, err := cs.AppsV1().Deployments(tandemWebhookNS).Get(ctx, tandemWebhookName, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		if d.Status.ReadyReplicas < 2 {
			last = fmt.Sprintf("%d of 2 replicas ready", d.Status.ReadyReplicas)
			return false, nil
		}
		m, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, tandemWebhookName, metav1.GetOptions{})
		if err != nil || len(m.Webhooks) == 0 || len(m.Webhooks[0].ClientConfig.CABundle) == 0 {
			last = fmt.Sprintf("MutatingWebhookConfiguration without caBundle (%v)", err)
			return false, nil
		}
		v, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, tandemWebhookName, metav1.GetOptions{})
		if err != nil || len(v.Webhooks) == 0 || len(v.Webhooks[0].ClientConfig.CABundle) == 0 {
			last = fmt.Sprintf("ValidatingWebhookConfiguration without caBundle (%v)", err)
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		out, _ := suite.c.RunKubectl(ctx, "-n", tandemWebhookNS, "get", "pods", "-o", "wide")
		logs, _ := suite.c.RunKubectl(ctx, "-n", tandemWebhookNS, "logs", "deployment/"+tandemWebhookName, "--all-containers", "--tail=50")
		t.Fatalf("tandem-webhook not ready with its caBundle in 4 minutes (%s)\n%s\n%s", last, out, logs)
	}
}

// waitProfileApplied creates dry-run pods until one comes back changed by the profile.
func waitProfileApplied(ctx context.Context, t *testing.T, cs kubernetes.Interface) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		p := sleepPod("probe")
		p.Namespace = seedNamespace
		p.Labels["koordinator.sh/enable-colocation"] = "true"
		got, err := cs.CoreV1().Pods(seedNamespace).Create(ctx, p, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err == nil && got.Labels["koordinator.sh/qosClass"] == "BE", nil
	})
	if err != nil {
		t.Fatal("no dry-run pod got Koordinator's colocation-profile-example within a minute")
	}
}

// seedPod is the pod Koordinator's documentation creates with its colocation-profile-example, with
// this cluster's image: nginx cannot be pulled here.
func seedPod(t *testing.T) *corev1.Pod {
	t.Helper()
	b, err := os.ReadFile(repoPath(t, "admission/testdata/seed-001-pod.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var p corev1.Pod
	if err := yaml.UnmarshalStrict(b, &p); err != nil {
		t.Fatal(err)
	}
	p.Namespace = seedNamespace
	c := &p.Spec.Containers[0]
	c.Image, c.ImagePullPolicy, c.Command = framework.TestImage, corev1.PullNever, []string{"/bin/sh", "-c", "exec sleep 3600"}
	return &p
}

// executorJob stands in for Spark's executors: 4 pods, each with an init container and two
// containers, created by the Job controller from a template that says nothing of batch.
func executorJob() *batchv1.Job {
	res := func(cpu string) corev1.ResourceRequirements {
		return corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse("32Mi")}}
	}
	ctr := func(name, cmd, cpu string) corev1.Container {
		return corev1.Container{Name: name, Image: framework.TestImage, ImagePullPolicy: corev1.PullNever, Command: []string{"/bin/sh", "-c", cmd}, Resources: res(cpu)}
	}
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "spark-executors", Namespace: seedNamespace},
		Spec: batchv1.JobSpec{
			// Spark's driver asks for an executor again when one is lost, and so does the Job
			// controller for a pod kubelet refused at admission (runPastAdmissionRace).
			Parallelism: ptr.To[int32](4), Completions: ptr.To[int32](4), BackoffLimit: ptr.To[int32](3),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"koordinator.sh/enable-colocation": "true", "spark-role": "executor"}},
				Spec: corev1.PodSpec{
					RestartPolicy:                 corev1.RestartPolicyNever,
					TerminationGracePeriodSeconds: ptr.To[int64](1),
					InitContainers:                []corev1.Container{ctr("setup", "true", "50m")},
					Containers:                    []corev1.Container{ctr("executor", "sleep 5", "100m"), ctr("shuffle", "sleep 5", "50m")},
				},
			},
		},
	}
}

// checkBatchPod checks that a pod a BE profile took asks for batch resources only, in every
// container named.
func checkBatchPod(t *testing.T, p *corev1.Pod, containers []string) {
	t.Helper()
	if p.Labels["koordinator.sh/qosClass"] != "BE" || p.Spec.PriorityClassName != "koord-batch" {
		t.Errorf("pod %s: qosClass %q, priorityClassName %q; want BE, koord-batch", p.Name, p.Labels["koordinator.sh/qosClass"], p.Spec.PriorityClassName)
	}
	all := append(append([]corev1.Container{}, p.Spec.InitContainers...), p.Spec.Containers...)
	for _, name := range containers {
		found := false
		for _, c := range all {
			if c.Name != name {
				continue
			}
			found = true
			_, cpu := c.Resources.Requests[corev1.ResourceCPU]
			bc := c.Resources.Requests["kubernetes.io/batch-cpu"]
			if cpu || bc.Value() <= 0 {
				t.Errorf("pod %s, container %s: requests %v, want batch-cpu instead of cpu", p.Name, name, c.Resources.Requests)
			}
		}
		if !found {
			t.Errorf("pod %s has no container %s", p.Name, name)
		}
	}
}

// webDeployment is an online-looking Deployment whose pods the profile's selector takes.
func webDeployment() *appsv1.Deployment {
	labels := map[string]string{"app": "web", "koordinator.sh/enable-colocation": "true"}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: seedNamespace},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: ptr.To[int64](1),
					Containers: []corev1.Container{{
						Name: "web", Image: framework.TestImage, ImagePullPolicy: corev1.PullNever,
						Command: []string{"/bin/sh", "-c", "exec sleep 3600"},
						Resources: corev1.ResourceRequirements{
							Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("32Mi")},
							Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")},
						},
					}},
				},
			},
		},
	}
}

// kubectlApply applies a pod as a user would, from a file, and returns kubectl's output.
func kubectlApply(ctx context.Context, pod *corev1.Pod) ([]byte, error) {
	pod = pod.DeepCopy()
	pod.APIVersion, pod.Kind = "v1", "Pod"
	b, err := yaml.Marshal(pod)
	if err != nil {
		return nil, err
	}
	f, err := os.CreateTemp("", "tandem-apply-*.yaml")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.Remove(f.Name()) }()
	if _, err := f.Write(b); err != nil {
		return nil, err
	}
	if err := f.Close(); err != nil {
		return nil, err
	}
	return suite.c.RunKubectl(ctx, "apply", "-f", f.Name())
}

func scaleWebhook(ctx context.Context, t *testing.T, cs kubernetes.Interface, replicas int) {
	t.Helper()
	if out, err := suite.c.RunKubectl(ctx, "-n", tandemWebhookNS, "scale", "deployment/"+tandemWebhookName, fmt.Sprintf("--replicas=%d", replicas)); err != nil {
		t.Fatalf("scale %s to %d: %v: %s", tandemWebhookName, replicas, err, out)
	}
	if replicas > 0 {
		return
	}
	err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		ps, err := cs.CoreV1().Pods(tandemWebhookNS).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + tandemWebhookName})
		return err == nil && len(ps.Items) == 0, nil
	})
	if err != nil {
		t.Fatalf("%s's pods not gone 2 minutes after scaling to 0", tandemWebhookName)
	}
}

// failOpen reads the API server's count of admissions that went ahead without tandem-webhook's
// mutating webhook.
func failOpen(ctx context.Context, t *testing.T, cs kubernetes.Interface) float64 {
	t.Helper()
	b, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		t.Fatalf("read the API server's /metrics: %v", err)
	}
	total := 0.0
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "apiserver_admission_webhook_fail_open_count{") && strings.Contains(l, `name="pods.mutate.tandem.io"`) {
			f := strings.Fields(l)
			v, _ := strconv.ParseFloat(f[len(f)-1], 64)
			total += v
		}
	}
	return total
}

// webhookMetrics scrapes every replica's /metrics once (pod IPs are reachable from this host)
// and returns, per replica, each series' value.
func webhookMetrics(ctx context.Context, t *testing.T, cs kubernetes.Interface) []map[string]float64 {
	t.Helper()
	ps, err := cs.CoreV1().Pods(tandemWebhookNS).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + tandemWebhookName})
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]float64
	for _, p := range ps.Items {
		if p.Status.PodIP == "" {
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		req, _ := http.NewRequestWithContext(rctx, http.MethodGet, "http://"+p.Status.PodIP+":9080/metrics", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			cancel()
			t.Fatalf("metrics of %s: %v", p.Name, err)
		}
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		cancel()
		series := map[string]float64{}
		for _, l := range strings.Split(string(b), "\n") {
			if i := strings.LastIndexByte(l, ' '); i > 0 && !strings.HasPrefix(l, "#") {
				if v, err := strconv.ParseFloat(l[i+1:], 64); err == nil {
					series[l[:i]] = v
				}
			}
		}
		out = append(out, series)
	}
	return out
}

// sumOf adds a series up over the replicas: the API server keeps a connection to one replica, but
// which one can change.
func sumOf(replicas []map[string]float64, series ...string) float64 {
	sum := 0.0
	for _, r := range replicas {
		for _, s := range series {
			sum += r[s]
		}
	}
	return sum
}

// maxOf is a gauge every replica computes alike (the audit) across the replicas.
func maxOf(replicas []map[string]float64, series string) float64 {
	m := 0.0
	for _, r := range replicas {
		m = max(m, r[series])
	}
	return m
}

func tailBytes(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
