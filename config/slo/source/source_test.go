package source

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/tandemkit/tandem/config/slo"
	"github.com/tandemkit/tandem/internal/polltest"
	"github.com/tandemkit/tandem/kubeclient/kubeclienttest"
)

// start runs a source and returns the updates it applies.
func start(t *testing.T, cfg Config, client Client) <-chan Update {
	t.Helper()
	ch := make(chan Update, 64)
	src, err := New(cfg, Deps{Client: client, Apply: func(_ context.Context, u Update) { ch <- u }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); _ = src.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return ch
}

// await returns the first update for which ok holds, within 5 s: what tandem-proxy promises every consumer.
func await(t *testing.T, ch <-chan Update, what string, ok func(Update) bool) Update {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case u := <-ch:
			if ok(u) {
				return u
			}
		case <-deadline:
			t.Fatalf("no update within 5 s where %s", what)
		}
	}
}

// quiet fails on any update within d.
func quiet(t *testing.T, ch <-chan Update, d time.Duration, why string) {
	t.Helper()
	select {
	case u := <-ch:
		t.Fatalf("update from %s although %s", u.Origin, why)
	case <-time.After(d):
	}
}

func events(t *testing.T, cs *fake.Clientset, namespace string) []corev1.Event {
	t.Helper()
	list, err := cs.CoreV1().Events(namespace).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}

const (
	threshold = `{"clusterStrategy": {"enable": true, "cpuSuppressThresholdPercent": 60},
		"nodeStrategies": [{"name": "pool-a", "nodeSelector": {"matchLabels": {"pool": "a"}}, "cpuSuppressThresholdPercent": 40}]}`
	burst = `{"clusterStrategy": {"policy": "auto", "cpuBurstPercent": 300}}`
)

// TestConfigMap follows the ConfigMap through the API as an operator changes it, and the Node as it is
// relabelled.
func TestConfigMap(t *testing.T) {
	t.Parallel()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1", Labels: map[string]string{"pool": "b"}}}
	// Another ConfigMap in the namespace must not be read.
	other := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "koordinator-system", Name: "other"},
		Data: map[string]string{slo.ColocationConfigKey: `{"enable": true}`}}
	cs := fake.NewClientset(node, other)
	cms := cs.CoreV1().ConfigMaps("koordinator-system")
	ctx := t.Context()
	ch := start(t, Config{ConfigMap: DefaultConfigMap, NodeName: "node-1"}, kubeclienttest.Clientset{Interface: cs})

	// No ConfigMap yet: Koordinator's defaults, colocation off.
	await(t, ch, "the defaults apply without a ConfigMap", func(u Update) bool {
		return !u.Resolved.Colocation.Enable && !u.Resolved.ResourceThreshold.Enable && strings.Contains(u.Origin, "absent")
	})

	// Created.
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "koordinator-system", Name: "slo-controller-config"},
		Data: map[string]string{slo.ColocationConfigKey: `{"enable": true}`, slo.ResourceThresholdConfigKey: threshold, slo.CPUBurstConfigKey: burst}}
	if _, err := cms.Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	await(t, ch, "the created ConfigMap applies", func(u Update) bool {
		return u.Resolved.Colocation.Enable && u.Resolved.ResourceThreshold.CPUSuppressThresholdPercent == 60 && u.Resolved.CPUBurst.Policy == slo.CPUBurstAuto
	})

	// A typo in cpu-burst-config and colocation turned off in the same edit: the typo is refused (Event on
	// the ConfigMap, naming the key), cpu burst keeps its last good value, colocation goes off.
	cm.Data[slo.CPUBurstConfigKey] = `{"clusterStrategy": {"polcy": "none"}}`
	cm.Data[slo.ColocationConfigKey] = `{"enable": false}`
	if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	await(t, ch, "colocation goes off and cpu burst keeps auto", func(u Update) bool {
		return !u.Resolved.Colocation.Enable && u.Resolved.CPUBurst.Policy == slo.CPUBurstAuto && u.Resolved.CPUBurst.CPUBurstPercent == 300
	})
	evs := events(t, cs, "koordinator-system")
	if len(evs) != 1 {
		t.Fatalf("%d Events, want one about cpu-burst-config: %+v", len(evs), evs)
	}
	ev := evs[0]
	if ev.Reason != ReasonInvalid || ev.Type != corev1.EventTypeWarning || ev.InvolvedObject.Kind != "ConfigMap" ||
		ev.InvolvedObject.Name != "slo-controller-config" || !strings.Contains(ev.Message, `"cpu-burst-config"`) ||
		!strings.Contains(ev.Message, "polcy") {
		t.Fatalf("Event = %s %s on %s/%s: %q; want a Warning %s on the ConfigMap naming cpu-burst-config and the field",
			ev.Type, ev.Reason, ev.InvolvedObject.Kind, ev.InvolvedObject.Name, ev.Message, ReasonInvalid)
	}

	// The Node is relabelled into pool a: its node strategy applies; the same typo raises no second Event.
	node.Labels = map[string]string{"pool": "a"}
	if _, err := cs.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	await(t, ch, "the pool-a strategy applies after the relabel", func(u Update) bool {
		return u.Resolved.ResourceThreshold.CPUSuppressThresholdPercent == 40 && u.Labels["pool"] == "a"
	})
	if n := len(events(t, cs, "koordinator-system")); n != 1 {
		t.Fatalf("%d Events after a relabel, want still one: the refusal did not change", n)
	}

	// Deleted: Koordinator's defaults again.
	if err := cms.Delete(ctx, cm.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	await(t, ch, "the defaults apply after the delete", func(u Update) bool {
		return !u.Resolved.ResourceThreshold.Enable && u.Resolved.CPUBurst.Policy == slo.CPUBurstNone
	})
}

