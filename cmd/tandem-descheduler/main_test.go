package main

import (
	"os"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"

	"github.com/tandemkit/tandem/descheduler/config"
)

// TestShippedManifests: the flags deploy/descheduler/deployment.yaml passes are accepted (klog's
// included), and the configuration its ConfigMap holds loads without a warning.
func TestShippedManifests(t *testing.T) {
	raw, err := os.ReadFile("../../deploy/descheduler/deployment.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var d appsv1.Deployment
	if err := yaml.UnmarshalStrict(raw, &d); err != nil {
		t.Fatal(err)
	}
	o, err := parse(d.Spec.Template.Spec.Containers[0].Args)
	if err != nil {
		t.Fatalf("the Deployment's args: %v", err)
	}
	if o.config == "" || o.metricsAddr == "" || o.dryRun {
		t.Errorf("options %+v", o)
	}
	if _, err := parse([]string{"--no-such-flag"}); err == nil {
		t.Error("an unknown flag is accepted")
	}
	raw, err = os.ReadFile("../../deploy/descheduler/configmap.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cm struct {
		Data map[string]string `json:"data"`
	}
	if err := yaml.Unmarshal(raw, &cm); err != nil {
		t.Fatal(err)
	}
	cfg, warnings, err := config.Parse([]byte(cm.Data["config.yaml"]))
	if err != nil || len(warnings) > 0 {
		t.Fatalf("the shipped configuration: %v, warnings %v", err, warnings)
	}
	// The ConfigMap says it holds the defaults.
	def := config.Default()
	if cfg.Interval != def.Interval || cfg.LowLoad.ConsecutiveAbnormalities != def.LowLoad.ConsecutiveAbnormalities ||
		cfg.MaxMigratingPerNode != def.MaxMigratingPerNode || cfg.JobTTL != def.JobTTL || cfg.DryRun {
		t.Errorf("the shipped configuration %+v is not the defaults %+v", cfg, def)
	}
}
