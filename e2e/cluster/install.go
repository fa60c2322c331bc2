package cluster

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/tandemkit/tandem/e2e/framework"
)

// Paths below the repository that the installation uses, as docs/install.md
// names them.
const (
	// ImagesDir is where `make images` writes each in-cluster binary as an
	// OCI image layout tarball, <name>.tar.
	ImagesDir = "bin/images"
	// ExtenderImage is what `make images` writes for tandem-extender.
	ExtenderImage = ImagesDir + "/tandem-extender.tar"
	// WebhookManifests is deploy/'s directory for tandem-webhook: once it
	// exists, `kubectl apply -k deploy/` must create the Deployment.
	WebhookManifests = "deploy/webhook"
	// SLOConfig is deploy/'s example slo-controller-config, colocation on.
	SLOConfig = "slo-controller-config.yaml"
	// InstalledUnit is where `tandemctl node install` writes the unit,
	// below its --prefix.
	InstalledUnit = "etc/systemd/system/tandem-proxy.service"
	// KubeletConfigDir is kubelet's --config-dir as docs/install.md sets
	// it; `tandemctl node install` puts the runtime drop-in there, below
	// its --prefix.
	KubeletConfigDir = "/etc/kubernetes/kubelet.conf.d"
)

// installProxy installs tandem-proxy on node n with `tandemctl node install`
// (into a prefix below the node's directory, not started: this machine has
// no systemd) and returns the ExecStart of the unit it wrote, which is how
// the node runs it. When tandemctl cannot install, it falls back to deploy/'s
// unit with the node's flags added, and says so in problem, so that the
// cluster still comes up and the tier reports what is missing.
func (c *Cluster) installProxy(ctx context.Context, n *Node, opts Options) (args []string, problem string, err error) {
	prefix := filepath.Join(n.Dir, "prefix")
	stateDir := filepath.Join(n.Dir, "proxy", "state")
	n.StateDir = stateDir
	cmdArgs := []string{"node", "install",
		"--prefix", prefix,
		"--binary", opts.ProxyBinary,
		"--kubeconfig", n.Kubeconfig,
		"--runtime-endpoint", n.ContainerdEndpoint(),
		"--listen", n.ProxySocket,
		"--kubelet-cgroup-root", n.CgroupRoot,
		"--node-name", n.Name,
		"--state-dir", stateDir,
		"--metrics-addr", n.ProxyMetrics,
		"--kubelet-config-dir", KubeletConfigDir,
		"--hooks-dir", filepath.Join(n.Dir, "hooks.d"),
		"--start=false",
	}
	// kubelet's --config-dir is not made here: tandemctl makes it, before kubelet is pointed at it
	// (kubelet does not start with a --config-dir that does not exist).
	logger := klog.FromContext(ctx)
	out, runErr := exec.CommandContext(ctx, opts.Tandemctl, cmdArgs...).CombinedOutput()
	logger.V(1).Info("tandemctl node install", "node", n.Name, "args", cmdArgs, "output", string(out))
	if runErr == nil {
		n.Unit = filepath.Join(prefix, InstalledUnit)
		b, err := os.ReadFile(n.Unit)
		if err != nil {
			return nil, "", fmt.Errorf("tandemctl node install wrote no unit at %s: %w", n.Unit, err)
		}
		words, err := ExecStart(b)
		if err != nil {
			return nil, "", fmt.Errorf("%s: %w", n.Unit, err)
		}
		if drops, _ := filepath.Glob(filepath.Join(n.KubeletConfigDir, "*.conf")); len(drops) == 0 {
			problem = fmt.Sprintf("tandemctl node install --kubelet-config-dir %s wrote no kubelet drop-in; the tier installed deploy/%s", n.KubeletConfigDir, KubeletDropIn)
			if err := writeKubeletDropIn(n.KubeletConfigDir, "unix://"+n.ProxySocket); err != nil {
				return nil, "", err
			}
		}
		return words, problem, nil
	}
	problem = fmt.Sprintf("`tandemctl %s` failed (%v: %s); node %s runs tandem-proxy from deploy/%s with --kubeconfig, --node-name and --kubelet-cgroup-root added where the proxy knows them",
		strings.Join(cmdArgs, " "), runErr, strings.TrimSpace(tail(out, 400)), n.Name, ProxyUnit)
	base, err := proxyArgsFromUnit(proxyUnitSubstitutions{
		Listen:          n.ProxySocket,
		RuntimeEndpoint: n.ContainerdEndpoint(),
		StateDir:        stateDir,
		MetricsAddr:     n.ProxyMetrics,
		HooksDir:        filepath.Join(n.Dir, "hooks.d"),
	})
	if err != nil {
		return nil, "", err
	}
	// The node's own values for the flags deploy/'s unit may carry, added
	// when it does not; a flag this proxy does not know is dropped and named.
	help, _ := exec.CommandContext(ctx, opts.ProxyBinary, "--help").CombinedOutput()
	known := func(flag string) bool { return strings.Contains(string(help), flag+" ") }
	node := map[string]string{"--kubeconfig": n.Kubeconfig, "--node-name": n.Name, "--kubelet-cgroup-root": n.CgroupRoot}
	var args2 []string
	for _, w := range base {
		name, _, _ := strings.Cut(w, "=")
		if v, ok := node[name]; ok {
			w = name + "=" + v
			delete(node, name)
		}
		if strings.HasPrefix(name, "--") && !known(name) {
			problem += fmt.Sprintf("; tandem-proxy does not know %s, dropped", name)
			continue
		}
		args2 = append(args2, w)
	}
	for name, v := range node {
		if known(name) {
			args2 = append(args2, name+"="+v)
		} else {
			problem += fmt.Sprintf("; tandem-proxy does not know %s, not set", name)
		}
	}
	base = args2
	if err := writeKubeletDropIn(n.KubeletConfigDir, "unix://"+n.ProxySocket); err != nil {
		return nil, "", err
	}
	return append([]string{opts.ProxyBinary}, base...), problem, nil
}

