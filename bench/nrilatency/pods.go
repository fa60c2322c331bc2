package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/tandemkit/tandem/e2e/framework"
)

// The two pods of every path, as Koordinator has them run side by side on a node.
const (
	classLS = "LS"
	classBE = "BE"
)

// podClasses are the pods of a path in block order: block b of a round starts a container in the pod of
// class podClasses[b%2].
var podClasses = []string{classLS, classBE}

// The LS pod is a Burstable web server: 500m CPU and 256Mi requested, 1 CPU and 512Mi the limits.
const (
	lsShares      = 512 // kubelet's shares for a 500m request
	lsQuota       = 100000
	lsMemRequest  = 256 << 20
	lsMemoryLimit = 512 << 20
	cfsPeriod     = 100000
	// beShares is kubelet's shares for a BestEffort container; batchresource sets beBatchShares from the
	// batch-cpu request instead (1k milli-CPU, 1024 shares).
	beShares      = 2
	beBatchShares = 1024
)

// batchSpec is the BE pod's node.koordinator.sh/extended-resource-spec, as Koordinator's webhook writes it,
// for containers named c0 .. c(n-1): 1 batch CPU requested, 1.5 the limit, 64Mi of batch memory.
func batchSpec(n int) string {
	var parts []string
	for i := range n {
		parts = append(parts, fmt.Sprintf(`"c%d":{"requests":{"kubernetes.io/batch-cpu":"1k","kubernetes.io/batch-memory":"64Mi"},"limits":{"kubernetes.io/batch-cpu":"1500","kubernetes.io/batch-memory":"64Mi"}}`, i))
	}
	return `{"containers":{` + strings.Join(parts, ",") + `}}`
}

// pod is one running pod sandbox of a path.
type pod struct {
	class  string
	id     string
	cfg    *runtimeapi.PodSandboxConfig
	parent string // its cgroup, under the path's private root
	// dir holds the host files kubelet mounts into every container: /etc/hosts, the service account token,
	// each container's termination log.
	dir string
}

// podConfig is the sandbox config kubelet sends for a pod of class, its cgroup under root
// (root/kubepods/<qos>/pod<uid>, as with kubelet's cgroupfs driver and a cgroupRoot of root).
func podConfig(name, class, root string, perPod int) *runtimeapi.PodSandboxConfig {
	cfg := framework.PodSandboxConfig(name, "shop", true)
	qosDir := "burstable"
	if class == classBE {
		qosDir = "besteffort"
	}
	cfg.Linux.CgroupParent = fmt.Sprintf("%s/kubepods/%s/pod%s", root, qosDir, cfg.Metadata.Uid)
	cfg.Labels["koordinator.sh/qosClass"] = class
	cfg.Annotations["kubernetes.io/config.seen"] = time.Now().UTC().Format(time.RFC3339Nano)
	if class == classBE {
		cfg.Labels["app"] = "spark-executor"
		cfg.Labels["spark-role"] = "executor"
		cfg.Annotations["node.koordinator.sh/extended-resource-spec"] = batchSpec(perPod)
	} else {
		cfg.Labels["app"] = "web"
		cfg.Labels["pod-template-hash"] = "7d4b9c6f8d"
	}
	return cfg
}

// kubeletMaskedPaths and kubeletReadonlyPaths are what kubelet masks and makes read-only in every
// unprivileged container (k8s.io/kubernetes/pkg/securitycontext).
var (
	kubeletMaskedPaths = []string{"/proc/asound", "/proc/acpi", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
		"/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi", "/sys/firmware", "/sys/devices/virtual/powercap"}
	kubeletReadonlyPaths = []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"}
)

// serviceEnv is the environment kubelet gives every container of a namespace with only the kubernetes
// Service.
var serviceEnv = []*runtimeapi.KeyValue{
	{Key: "KUBERNETES_SERVICE_HOST", Value: []byte("10.96.0.1")},
	{Key: "KUBERNETES_SERVICE_PORT", Value: []byte("443")},
	{Key: "KUBERNETES_SERVICE_PORT_HTTPS", Value: []byte("443")},
	{Key: "KUBERNETES_PORT", Value: []byte("tcp://10.96.0.1:443")},
	{Key: "KUBERNETES_PORT_443_TCP", Value: []byte("tcp://10.96.0.1:443")},
	{Key: "KUBERNETES_PORT_443_TCP_PROTO", Value: []byte("tcp")},
	{Key: "KUBERNETES_PORT_443_TCP_PORT", Value: []byte("443")},
	{Key: "KUBERNETES_PORT_443_TCP_ADDR", Value: []byte("10.96.0.1")},
}

