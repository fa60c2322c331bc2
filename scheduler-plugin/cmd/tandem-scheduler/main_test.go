package main

import (
	"testing"

	"k8s.io/klog/v2/ktesting"
	"k8s.io/kubernetes/cmd/kube-scheduler/app/options"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/validation"

	extender "github.com/tandemkit/tandem/scheduler-extender"
	"github.com/tandemkit/tandem/scheduler-plugin/loadaware"
)

// TestShippedConfig loads deploy/scheduler-plugin's configuration as kube-scheduler does (its own
// loader, defaulting and validation): both profiles enable TandemLoadAware with the extender's
// weight, and each profile's args decode to the extender's shipped policy.
func TestShippedConfig(t *testing.T) {
	logger, _ := ktesting.NewTestContext(t)
	cfg, err := options.LoadConfigFromFile(logger, "../../../deploy/scheduler-plugin/kube-scheduler-config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := validation.ValidateKubeSchedulerConfiguration(cfg); err != nil {
		t.Fatalf("kube-scheduler would refuse the configuration: %v", err)
	}
	if len(cfg.Extenders) != 0 {
		t.Errorf("extenders = %v: the plugin replaces tandem-extender, both would filter twice", cfg.Extenders)
	}
	names := map[string]bool{}
	for _, p := range cfg.Profiles {
		names[p.SchedulerName] = true
		var enabled bool
		for _, pl := range p.Plugins.MultiPoint.Enabled {
			if pl.Name == loadaware.Name {
				enabled = true
				if pl.Weight != 3 {
					t.Errorf("%s: weight %d, want the extender's 3", p.SchedulerName, pl.Weight)
				}
			}
		}
		if !enabled {
			t.Errorf("%s: %s is not enabled", p.SchedulerName, loadaware.Name)
		}
		var found bool
		for _, pc := range p.PluginConfig {
			if pc.Name != loadaware.Name {
				continue
			}
			found = true
			got, err := loadaware.DecodeArgs(pc.Args)
			if err != nil {
				t.Fatalf("%s: %v", p.SchedulerName, err)
			}
			if got != extender.DefaultConfig() {
				t.Errorf("%s: args decode to %+v, want the extender's shipped policy %+v", p.SchedulerName, got, extender.DefaultConfig())
			}
		}
		if !found {
			t.Errorf("%s: no pluginConfig for %s", p.SchedulerName, loadaware.Name)
		}
	}
	if !names["default-scheduler"] || !names["koord-scheduler"] {
		t.Errorf("profiles %v: want default-scheduler and koord-scheduler", names)
	}
}
