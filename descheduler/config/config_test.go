package config

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// koordinator is a koord-descheduler configuration as Koordinator's docs write one.
const koordinator = `
apiVersion: descheduler/v1alpha2
kind: DeschedulerConfiguration
enableProfiling: false
leaderElection:
  leaderElect: true
  resourceLock: leases
  resourceName: koord-descheduler
  resourceNamespace: koordinator-system
deschedulingInterval: 10s
dryRun: false
profiles:
- name: koord-descheduler
  plugins:
    balance:
      enabled:
        - name: LowNodeLoad
  pluginConfig:
  - name: MigrationController
    args:
      apiVersion: descheduler/v1alpha2
      kind: MigrationControllerArgs
      evictionPolicy: Eviction
      maxMigratingPerNode: 2
      maxMigratingGlobally: 4
      defaultJobTTL: 3m
      namespaces:
        exclude: [kube-system]
  - name: LowNodeLoad
    args:
      apiVersion: descheduler/v1alpha2
      kind: LowNodeLoadArgs
      evictableNamespaces:
        exclude: [koordinator-system]
      lowThresholds:
        cpu: 20
        memory: 30
      highThresholds:
        cpu: 50
        memory: 60
      anomalyCondition:
        consecutiveAbnormalities: 3
      nodeMetricExpirationSeconds: 60
  - name: RemovePodsViolatingNodeAffinity
    args: {}
`

func TestParseKoordinator(t *testing.T) {
	cfg, warnings, err := Parse([]byte(koordinator))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Interval != 10*time.Second || cfg.LeaseName != "koord-descheduler" || cfg.MaxMigratingPerNode != 2 || cfg.MaxMigratingGlobally != 4 ||
		cfg.MaxMigratingPerNamespace != 2 || cfg.JobTTL != 3*time.Minute {
		t.Errorf("resolved %+v", cfg)
	}
	s := cfg.LowLoad
	if s.HighThresholds[corev1.ResourceCPU] != 50 || s.LowThresholds[corev1.ResourceMemory] != 30 || s.ConsecutiveAbnormalities != 3 ||
		s.MetricExpiration != time.Minute || len(s.Exclude) != 2 {
		t.Errorf("LowNodeLoad %+v", s)
	}
	joined := strings.Join(warnings, "\n")
	for _, w := range []string{"evictionPolicy: not implemented", "plugin RemovePodsViolatingNodeAffinity: not implemented"} {
		if !strings.Contains(joined, w) {
			t.Errorf("warnings lack %q:\n%s", w, joined)
		}
	}
}

func TestParseRefuses(t *testing.T) {
	cases := []struct{ name, file, want string }{
		{"typo", "profiles: [{name: p, pluginConfig: [{name: LowNodeLoad, args: {highTresholds: {cpu: 50}}}]}]", `unknown field "highTresholds"`},
		{"low above high", "profiles: [{name: p, pluginConfig: [{name: LowNodeLoad, args: {highThresholds: {cpu: 50}, lowThresholds: {cpu: 60}}}]}]", "must be below"},
		{"evict directly", "profiles: [{name: p, pluginConfig: [{name: MigrationController, args: {defaultJobMode: EvictDirectly}}]}]", "ReservationFirst"},
		{"not a percentage", "profiles: [{name: p, pluginConfig: [{name: LowNodeLoad, args: {highThresholds: {cpu: 150}}}]}]", "not a percentage"},
		{"another kind", "kind: KubeSchedulerConfiguration", "want DeschedulerConfiguration"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := Parse([]byte(tc.file))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %v, want %q", err, tc.want)
			}
		})
	}
}

func TestDefault(t *testing.T) {
	cfg, warnings, err := Parse(nil)
	if err != nil || len(warnings) > 0 {
		t.Fatalf("empty file: %v %v", err, warnings)
	}
	if cfg.DryRun || !cfg.LeaderElect || cfg.LowLoad.ConsecutiveAbnormalities != 5 {
		t.Errorf("defaults %+v", cfg)
	}
}