// installClusterSide does what docs/install.md does on the cluster side once
// the nodes are up: label the control-plane node, import the images `make
// images` builds into the nodes' containerd (there is no registry), `kubectl
// apply -k deploy/` (in NRI mode, of deploy/ with the deploy/nri component,
// and waits until its DaemonSet is ready), the extender's TLS Secret, `kubectl apply -f
// deploy/slo-controller-config.yaml`, and waits until the extender answers
// where and as kube-scheduler calls it, and until tandem-webhook, when
// deploy/ has it, has rolled out.
// What fails is recorded in c.Problems; only a failure of the cluster itself
// is returned.
func (c *Cluster) installClusterSide(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	root, err := RepoRoot()
	if err != nil {
		return err
	}
	problem := func(format string, args ...any) {
		p := fmt.Sprintf(format, args...)
		logger.Info("Installation problem", "problem", p)
		c.Problems = append(c.Problems, p)
	}
	if _, err := c.RunKubectl(ctx, "label", "node", NodeA, ControlPlaneLabel+"=", "--overwrite"); err != nil {
		return err
	}
	t := time.Now()
	if err := c.importImages(ctx, root); err != nil {
		problem("images: %v", err)
	} else {
		logger.Info("Imported the images of make images", "nodes", c.NodeNames(), "elapsed", time.Since(t).Round(time.Millisecond))
	}
	if !c.NRI {
		if _, err := c.RunKubectl(ctx, "apply", "-k", filepath.Join(root, "deploy")); err != nil {
			problem("kubectl apply -k deploy/: %v", err)
		}
	} else if overlay, err := c.writeNRIOverlay(root); err != nil {
		problem("the kustomization of deploy/ and deploy/%s: %v", NRIComponent, err)
	} else if _, err := c.RunKubectl(ctx, "apply", "-k", overlay); err != nil {
		problem("kubectl apply -k of deploy/ and deploy/%s (%s): %v", NRIComponent, overlay, err)
	}
	// The extender's serving certificate and client CA, as docs/install.md has
	// an operator store them; the DaemonSet's pod starts once the Secret exists.
	x := c.extenderTLS()
	if _, err := c.RunKubectl(ctx, "-n", "kube-system", "create", "secret", "generic", ExtenderSecret,
		"--from-file=tls.crt="+x.Cert, "--from-file=tls.key="+x.Key, "--from-file=ca.crt="+x.CA); err != nil {
		problem("create Secret kube-system/%s: %v", ExtenderSecret, err)
	}
	for _, err := range c.pointAtAPIServer(ctx, root) {
		problem("%v", err)
	}
	if _, err := c.RunKubectl(ctx, "apply", "-f", filepath.Join(root, "deploy", SLOConfig)); err != nil {
		problem("kubectl apply -f deploy/%s: %v", SLOConfig, err)
	} else if err := c.reclaimWholeMachine(ctx); err != nil {
		return err
	}
	t = time.Now()
	// Over HTTPS with kube-scheduler's client certificate, as kube-scheduler
	// will call it.
	client, err := extenderClient(c.schedulerConfig())
	if err != nil {
		return err
	}
	var last error
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		last = httpOK(cctx, client, ExtenderURL+"/readyz")
		return last == nil, nil
	})
	if err != nil {
		problem("tandem-extender from deploy/ did not answer %s/readyz within 2 minutes (last: %v)", ExtenderURL, last)
	} else {
		logger.Info("tandem-extender ready", "url", ExtenderURL, "elapsed", time.Since(t).Round(time.Millisecond))
	}
	if err := c.waitWebhook(ctx); err != nil {
		problem("%v", err)
	}
	if c.NRI {
		if err := c.waitNRI(ctx); err != nil {
			problem("%v", err)
		}
	}
	return nil
}

