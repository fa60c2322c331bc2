package main

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulerv1 "k8s.io/kube-scheduler/config/v1"
	"sigs.k8s.io/yaml"

	"github.com/tandemkit/tandem/config/slo"
	"github.com/tandemkit/tandem/metrics/nodemetric"
	"github.com/tandemkit/tandem/metrics/reclaim"
)

func repoRoot(t *testing.T) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

func readSchedulerConfig(t *testing.T, path string) schedulerv1.KubeSchedulerConfiguration {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var cfg schedulerv1.KubeSchedulerConfiguration
	if err := yaml.UnmarshalStrict(b, &cfg); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestSchedulerConfig: both settings run deploy/'s configuration; only the extenders differ.
func TestSchedulerConfig(t *testing.T) {
	root := repoRoot(t)
	for _, tc := range []struct {
		name      string
		tandem    bool
		extenders int
	}{
		{"tandem keeps the shipped extender", true, 1},
		{"plain removes it and nothing else", false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "cfg.yaml")
			if err := schedulerConfig(root, out, "/k/admin.kubeconfig", tc.tandem, false, 12345, "/k/tls"); err != nil {
				t.Fatal(err)
			}
			cfg := readSchedulerConfig(t, out)
			if len(cfg.Profiles) != 2 || cfg.Profiles[0].SchedulerName == nil || *cfg.Profiles[1].SchedulerName != "koord-scheduler" {
				t.Errorf("profiles %+v: want deploy/'s default-scheduler and koord-scheduler", cfg.Profiles)
			}
			if cfg.ClientConnection.Kubeconfig != "/k/admin.kubeconfig" || cfg.ClientConnection.QPS != 5000 || *cfg.LeaderElection.LeaderElect {
				t.Errorf("client connection %+v, leader election %v", cfg.ClientConnection, *cfg.LeaderElection.LeaderElect)
			}
			if len(cfg.Extenders) != tc.extenders {
				t.Fatalf("%d extenders, want %d", len(cfg.Extenders), tc.extenders)
			}
			if tc.extenders == 0 {
				return
			}
			e := cfg.Extenders[0]
			if e.URLPrefix != "https://127.0.0.1:12345" || e.TLSConfig.CertFile != "/k/tls/scheduler.crt" || e.TLSConfig.CAFile != "/k/tls/ca.crt" {
				t.Errorf("extender %s with TLS %+v: want this run's port and files", e.URLPrefix, e.TLSConfig)
			}
			if !e.NodeCacheCapable || !e.Ignorable || e.FilterVerb != "filter" || e.PrioritizeVerb != "prioritize" {
				t.Errorf("extender %+v: want nodeCacheCapable, ignorable, filter and prioritize as shipped", e)
			}
		})
	}
}

// TestPluginSchedulerConfig: the plugin setting runs deploy/scheduler-plugin's configuration, its
// YAML references resolved, with only this machine's kubeconfig, the QPS and leader election changed.
func TestPluginSchedulerConfig(t *testing.T) {
	out := filepath.Join(t.TempDir(), "cfg.yaml")
	if err := pluginSchedulerConfig(repoRoot(t), out, "/k/admin.kubeconfig"); err != nil {
		t.Fatal(err)
	}
	cfg := readSchedulerConfig(t, out)
	if cfg.ClientConnection.Kubeconfig != "/k/admin.kubeconfig" || cfg.ClientConnection.QPS != 5000 || *cfg.LeaderElection.LeaderElect {
		t.Errorf("client connection %+v, leader election %v", cfg.ClientConnection, *cfg.LeaderElection.LeaderElect)
	}
	if len(cfg.Extenders) != 0 || len(cfg.Profiles) != 2 {
		t.Fatalf("%d extenders and %d profiles: want none and deploy/'s two", len(cfg.Extenders), len(cfg.Profiles))
	}
	for _, p := range cfg.Profiles {
		if p.Plugins == nil || len(p.Plugins.MultiPoint.Enabled) != 1 || p.Plugins.MultiPoint.Enabled[0].Name != "TandemLoadAware" ||
			len(p.PluginConfig) != 1 || len(p.PluginConfig[0].Args.Raw) == 0 {
			t.Errorf("profile %s: plugins %+v, pluginConfig %+v: want TandemLoadAware enabled with its policy", *p.SchedulerName, p.Plugins, p.PluginConfig)
		}
	}
}

