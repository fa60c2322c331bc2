//go:build e2e

package cluster_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/tandemkit/tandem/config/batchwindow"
	"github.com/tandemkit/tandem/e2e/cluster"
	"github.com/tandemkit/tandem/metrics/reporter"
)

// TestBatchWindow gives both nodes a batch window one minute long, in UTC, starting on a coming
// minute, with a 20 s closing lead and a 15 s eviction grace, and node-b's window eviction in dry run
// (a nodeConfigs entry of dry-run-config). It checks, from the API server, what an operator would:
//
//   - before the window, node-a publishes batch-cpu 0 and says why on the Node; a batch pod pinned to
//     it stays Pending;
//   - when the window opens, node-a publishes capacity within one report period and the pod runs;
//     batch pods started in the window on node-a (one under a PodDisruptionBudget allowing no
//     disruption) and on node-b run;
//   - in the closing lead the capacity is withdrawn again (no new batch pod is placed);
//   - after the close and its grace, and not before, node-a's free batch pod is evicted through the
//     Eviction API with an Event naming the window; the protected one stays; node-b's pod stays and
//     gets a WouldEvict Event;
//   - tandemctl capacity on node-a says the same as the Node.
//
// The windows are the agent's node loops, the same code under NRI; this test runs in the CRI proxy run.
func TestBatchWindow(t *testing.T) {
	if suite.c.NRI {
		t.Skip("not run under NRI: batch windows are the agent's node loops, the same code as in the CRI proxy run, which runs this test")
	}
	ctx := testContext(t, 8*time.Minute)
	cs := client(t)
	orig := maps.Clone(sloData(ctx, t, cs))
	t.Cleanup(func() { restoreSLO(context.WithoutCancel(ctx), t, cs, orig) })

	// Both nodes measure this one 2-CPU machine, whose control plane and builds leave node-a little
	// batch CPU at times. The window test needs some: reclaim up to the whole node, predict over a
	// minute, and wait until node-a publishes room for the test's pods before the window is set.
	editSLO(ctx, t, cs, "colocation-config", func(v map[string]any) {
		v["cpuReclaimThresholdPercent"] = 100
		v["metricAggregateDurationSeconds"] = 60
	})
	waitWindow(ctx, t, cs, cluster.NodeA, 3*time.Minute, func(cpu int64, _ *batchwindow.State) bool { return cpu >= 400 },
		"batch-cpu of at least 400m before the window is set")

	// The window opens on a minute boundary at least 25 s away: time to see the node withdraw its
	// capacity and keep a pod Pending first.
	open := time.Now().UTC().Truncate(time.Minute).Add(time.Minute)
	if time.Until(open) < 25*time.Second {
		open = open.Add(time.Minute)
	}
	closeAt := open.Add(time.Minute)
	const lead, grace = 20 * time.Second, 15 * time.Second
	windows := map[string]any{
		"enable": true, "timeZone": "UTC",
		"windows":                         []map[string]any{{"name": "e2e-minute", "start": open.Format("15:04"), "end": closeAt.Format("15:04")}},
		"stopPlacementBeforeCloseSeconds": int(lead / time.Second), "evictionGraceSeconds": int(grace / time.Second),
	}
	dry := map[string]any{"nodeConfigs": []map[string]any{{"name": "node-b-dry", "nodeSelector": map[string]any{"matchLabels": map[string]string{"kubernetes.io/hostname": cluster.NodeB}}, "windowEvict": true}}}
	for key, v := range map[string]any{"batch-window-config": windows, "dry-run-config": dry} {
		b, _ := json.Marshal(v)
		setSLO(ctx, t, cs, key, string(b))
	}
	t.Logf("window e2e-minute %s-%s UTC; now %s", open.Format("15:04:05"), closeAt.Format("15:04:05"), time.Now().UTC().Format("15:04:05"))

	// Outside: batch-cpu 0 and the Node says which window.
	waitWindow(ctx, t, cs, cluster.NodeA, time.Until(open), func(cpu int64, w *batchwindow.State) bool {
		return cpu == 0 && w != nil && w.Phase.Limits() && w.Phase != batchwindow.PhaseClosing
	}, "batch-cpu 0 outside the window")
	const free, protected, dryPod = "tandem-window-free", "tandem-window-protected", "tandem-window-dry"
	createPinned(ctx, t, cs, free, cluster.NodeA)
	if time.Until(open) > 5*time.Second {
		time.Sleep(time.Until(open) - 5*time.Second)
	}
	p, err := cs.CoreV1().Pods(metav1.NamespaceDefault).Get(ctx, free, metav1.GetOptions{})
	if err != nil || p.Spec.NodeName != "" {
		t.Fatalf("batch pod %s was placed on %q (%v) before the window opened", free, p.Spec.NodeName, err)
	}
	t.Logf("%s Pending 5 s before the window: %s", free, podScheduledMessage(p))

	// Open: capacity back within one report period (the reporter steps every 5 s), the pod runs.
	waitWindow(ctx, t, cs, cluster.NodeA, 15*time.Second+time.Until(open), func(cpu int64, w *batchwindow.State) bool {
		return cpu > 0 && w != nil && w.Phase == batchwindow.PhaseOpen
	}, "batch capacity published when the window opened")
	t.Logf("capacity published %s after the window opened", time.Since(open).Round(100*time.Millisecond))
	createPDB(ctx, t, cs, protected)
	createPinned(ctx, t, cs, protected, cluster.NodeA)
	createPinned(ctx, t, cs, dryPod, cluster.NodeB)
	freeUID := waitPodRunning(ctx, t, cs, free, 30*time.Second).UID
	waitPodRunning(ctx, t, cs, protected, 30*time.Second)
	dryUID := waitPodRunning(ctx, t, cs, dryPod, 30*time.Second).UID
	waitPDBCounts(ctx, t, cs, protected)

	// The closing lead: capacity withdrawn before the close.
	waitWindow(ctx, t, cs, cluster.NodeA, time.Until(closeAt)+5*time.Second, func(cpu int64, w *batchwindow.State) bool {
		return cpu == 0 && w != nil && w.Phase == batchwindow.PhaseClosing
	}, "batch capacity withdrawn in the closing lead")
	if time.Now().Before(closeAt.Add(-lead)) {
		t.Errorf("capacity withdrawn at %s, before the lead began at %s", time.Now().UTC().Format("15:04:05"), closeAt.Add(-lead).Format("15:04:05"))
	}

	// The grace: nothing evicted until it has passed.
	time.Sleep(time.Until(closeAt.Add(grace - 3*time.Second)))
	if p, err := cs.CoreV1().Pods(metav1.NamespaceDefault).Get(ctx, free, metav1.GetOptions{}); err != nil || p.UID != freeUID || p.DeletionTimestamp != nil {
		t.Fatalf("batch pod %s evicted within the grace period (%v)", free, err)
	}
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := cs.CoreV1().Pods(metav1.NamespaceDefault).Get(ctx, free, metav1.GetOptions{})
		return apierrors.IsNotFound(err) || (err == nil && (p.UID != freeUID || p.DeletionTimestamp != nil)), nil
	})
	if err != nil {
		t.Fatalf("batch pod %s not evicted within 30 s of the grace's end: see %s", free, suite.c.AgentLogs(cluster.NodeA))
	}
	t.Logf("%s evicted %s after the close (grace %s)", free, time.Since(closeAt).Round(100*time.Millisecond), grace)
	wantEvent(ctx, t, cs, free, "Evicted", `batch window "e2e-minute" closed`)
	wantEvent(ctx, t, cs, dryPod, "WouldEvict", `would evict the pod: batch window "e2e-minute" closed`)

	// The protected pod and node-b's dry-run pod stay through several rounds.
	end := time.Now().Add(12 * time.Second)
	for time.Now().Before(end) {
		for name, uid := range map[string]any{protected: nil, dryPod: dryUID} {
			p, err := cs.CoreV1().Pods(metav1.NamespaceDefault).Get(ctx, name, metav1.GetOptions{})
			if err != nil || p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning || (uid != nil && p.UID != uid) {
				t.Fatalf("pod %s was taken down (a PodDisruptionBudget or a dry run should keep it): %v", name, err)
			}
		}
		time.Sleep(time.Second)
	}
	if m := agentMetrics(ctx, t, cluster.NodeA); !strings.Contains(m, `tandem_batch_window_evictions_total{result="refused"}`) || strings.Contains(m, `tandem_batch_window_evictions_total{result="refused"} 0`) {
		t.Errorf("node-a counts no refused window eviction for %s", protected)
	}
	if m := agentMetrics(ctx, t, cluster.NodeB); strings.Contains(m, `tandem_dry_run_actions_total{action="windowEvict"} 0`) || !strings.Contains(m, `tandem_dry_run_actions_total{action="windowEvict"}`) {
		t.Errorf("node-b counts no dry-run window eviction")
	}

	// tandemctl capacity on node-a says what the Node says.
	out, err := exec.CommandContext(ctx, tandemctl(ctx, t), "--proxy-debug-socket", proxyDebugSocket(t, cluster.NodeA), "capacity", "-o", "json").Output()
	if err != nil {
		t.Fatalf("tandemctl capacity: %v", err)
	}
	var st reporter.CapacityStatus
	if err := json.Unmarshal(out, &st); err != nil || st.Window == nil || st.Window.Phase != batchwindow.PhaseEvicting || st.Window.Window != "e2e-minute" || st.Published == nil || st.Published.CPUMilli != 0 {
		t.Errorf("tandemctl capacity -o json after the close: %v\n%s", err, out)
	}
}

