package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"sigs.k8s.io/yaml"
)

// defaultKubeletConfig is where kubeadm writes kubelet's configuration.
const defaultKubeletConfig = "/var/lib/kubelet/config.yaml"

// The kubelet settings Tandem follows, spelled as in KubeletConfiguration.
const (
	cgroupDriverCgroupfs = "cgroupfs"
	cgroupDriverSystemd  = "systemd"
	cpuManagerNone       = "none"
	cpuManagerStatic     = "static"
)

// kubeletSettings is the part of kubelet's KubeletConfiguration Tandem reads.
type kubeletSettings struct {
	CgroupDriver     string `json:"cgroupDriver"`
	CPUManagerPolicy string `json:"cpuManagerPolicy"`
}

// resolveKubelet returns kubelet's cgroup driver and CPU manager policy: each from its flag when set,
// else from kubelet's configuration file, else kubelet's default (cgroupfs, none). A file that exists
// but does not parse is an error: guessing the CPU manager policy wrong would take CPUs kubelet gave a
// Guaranteed pod.
func resolveKubelet(file, driver, cpuPolicy string) (string, string, error) {
	var ks kubeletSettings
	if (driver == "" || cpuPolicy == "") && file != "" {
		b, err := os.ReadFile(file)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return "", "", fmt.Errorf("read --kubelet-config %s (or set --cgroup-driver and --cpu-manager-policy): %w", file, err)
		default:
			if err := yaml.Unmarshal(b, &ks); err != nil {
				return "", "", fmt.Errorf("--kubelet-config %s is not a KubeletConfiguration (or set --cgroup-driver and --cpu-manager-policy): %w", file, err)
			}
		}
	}
	if driver == "" {
		driver = ks.CgroupDriver
	}
	if cpuPolicy == "" {
		cpuPolicy = ks.CPUManagerPolicy
	}
	switch driver {
	case "":
		driver = cgroupDriverCgroupfs
	case cgroupDriverCgroupfs, cgroupDriverSystemd:
	default:
		return "", "", fmt.Errorf("cgroup driver %q: want cgroupfs or systemd, as kubelet's cgroupDriver", driver)
	}
	switch cpuPolicy {
	case "":
		cpuPolicy = cpuManagerNone
	case cpuManagerNone, cpuManagerStatic:
	default:
		return "", "", fmt.Errorf("CPU manager policy %q: want none or static, as kubelet's cpuManagerPolicy", cpuPolicy)
	}
	return driver, cpuPolicy, nil
}
