//go:build e2e

package cluster_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	schedulerv1 "k8s.io/kube-scheduler/config/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/tandemkit/tandem/e2e/framework"
	extender "github.com/tandemkit/tandem/scheduler-extender"
)

// pluginScheduler is the schedulerName the test's tandem-scheduler answers to, apart from the
// cluster's kube-scheduler, which keeps default-scheduler and koord-scheduler.
const pluginScheduler = "tandem-e2e-plugin"

// TestSchedulerPlugin runs tandem-scheduler, built from this checkout with deploy/scheduler-plugin's
// configuration (its first profile, renamed), beside the cluster's kube-scheduler, on the real nodes
// and the metrics their agents publish. A pod pinned to a node whose tandem.io/usage-thresholds
// annotation its reported usage exceeds stays Pending with the plugin's reason; when the annotation
// is removed, the Node update requeues the pod and it runs there.
func TestSchedulerPlugin(t *testing.T) {
	ctx := testContext(t, 8*time.Minute)
	cs := client(t)
	dir := t.TempDir()

	bin, err := framework.BuildScheduler(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}

	b, err := os.ReadFile(repoPath(t, "deploy/scheduler-plugin/kube-scheduler-config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg schedulerv1.KubeSchedulerConfiguration
	if err := yaml.UnmarshalStrict(b, &cfg); err != nil {
		t.Fatalf("deploy/scheduler-plugin/kube-scheduler-config.yaml: %v", err)
	}
	cfg.Profiles = cfg.Profiles[:1]
	cfg.Profiles[0].SchedulerName = ptr.To(pluginScheduler)
	cfg.ClientConnection.Kubeconfig = suite.c.Kubeconfig
	cfg.LeaderElection.LeaderElect = ptr.To(false)
	enc, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfgPath, enc, 0o600); err != nil {
		t.Fatal(err)
	}
	ports, err := framework.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "tandem-scheduler.log")
	sched, err := framework.StartDaemon("tandem-scheduler", bin, []string{
		"--config=" + cfgPath,
		"--bind-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", ports[0]),
		"--authentication-kubeconfig=" + suite.c.Kubeconfig, "--authorization-kubeconfig=" + suite.c.Kubeconfig,
		"--cert-dir=" + filepath.Join(dir, "pki"),
	}, nil, logPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := sched.Stop(context.Background(), 10*time.Second); err != nil {
			t.Errorf("stop tandem-scheduler: %v", err)
		}
		if t.Failed() {
			t.Logf("tandem-scheduler's log ends:\n%s", sched.LogTail(4000))
		}
	})

	target := suite.c.Nodes[0].Name
	// Every reported usage is above 1% of the node's CPUs: kubelet and containerd alone use more.
	setThresholds := func(value *string) {
		t.Helper()
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:null}}}`, extender.UsageThresholdsAnnotation)
		if value != nil {
			patch = fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, extender.UsageThresholdsAnnotation, *value)
		}
		if _, err := cs.CoreV1().Nodes().Patch(ctx, target, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatalf("annotate node %s: %v", target, err)
		}
	}
	node, err := cs.CoreV1().Nodes().Get(ctx, target, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	before, had := node.Annotations[extender.UsageThresholdsAnnotation]
	t.Cleanup(func() {
		if had {
			setThresholds(&before)
		} else {
			setThresholds(nil)
		}
	})
	setThresholds(ptr.To(`{"cpu":1}`))

	pod := sleepPod("plugin-placed")
	pod.Spec.SchedulerName = pluginScheduler
	pod.Spec.NodeSelector = map[string]string{corev1.LabelHostname: target}
	pod.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m")}
	if _, err := cs.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deletePod(context.Background(), t, cs, pod.Name) })

	// The plugin's reason, from tandem-scheduler (no other scheduler answers to its name).
	var reason string
	err = wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		evs, err := cs.CoreV1().Events(pod.Namespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod.Name + ",reason=FailedScheduling"})
		if err != nil {
			return false, err
		}
		for _, e := range evs.Items {
			if strings.Contains(e.Message, "tandem: cpu usage above threshold") {
				reason = e.Message
				return true, nil
			}
		}
		if err := sched.Exited(); err != nil {
			return false, err
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no FailedScheduling event with the plugin's reason for a pod pinned to a node above its threshold: %v", err)
	}
	p, err := cs.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Spec.NodeName != "" {
		t.Fatalf("the pod was bound to %s although the plugin refused the node (%s)", p.Spec.NodeName, reason)
	}
	t.Logf("pending as expected: %s", reason)

	setThresholds(nil)
	running := waitPodRunning(ctx, t, cs, pod.Name, 3*time.Minute)
	if running.Spec.NodeName != target {
		t.Errorf("the pod runs on %s, want %s", running.Spec.NodeName, target)
	}
}