// createPinned creates a batch pod that may only run on node, deleted when the test ends.
func createPinned(ctx context.Context, t *testing.T, cs kubernetes.Interface, name, node string) {
	t.Helper()
	p := batchPod(name, 100)
	p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}}}},
	}}}
	if _, err := cs.CoreV1().Pods(metav1.NamespaceDefault).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deletePod(context.WithoutCancel(ctx), t, cs, name) })
}

// waitWindow waits until the Node's batch-cpu and window state (its tandem.io/batch-capacity) satisfy ok.
func waitWindow(ctx context.Context, t *testing.T, cs kubernetes.Interface, node string, within time.Duration, ok func(int64, *batchwindow.State) bool, what string) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, max(within, time.Second), true, func(ctx context.Context) (bool, error) {
		n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		cpu, _ := batchCPU(n)
		var note reporter.CapacityNote
		_ = json.Unmarshal([]byte(n.Annotations[reporter.CapacityAnnotation]), &note)
		last = fmt.Sprintf("batch-cpu %d, %s %s", cpu, reporter.CapacityAnnotation, n.Annotations[reporter.CapacityAnnotation])
		return ok(cpu, note.Window), nil
	})
	if err != nil {
		t.Fatalf("%s: %s not seen within %s (at %s); last: %s", node, what, within.Round(time.Second), time.Now().UTC().Format("15:04:05"), last)
	}
	t.Logf("%s at %s: %s", what, time.Now().UTC().Format("15:04:05"), last)
}

// podScheduledMessage is the reason the scheduler gives for not placing p, "" before it tried.
func podScheduledMessage(p *corev1.Pod) string {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled {
			return c.Reason + ": " + c.Message
		}
	}
	return ""
}

// wantEvent waits for an Event of reason on pod name whose message contains text.
func wantEvent(ctx context.Context, t *testing.T, cs kubernetes.Interface, name, reason, text string) {
	t.Helper()
	var seen []string
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		evs, err := cs.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name + ",reason=" + reason})
		if err != nil {
			return false, nil
		}
		seen = seen[:0]
		for _, e := range evs.Items {
			seen = append(seen, e.Message)
			if strings.Contains(e.Message, text) {
				t.Logf("Event %s on %s: %s", reason, name, e.Message)
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Errorf("no %s Event on %s saying %q within 30 s; seen %q", reason, name, text, seen)
	}
}