// ReclaimThresholdPercent and AggregateSeconds are the colocation-config
// cpuReclaimThresholdPercent and metricAggregateDurationSeconds the cluster
// sets instead of the example's 60 and 300. Both nodes share this machine's
// 2 CPUs, and each node's reporter counts the whole machine's usage (the
// control plane, the other node's pods, the test's own builds) as its system
// usage. At 60% of 2 CPUs, and with the peak of the last 5 minutes, that
// leaves no batch CPU at all (measured: 0 to 40 milli-cores on an idle
// cluster); with the whole machine and a 2-minute window, 1600 to 1900.
// The window must stay longer than metricReportIntervalSeconds (60), the
// reporter's warm-up: with both at 60 s it never publishes (measured).
const (
	ReclaimThresholdPercent = 100
	AggregateSeconds        = 120
)

// reclaimWholeMachine sets cpuReclaimThresholdPercent and
// metricAggregateDurationSeconds in the slo-controller-config, as an
// operator tunes them for their nodes, and switches the steal headroom off
// for the host nodes: they are processes of one virtual machine whose host
// takes CPU back when both of its CPUs are busy, so each node would hold its
// BE pods (and its published batch CPU) for the whole machine's load, and
// the tests that read the BE quota or place batch pods would read the host's
// noise. The VM node keeps stealHeadroom's default, auto.
func (c *Cluster) reclaimWholeMachine(ctx context.Context) error {
	cs, err := c.Client()
	if err != nil {
		return err
	}
	cm, err := cs.CoreV1().ConfigMaps(SLONamespace).Get(ctx, SLOName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("get %s/%s: %w", SLONamespace, SLOName, err)
	}
	var coloc map[string]any
	if err := json.Unmarshal([]byte(cm.Data["colocation-config"]), &coloc); err != nil {
		return fmt.Errorf("colocation-config of deploy/%s: %w", SLOConfig, err)
	}
	coloc["cpuReclaimThresholdPercent"] = ReclaimThresholdPercent
	coloc["metricAggregateDurationSeconds"] = AggregateSeconds
	b, err := json.Marshal(coloc)
	if err != nil {
		return err
	}
	cm.Data["colocation-config"] = string(b)
	var th map[string]any
	if err := json.Unmarshal([]byte(cm.Data["resource-threshold-config"]), &th); err != nil {
		return fmt.Errorf("resource-threshold-config of deploy/%s: %w", SLOConfig, err)
	}
	cluster, _ := th["clusterStrategy"].(map[string]any)
	if cluster == nil {
		cluster = map[string]any{}
		th["clusterStrategy"] = cluster
	}
	cluster["stealHeadroom"] = "off"
	th["nodeStrategies"] = []any{map[string]any{"name": "vm-node",
		"nodeSelector":  map[string]any{"matchLabels": map[string]any{"kubernetes.io/hostname": NodeVM}},
		"stealHeadroom": "auto"}}
	if b, err = json.Marshal(th); err != nil {
		return err
	}
	cm.Data["resource-threshold-config"] = string(b)
	if _, err := cs.CoreV1().ConfigMaps(SLONamespace).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("update %s/%s: %w", SLONamespace, SLOName, err)
	}
	return nil
}

// Where deploy/slo-controller-config.yaml puts Koordinator's ConfigMap, the
// default of tandem-proxy's --slo-configmap.
const (
	SLONamespace = "koordinator-system"
	SLOName      = "slo-controller-config"
)

