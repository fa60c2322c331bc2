package framework

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	remote "k8s.io/cri-client/pkg"
)

// kubeletRuntimeRequestTimeout is kubelet's default --runtime-request-timeout,
// which it also uses as the CRI connection timeout.
const kubeletRuntimeRequestTimeout = 2 * time.Minute

// LabelE2E marks every pod and container the framework creates.
const LabelE2E = "tandem.io/e2e"

// NewCRIClients connects to endpoint with k8s.io/cri-client the way kubelet
// does: its default 2m timeout, no tracing and unary (not streaming) lists,
// as with kubelet's default feature gates.
func NewCRIClients(ctx context.Context, endpoint string) (internalapi.RuntimeService, internalapi.ImageManagerService, error) {
	rs, err := remote.NewRemoteRuntimeService(ctx, endpoint, kubeletRuntimeRequestTimeout, nil, false)
	if err != nil {
		return nil, nil, fmt.Errorf("connect runtime service %s: %w", endpoint, err)
	}
	is, err := remote.NewRemoteImageService(ctx, endpoint, kubeletRuntimeRequestTimeout, nil, false)
	if err != nil {
		return nil, nil, fmt.Errorf("connect image service %s: %w", endpoint, err)
	}
	return rs, is, nil
}

// podLogRoot holds the pods' log directories (kubelet's /var/log/pods).
func podLogRoot() string { return filepath.Join(os.TempDir(), "tandem-e2e-pods") }

// RemovePodLogs removes every pod log directory PodSandboxConfig made. RemovePod removes its pod's,
// but a test that kills a runtime or a proxy under its pods cannot always remove them all; a test
// binary calls this once its tests are done, so that no run leaves them behind.
func RemovePodLogs() error { return os.RemoveAll(podLogRoot()) }

func podLogDir(md *runtimeapi.PodSandboxMetadata) string {
	return filepath.Join(podLogRoot(), md.GetNamespace()+"_"+md.GetName()+"_"+md.GetUid())
}

// NewUID returns a random RFC 4122 UUID, as the API server gives pods.
func NewUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails: it crashes the program instead (Go 1.24+)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// PodSandboxConfig returns a sandbox config shaped like kubelet's: a unique
// uid, kubelet's pod labels, a log directory (created here, removed by
// RemovePod) and host or pod networking. CgroupParent is empty, so the
// runtime uses its own default parent; set it when a test needs one.
func PodSandboxConfig(name, namespace string, hostNetwork bool) *runtimeapi.PodSandboxConfig {
	md := &runtimeapi.PodSandboxMetadata{Name: name, Namespace: namespace, Uid: NewUID()}
	logDir := podLogDir(md)
	_ = os.MkdirAll(logDir, 0o755) // a missing dir shows up as a clear CreateContainer error
	network := runtimeapi.NamespaceMode_POD
	hostname := name
	if hostNetwork {
		network = runtimeapi.NamespaceMode_NODE
		hostname = ""
	}
	return &runtimeapi.PodSandboxConfig{
		Metadata:     md,
		Hostname:     hostname,
		LogDirectory: logDir,
		Labels: map[string]string{
			"io.kubernetes.pod.name":      name,
			"io.kubernetes.pod.namespace": namespace,
			"io.kubernetes.pod.uid":       md.Uid,
			LabelE2E:                      "true",
		},
		Annotations: map[string]string{"kubernetes.io/config.source": "api"},
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
				NamespaceOptions: &runtimeapi.NamespaceOption{
					Network: network,
					Pid:     runtimeapi.NamespaceMode_CONTAINER,
					Ipc:     runtimeapi.NamespaceMode_POD,
				},
			},
		},
	}
}

// SleepCommand runs for an hour but exits 0 at once on SIGTERM (a bare sleep
// as PID 1 would ignore it and make every stop wait for its timeout).
func SleepCommand() []string {
	return []string{"/bin/sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"}
}

// ContainerConfig returns a container of TestImage running cmd (the image's
// /pause when cmd is empty), logging to <name>_0.log in the pod's log dir.
func ContainerConfig(name string, cmd ...string) *runtimeapi.ContainerConfig {
	return &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: name},
		Image:    &runtimeapi.ImageSpec{Image: TestImage, UserSpecifiedImage: TestImage},
		Command:  cmd,
		LogPath:  name + "_0.log",
		Labels: map[string]string{
			"io.kubernetes.container.name": name,
			LabelE2E:                       "true",
		},
		Linux: &runtimeapi.LinuxContainerConfig{
			Resources: &runtimeapi.LinuxContainerResources{CpuShares: 2, OomScoreAdj: 1000},
		},
	}
}

// RunPod starts a sandbox from cfg and n containers (c0, c1, …) running
// SleepCommand. On error it returns what it created so far, for clean-up.
func RunPod(ctx context.Context, rs internalapi.RuntimeService, cfg *runtimeapi.PodSandboxConfig, n int) (string, []string, error) {
	podID, err := rs.RunPodSandbox(ctx, cfg, "")
	if err != nil {
		return "", nil, fmt.Errorf("run pod %s: %w", cfg.GetMetadata().GetName(), err)
	}
	var ids []string
	for i := range n {
		id, err := rs.CreateContainer(ctx, podID, ContainerConfig(fmt.Sprintf("c%d", i), SleepCommand()...), cfg)
		if err != nil {
			return podID, ids, fmt.Errorf("create container c%d in pod %s: %w", i, cfg.GetMetadata().GetName(), err)
		}
		ids = append(ids, id)
		if err := rs.StartContainer(ctx, id); err != nil {
			return podID, ids, fmt.Errorf("start container c%d in pod %s: %w", i, cfg.GetMetadata().GetName(), err)
		}
	}
	return podID, ids, nil
}

// RemovePod stops and removes a pod with its containers, and its log dir.
func RemovePod(ctx context.Context, rs internalapi.RuntimeService, podID string) error {
	var logDir string
	if st, err := rs.PodSandboxStatus(ctx, podID, false); err == nil && st.GetStatus().GetMetadata() != nil {
		logDir = podLogDir(st.GetStatus().GetMetadata())
	}
	var errs []error
	if err := rs.StopPodSandbox(ctx, podID); err != nil {
		errs = append(errs, fmt.Errorf("stop pod %s: %w", podID, err))
	}
	if err := rs.RemovePodSandbox(ctx, podID); err != nil {
		errs = append(errs, fmt.Errorf("remove pod %s: %w", podID, err))
	}
	if logDir != "" && len(errs) == 0 {
		if err := os.RemoveAll(logDir); err != nil {
			errs = append(errs, fmt.Errorf("remove pod log dir: %w", err))
		}
	}
	return errors.Join(errs...)
}