// TestFile: the file mode a standalone node uses; a bad section never stops the others, and a file that
// is no YAML at all keeps everything in force.
func TestFile(t *testing.T) {
	t.Parallel()
	cs := fake.NewClientset()
	path := filepath.Join(t.TempDir(), "slo.yaml")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("resource-threshold-config: '" + strings.ReplaceAll(threshold, "\n", " ") + "'\ncpu-burst-config: '{\"clusterStrategy\": {\"polcy\": \"x\"}}'\n")
	ch := start(t, Config{File: path, NodeName: "node-1", NodeLabels: map[string]string{"pool": "a"}, Debounce: 20 * time.Millisecond},
		kubeclienttest.Clientset{Interface: cs})

	await(t, ch, "the good section applies at start, the typo uses defaults", func(u Update) bool {
		return u.Resolved.ResourceThreshold.CPUSuppressThresholdPercent == 40 && u.Resolved.CPUBurst.Policy == slo.CPUBurstNone
	})
	evs := events(t, cs, metav1.NamespaceDefault)
	if len(evs) != 1 || evs[0].InvolvedObject.Kind != "Node" || evs[0].InvolvedObject.Name != "node-1" || !strings.Contains(evs[0].Message, "cpu-burst-config") {
		t.Fatalf("Events = %+v, want one on Node node-1 naming cpu-burst-config", evs)
	}

	write("resource-threshold-config: [not: yaml\n")
	polltest.Until(t, "a second Event, about the unreadable file", func() bool { return len(events(t, cs, metav1.NamespaceDefault)) >= 2 })
	quiet(t, ch, 200*time.Millisecond, "the file is not YAML: the settings in force stay")

	write("cpu-burst-config: '" + burst + "'\n")
	await(t, ch, "the fixed file applies", func(u Update) bool {
		return u.Resolved.CPUBurst.Policy == slo.CPUBurstAuto && !u.Resolved.ResourceThreshold.Enable
	})

	// Another file in the directory (tandem-proxy's log, say) changing all the time, and the file
	// rewritten with the same bytes: nothing to apply.
	neighbour := filepath.Join(filepath.Dir(path), "proxy.log")
	for i := range 10 {
		if err := os.WriteFile(neighbour, []byte(strings.Repeat("x", i+1)), 0o600); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond) // real time between writes, so the watcher sees each as its own event
	}
	write("cpu-burst-config: '" + burst + "'\n")
	quiet(t, ch, 300*time.Millisecond, "only a neighbour changed and the file's content did not")
}

func TestNewRefuses(t *testing.T) {
	t.Parallel()
	apply := func(context.Context, Update) {}
	client := kubeclienttest.Clientset{Interface: fake.NewClientset()}
	tests := []struct {
		name    string
		cfg     Config
		client  Client
		wantErr string
	}{
		{"not namespace/name", Config{ConfigMap: "slo-controller-config", NodeName: "n"}, client, "want namespace/name"},
		{"no API access", Config{ConfigMap: DefaultConfigMap, NodeName: "n"}, nil, "needs API access"},
		{"no node name", Config{ConfigMap: DefaultConfigMap}, client, "--node-name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.cfg, Deps{Client: tt.client, Apply: apply})
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("New = %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}

// TestFileClientLater: a node whose kubeconfig appears after the start (kubelet's TLS bootstrap) applies
// the file at once, and reports what it refused as an Event once the client comes.
func TestFileClientLater(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "slo.yaml")
	if err := os.WriteFile(path, []byte("cpu-burst-config: '{\"clusterStrategy\": {\"polcy\": \"x\"}}'\ncolocation-config: '{\"enable\": true}'\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ch := make(chan Update, 16)
	src, err := New(Config{File: path, NodeName: "node-1"}, Deps{Apply: func(_ context.Context, u Update) { ch <- u }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); _ = src.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	await(t, ch, "the file applies without a client", func(u Update) bool { return u.Resolved.Colocation.Enable })

	cs := fake.NewClientset()
	src.SetClient(kubeclienttest.Clientset{Interface: cs})
	polltest.Until(t, "an Event about the refused cpu-burst-config after the client came", func() bool { return len(events(t, cs, metav1.NamespaceDefault)) > 0 })
}

// TestNodeStatusChangesDoNotReload: kubelet and the reporter patch the Node all the time; only a change
// of its labels (or of the ConfigMap) may hand over a configuration, since each one rebuilds the policies.
func TestNodeStatusChangesDoNotReload(t *testing.T) {
	t.Parallel()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1", Labels: map[string]string{"pool": "a"}}}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "koordinator-system", Name: "slo-controller-config"},
		Data: map[string]string{slo.ResourceThresholdConfigKey: threshold}}
	cs := fake.NewClientset(node, cm)
	ch := start(t, Config{ConfigMap: DefaultConfigMap, NodeName: "node-1"}, kubeclienttest.Clientset{Interface: cs})
	await(t, ch, "the first configuration", func(u Update) bool { return u.Resolved.ResourceThreshold.CPUSuppressThresholdPercent == 40 })

	node.Annotations = map[string]string{"tandem.io/node-metric": "{}"}
	node.Status.Allocatable = corev1.ResourceList{"kubernetes.io/batch-cpu": resource.MustParse("2k")}
	if _, err := cs.CoreV1().Nodes().Update(t.Context(), node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	quiet(t, ch, 500*time.Millisecond, "only the Node's status and annotations changed")
}