// importImages builds the images with `make images`, as docs/install.md
// does (so that the cluster runs this checkout's in-cluster binaries, as it
// runs this checkout's tandem-proxy), and imports every tarball it wrote
// into every node's containerd. tandem-extender runs on NodeA alone, but
// tandem-webhook's replicas may land on either node, and an import costs
// little next to `make images` (see ImportImage).
func (c *Cluster) importImages(ctx context.Context, root string) error {
	logger := klog.FromContext(ctx)
	// hack/image writes each tarball afresh (through a temporary file and a
	// rename): a tarball older than this run is one an earlier IMAGES left.
	// A second of slack for file systems with coarse timestamps.
	start := time.Now().Add(-time.Second)
	cmd := exec.CommandContext(ctx, "make", "-C", root, "images")
	cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(framework.GoBinary())+":"+os.Getenv("PATH"))
	var errs []error
	// The images it wrote before a failure are still imported: one image
	// that does not build must not keep the others out of the cluster.
	if out, err := cmd.CombinedOutput(); err != nil {
		errs = append(errs, fmt.Errorf("make images: %w: %s", err, tail(out, 1000)))
	}
	logger.V(1).Info("make images", "elapsed", time.Since(start).Round(time.Millisecond))
	tarballs, err := filepath.Glob(filepath.Join(root, ImagesDir, "*.tar"))
	if err != nil {
		return err
	}
	built := false
	for _, tarball := range tarballs {
		fi, err := os.Stat(tarball)
		if err != nil {
			return err
		}
		if fi.ModTime().Before(start) {
			logger.Info("Not importing an image make images did not write in this run", "tarball", tarball, "written", fi.ModTime())
			continue
		}
		if tarball == filepath.Join(root, ExtenderImage) {
			built = true
		}
		if _, err := c.ImportImage(ctx, tarball); err != nil {
			errs = append(errs, err)
		}
	}
	if !built {
		errs = append(errs, fmt.Errorf("make images wrote no %s", ExtenderImage))
	}
	return errors.Join(errs...)
}

// ImportImage imports an OCI image layout tarball (as `make images` and
// hack/image write them) into the containerd of each named node, every node
// when none is named, and waits until that containerd's CRI lists each image
// the tarball names, so that a pod with imagePullPolicy Never starts at once
// (the CRI plugin learns of an import from an event, not at once). It
// returns the names of the images.
func (c *Cluster) ImportImage(ctx context.Context, tarball string, nodes ...string) ([]string, error) {
	logger := klog.FromContext(ctx)
	names, err := imageNames(tarball)
	if err != nil {
		return nil, err
	}
	if len(nodes) == 0 {
		nodes = c.NodeNames()
	}
	for _, node := range nodes {
		t := time.Now()
		n := c.Node(node)
		if n == nil {
			return nil, fmt.Errorf("no node %q in the cluster", node)
		}
		ctrd, err := c.Containerd(ctx, node)
		if err != nil {
			return nil, err
		}
		if _, err := ctrd.Ctr(ctx, "images", "import", tarball); err != nil {
			return nil, fmt.Errorf("node %s: %w", node, err)
		}
		if err := waitCRIImages(ctx, n.ContainerdEndpoint(), names); err != nil {
			return nil, fmt.Errorf("node %s: %w: see %s", node, err, n.ContainerdLog())
		}
		logger.Info("Imported image", "node", node, "images", names, "tarball", tarball, "elapsed", time.Since(t).Round(time.Millisecond))
	}
	return names, nil
}

// waitCRIImages waits up to 30 seconds until the CRI at endpoint knows every
// image of names.
func waitCRIImages(ctx context.Context, endpoint string, names []string) error {
	_, is, err := framework.NewCRIClients(ctx, endpoint)
	if err != nil {
		return err
	}
	defer is.Close(ctx) //nolint:errcheck // the connection is done with
	for _, name := range names {
		var last error
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			resp, err := is.ImageStatus(ctx, &runtimeapi.ImageSpec{Image: name}, false)
			last = err
			return err == nil && resp.GetImage() != nil, nil
		})
		if err != nil {
			return fmt.Errorf("imported image %s is not visible through CRI (last error: %w): %w", name, last, err)
		}
	}
	return nil
}

// imageNames returns the names an OCI image layout tarball gives its images:
// the io.containerd.image.name annotations of its index.json, which `ctr
// images import` names them after.
func imageNames(tarball string) ([]string, error) {
	f, err := os.Open(tarball)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil, fmt.Errorf("%s: no index.json: not an OCI image layout", tarball)
		}
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", tarball, err)
		}
		if path.Clean(h.Name) != "index.json" {
			continue
		}
		var index struct {
			Manifests []struct {
				Annotations map[string]string `json:"annotations"`
			} `json:"manifests"`
		}
		if err := json.NewDecoder(tr).Decode(&index); err != nil {
			return nil, fmt.Errorf("%s: index.json: %w", tarball, err)
		}
		var names []string
		for _, m := range index.Manifests {
			if name := m.Annotations["io.containerd.image.name"]; name != "" {
				names = append(names, name)
			}
		}
		if len(names) == 0 {
			return nil, fmt.Errorf("%s: index.json names no image (io.containerd.image.name)", tarball)
		}
		return names, nil
	}
}

