//go:build e2e

package cluster_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
	"k8s.io/utils/ptr"

	"github.com/tandemkit/tandem/e2e/cluster"
	"github.com/tandemkit/tandem/metrics/nodemetric"
)

// extenderSchedulerName is the profile of the kube-scheduler that calls
// tandem-extender; the test's pods name it.
const extenderSchedulerName = "tandem-extender-e2e"

// The extender's messages, as kube-scheduler shows them for a rejected node
// (scheduler-extender/decide.go). They are spelled out here, not imported,
// because users read them in events: a change must fail this test.
const (
	reasonBatchCPU      = "tandem: insufficient reclaimable batch-cpu"
	reasonMetricExpired = "tandem: node metric expired"
)

// Batch capacity the test publishes as the node reporter would. Allocatable
// is larger than the metric's reclaimable on purpose: the reporter writes the
// annotation (metadata) and allocatable (status) in two requests, and while
// they disagree the extender holds the node to the lower. It also makes the
// refusal below the extender's: were allocatable 1000, kube-scheduler's own
// fit check would reject the pod first and never ask the extender.
const (
	allocBatchCPU      = 4000    // milli-cores
	allocBatchMemory   = 4 << 30 // bytes
	reclaimableCPU     = 1000
	reclaimableMemory  = 1 << 30
	podBatchMemory     = 64 << 20
	metricReportPeriod = 60 // seconds
)

// TestExtenderPlacesBatchPods runs kube-scheduler with deploy/'s extender
// configuration and tandem-extender, plays the node reporter by writing the
// node's batch allocatable and tandem.io/node-metric, and checks that batch
// pods land only where reclaimable capacity holds them and that a refusal
// carries the extender's reason in the pod's condition and event.
func TestExtenderPlacesBatchPods(t *testing.T) {
	ctx := testContext(t, 10*time.Minute)
	cs := client(t)
	url, err := suite.c.StartExtender(ctx, cluster.ExtenderOptions{
		SchedulerName: extenderSchedulerName,
		// deploy/ ships ignorable: true. Here an extender that fails or
		// cannot be reached must show up as the pod's event instead of
		// kube-scheduler placing the pod without it.
		Ignorable: ptr.To(false),
		// Empty: deploy/extender/kube-scheduler-config.yaml.
		SchedulerConfig: os.Getenv("TANDEM_EXTENDER_SCHEDULER_CONFIG"),
	})
	t.Cleanup(func() {
		if err := suite.c.StopExtender(context.WithoutCancel(ctx)); err != nil {
			t.Errorf("stop extender: %v", err)
		}
	})
	if err != nil {
		t.Fatalf("start tandem-extender and its kube-scheduler: %v", err)
	}
	t.Cleanup(func() { restoreNode(context.WithoutCancel(ctx), t, cs) })
	setBatchAllocatable(ctx, t, cs)

	// The steps share the node: the pod placed first stays assigned, so the
	// second must fit in what it left.
	steps := []struct {
		name      string
		metricAge time.Duration // of the metric's updateTime when the pod is created
		batchCPU  int64         // milli-cores the pod requests (and limits)
		// wantReason: the extender's message in the pod's condition and
		// FailedScheduling event; empty: the pod must be placed and run.
		wantReason string
	}{
		{name: "reclaimable holds it", batchCPU: 500},
		// 800 fits the reclaimable 1000 alone and the allocatable, but not
		// what the first pod left of reclaimable: only the extender knows.
		{name: "reclaimable minus assigned does not", batchCPU: 800, wantReason: reasonBatchCPU},
		// Expiry is 180s by default; 100m would fit.
		{name: "stale metric", metricAge: 10 * time.Minute, batchCPU: 100, wantReason: reasonMetricExpired},
	}
	for i, step := range steps {
		pod := batchPod(fmt.Sprintf("tandem-extender-e2e-%d", i), step.batchCPU)
		t.Cleanup(func() { deletePod(context.WithoutCancel(ctx), t, cs, pod.Name) })
		t.Run(step.name, func(t *testing.T) {
			writeNodeMetric(ctx, t, cs, step.metricAge)
			// The extender sees the node through its own watch: wait until
			// it answers for the new metric before kube-scheduler asks it.
			wantProbe := ""
			if step.metricAge > 0 {
				wantProbe = reasonMetricExpired
			}
			waitExtenderFilter(ctx, t, url, batchPod("probe", 100), wantProbe)
			filterCalls := extenderFilterCalls(ctx, t, url)

			if _, err := cs.CoreV1().Pods(metav1.NamespaceDefault).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
				t.Fatalf("create pod %s: %v", pod.Name, err)
			}
			if step.wantReason == "" {
				waitPodRunningOn(ctx, t, cs, pod.Name, cluster.NodeName, 3*time.Minute)
				if after := extenderFilterCalls(ctx, t, url); after <= filterCalls {
					t.Errorf("kube-scheduler placed %s without calling the extender's filter (calls before %v, after %v)", pod.Name, filterCalls, after)
				}
				return
			}
			waitUnschedulable(ctx, t, cs, pod.Name, step.wantReason, time.Minute)
		})
	}
}