func TestSameConversion(t *testing.T) {
	converted := newPod(kindBatch, "p", "rate", true)
	q := converted.Spec.Containers[0].Resources.Requests[nodemetric.ResourceBatchCPU]
	if q.Value() != 500 {
		t.Fatalf("a half-core batch pod requests batch-cpu %s, want 500 (milli-cores as whole units)", q.String())
	}
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		ok   bool
	}{
		{"the converted form", newPod(kindBatch, "p", "rate", true), true},
		{"as submitted", newPod(kindBatch, "p", "rate", false), false},
		{"another size", newPod(kindBatchBig, "p", "rate", true), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := sameConversion(tc.pod, kindBatch); (err == nil) != tc.ok {
				t.Errorf("sameConversion: %v, want ok %v", err, tc.ok)
			}
		})
	}
}

func defaultSettings(t *testing.T) slo.ColocationSettings {
	t.Helper()
	s, err := shippedColocation(repoRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	if s.MetricReportIntervalSeconds != 60 || s.UpdateTimeThresholdSeconds != 300 {
		t.Fatalf("deploy/slo-controller-config.yaml gives interval %d s, refresh %d s: the test's figures assume 60 and 300", s.MetricReportIntervalSeconds, s.UpdateTimeThresholdSeconds)
	}
	return s
}

func TestNodeLoadStaysInBounds(t *testing.T) {
	a, err := newAgents(nil, []string{"n0", "n1"}, defaultSettings(t), 1, 7, nil)
	if err != nil {
		t.Fatal(err)
	}
	cold, warm := a.loads[0], a.loads[1]
	now := time.Now()
	for i := range 1000 {
		if cold.step(now, 1) {
			t.Fatal("a cold node's load moved")
		}
		if !warm.step(now.Add(time.Duration(i)*time.Minute), 1) {
			t.Fatal("a warm node with probability 1 did not move")
		}
		if warm.percent < 5 || warm.percent > 55 {
			t.Fatalf("warm load at %.1f%%, outside 5-55%%", warm.percent)
		}
	}
	s := warm.sample(now, "n1", boundUsage{})
	if s.Node.CPUMilli <= s.System.CPUMilli || s.Capacity.CPUMilli != nodeCPUMilli {
		t.Errorf("sample %+v: the node's usage must hold its services' and the system's", s)
	}
	placed := warm.sample(now, "n1", boundUsage{ls: reclaim.Resources{CPUMilli: 300}, be: reclaim.Resources{CPUMilli: 900}})
	if d := placed.Node.CPUMilli - s.Node.CPUMilli; d < 1100 || d > 1400 {
		t.Errorf("placed pods' 1200 milli-cores moved the node's usage by %d (jitter is under 130)", d)
	}
	if len(placed.Pods) != 3 || placed.Pods[2].QoS != "BE" {
		t.Errorf("pods %+v: want the services, the placed services and the placed batch pods (BE)", placed.Pods)
	}
}

func TestWriteStats(t *testing.T) {
	a, err := newAgents(nil, []string{"n0", "n1", "n2"}, defaultSettings(t), 0, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	// n0 (cold): one write at the start, one refresh 300 s later. n1: its load moved at 100 s and it
	// wrote at 105 and 165 (the mean caught up). n2: wrote twice within 60 s without a move.
	// n1's load stepped at 100 s and it wrote at 105, 165 and 400 (the predictor's 300 s window
	// still moving) and at 500 (past the window and an interval: unexplained). n2 received a pod
	// at 700 s and wrote at 720.
	a.apis[0].writes = []write{{at: at(0)}, {at: at(300), refresh: true}}
	a.loads[1].moves = []time.Time{at(100)}
	a.apis[1].writes = []write{{at: at(105)}, {at: at(165)}, {at: at(400)}, {at: at(500)}}
	a.apis[2].writes = []write{{at: at(10)}, {at: at(40), err: true}, {at: at(720)}}
	placed := func(node string) []time.Time {
		if node == "n2" {
			return []time.Time{at(700)}
		}
		return nil
	}
	s := a.stats(at(0), at(800), placed)
	want := writeStats{nodes: 3, window: 800 * time.Second, total: 9, errors: 1, refresh: 1, perNodeMax: 2, unexplained: 3}
	if s != want {
		t.Errorf("stats = %+v, want %+v", s, want)
	}
	if got := s.perSecondPer1000(); got != 9.0/800/3*1000 {
		t.Errorf("writes/s per 1000 nodes = %g", got)
	}
}

func TestColdNodes(t *testing.T) {
	for _, n := range []int{5, 200, 1000, 5000, 5003} {
		cold := 0
		for i := range n {
			if isCold(i, n) {
				cold++
			}
		}
		if cold != coldNodes(n) {
			t.Errorf("%d nodes: %d cold, coldNodes says %d", n, cold, coldNodes(n))
		}
		if want := (n + 9) / 10; cold != want {
			t.Errorf("%d nodes: %d cold, want one in ten (%d)", n, cold, want)
		}
	}
}