// pointAtAPIServer gives the in-cluster parts of deploy/ the API server's
// real address. This cluster runs no kube-proxy, so the `kubernetes`
// Service's ClusterIP that in-cluster configuration names leads nowhere; on
// a real cluster kube-proxy makes it reach the API server. The override is
// the container's own KUBERNETES_SERVICE_HOST/PORT, which kubelet lets win
// over the Service's:
//   - the tandem-extender DaemonSet runs on the host network: 127.0.0.1;
//   - the tandem-webhook and tandem-descheduler Deployments run on the pod
//     network, where loopback is the pod's own: this machine's address
//     (APIServerForPods). Until deploy/webhook/ exists, a missing webhook
//     Deployment is only logged.
//
// It returns what it could not do.
func (c *Cluster) pointAtAPIServer(ctx context.Context, root string) []error {
	logger := klog.FromContext(ctx)
	cs, err := c.Client()
	if err != nil {
		return []error{err}
	}
	var errs []error
	_, port, _ := strings.Cut(strings.TrimPrefix(c.APIServer, "https://"), ":")
	daemonSets, err := cs.AppsV1().DaemonSets(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return []error{fmt.Errorf("list DaemonSets: %w", err)}
	}
	found := false
	for _, ds := range daemonSets.Items {
		if ds.Name != TandemExtender {
			continue
		}
		found = true
		if _, err := c.RunKubectl(ctx, "set", "env", "-n", ds.Namespace, "daemonset/"+ds.Name,
			"KUBERNETES_SERVICE_HOST=127.0.0.1", "KUBERNETES_SERVICE_PORT="+port); err != nil {
			errs = append(errs, err)
		}
	}
	if !found {
		errs = append(errs, errors.New("kubectl apply -k deploy/ created no DaemonSet "+TandemExtender))
	}

	deployments, err := cs.AppsV1().Deployments(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return append(errs, fmt.Errorf("list Deployments: %w", err))
	}
	found = false
	for _, d := range deployments.Items {
		if d.Name != TandemWebhook && d.Name != TandemDescheduler {
			continue
		}
		found = found || d.Name == TandemWebhook
		host, port, err := c.APIServerForPods()
		if err != nil {
			errs = append(errs, fmt.Errorf("deployment %s/%s: %w", d.Namespace, d.Name, err))
			continue
		}
		if _, err := c.RunKubectl(ctx, "set", "env", "-n", d.Namespace, "deployment/"+d.Name,
			"KUBERNETES_SERVICE_HOST="+host, "KUBERNETES_SERVICE_PORT="+port); err != nil {
			errs = append(errs, err)
		}
	}
	if !found {
		if _, err := os.Stat(filepath.Join(root, WebhookManifests)); err == nil {
			errs = append(errs, fmt.Errorf("kubectl apply -k deploy/ created no Deployment %s, though %s exists", TandemWebhook, WebhookManifests))
		} else {
			logger.Info("No Deployment "+TandemWebhook+" to point at the API server: deploy/ has none yet", "manifests", WebhookManifests)
		}
	}
	return errs
}

// waitWebhook waits until every tandem-webhook Deployment has rolled out
// (pointAtAPIServer changed its pods), so that the tests start with the
// webhook answering the API server. Without one it does nothing:
// pointAtAPIServer reports a missing one.
func (c *Cluster) waitWebhook(ctx context.Context) error {
	cs, err := c.Client()
	if err != nil {
		return err
	}
	deployments, err := cs.AppsV1().Deployments(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list Deployments: %w", err)
	}
	var errs []error
	for _, d := range deployments.Items {
		if d.Name != TandemWebhook {
			continue
		}
		t := time.Now()
		if _, err := c.RunKubectl(ctx, "rollout", "status", "-n", d.Namespace, "deployment/"+d.Name, "--timeout=2m"); err != nil {
			errs = append(errs, fmt.Errorf("deployment %s/%s did not roll out within 2 minutes: %w", d.Namespace, d.Name, err))
			continue
		}
		klog.FromContext(ctx).Info("tandem-webhook ready", "namespace", d.Namespace, "elapsed", time.Since(t).Round(time.Millisecond))
	}
	return errors.Join(errs...)
}

// TandemExtender is the name of deploy/'s extender DaemonSet.
const TandemExtender = "tandem-extender"

// TandemWebhook is the name of deploy/'s admission webhook Deployment (and
// of its Service).
const TandemWebhook = "tandem-webhook"

// TandemDescheduler is the name of deploy/'s tandem-descheduler Deployment.
const TandemDescheduler = "tandem-descheduler"
