package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/tandemkit/tandem/e2e/framework"
)

// demoCgroupRoot is where the demo's pod cgroups live, as kubelet's live under /kubepods; a private name,
// so the demo never touches a real kubelet's cgroups.
const demoCgroupRoot = "/tandem-demo"

// seedPod is one of the four nginx Deployments of Koordinator's documented QoS example, scaled to this
// machine.
type seedPod struct {
	name, class, kubeQoS string
	cpuMilli             int64 // request == limit; 0 for none
	annotations          map[string]string
	// refused is set when the machine is too small for the pod and Tandem must say so.
	refused bool
}

// seed000 runs the LSE, LSR, LS and BE pods of Koordinator's documented QoS example, whose cpusets users
// check a colocation system against, through the proxy with Tandem's built-in policies, then shows the
// result with tandemctl, as an operator would check it.
func (d *demo) seed000(ctx context.Context) {
	fmt.Fprintf(d.out, "\nThe four pods of Koordinator's QoS example (LSE, LSR, LS, BE), scaled to %d CPUs:\n", numCPU())
	spread := `{"preferredCPUBindPolicy": "SpreadByPCPUs"}`
	pods := []seedPod{
		{name: "nginx-lse", class: "LSE", kubeQoS: "guaranteed", cpuMilli: 1000, annotations: map[string]string{"scheduling.koordinator.sh/resource-spec": spread}},
		// On 2 CPUs, LSE takes one and the LS pool keeps the other: LSR must be refused, with the numbers.
		{name: "nginx-lsr", class: "LSR", kubeQoS: "guaranteed", cpuMilli: 1000, annotations: map[string]string{"scheduling.koordinator.sh/resource-spec": spread}, refused: numCPU() <= 2},
		{name: "nginx-ls", class: "LS", kubeQoS: "burstable"},
		{name: "nginx-be", class: "BE", kubeQoS: "besteffort", annotations: map[string]string{
			"node.koordinator.sh/extended-resource-spec": `{"containers":{"nginx":{"requests":{"kubernetes.io/batch-cpu":"1k","kubernetes.io/batch-memory":"128Mi"},"limits":{"kubernetes.io/batch-cpu":"1k","kubernetes.io/batch-memory":"128Mi"}}}}`,
		}},
	}
	var podIDs []string
	defer func() {
		if d.keep {
			return
		}
		for _, id := range podIDs {
			_ = framework.RemovePod(context.WithoutCancel(ctx), d.direct, id)
		}
		removeDemoCgroups()
	}()
	for _, p := range pods {
		d.check(fmt.Sprintf("%s (%s)", p.name, p.class), func() (string, error) {
			id, facts, err := d.runSeedPod(ctx, p)
			if id != "" {
				podIDs = append(podIDs, id)
			}
			return facts, err
		})
	}
	d.check("tandemctl pods", func() (string, error) { return d.tandemctl(ctx, "pods") })
	d.check("tandemctl pools", func() (string, error) { return d.tandemctl(ctx, "pools") })
}

func (d *demo) runSeedPod(ctx context.Context, p seedPod) (string, string, error) {
	cfg := framework.PodSandboxConfig(p.name, "default", true)
	cfg.Labels["koordinator.sh/qosClass"] = p.class
	for k, v := range p.annotations {
		cfg.Annotations[k] = v
	}
	parent := filepath.Join(demoCgroupRoot, p.kubeQoS, "pod"+cfg.Metadata.Uid)
	if err := makePodCgroup(parent); err != nil {
		return "", "", err
	}
	cfg.Linux.CgroupParent = parent
	podID, err := d.rs.RunPodSandbox(ctx, cfg, "")
	if err != nil {
		return "", "", err
	}
	cc := framework.ContainerConfig("nginx", framework.SleepCommand()...)
	if p.cpuMilli > 0 {
		cc.Linux.Resources = &runtimeapi.LinuxContainerResources{CpuShares: p.cpuMilli * 1024 / 1000, CpuQuota: p.cpuMilli * 100, CpuPeriod: 100000}
	}
	ctrID, err := d.rs.CreateContainer(ctx, podID, cc, cfg)
	if p.refused {
		if err == nil {
			return podID, "", errors.New("want the pod refused for lack of CPUs, but its container was created")
		}
		if status.Code(err) != codes.ResourceExhausted {
			return podID, "", fmt.Errorf("want the pod refused for lack of CPUs, got: %w", err)
		}
		msg := status.Convert(err).Message()
		if i := strings.Index(msg, "not enough"); i >= 0 {
			msg = msg[i:]
		}
		return podID, "refused, as it must be here: …" + msg, nil
	}
	if err != nil {
		return podID, "", err
	}
	if err := d.rs.StartContainer(ctx, ctrID); err != nil {
		return podID, "", err
	}
	st, err := d.direct.ContainerStatus(ctx, ctrID, false)
	if err != nil {
		return podID, "", err
	}
	return podID, fmt.Sprintf("running, tandem.io/qos-class=%s", st.GetStatus().GetAnnotations()["tandem.io/qos-class"]), nil
}

// tandemctl runs the operator's tool against the demo's proxy and prints its table.
func (d *demo) tandemctl(ctx context.Context, cmd string) (string, error) {
	bin, err := framework.BuildCommand(ctx, filepath.Join(d.dir, "bin"), "tandemctl")
	if err != nil {
		return "", err
	}
	out, err := exec.CommandContext(ctx, bin, cmd, "--proxy-debug-socket", d.proxy.DebugSocket).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%w: %s", err, out)
	}
	fmt.Fprintf(d.out, "\n    $ tandemctl %s\n", cmd)
	for _, line := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
		fmt.Fprintf(d.out, "    %s\n", line)
	}
	fmt.Fprintln(d.out)
	return "read from the proxy's store and the real cgroup files", nil
}

// makePodCgroup creates a pod cgroup in every v1 hierarchy, as kubelet does before RunPodSandbox.
func makePodCgroup(parent string) error {
	for _, ctrl := range cgroupControllers() {
		if err := os.MkdirAll(filepath.Join("/sys/fs/cgroup", ctrl, parent), 0o755); err != nil {
			return fmt.Errorf("create pod cgroup: %w", err)
		}
	}
	return nil
}

// removeDemoCgroups removes the demo's cgroup tree, deepest first, from every hierarchy: runc also makes
// the pods' cgroups in the named systemd and the unified ones. The containers are gone by then.
func removeDemoCgroups() {
	hierarchies, _ := filepath.Glob("/sys/fs/cgroup/*")
	for _, h := range hierarchies {
		root := filepath.Join(h, demoCgroupRoot)
		var dirs []string
		_ = filepath.WalkDir(root, func(p string, e os.DirEntry, err error) error {
			if err == nil && e.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			_ = os.Remove(dirs[i])
		}
	}
}

func cgroupControllers() []string {
	var out []string
	for _, c := range []string{"cpu", "cpuacct", "cpuset", "memory", "pids", "blkio", "devices", "freezer", "hugetlb"} {
		if fi, err := os.Stat(filepath.Join("/sys/fs/cgroup", c)); err == nil && fi.IsDir() {
			out = append(out, c)
		}
	}
	return out
}

func numCPU() int {
	b, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		return 0
	}
	n := 0
	for _, r := range strings.Split(strings.TrimSpace(string(b)), ",") {
		var lo, hi int
		if c, _ := fmt.Sscanf(r, "%d-%d", &lo, &hi); c == 2 {
			n += hi - lo + 1
		} else {
			n++
		}
	}
	return n
}
