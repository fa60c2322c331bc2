//go:build e2e

package cluster_test

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/tandemkit/tandem/actuate/evict"
	"github.com/tandemkit/tandem/e2e/cluster"
)

// TestEvictThroughAPI turns memory eviction on in the slo-controller-config
// with a threshold the node is always above, with two BE pods on node-a, one
// of them covered by a PodDisruptionBudget that allows no disruption. node-a's
// tandem-proxy must evict the other through the Eviction API (its Event shows
// in `kubectl get events`), be refused for the protected one (its counter and log say so) and leave it
// running.
func TestEvictThroughAPI(t *testing.T) {
	ctx := testContext(t, 5*time.Minute)
	cs := client(t)
	orig := maps.Clone(sloData(ctx, t, cs))
	t.Cleanup(func() {
		ctx := context.WithoutCancel(ctx)
		restoreSLO(ctx, t, cs, orig)
		// Turning the cluster strategy on turned CPU suppression on too
		// (the example's cpuset policy): BE must get every CPU back.
		all := machineCPUs(t).String()
		for _, n := range suite.c.NodeNames() {
			f := filepath.Join("/sys/fs/cgroup/cpuset", node(t, n).CgroupRoot, "kubepods", "besteffort", "cpuset.cpus")
			var got string
			err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
				b, err := os.ReadFile(f)
				got = strings.TrimSpace(string(b))
				return err == nil && got == all, nil
			})
			if err != nil {
				t.Errorf("%s: %s is %q 30s after the configuration was restored, want %s", n, f, got, all)
			}
		}
	})

	const protected, free = "tandem-evict-protected", "tandem-evict-free"
	createPDB(ctx, t, cs, protected)
	for _, name := range []string{protected, free} {
		p := sleepPod(name)
		p.Labels["koordinator.sh/qosClass"] = "BE"
		p.Spec.PriorityClassName = "koord-batch"
		p.Spec.NodeName = cluster.NodeA
		if _, err := cs.CoreV1().Pods(metav1.NamespaceDefault).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { deletePod(context.WithoutCancel(ctx), t, cs, name) })
	}
	freePod := waitPodRunning(ctx, t, cs, free, 2*time.Minute)
	waitPodRunning(ctx, t, cs, protected, 2*time.Minute)
	waitPDBCounts(ctx, t, cs, protected)

	editSLO(ctx, t, cs, "resource-threshold-config", func(v map[string]any) {
		cs, _ := v["clusterStrategy"].(map[string]any)
		if cs == nil {
			cs = map[string]any{}
			v["clusterStrategy"] = cs
		}
		cs["enable"] = true
		cs["memoryEvictThresholdPercent"] = 1
		cs["memoryEvictLowerPercent"] = 0
	})
	start := time.Now()
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := cs.CoreV1().Pods(metav1.NamespaceDefault).Get(ctx, free, metav1.GetOptions{})
		return apierrors.IsNotFound(err) || (err == nil && (p.UID != freePod.UID || p.DeletionTimestamp != nil)), nil
	})
	if err != nil {
		t.Fatalf("BE pod %s not evicted a minute after memory eviction was enabled at 1%%: see %s", free, suite.c.AgentLogs(cluster.NodeA))
	}
	t.Logf("%s evicted %s after the change", free, time.Since(start).Round(100*time.Millisecond))

	var out []byte
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		out, _ = suite.c.RunKubectl(ctx, "get", "events", "--field-selector", "involvedObject.name="+free+",reason="+evict.EventReason)
		return strings.Contains(string(out), free), nil
	})
	if err != nil {
		t.Errorf("kubectl get events shows no %s event for %s: %s", evict.EventReason, free, out)
	} else {
		t.Logf("kubectl get events:\n%s", out)
	}

	// The Eviction API refused the protected pod, and the agent says so: a counter and a log line
	// naming the pod and its PodDisruptionBudget.
	err = wait.PollUntilContextTimeout(ctx, time.Second, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		return strings.Contains(agentMetrics(ctx, t, cluster.NodeA), `tandem_eviction_refusals_total{reason="memory"}`), nil
	})
	if err != nil {
		t.Errorf("the agent on %s counts no refused eviction (tandem_eviction_refusals_total{reason=\"memory\"}) within 30s", cluster.NodeA)
	}
	// tandem-proxy's log file, or the plugin's container logs (a pattern) in NRI mode.
	var logs []byte
	files, _ := filepath.Glob(suite.c.AgentLogs(cluster.NodeA))
	for _, f := range files {
		b, _ := os.ReadFile(f)
		logs = append(logs, b...)
	}
	refused := false
	for _, l := range strings.Split(string(logs), "\n") {
		if strings.Contains(l, "BE pod eviction refused") && strings.Contains(l, protected) && strings.Contains(l, "disruption budget") {
			refused = true
		}
	}
	if !refused {
		t.Errorf("the agent's log (%s) does not say the Eviction API refused %s for its PodDisruptionBudget", suite.c.AgentLogs(cluster.NodeA), protected)
	}

	// The protected pod stays: several evict rounds pass in this window.
	end := time.Now().Add(15 * time.Second)
	for time.Now().Before(end) {
		p, err := cs.CoreV1().Pods(metav1.NamespaceDefault).Get(ctx, protected, metav1.GetOptions{})
		if err != nil || p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
			t.Fatalf("pod %s, covered by a PodDisruptionBudget allowing no disruption, was taken down: %v %v", protected, err, p.Status.Phase)
		}
		time.Sleep(time.Second)
	}
}