// batchPod is a BE pod that asks only for batch resources, requests equal
// to limits, scheduled by the extender's kube-scheduler.
func batchPod(name string, batchCPU int64) *corev1.Pod {
	batch := corev1.ResourceList{
		nodemetric.ResourceBatchCPU:    *resource.NewQuantity(batchCPU, resource.DecimalSI),
		nodemetric.ResourceBatchMemory: *resource.NewQuantity(podBatchMemory, resource.BinarySI),
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: metav1.NamespaceDefault,
			Labels:    map[string]string{"app": "tandem-extender-e2e", "koordinator.sh/qosClass": "BE"},
		},
		Spec: corev1.PodSpec{
			SchedulerName:                 extenderSchedulerName,
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			Containers: []corev1.Container{{
				Name:            "sleep",
				Image:           "docker.io/library/tandem-e2e:1",
				ImagePullPolicy: corev1.PullNever,
				Command:         []string{"/bin/sh", "-c", "exec sleep 3600"},
				Resources:       corev1.ResourceRequirements{Requests: batch, Limits: batch},
			}},
		},
	}
}

// setBatchAllocatable publishes the node's batch capacity in capacity and
// allocatable, as the reporter does: kubelet recomputes allocatable from
// capacity on every status update, so capacity must carry it too.
func setBatchAllocatable(ctx context.Context, t *testing.T, cs kubernetes.Interface) {
	t.Helper()
	res := map[corev1.ResourceName]string{
		nodemetric.ResourceBatchCPU:    strconv.Itoa(allocBatchCPU),
		nodemetric.ResourceBatchMemory: strconv.Itoa(allocBatchMemory),
	}
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"capacity": res, "allocatable": res}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Nodes().Patch(ctx, cluster.NodeName, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		t.Fatalf("patch node status with batch resources: %v", err)
	}
}

// writeNodeMetric writes tandem.io/node-metric with low usage, the test's
// reclaimable capacity and an updateTime age old.
func writeNodeMetric(ctx context.Context, t *testing.T, cs kubernetes.Interface, age time.Duration) {
	t.Helper()
	value, err := nodemetric.Marshal(&nodemetric.NodeMetric{
		UpdateTime:            time.Now().Add(-age).UTC().Truncate(time.Second),
		ReportIntervalSeconds: metricReportPeriod,
		NodeUsage:             nodemetric.Resources{CPUMilli: 200, MemoryBytes: 512 << 20},
		HPUsage:               nodemetric.Resources{CPUMilli: 100, MemoryBytes: 256 << 20},
		Reclaimable:           nodemetric.Resources{CPUMilli: reclaimableCPU, MemoryBytes: reclaimableMemory},
	})
	if err != nil {
		t.Fatal(err)
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{nodemetric.AnnotationKey: value}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Nodes().Patch(ctx, cluster.NodeName, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("annotate node with the metric: %v", err)
	}
	t.Logf("node metric: %s", value)
}

// restoreNode removes what the test published on the node.
func restoreNode(ctx context.Context, t *testing.T, cs kubernetes.Interface) {
	t.Helper()
	res := map[corev1.ResourceName]any{nodemetric.ResourceBatchCPU: nil, nodemetric.ResourceBatchMemory: nil}
	status, _ := json.Marshal(map[string]any{"status": map[string]any{"capacity": res, "allocatable": res}})
	if _, err := cs.CoreV1().Nodes().Patch(ctx, cluster.NodeName, types.MergePatchType, status, metav1.PatchOptions{}, "status"); err != nil {
		t.Errorf("remove batch resources from the node: %v", err)
	}
	meta, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{nodemetric.AnnotationKey: nil}}})
	if _, err := cs.CoreV1().Nodes().Patch(ctx, cluster.NodeName, types.MergePatchType, meta, metav1.PatchOptions{}); err != nil {
		t.Errorf("remove the node metric: %v", err)
	}
}

// deletePod deletes a pod and waits until it is gone, so that the next test
// finds the node as it was.
func deletePod(ctx context.Context, t *testing.T, cs kubernetes.Interface, name string) {
	t.Helper()
	pods := cs.CoreV1().Pods(metav1.NamespaceDefault)
	if err := pods.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		if !cluster.IsNotFound(err) {
			t.Errorf("delete pod %s: %v", name, err)
		}
		return
	}
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := pods.Get(ctx, name, metav1.GetOptions{})
		return cluster.IsNotFound(err), nil
	})
	if err != nil {
		t.Errorf("pod %s not gone 2 minutes after delete: %v", name, err)
	}
}

