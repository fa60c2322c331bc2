//go:build e2e

package cluster_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/tandemkit/tandem/e2e/cluster"
	"github.com/tandemkit/tandem/e2e/framework"
	"github.com/tandemkit/tandem/metrics/nodemetric"
)

// Koordinator's slo-controller-config, as deploy/slo-controller-config.yaml
// installs it and every tandem-proxy watches it.
const (
	sloNamespace = cluster.SLONamespace
	sloName      = cluster.SLOName
)

// sloData returns the ConfigMap's data.
func sloData(ctx context.Context, t *testing.T, cs kubernetes.Interface) map[string]string {
	t.Helper()
	cm, err := cs.CoreV1().ConfigMaps(sloNamespace).Get(ctx, sloName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get %s/%s (kubectl apply -f deploy/slo-controller-config.yaml): %v", sloNamespace, sloName, err)
	}
	return cm.Data
}

// setSLO writes one key of the ConfigMap as a user would with kubectl edit.
func setSLO(ctx context.Context, t *testing.T, cs kubernetes.Interface, key, value string) {
	t.Helper()
	cm, err := cs.CoreV1().ConfigMaps(sloNamespace).Get(ctx, sloName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data[key] = value
	if _, err := cs.CoreV1().ConfigMaps(sloNamespace).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update %s of %s/%s: %v", key, sloNamespace, sloName, err)
	}
}

// editSLO decodes one JSON key of the ConfigMap, lets edit change it and
// writes it back.
func editSLO(ctx context.Context, t *testing.T, cs kubernetes.Interface, key string, edit func(map[string]any)) {
	t.Helper()
	var v map[string]any
	if err := json.Unmarshal([]byte(sloData(ctx, t, cs)[key]), &v); err != nil {
		t.Fatalf("%s of %s/%s is not JSON: %v", key, sloNamespace, sloName, err)
	}
	edit(v)
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	setSLO(ctx, t, cs, key, string(b))
}

// restoreSLO puts the ConfigMap's data back as it was.
func restoreSLO(ctx context.Context, t *testing.T, cs kubernetes.Interface, data map[string]string) {
	cm, err := cs.CoreV1().ConfigMaps(sloNamespace).Get(ctx, sloName, metav1.GetOptions{})
	if err != nil {
		t.Errorf("restore %s/%s: %v", sloNamespace, sloName, err)
		return
	}
	cm.Data = data
	if _, err := cs.CoreV1().ConfigMaps(sloNamespace).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Errorf("restore %s/%s: %v", sloNamespace, sloName, err)
	}
}

// batchCPU returns the kubernetes.io/batch-cpu the node's allocatable
// publishes, in milli-cores, and whether it is there at all.
func batchCPU(n *corev1.Node) (int64, bool) {
	q, ok := n.Status.Allocatable[nodemetric.ResourceBatchCPU]
	return q.Value(), ok
}

// batchPod is a BE pod as Koordinator users write one: the koord-scheduler,
// koord-batch priority and batch resources in its spec, no Koordinator
// annotation.
func batchPod(name string, batchCPU int64) *corev1.Pod {
	batch := corev1.ResourceList{
		nodemetric.ResourceBatchCPU:    *resource.NewQuantity(batchCPU, resource.DecimalSI),
		nodemetric.ResourceBatchMemory: *resource.NewQuantity(64<<20, resource.BinarySI),
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: metav1.NamespaceDefault,
			Labels: map[string]string{"app": name, "koordinator.sh/qosClass": "BE"},
		},
		Spec: corev1.PodSpec{
			SchedulerName:                 "koord-scheduler",
			PriorityClassName:             "koord-batch",
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			Containers: []corev1.Container{{
				Name: "sleep", Image: framework.TestImage, ImagePullPolicy: corev1.PullNever,
				Command:   []string{"/bin/sh", "-c", "exec sleep 3600"},
				Resources: corev1.ResourceRequirements{Requests: batch, Limits: batch},
			}},
		},
	}
}