// preparePod makes what kubelet makes on the host before it creates a pod's containers: the files it
// mounts into them.
func preparePod(p *pod) error {
	if err := os.MkdirAll(filepath.Join(p.dir, "token"), 0o755); err != nil {
		return fmt.Errorf("create pod dir: %w", err)
	}
	files := map[string]string{
		"etc-hosts":       "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n",
		"token/token":     "bench",
		"token/namespace": p.cfg.Metadata.Namespace,
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(p.dir, name), []byte(content), 0o644); err != nil {
			return fmt.Errorf("write pod file: %w", err)
		}
	}
	return nil
}

// containerConfig is the config kubelet sends for container name of p, the attempt-th time it starts it
// (attempt counts the rounds: each round starts the same names again, as kubelet does after a restart).
func containerConfig(p *pod, name string, attempt uint32) (*runtimeapi.ContainerConfig, error) {
	// kubelet makes the container's log dir and an empty termination log file on the host per start.
	termLog := filepath.Join(p.dir, fmt.Sprintf("%s-%d.termination-log", name, attempt))
	if err := os.WriteFile(termLog, nil, 0o666); err != nil {
		return nil, fmt.Errorf("create termination log: %w", err)
	}
	if err := os.MkdirAll(filepath.Join(p.cfg.LogDirectory, name), 0o755); err != nil {
		return nil, fmt.Errorf("create container log dir: %w", err)
	}
	md := p.cfg.Metadata
	res := &runtimeapi.LinuxContainerResources{CpuPeriod: cfsPeriod, CpuShares: beShares, OomScoreAdj: 1000}
	if p.class == classLS {
		res = &runtimeapi.LinuxContainerResources{CpuPeriod: cfsPeriod, CpuQuota: lsQuota, CpuShares: lsShares,
			MemoryLimitInBytes: lsMemoryLimit, OomScoreAdj: burstableOOMScoreAdj(lsMemRequest)}
	}
	return &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: name, Attempt: attempt},
		Image:    &runtimeapi.ImageSpec{Image: framework.TestImage, UserSpecifiedImage: framework.TestImage},
		Command:  framework.SleepCommand(),
		Envs:     serviceEnv,
		Mounts: []*runtimeapi.Mount{
			{ContainerPath: "/etc/hosts", HostPath: filepath.Join(p.dir, "etc-hosts")},
			{ContainerPath: "/dev/termination-log", HostPath: termLog},
			{ContainerPath: "/var/run/secrets/kubernetes.io/serviceaccount", HostPath: filepath.Join(p.dir, "token"), Readonly: true},
		},
		LogPath: filepath.Join(name, strconv.Itoa(int(attempt))+".log"),
		Labels: map[string]string{
			"io.kubernetes.container.name": name,
			"io.kubernetes.pod.name":       md.Name,
			"io.kubernetes.pod.namespace":  md.Namespace,
			"io.kubernetes.pod.uid":        md.Uid,
		},
		Annotations: map[string]string{
			"io.kubernetes.container.hash":                     "6f2b3c1d",
			"io.kubernetes.container.restartCount":             strconv.Itoa(int(attempt)),
			"io.kubernetes.container.terminationMessagePath":   "/dev/termination-log",
			"io.kubernetes.container.terminationMessagePolicy": "File",
			"io.kubernetes.pod.terminationGracePeriod":         "30",
		},
		Linux: &runtimeapi.LinuxContainerConfig{
			Resources: res,
			SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
				NamespaceOptions: p.cfg.Linux.SecurityContext.NamespaceOptions,
				MaskedPaths:      kubeletMaskedPaths,
				ReadonlyPaths:    kubeletReadonlyPaths,
			},
		},
	}, nil
}

// burstableOOMScoreAdj is kubelet's oom_score_adj for a Burstable container requesting memReq bytes on
// this machine: 1000 - 1000 × request / capacity, within [2, 999].
func burstableOOMScoreAdj(memReq int64) int64 {
	var si syscall.Sysinfo_t
	if err := syscall.Sysinfo(&si); err != nil || si.Totalram == 0 {
		return 999
	}
	capacity := int64(si.Totalram) * int64(si.Unit)
	return min(max(1000-1000*memReq/capacity, 2), 999)
}
