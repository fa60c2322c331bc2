package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	"sigs.k8s.io/yaml"
)

// In NRI mode (Options.NRI) each kubelet talks to its containerd directly,
// and Tandem runs as deploy/nri's DaemonSet, installed with `kubectl apply
// -k` of a kustomization that lists deploy/ and the deploy/nri component,
// as docs/install.md has an operator write one. Its patch gives the
// DaemonSet this machine's paths, because both nodes share one file system
// and one network namespace:
//   - each node's containerd serves NRI on a socket of its own,
//     <Dir>/nri/<node>/nri.sock, and the plugin takes
//     --nri-socket=/var/run/nri/$(NODE_NAME)/nri.sock from that directory;
//   - likewise its containerd's CRI socket (--runtime-endpoint), a state
//     directory <Dir>/nri-state/<node> and kubelet's cgroupRoot /<node>;
//   - the pods run on the pod network instead of the node's (two plugins
//     on one network namespace would collide on --metrics-addr's port), so
//     /metrics, /healthz and /readyz are on the pod's address, and the API
//     server is reached at this machine's address as tandem-webhook does.
const (
	// NRIDaemonSet is deploy/nri's DaemonSet, in NRINamespace.
	NRIDaemonSet = "tandem-nri"
	NRINamespace = "koordinator-system"
	// NRIComponent is the kustomize component below deploy/.
	NRIComponent = "nri"
	// nriManifest is the DaemonSet's file below deploy/.
	nriManifest = NRIComponent + "/daemonset.yaml"
	// NRIBinary is the command the DaemonSet's image runs.
	NRIBinary = "tandem-nri"
	// nriOverlay is the kustomization the cluster writes below Dir.
	nriOverlay = "nri-overlay"
)

// nodeNameVar is what kubelet replaces with the pod's NODE_NAME variable in
// the container's arguments: the one value that differs between the pods of
// a DaemonSet.
const nodeNameVar = "$(NODE_NAME)"

// nriSocketDir is the host directory of every node's NRI socket.
func (c *Cluster) nriSocketDir() string { return filepath.Join(c.Dir, "nri") }

// nriStateDir is the host directory of every node's plugin state directory.
func (c *Cluster) nriStateDir() string { return filepath.Join(c.Dir, "nri-state") }

// shareDir makes the cluster directory a shared mount (a bind mount onto
// itself, then shared with everything below it), as systemd makes / on a
// node. deploy/nri mounts containerd's directory with HostToContainer
// propagation, which kubelet refuses from a private mount, and this
// machine's mounts are private. Down unmounts it with everything below Dir.
func (c *Cluster) shareDir() error {
	if err := syscall.Mount(c.Dir, c.Dir, "", syscall.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind-mount %s onto itself: %w", c.Dir, err)
	}
	if err := syscall.Mount("", c.Dir, "", syscall.MS_SHARED|syscall.MS_REC, ""); err != nil {
		return fmt.Errorf("make %s a shared mount: %w", c.Dir, err)
	}
	return nil
}

// prepareNRINode sets the node's NRI paths and creates the socket's
// directory, which containerd expects to exist.
func (c *Cluster) prepareNRINode(n *Node) error {
	n.NRISocket = filepath.Join(c.nriSocketDir(), n.Name, "nri.sock")
	n.StateDir = filepath.Join(c.nriStateDir(), n.Name)
	if err := os.MkdirAll(filepath.Dir(n.NRISocket), 0o700); err != nil {
		return fmt.Errorf("create the NRI socket's directory: %w", err)
	}
	return nil
}