// waitPodRunningOn waits until the pod is bound to node and Running.
func waitPodRunningOn(ctx context.Context, t *testing.T, cs kubernetes.Interface, name, node string, timeout time.Duration) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		p, err := cs.CoreV1().Pods(metav1.NamespaceDefault).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		if p.Spec.NodeName != "" && p.Spec.NodeName != node {
			return false, fmt.Errorf("pod %s bound to %s, want %s", name, p.Spec.NodeName, node)
		}
		last = fmt.Sprintf("node %q, phase %s: %s", p.Spec.NodeName, p.Status.Phase, podProblem(p))
		return p.Spec.NodeName == node && p.Status.Phase == corev1.PodRunning, nil
	})
	if err != nil {
		t.Fatalf("pod %s not Running on %s within %s (last: %s); see %s, %s and %s: %v", name, node, timeout, last,
			suite.c.Logs(cluster.ExtenderScheduler), suite.c.Logs(cluster.TandemExtender), suite.c.Logs(cluster.Kubelet), err)
	}
	t.Logf("pod %s: Running on %s", name, node)
}

// waitUnschedulable waits until kube-scheduler reports the pod unschedulable
// with reason in its PodScheduled condition and a FailedScheduling event,
// and checks that it stayed unbound.
func waitUnschedulable(ctx context.Context, t *testing.T, cs kubernetes.Interface, name, reason string, timeout time.Duration) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		p, err := cs.CoreV1().Pods(metav1.NamespaceDefault).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		if p.Spec.NodeName != "" {
			return false, fmt.Errorf("pod %s was bound to %s; want it Pending with %q", name, p.Spec.NodeName, reason)
		}
		last = "no PodScheduled=False condition"
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
				last = fmt.Sprintf("PodScheduled=False %s: %s", c.Reason, c.Message)
				if c.Reason == corev1.PodReasonUnschedulable && strings.Contains(c.Message, reason) {
					return true, nil
				}
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("pod %s not unschedulable with %q within %s (last: %s); see %s and %s: %v", name, reason, timeout, last,
			suite.c.Logs(cluster.ExtenderScheduler), suite.c.Logs(cluster.TandemExtender), err)
	}
	t.Logf("pod %s: %s", name, last)

	var events []string
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := cs.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{
			FieldSelector: fields.Set{"involvedObject.name": name, "reason": "FailedScheduling"}.String(),
		})
		if err != nil {
			return false, nil
		}
		events = events[:0]
		for _, e := range list.Items {
			events = append(events, e.Message)
			if strings.Contains(e.Message, reason) {
				t.Logf("event FailedScheduling for %s: %s", name, e.Message)
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no FailedScheduling event of pod %s names %q (events: %q): %v", name, reason, events, err)
	}
	// Still unbound once the event is out: kube-scheduler retried it.
	if p, err := cs.CoreV1().Pods(metav1.NamespaceDefault).Get(ctx, name, metav1.GetOptions{}); err != nil {
		t.Fatalf("get pod %s: %v", name, err)
	} else if p.Spec.NodeName != "" {
		t.Fatalf("pod %s was bound to %s after its FailedScheduling event", name, p.Spec.NodeName)
	}
}

// waitExtenderFilter asks the extender's filter, as kube-scheduler does with
// nodeCacheCapable (node names only), about the node for pod until the
// answer is want: empty for a pass, else the message of the rejection.
func waitExtenderFilter(ctx context.Context, t *testing.T, url string, pod *corev1.Pod, want string) {
	t.Helper()
	body, err := json.Marshal(extenderv1.ExtenderArgs{Pod: pod, NodeNames: &[]string{cluster.NodeName}})
	if err != nil {
		t.Fatal(err)
	}
	var last string
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/filter", bytes.NewReader(body))
		if err != nil {
			return false, err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		defer resp.Body.Close()
		var res extenderv1.ExtenderFilterResult
		if err := json.NewDecoder(resp.Body).Decode(&res); err != nil {
			last = fmt.Sprintf("HTTP %d, undecodable: %v", resp.StatusCode, err)
			return false, nil
		}
		got := res.FailedNodes[cluster.NodeName]
		if got == "" {
			got = res.FailedAndUnresolvableNodes[cluster.NodeName]
		}
		last = fmt.Sprintf("HTTP %d, error %q, rejection %q", resp.StatusCode, res.Error, got)
		return resp.StatusCode == http.StatusOK && res.Error == "" && got == want, nil
	})
	if err != nil {
		t.Fatalf("extender's filter did not answer %q for node %s (last: %s); see %s: %v", want, cluster.NodeName, last, suite.c.Logs(cluster.TandemExtender), err)
	}
}

// extenderFilterCalls reads how many filter calls the extender answered
// with 200, from its /metrics.
func extenderFilterCalls(ctx context.Context, t *testing.T, url string) float64 {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("scrape extender metrics: %v", err)
	}
	defer resp.Body.Close()
	var n float64
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "tandem_extender_requests_total{") || !strings.Contains(line, `verb="filter"`) || !strings.Contains(line, `code="200"`) {
			continue
		}
		fs := strings.Fields(line)
		v, err := strconv.ParseFloat(fs[len(fs)-1], 64)
		if err != nil {
			t.Fatalf("extender metric line %q: %v", line, err)
		}
		n += v
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("read extender metrics: %v", err)
	}
	return n
}