// besteffortQuota reads the node's kubepods/besteffort cpu.cfs_quota_us,
// where cfsQuota suppression clamps BE.
func besteffortQuota(t *testing.T, nodeName string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/cpu", node(t, nodeName).CgroupRoot, "kubepods", "besteffort", "cpu.cfs_quota_us"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// TestLiveConfig changes the slo-controller-config ConfigMap as an operator
// would and checks each consequence from the API server and the cgroup
// files, with no proxy restarted: colocation off takes batch capacity off
// every Node within 10 s, and a batch pod then stays Pending; colocation on
// again, with node-b reclaiming less (nodeConfigs), a batch pod sized between
// what the two nodes publish lands on node-a, the one whose capacity holds it,
// with batch cgroups from its spec; suppression on clamps
// BE within 5 s, off lifts the clamp; a typo is refused with an Event naming
// the key while the node keeps working.
func TestLiveConfig(t *testing.T) {
	ctx := testContext(t, 10*time.Minute)
	cs := client(t)
	orig := maps.Clone(sloData(ctx, t, cs))
	t.Cleanup(func() {
		ctx := context.WithoutCancel(ctx)
		restoreSLO(ctx, t, cs, orig)
		// A clamp left on kubepods/besteffort breaks every later test.
		for _, n := range suite.c.NodeNames() {
			err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
				return besteffortQuota(t, n) == "-1", nil
			})
			if err != nil {
				t.Errorf("%s: kubepods/besteffort cpu.cfs_quota_us is %s 30s after the configuration was restored, want -1", n, besteffortQuota(t, n))
			}
		}
	})
	const podBatchCPU = 100 // milli-cores; an idle node publishes more

	t.Run("colocation off takes batch capacity off every Node", func(t *testing.T) {
		// First the reporters must have published (after their warm-up,
		// metricReportIntervalSeconds), or there is nothing to take off.
		var last string
		err := wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
			last = ""
			for _, name := range suite.c.NodeNames() {
				n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					return false, err
				}
				if _, ok := batchCPU(n); !ok {
					last += name + " publishes no batch-cpu; "
				}
			}
			return last == "", nil
		})
		if err != nil {
			t.Fatalf("with colocation on, not every Node has batch capacity within 3 minutes: %s", last)
		}
		editSLO(ctx, t, cs, "colocation-config", func(v map[string]any) { v["enable"] = false })
		start := time.Now()
		err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
			for _, name := range suite.c.NodeNames() {
				n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					return false, err
				}
				if v, ok := batchCPU(n); ok {
					last = fmt.Sprintf("%s still publishes batch-cpu %d", name, v)
					return false, nil
				}
			}
			return true, nil
		})
		if err != nil {
			t.Fatalf("10s after colocation-config.enable=false: %s", last)
		}
		t.Logf("batch capacity gone from every Node %s after the change", time.Since(start).Round(10*time.Millisecond))
	})
	if t.Failed() {
		t.FailNow()
	}

	pod := batchPod("tandem-batch-e2e", podBatchCPU)
	t.Cleanup(func() { deletePod(context.WithoutCancel(ctx), t, cs, pod.Name) })
	var podBatch int64 // what the placed batch pod asks
	t.Run("a batch pod stays Pending without batch capacity, then lands where it fits", func(t *testing.T) {
		if _, err := cs.CoreV1().Pods(metav1.NamespaceDefault).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		var p *corev1.Pod
		err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			var err error
			p, err = cs.CoreV1().Pods(metav1.NamespaceDefault).Get(ctx, pod.Name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
					return true, nil
				}
			}
			return p.Spec.NodeName != "", nil
		})
		if err != nil || p.Spec.NodeName != "" {
			t.Fatalf("batch pod without batch capacity anywhere: node %q, conditions %+v (%v); want Pending, Unschedulable", p.Spec.NodeName, p.Status.Conditions, err)
		}
		deletePod(ctx, t, cs, pod.Name)
		// Both nodes measure this one machine and publish about the same. So that the placement shows
		// the extender and kube-scheduler following what each node publishes, node-b reclaims less (a
		// nodeConfigs entry, as an operator gives a class of nodes its own threshold), and the pod asks
		// for more than node-b publishes and less than node-a does.
		editSLO(ctx, t, cs, "colocation-config", func(v map[string]any) {
			v["enable"] = true
			v["nodeConfigs"] = []any{map[string]any{"name": "node-b-less",
				"nodeSelector":               map[string]any{"matchLabels": map[string]any{corev1.LabelHostname: cluster.NodeB}},
				"cpuReclaimThresholdPercent": 45}}
		})
		start := time.Now()
		var a, b int64
		err = wait.PollUntilContextTimeout(ctx, time.Second, 4*time.Minute, true, func(ctx context.Context) (bool, error) {
			var okA, okB bool
			na, errA := cs.CoreV1().Nodes().Get(ctx, cluster.NodeA, metav1.GetOptions{})
			nb, errB := cs.CoreV1().Nodes().Get(ctx, cluster.NodeB, metav1.GetOptions{})
			if errA != nil || errB != nil {
				return false, nil
			}
			a, okA = batchCPU(na)
			b, okB = batchCPU(nb)
			return okA && okB && a >= b+200, nil
		})
		if err != nil {
			t.Fatalf("with node-b reclaiming 45%% of its CPU and node-a all of it, they publish batch-cpu %d and %d within 4 minutes; want node-a 200 above node-b", a, b)
		}
		podBatch = b + (a-b)/2
		// Above one CPU where node-a has room, so that the pod's quota is above the clamp of the
		// suppression subtests (a CPU at least): cgroup v1 refuses a child above its parent.
		if a >= 1250 {
			podBatch = max(podBatch, 1100)
		}
		sized := batchPod(pod.Name, podBatch)
		t.Logf("node-a publishes batch-cpu %d, node-b %d: the batch pod asks %d", a, b, podBatch)
		create := func() error {
			_, err := cs.CoreV1().Pods(metav1.NamespaceDefault).Create(ctx, sized, metav1.CreateOptions{})
			return err
		}
		if err := create(); err != nil {
			t.Fatal(err)
		}
		p = runPastAdmissionRace(ctx, t, cs, metav1.NamespaceDefault, pod.Name, 4*time.Minute, create)
		t.Logf("batch pod placed on %s and Running %s after colocation was enabled again", p.Spec.NodeName, time.Since(start).Round(100*time.Millisecond))
		if p.Spec.NodeName != cluster.NodeA {
			t.Errorf("batch pod asking batch-cpu %d placed on %s; only %s published enough (%d; %s %d)", podBatch, p.Spec.NodeName, cluster.NodeA, a, cluster.NodeB, b)
		}
		checkBatchCgroups(t, p, podBatch)
	})
	if t.Failed() {
		t.FailNow()
	}
	p, err := cs.CoreV1().Pods(metav1.NamespaceDefault).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	beNode := p.Spec.NodeName

	t.Run("suppression on clamps BE within 5s, off lifts it", func(t *testing.T) {
		if q := besteffortQuota(t, beNode); q != "-1" {
			t.Fatalf("%s: kubepods/besteffort cpu.cfs_quota_us is %s before suppression is on, want -1", beNode, q)
		}
		// A threshold of 1% leaves BE the least suppression allows,
		// whatever the machine's load.
		editSLO(ctx, t, cs, "resource-threshold-config", func(v map[string]any) {
			cs, _ := v["clusterStrategy"].(map[string]any)
			if cs == nil {
				cs = map[string]any{}
				v["clusterStrategy"] = cs
			}
			cs["enable"] = true
			cs["cpuSuppressThresholdPercent"] = 1
			cs["cpuSuppressPolicy"] = "cfsQuota"
		})
		start := time.Now()
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
			return besteffortQuota(t, beNode) != "-1", nil
		})
		if err != nil {
			t.Fatalf("%s: kubepods/besteffort cpu.cfs_quota_us still -1 5s after suppression was enabled", beNode)
		}
		t.Logf("%s: BE clamped to cfs_quota_us %s, %s after the change", beNode, besteffortQuota(t, beNode), time.Since(start).Round(10*time.Millisecond))
		editSLO(ctx, t, cs, "resource-threshold-config", func(v map[string]any) {
			v["clusterStrategy"].(map[string]any)["enable"] = false
		})
		err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			return besteffortQuota(t, beNode) == "-1", nil
		})
		if err != nil {
			t.Errorf("%s: kubepods/besteffort cpu.cfs_quota_us is %s 10s after suppression was disabled, want -1", beNode, besteffortQuota(t, beNode))
		}
	})

	t.Run("SIGTERM of tandem-proxy lifts a clamp in force", func(t *testing.T) {
		if suite.c.NRI {
			t.Skip("tandem-proxy only: kubelet restarts the plugin's container at once, and a new plugin lifts a clamp it finds at start")
		}
		editSLO(ctx, t, cs, "resource-threshold-config", func(v map[string]any) {
			v["clusterStrategy"] = map[string]any{"enable": true, "cpuSuppressThresholdPercent": 1, "cpuSuppressPolicy": "cfsQuota", "memoryEvictThresholdPercent": 99, "stealHeadroom": "off"}
		})
		var clamp string
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
			clamp = besteffortQuota(t, beNode)
			return clamp != "-1", nil
		})
		if err != nil {
			t.Fatalf("%s: kubepods/besteffort not clamped 5s after suppression was enabled", beNode)
		}
		own := fmt.Sprint(podBatch * 100)
		clamped := readCgroup(t, p, "cpu", "cpu.cfs_quota_us")
		t.Logf("%s: kubepods/besteffort clamped to %s; the batch pod (its own quota %s) has %s", beNode, clamp, own, clamped)
		if err := suite.c.StopDaemon(ctx, proxyDaemon(beNode)); err != nil {
			t.Fatal(err)
		}
		// Before the proxy starts again, so that it starts with suppression off.
		editSLO(ctx, t, cs, "resource-threshold-config", func(v map[string]any) {
			v["clusterStrategy"].(map[string]any)["enable"] = false
		})
		parent, child := besteffortQuota(t, beNode), readCgroup(t, p, "cpu", "cpu.cfs_quota_us")
		if err := suite.c.StartDaemon(ctx, proxyDaemon(beNode)); err != nil {
			t.Fatal(err)
		}
		if parent != "-1" {
			t.Errorf("%s: kubepods/besteffort cpu.cfs_quota_us is %s once tandem-proxy stopped, want -1: the clamp outlived it", beNode, parent)
		}
		if child != own {
			t.Errorf("%s: the batch pod's cpu.cfs_quota_us is %s once tandem-proxy stopped, want its own %s (batch-cpu %d)", beNode, child, own, podBatch)
		}
		if podBatch <= 1000 {
			t.Logf("the batch pod's quota (batch-cpu %d) was below the clamp: %s published too little to place one above it", podBatch, beNode)
		}
		kubeletCallsSucceed(ctx, t, beNode)
	})

	t.Run("a typo is refused with an Event and the nodes keep working", func(t *testing.T) {
		since := time.Now().Add(-time.Second)
		bad := strings.Replace(sloData(ctx, t, cs)["colocation-config"], `"enable"`, `"enable`, 1)
		setSLO(ctx, t, cs, "colocation-config", bad)
		var last []string
		err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
			evs, err := cs.CoreV1().Events(sloNamespace).List(ctx, metav1.ListOptions{
				FieldSelector: fields.Set{"involvedObject.name": sloName, "reason": "InvalidSLOConfig"}.String()})
			if err != nil {
				return false, err
			}
			last = nil
			for _, e := range evs.Items {
				ts := e.LastTimestamp.Time
				if ts.IsZero() {
					ts = e.EventTime.Time
				}
				last = append(last, e.Message)
				if e.Type == corev1.EventTypeWarning && strings.Contains(e.Message, "colocation-config") && !ts.Before(since) {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			t.Errorf("no Warning InvalidSLOConfig Event naming colocation-config on %s/%s within 10s (events: %q)", sloNamespace, sloName, last)
		}
		if out, err := suite.c.RunKubectl(ctx, "get", "events", "-n", sloNamespace, "--field-selector", "reason=InvalidSLOConfig"); err == nil {
			t.Logf("kubectl get events -n %s:\n%s", sloNamespace, out)
		}
		// The refused section keeps its last good value: batch capacity
		// stays published, and every proxy keeps serving.
		nodeStaysReady(ctx, t, cs, beNode, 6*time.Second)
		for _, name := range suite.c.NodeNames() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, agentURL(ctx, t, name, "/readyz"), nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Errorf("%s: agent /readyz after the typo: %v", name, err)
				continue
			}
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Errorf("%s: agent /readyz after the typo: %s", name, resp.Status)
			}
		}
		n, err := cs.CoreV1().Nodes().Get(ctx, beNode, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := batchCPU(n); !ok {
			t.Errorf("%s dropped its batch capacity after a typo in colocation-config; the refused section must keep its last good value", beNode)
		}
	})
}