// writeNRIOverlay writes the kustomization that installs Tandem in NRI mode
// (deploy/ as a resource, deploy/nri as a component) and the patch that
// gives its DaemonSet this machine's paths, and returns its directory. The
// patch keeps every argument of deploy/nri's DaemonSet and replaces only the
// values of the flags that name a host path or port; a flag it must replace
// that the DaemonSet does not pass is an error, so the tier fails when the
// manifest changes under it.
func (c *Cluster) writeNRIOverlay(root string) (string, error) {
	manifest := filepath.Join(root, "deploy", nriManifest)
	b, err := os.ReadFile(manifest)
	if err != nil {
		return "", err
	}
	var ds appsv1.DaemonSet
	if err := yaml.Unmarshal(b, &ds); err != nil {
		return "", fmt.Errorf("%s: %w", manifest, err)
	}
	if len(ds.Spec.Template.Spec.Containers) != 1 {
		return "", fmt.Errorf("%s: %d containers, want 1", manifest, len(ds.Spec.Template.Spec.Containers))
	}
	ctr := ds.Spec.Template.Spec.Containers[0]
	flags := map[string]string{}
	for _, a := range ctr.Args {
		if name, value, ok := strings.Cut(a, "="); ok {
			flags[name] = value
		}
	}
	// volumeFor returns the volume mounted at dir, the directory a flag names.
	volumeFor := func(flag, dir string) (string, error) {
		for _, m := range ctr.VolumeMounts {
			if m.MountPath == dir {
				return m.Name, nil
			}
		}
		return "", fmt.Errorf("%s: %s=%s: no volume is mounted at %s", manifest, flag, flags[flag], dir)
	}
	var errs []error
	need := func(flag string) string {
		v, ok := flags[flag]
		if !ok {
			errs = append(errs, fmt.Errorf("%s: the DaemonSet does not pass %s, which the tier-2 cluster sets per node", manifest, flag))
		}
		return v
	}
	socket := need("--nri-socket")
	endpoint := strings.TrimPrefix(need("--runtime-endpoint"), "unix://")
	state := need("--state-dir")
	need("--kubelet-cgroup-root")
	_, port, err := net.SplitHostPort(need("--metrics-addr"))
	if err != nil && len(errs) == 0 {
		errs = append(errs, fmt.Errorf("%s: --metrics-addr=%s: %w", manifest, flags["--metrics-addr"], err))
	}
	if err := errors.Join(errs...); err != nil {
		return "", err
	}
	nriVol, err1 := volumeFor("--nri-socket", path.Dir(socket))
	ctrdVol, err2 := volumeFor("--runtime-endpoint", path.Dir(endpoint))
	stateVol, err3 := volumeFor("--state-dir", state)
	if err := errors.Join(err1, err2, err3); err != nil {
		return "", err
	}
	if c.NRIMetricsPort, err = strconv.Atoi(port); err != nil {
		return "", fmt.Errorf("%s: --metrics-addr port %q: %w", manifest, port, err)
	}
	// The containerd CRI socket of the node named $(NODE_NAME), below the cluster directory.
	ctrdRel, err := filepath.Rel(c.Dir, c.Nodes[0].ContainerdDir)
	if err != nil {
		return "", err
	}
	ctrdRel = strings.Replace(ctrdRel, c.Nodes[0].Name, nodeNameVar, 1)
	set := map[string]string{
		"--nri-socket":          path.Join(path.Dir(socket), nodeNameVar, path.Base(socket)),
		"--runtime-endpoint":    "unix://" + path.Join(path.Dir(endpoint), ctrdRel, "containerd.sock"),
		"--state-dir":           path.Join(state, nodeNameVar),
		"--kubelet-cgroup-root": "/" + nodeNameVar,
		// The pod's own network namespace: kubelet's probes and the tests reach it at the pod's address.
		"--metrics-addr": net.JoinHostPort("0.0.0.0", port),
	}
	var args []string
	for _, a := range ctr.Args {
		name, _, _ := strings.Cut(a, "=")
		if v, ok := set[name]; ok {
			a = name + "=" + v
		}
		args = append(args, a)
	}
	apiHost, apiPort, err := c.APIServerForPods()
	if err != nil {
		return "", err
	}
	// A strategic merge patch: containers, env and volumes merge by name, a null deletes.
	patch := map[string]any{
		"apiVersion": "apps/v1",
		"kind":       "DaemonSet",
		"metadata":   map[string]any{"name": ds.Name, "namespace": ds.Namespace},
		"spec": map[string]any{"template": map[string]any{"spec": map[string]any{
			"hostNetwork": false,
			"containers": []any{map[string]any{
				"name": ctr.Name,
				"args": args,
				// No kube-proxy here: the kubernetes Service's ClusterIP leads nowhere.
				"env": []any{
					map[string]any{"name": "KUBERNETES_SERVICE_HOST", "value": apiHost},
					map[string]any{"name": "KUBERNETES_SERVICE_PORT", "value": apiPort},
				},
				// On the pod network kubelet probes the pod's address, not the node's loopback.
				"readinessProbe": map[string]any{"httpGet": map[string]any{"host": nil}},
				"livenessProbe":  map[string]any{"httpGet": map[string]any{"host": nil}},
			}},
			"volumes": []any{
				map[string]any{"name": nriVol, "hostPath": map[string]any{"path": c.nriSocketDir()}},
				map[string]any{"name": ctrdVol, "hostPath": map[string]any{"path": c.Dir}},
				map[string]any{"name": stateVol, "hostPath": map[string]any{"path": c.nriStateDir()}},
			},
		}}},
	}
	pb, err := yaml.Marshal(patch)
	if err != nil {
		return "", err
	}
	dir := c.NRIOverlay()
	// kustomize refuses absolute paths to a base.
	deploy, err := filepath.Rel(dir, filepath.Join(root, "deploy"))
	if err != nil {
		return "", err
	}
	k := fmt.Sprintf(`# Written by the tier-2 cluster: deploy/ and the deploy/nri component, as docs/install.md has an
# operator list them, and this machine's paths for the DaemonSet (e2e/cluster/nri.go says why).
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - %s
components:
  - %s
patches:
  - path: daemonset-patch.yaml
`, deploy, path.Join(deploy, NRIComponent))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "daemonset-patch.yaml"), pb, 0o644); err != nil {
		return "", err
	}
	return dir, nil
}

