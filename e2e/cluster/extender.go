package cluster

import (
	"fmt"
	"os"

	schedulerv1 "k8s.io/kube-scheduler/config/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

// SchedulerConfig is deploy/'s KubeSchedulerConfiguration: profiles
// default-scheduler and koord-scheduler, both calling tandem-extender. The
// cluster's kube-scheduler runs with it.
const SchedulerConfig = "extender/kube-scheduler-config.yaml"

// writeSchedulerConfig writes deploy/'s KubeSchedulerConfiguration (or src,
// when set), decoded strictly with kube-scheduler's v1 types so that a field
// it does not know fails here, with only what names the node's files
// replaced: clientConnection.kubeconfig, and no leader election (one
// scheduler, and leases would slow its start). Profiles and the extender's
// URL stay as shipped: the tier checks them.
func writeSchedulerConfig(path, kubeconfig, src string) error {
	if src == "" {
		var err error
		if src, err = deployFile(SchedulerConfig); err != nil {
			return err
		}
	}
	b, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("read scheduler config: %w", err)
	}
	var cfg schedulerv1.KubeSchedulerConfiguration
	if err := yaml.UnmarshalStrict(b, &cfg); err != nil {
		return fmt.Errorf("%s is not a KubeSchedulerConfiguration: %w", src, err)
	}
	if gv := schedulerv1.SchemeGroupVersion.String(); cfg.APIVersion != gv || cfg.Kind != "KubeSchedulerConfiguration" {
		return fmt.Errorf("%s is a %s %s: want a %s KubeSchedulerConfiguration", src, cfg.APIVersion, cfg.Kind, gv)
	}
	cfg.ClientConnection.Kubeconfig = kubeconfig
	cfg.LeaderElection.LeaderElect = ptr.To(false)
	out, err := yaml.Marshal(cfg)
	if err != nil {
		return fmt.Errorf("encode scheduler config: %w", err)
	}
	if err := os.WriteFile(path, out, 0o644); err != nil {
		return fmt.Errorf("write scheduler config: %w", err)
	}
	return nil
}
