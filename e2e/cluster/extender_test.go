package cluster

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	schedulerconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/validation"
)

// TestSchedulerConfig loads the configuration the cluster gives
// kube-scheduler the way kube-scheduler v1.36 loads its --config (decode with
// defaults, then validate), so a configuration it would refuse to start with
// fails here without a cluster; deploy/'s must also have the profiles
// seed 000's pods and every other pod name, both calling the extender where
// its DaemonSet listens.
func TestSchedulerConfig(t *testing.T) {
	const base = `apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: /etc/kubernetes/scheduler.conf
extenders:
- urlPrefix: http://tandem-extender.kube-system.svc:10262
  filterVerb: filter
  prioritizeVerb: prioritize
  weight: 3
  nodeCacheCapable: true
  httpTimeout: 1s
`
	deploy, err := deployFile(SchedulerConfig)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		src     string // a file; empty: yaml
		yaml    string
		wantErr string // substring of kube-scheduler's error; empty: valid
		shipped bool   // deploy/'s: profiles and URL checked too
	}{
		{name: "deploy/", src: deploy, shipped: true},
		{name: "without managedResources", yaml: base},
		{
			name: "managedResources of the kubernetes.io domain",
			yaml: base + `  managedResources:
  - name: kubernetes.io/batch-cpu
`,
			wantErr: "invalid extended resource name",
		},
		{
			name: "managedResources of another domain",
			yaml: base + `  managedResources:
  - name: example.com/batch-cpu
`,
		},
		{name: "not a scheduler configuration", yaml: "apiVersion: v1\nkind: ConfigMap\n", wantErr: "KubeSchedulerConfiguration"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			src := tc.src
			if src == "" {
				src = filepath.Join(dir, "in.yaml")
				if err := os.WriteFile(src, []byte(tc.yaml), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			out := filepath.Join(dir, "out.yaml")
			err := writeSchedulerConfig(out, "/k/scheduler.kubeconfig", src)
			if err == nil {
				err = loadSchedulerConfig(t, out, tc.shipped)
			}
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("kube-scheduler would refuse the configuration from %s: %v", src, err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("error = %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

// loadSchedulerConfig decodes and validates a --config file as kube-scheduler
// does, and checks the values the cluster substitutes; for deploy/'s file
// (shipped), also the profiles and the extender's URL it must keep.
func loadSchedulerConfig(t *testing.T, path string, shipped bool) error {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	obj, _, err := scheme.Codecs.UniversalDecoder().Decode(b, nil, nil)
	if err != nil {
		return err
	}
	cfg, ok := obj.(*schedulerconfig.KubeSchedulerConfiguration)
	if !ok {
		t.Fatalf("decoded %T", obj)
	}
	if err := validation.ValidateKubeSchedulerConfiguration(cfg); err != nil {
		return err
	}
	if cfg.ClientConnection.Kubeconfig != "/k/scheduler.kubeconfig" || cfg.LeaderElection.LeaderElect {
		t.Errorf("kubeconfig %q, leader election %v: want the cluster's kubeconfig and no election", cfg.ClientConnection.Kubeconfig, cfg.LeaderElection.LeaderElect)
	}
	if !shipped {
		return nil
	}
	var names []string
	for _, p := range cfg.Profiles {
		names = append(names, p.SchedulerName)
	}
	if strings.Join(names, ",") != "default-scheduler,koord-scheduler" {
		t.Errorf("profiles %v, want default-scheduler and koord-scheduler (seed 000's pods name koord-scheduler)", names)
	}
	if len(cfg.Extenders) != 1 || cfg.Extenders[0].URLPrefix != ExtenderURL {
		t.Errorf("extenders %+v, want one at %s, where deploy/'s DaemonSet listens", cfg.Extenders, ExtenderURL)
	}
	return nil
}