// NRIOverlay is the directory of the kustomization the cluster applies in
// NRI mode (writeNRIOverlay).
func (c *Cluster) NRIOverlay() string { return filepath.Join(c.Dir, nriOverlay) }

// waitNRI waits until the tandem-nri DaemonSet has a ready pod on every
// node: each plugin registered with its containerd and synchronized.
func (c *Cluster) waitNRI(ctx context.Context) error {
	t := time.Now()
	if _, err := c.RunKubectl(ctx, "rollout", "status", "-n", NRINamespace, "daemonset/"+NRIDaemonSet, "--timeout=2m"); err != nil {
		return fmt.Errorf("DaemonSet %s/%s not ready on every node within 2 minutes: %w", NRINamespace, NRIDaemonSet, err)
	}
	klog.FromContext(ctx).Info("tandem-nri ready on every node", "elapsed", time.Since(t).Round(time.Millisecond))
	return nil
}

// AgentPod returns the tandem-nri pod of the node (NRI mode only).
func (c *Cluster) AgentPod(ctx context.Context, node string) (*corev1.Pod, error) {
	cs, err := c.Client()
	if err != nil {
		return nil, err
	}
	pods, err := cs.CoreV1().Pods(NRINamespace).List(ctx, metav1.ListOptions{
		LabelSelector: "app.kubernetes.io/name=" + NRIDaemonSet,
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String(),
	})
	if err != nil {
		return nil, err
	}
	var live []corev1.Pod
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			live = append(live, p)
		}
	}
	if len(live) != 1 {
		return nil, fmt.Errorf("node %s has %d %s pods, want 1", node, len(live), NRIDaemonSet)
	}
	return &live[0], nil
}

// AgentMetrics returns the host:port where the node's Tandem agent serves
// /metrics, /healthz and /readyz: tandem-proxy's --metrics-addr, or in NRI
// mode the tandem-nri pod's address.
func (c *Cluster) AgentMetrics(ctx context.Context, node string) (string, error) {
	n := c.Node(node)
	if n == nil {
		return "", fmt.Errorf("no node %q in the cluster", node)
	}
	if !c.NRI {
		return n.ProxyMetrics, nil
	}
	p, err := c.AgentPod(ctx, node)
	if err != nil {
		return "", err
	}
	if p.Status.PodIP == "" {
		return "", fmt.Errorf("%s pod %s has no address yet", NRIDaemonSet, p.Name)
	}
	return net.JoinHostPort(p.Status.PodIP, strconv.Itoa(c.NRIMetricsPort)), nil
}

// AgentDebugSocket returns where the node's agent serves /debug/*, to root
// alone: --debug-socket, by default debug.sock in its state directory.
func (c *Cluster) AgentDebugSocket(node string) (string, error) {
	n := c.Node(node)
	if n == nil {
		return "", fmt.Errorf("no node %q in the cluster", node)
	}
	if c.NRI {
		return filepath.Join(n.StateDir, "debug.sock"), nil
	}
	d := c.Daemons[NodeDaemon(TandemProxy, node)]
	if d == nil {
		return "", fmt.Errorf("no tandem-proxy on node %s", node)
	}
	socket, state := "", "/var/lib/tandem"
	for _, a := range d.Args {
		switch name, value, _ := strings.Cut(a, "="); name {
		case "--debug-socket":
			socket = value
		case "--state-dir":
			state = value
		}
	}
	if socket == "" {
		socket = filepath.Join(state, "debug.sock")
	}
	return socket, nil
}

// AgentPID returns the pid of the node's agent process, 0 when none runs.
// In NRI mode that is the process, seen from this machine, whose command
// line is tandem-nri's with --node-name=<node>.
func (c *Cluster) AgentPID(node string) int {
	if !c.NRI {
		return c.PID(NodeDaemon(TandemProxy, node))
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if path.Base(args[0]) != NRIBinary {
			continue
		}
		for _, a := range args[1:] {
			if a == "--node-name="+node && alive(pid) {
				return pid
			}
		}
	}
	return 0
}

// KillAgent SIGKILLs the node's agent and waits until a new one serves
// /readyz: tandem-proxy started again with its command line, as systemd's
// Restart=always would, or in NRI mode the tandem-nri container restarted
// by kubelet. It returns the old and the new pid.
func (c *Cluster) KillAgent(ctx context.Context, node string) (oldPID, newPID int, err error) {
	oldPID = c.AgentPID(node)
	if oldPID == 0 {
		return 0, 0, fmt.Errorf("no agent runs on node %s", node)
	}
	if !c.NRI {
		name := NodeDaemon(TandemProxy, node)
		if err := c.KillDaemon(ctx, name); err != nil {
			return oldPID, 0, err
		}
		if err := c.StartDaemon(ctx, name); err != nil {
			return oldPID, 0, err
		}
		return oldPID, c.AgentPID(node), nil
	}
	if err := syscall.Kill(oldPID, syscall.SIGKILL); err != nil {
		return oldPID, 0, fmt.Errorf("SIGKILL tandem-nri (pid %d) on node %s: %w", oldPID, node, err)
	}
	var last error
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		newPID = c.AgentPID(node)
		if newPID == 0 || newPID == oldPID {
			last = fmt.Errorf("no new tandem-nri process yet")
			return false, nil
		}
		last = c.AgentReady(ctx, node)
		return last == nil, nil
	})
	if err != nil {
		return oldPID, newPID, fmt.Errorf("tandem-nri on node %s not back 2 minutes after SIGKILL (last: %w): see %s: %w", node, last, c.AgentLogs(node), err)
	}
	return oldPID, newPID, nil
}

// AgentReady returns nil once the node's agent answers /readyz with 200.
func (c *Cluster) AgentReady(ctx context.Context, node string) error {
	addr, err := c.AgentMetrics(ctx, node)
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return httpOK(cctx, http.DefaultClient, "http://"+addr+"/readyz")
}

// AgentLogs says where the node's agent logs: tandem-proxy's log, or in NRI
// mode the tandem-nri container's log files, which kubelet keeps below the
// node's pod log directory.
func (c *Cluster) AgentLogs(node string) string {
	if !c.NRI {
		return c.Logs(NodeDaemon(TandemProxy, node))
	}
	n := c.Node(node)
	if n == nil {
		return filepath.Join(c.Dir, "logs")
	}
	return filepath.Join(n.Dir, "pods", NRINamespace+"_"+NRIDaemonSet+"-*", "*", "*.log")
}
