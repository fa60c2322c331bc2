package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/tandemkit/tandem/e2e/framework"
)

// DefaultDir is where `cluster up` puts the cluster unless told otherwise
// ($TANDEM_CLUSTER_DIR). Short, because containerd's sockets live below it.
const DefaultDir = "/tmp/tandem-cluster"

// NodeName is the name the node registers under.
const NodeName = "tandem-node"

// Names of the cluster's daemons, in start order. containerd is run by
// e2e/framework and sits between kube-scheduler and tandem-proxy.
const (
	Etcd        = "etcd"
	TandemProxy = "tandem-proxy"
)

// Daemons a test may add beside the cluster's with StartExtender: they are
// absent from a cluster that Up starts, and Down stops them when present.
const (
	TandemExtender = "tandem-extender"
	// ExtenderScheduler is a second kube-scheduler whose only profile calls
	// tandem-extender; the cluster's own kube-scheduler stays unchanged.
	ExtenderScheduler = "kube-scheduler-extender"
)

func daemonOrder() []string {
	return []string{Etcd, KubeAPIServer, KubeControllerManager, KubeScheduler, TandemExtender, ExtenderScheduler, TandemProxy, Kubelet}
}

// Options configure Up.
type Options struct {
	// Dir holds everything the cluster writes; it must not exist yet or be
	// empty. Keep it short: containerd's unix sockets live below it.
	Dir string
	// Flavor is the containerd under the proxy: framework.Flavor16
	// (Debian's, the default) or framework.Flavor2.
	Flavor string
	// Policies is tandem-proxy's --policies: a comma-separated list of
	// built-in policies, AllPolicies for the proxy's default (every one), or
	// empty for none, so that the proxy only carries kubelet's calls.
	Policies string
	// ProxyBinary is a tandem-proxy to run; empty builds ./cmd/tandem-proxy
	// of this checkout.
	ProxyBinary string
}

// AllPolicies runs tandem-proxy with its default set of built-in policies.
const AllPolicies = "all"

// Cluster is a running cluster. Its fields are saved to Dir/cluster.json so
// that another process (a test, `cluster down`) can Load and drive it.
type Cluster struct {
	Dir        string `json:"dir"`
	Flavor     string `json:"flavor"`
	Kubeconfig string `json:"kubeconfig"` // cluster-admin, token auth
	APIServer  string `json:"apiServer"`  // https://127.0.0.1:<port>
	Kubectl    string `json:"kubectl"`
	// CgroupRoot is kubelet's cgroupRoot: its kubepods tree lives below
	// /<CgroupRoot> in every hierarchy, apart from any other kubelet's or
	// test's /kubepods on the host.
	CgroupRoot string `json:"cgroupRoot"`
	// ProxySocket is the socket kubelet's containerRuntimeEndpoint names.
	ProxySocket  string `json:"proxySocket"`
	ProxyMetrics string `json:"proxyMetrics"` // host:port of /readyz, /metrics, /debug/store

	ContainerdDir string             `json:"containerdDir"`
	Daemons       map[string]*daemon `json:"daemons"`
}

// stateFile is the name of the saved Cluster below Dir.
const stateFile = "cluster.json"

// Up builds or finds every binary, starts the cluster in opts.Dir and waits
// until the node is Ready, schedulable and the default ServiceAccount exists.
// On failure it tears down what it started.
func Up(ctx context.Context, opts Options) (_ *Cluster, err error) {
	logger := klog.FromContext(ctx)
	if opts.Dir == "" {
		opts.Dir = DefaultDir
	}
	if opts.Flavor == "" {
		opts.Flavor = framework.Flavor16
	}
	if !filepath.IsAbs(opts.Dir) {
		return nil, fmt.Errorf("cluster dir %q must be an absolute path", opts.Dir)
	}
	if _, err := os.Stat(filepath.Join(opts.Dir, stateFile)); err == nil {
		return nil, fmt.Errorf("a cluster already lives in %s: run `cluster down` first", opts.Dir)
	}
	if os.Geteuid() != 0 {
		return nil, errors.New("the cluster needs root (containerd, runc, kubelet): run as root")
	}
	start := time.Now()
	if err := ensurePackages(ctx); err != nil {
		return nil, err
	}
	if !KubernetesCached() {
		logger.Info("Building Kubernetes once; this takes several minutes", "version", KubernetesVersion, "cache", KubernetesBinDir())
	}
	bins, err := EnsureKubernetes(ctx)
	if err != nil {
		return nil, err
	}
	logger.V(1).Info("Kubernetes binaries ready", "dir", bins, "elapsed", time.Since(start).Round(time.Millisecond))
	if err := os.MkdirAll(opts.Dir, 0o711); err != nil {
		return nil, fmt.Errorf("create cluster dir: %w", err)
	}
	proxyBin := opts.ProxyBinary
	if proxyBin == "" {
		if proxyBin, err = framework.BuildProxy(ctx, filepath.Join(opts.Dir, "bin")); err != nil {
			return nil, err
		}
	}
	c, err := newCluster(opts, bins, proxyBin)
	if err != nil {
		return nil, err
	}
	if err := c.save(); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, c.Down(context.WithoutCancel(ctx)))
		}
	}()
	if err := c.start(ctx); err != nil {
		return nil, err
	}
	logger.Info("Cluster ready", "dir", c.Dir, "kubeconfig", c.Kubeconfig, "elapsed", time.Since(start).Round(time.Millisecond))
	return c, nil
}

// ensurePackages installs what Debian must provide: containerd, runc,
// busybox-static and the CNI plugins (through e2e/framework), and etcd.
func ensurePackages(ctx context.Context) error {
	if err := framework.EnsureDebianPackages(ctx); err != nil {
		return err
	}
	if _, err := os.Stat(etcdBinary); err == nil {
		return nil
	}
	cmd := exec.CommandContext(ctx, "apt-get", "install", "-y", "--no-install-recommends", "etcd-server")
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	out, err := cmd.CombinedOutput()
	if err != nil {
		// A fresh machine may not have read its package lists yet.
		upd := exec.CommandContext(ctx, "apt-get", "update")
		if uout, uerr := upd.CombinedOutput(); uerr != nil {
			return fmt.Errorf("apt-get update: %w: %s", uerr, tail(uout, 2000))
		}
		cmd = exec.CommandContext(ctx, "apt-get", "install", "-y", "--no-install-recommends", "etcd-server")
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		if out, err = cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("install etcd-server with apt-get (run as root with Debian's package sources): %w: %s", err, tail(out, 2000))
		}
	}
	return nil
}

const etcdBinary = "/usr/bin/etcd"

// Load returns the cluster that Up left running in dir.
func Load(dir string) (*Cluster, error) {
	b, err := os.ReadFile(filepath.Join(dir, stateFile))
	if err != nil {
		return nil, fmt.Errorf("no cluster in %s (run `cluster up`): %w", dir, err)
	}
	var c Cluster
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("decode %s: %w", filepath.Join(dir, stateFile), err)
	}
	return &c, nil
}

func (c *Cluster) save() error {
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return fmt.Errorf("encode cluster state: %w", err)
	}
	if err := os.WriteFile(filepath.Join(c.Dir, stateFile), b, 0o600); err != nil {
		return fmt.Errorf("save cluster state: %w", err)
	}
	return nil
}

// freePorts returns n TCP ports on 127.0.0.1 that were free a moment ago,
// all distinct.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find a free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func randomHex(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("read random bytes: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// newCluster lays out Dir (keys, tokens, kubeconfigs, configs) and fills in
// every daemon's command line; it starts nothing.
func newCluster(opts Options, bins, proxyBin string) (*Cluster, error) {
	dir := opts.Dir
	ports, err := freePorts(5)
	if err != nil {
		return nil, err
	}
	etcdPort, etcdPeer, apiPort, kubeletPort, metricsPort := ports[0], ports[1], ports[2], ports[3], ports[4]
	for _, d := range []string{"run", "logs", "kubelet", "pods", "proxy", "tandem-hooks"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o711); err != nil {
			return nil, fmt.Errorf("create cluster dirs: %w", err)
		}
	}
	// etcd refuses a data directory others may read.
	if err := os.MkdirAll(filepath.Join(dir, "etcd"), 0o700); err != nil {
		return nil, fmt.Errorf("create etcd dir: %w", err)
	}
	suffix, err := randomHex(4)
	if err != nil {
		return nil, err
	}
	c := &Cluster{
		Dir:           dir,
		Flavor:        opts.Flavor,
		Kubeconfig:    filepath.Join(dir, "admin.kubeconfig"),
		APIServer:     fmt.Sprintf("https://127.0.0.1:%d", apiPort),
		Kubectl:       filepath.Join(bins, Kubectl),
		CgroupRoot:    "/tandem-cluster-" + suffix,
		ProxySocket:   filepath.Join(dir, "proxy", "tandem.sock"),
		ProxyMetrics:  fmt.Sprintf("127.0.0.1:%d", metricsPort),
		ContainerdDir: filepath.Join(dir, "c"),
		Daemons:       map[string]*daemon{},
	}
	p := newPKI(filepath.Join(dir, "pki"))
	if err := p.write(); err != nil {
		return nil, err
	}
	tokens, err := writeTokens(filepath.Join(dir, "pki", "tokens.csv"))
	if err != nil {
		return nil, err
	}
	kubeconfigs := map[string]string{
		"admin":               c.Kubeconfig,
		KubeControllerManager: filepath.Join(dir, "controller-manager.kubeconfig"),
		KubeScheduler:         filepath.Join(dir, "scheduler.kubeconfig"),
		Kubelet:               filepath.Join(dir, "kubelet.kubeconfig"),
	}
	for user, path := range kubeconfigs {
		if err := writeKubeconfig(path, c.APIServer, p.CACert, tokens[user]); err != nil {
			return nil, err
		}
	}
	kubeletConfig := filepath.Join(dir, "kubelet-config.yaml")
	if err := writeKubeletConfig(kubeletConfig, kubeletConfigParams{
		Dir: dir, Port: kubeletPort, CACert: p.CACert, CgroupRoot: c.CgroupRoot,
		RuntimeEndpoint: "unix://" + c.ProxySocket,
	}); err != nil {
		return nil, err
	}
	proxyArgs, err := proxyArgsFromUnit(proxyUnitSubstitutions{
		Listen:          c.ProxySocket,
		RuntimeEndpoint: "unix://" + filepath.Join(c.ContainerdDir, "containerd.sock"),
		StateDir:        filepath.Join(dir, "proxy", "state"),
		MetricsAddr:     c.ProxyMetrics,
		HooksDir:        filepath.Join(dir, "tandem-hooks"),
	})
	if err != nil {
		return nil, err
	}
	if opts.Policies != AllPolicies {
		proxyArgs = append(proxyArgs, "--policies="+opts.Policies)
	}

	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", etcdPort)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", etcdPeer)
	add := func(name, bin string, env []string, args ...string) {
		c.Daemons[name] = &daemon{
			Name: name, Bin: bin, Args: args, Env: env,
			Log: filepath.Join(dir, "logs", name+".log"),
			PID: filepath.Join(dir, "run", name+".pid"),
		}
	}
	add(Etcd, etcdBinary, nil,
		"--name=tandem",
		"--data-dir="+filepath.Join(dir, "etcd"),
		"--listen-client-urls="+etcdURL,
		"--advertise-client-urls="+etcdURL,
		"--listen-peer-urls="+peerURL,
		"--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=tandem="+peerURL,
	)
	add(KubeAPIServer, filepath.Join(bins, KubeAPIServer), nil,
		"--etcd-servers="+etcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", apiPort),
		"--tls-cert-file="+p.ServingCert,
		"--tls-private-key-file="+p.ServingKey,
		"--client-ca-file="+p.CACert,
		"--token-auth-file="+filepath.Join(dir, "pki", "tokens.csv"),
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+p.SAPub,
		"--service-account-signing-key-file="+p.ServiceAccountKey,
		"--service-cluster-ip-range=10.96.0.0/16",
		"--kubelet-client-certificate="+p.KubeletClientCert,
		"--kubelet-client-key="+p.KCKey,
		"--kubelet-preferred-address-types=InternalIP,Hostname",
		"--allow-privileged=true",
		"--cert-dir="+filepath.Join(dir, "pki", "apiserver"),
		"--v=1",
	)
	add(KubeControllerManager, filepath.Join(bins, KubeControllerManager), nil,
		"--kubeconfig="+kubeconfigs[KubeControllerManager],
		// As kubeadm runs it: each controller acts as its own
		// ServiceAccount, so RBAC denials show up as they would on a node.
		"--use-service-account-credentials=true",
		"--service-account-private-key-file="+p.ServiceAccountKey,
		"--root-ca-file="+p.CACert,
		"--leader-elect=false",
		"--secure-port=0",
		"--v=1",
	)
	add(KubeScheduler, filepath.Join(bins, KubeScheduler), nil,
		"--kubeconfig="+kubeconfigs[KubeScheduler],
		"--leader-elect=false",
		"--secure-port=0",
		"--v=1",
	)
	add(TandemProxy, proxyBin, nil, proxyArgs...)
	add(Kubelet, filepath.Join(bins, Kubelet), nil,
		"--config="+kubeletConfig,
		"--config-dir="+filepath.Join(dir, "kubelet.conf.d"),
		"--kubeconfig="+kubeconfigs[Kubelet],
		"--root-dir="+filepath.Join(dir, "kubelet"),
		"--cert-dir="+filepath.Join(dir, "kubelet", "pki"),
		"--hostname-override="+NodeName,
		"--v=1",
	)
	if err := writeKubeletDropIn(filepath.Join(dir, "kubelet.conf.d"), "unix://"+c.ProxySocket); err != nil {
		return nil, err
	}
	return c, nil
}

// start starts etcd, the control plane, containerd, tandem-proxy and kubelet
// in that order, waiting for each to serve before the next.
func (c *Cluster) start(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	for _, name := range []string{Etcd, KubeAPIServer} {
		if err := c.startDaemon(ctx, name); err != nil {
			return err
		}
	}
	for _, name := range []string{KubeControllerManager, KubeScheduler} {
		if err := c.startDaemon(ctx, name); err != nil {
			return err
		}
	}
	t := time.Now()
	if _, err := framework.StartContainerd(ctx, framework.ContainerdOptions{Flavor: c.Flavor, Dir: c.ContainerdDir, CNI: true}); err != nil {
		return fmt.Errorf("start containerd %s: %w", c.Flavor, err)
	}
	logger.Info("Started", "daemon", "containerd", "flavor", c.Flavor, "elapsed", time.Since(t).Round(time.Millisecond))
	if err := c.prepareCgroupRoot(); err != nil {
		return err
	}
	for _, name := range []string{TandemProxy, Kubelet} {
		if err := c.startDaemon(ctx, name); err != nil {
			return err
		}
	}
	return c.WaitNodeReady(ctx, 3*time.Minute)
}

// startDaemon starts one daemon and waits until it serves.
func (c *Cluster) startDaemon(ctx context.Context, name string) error {
	d := c.Daemons[name]
	t := time.Now()
	if err := d.start(); err != nil {
		return err
	}
	if err := c.waitServing(ctx, name, 2*time.Minute); err != nil {
		return err
	}
	klog.FromContext(ctx).Info("Started", "daemon", name, "pid", d.pid(), "elapsed", time.Since(t).Round(time.Millisecond))
	return nil
}

// waitServing polls the daemon's own health endpoint where it has one; the
// controller manager, scheduler and kubelet are judged by their effects in
// WaitNodeReady.
func (c *Cluster) waitServing(ctx context.Context, name string, timeout time.Duration) error {
	d := c.Daemons[name]
	var check func(ctx context.Context) error
	switch name {
	case Etcd:
		url := argValue(d.Args, "--listen-client-urls") + "/health"
		check = func(ctx context.Context) error { return httpOK(ctx, http.DefaultClient, url) }
	case KubeAPIServer:
		check = func(ctx context.Context) error {
			cs, err := c.Client()
			if err != nil {
				return err
			}
			_, err = cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
			return err
		}
	case TandemProxy:
		check = func(ctx context.Context) error {
			return httpOK(ctx, http.DefaultClient, "http://"+c.ProxyMetrics+"/readyz")
		}
	default:
		check = func(context.Context) error { return nil }
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		if d.pid() == 0 {
			return fmt.Errorf("%s exited during start: see %s: %s", name, d.Log, d.logTail())
		}
		cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
		last = check(cctx)
		ccancel()
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s did not become ready (last error: %v): see %s: %w", name, last, d.Log, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func argValue(args []string, flag string) string {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			return v
		}
	}
	return ""
}

func httpOK(ctx context.Context, client *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s answered %d", url, resp.StatusCode)
	}
	return nil
}

// Client returns a cluster-admin clientset.
func (c *Cluster) Client() (kubernetes.Interface, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig %s: %w", c.Kubeconfig, err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("create clientset: %w", err)
	}
	return cs, nil
}

// WaitNodeReady waits until the node is Ready without the not-ready taint
// (the controller manager removes it) and the controller manager has
// created the default ServiceAccount and kube-root-ca.crt: then Deployments
// can run.
func (c *Cluster) WaitNodeReady(ctx context.Context, timeout time.Duration) error {
	cs, err := c.Client()
	if err != nil {
		return err
	}
	var last string
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		for _, name := range []string{Kubelet, TandemProxy} {
			if c.Daemons[name].pid() == 0 {
				return false, fmt.Errorf("%s is not running: see %s: %s", name, c.Daemons[name].Log, c.Daemons[name].logTail())
			}
		}
		node, err := cs.CoreV1().Nodes().Get(ctx, NodeName, metav1.GetOptions{})
		if err != nil {
			last = fmt.Sprintf("get node: %v", err)
			return false, nil
		}
		if !NodeReady(node) {
			last = "node is not Ready"
			return false, nil
		}
		for _, t := range node.Spec.Taints {
			if t.Key == corev1.TaintNodeNotReady || t.Key == corev1.TaintNodeUnreachable {
				last = "node still has taint " + t.Key
				return false, nil
			}
		}
		if _, err := cs.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Get(ctx, "default", metav1.GetOptions{}); err != nil {
			last = fmt.Sprintf("default ServiceAccount: %v", err)
			return false, nil
		}
		if _, err := cs.CoreV1().ConfigMaps(metav1.NamespaceDefault).Get(ctx, "kube-root-ca.crt", metav1.GetOptions{}); err != nil {
			last = fmt.Sprintf("kube-root-ca.crt: %v", err)
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("node %s not ready for pods (%s): see %s: %w", NodeName, last, filepath.Join(c.Dir, "logs"), err)
	}
	return nil
}

// NodeReady reports whether the node's Ready condition is True.
func NodeReady(n *corev1.Node) bool {
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

// Containerd returns a handle on the cluster's containerd.
func (c *Cluster) Containerd(ctx context.Context) (*framework.Containerd, error) {
	return framework.AttachContainerd(ctx, c.Flavor, c.ContainerdDir)
}

// ContainerdEndpoint is containerd's own CRI endpoint, for checks that must
// bypass the proxy.
func (c *Cluster) ContainerdEndpoint() string {
	return "unix://" + filepath.Join(c.ContainerdDir, "containerd.sock")
}

// PID returns the pid of a daemon (etcd, kube-*, kubelet, tandem-proxy), 0
// when it does not run.
func (c *Cluster) PID(name string) int {
	d, ok := c.Daemons[name]
	if !ok {
		return 0
	}
	return d.pid()
}

// KillDaemon SIGKILLs one daemon and waits until it is gone.
func (c *Cluster) KillDaemon(ctx context.Context, name string) error {
	d, ok := c.Daemons[name]
	if !ok {
		return fmt.Errorf("unknown daemon %q", name)
	}
	return d.stop(ctx, syscall.SIGKILL, 10*time.Second)
}

// StartDaemon starts a stopped daemon again with its original command line
// and waits until it serves.
func (c *Cluster) StartDaemon(ctx context.Context, name string) error {
	if _, ok := c.Daemons[name]; !ok {
		return fmt.Errorf("unknown daemon %q", name)
	}
	return c.startDaemon(ctx, name)
}

// Logs returns the path of a daemon's log; any other name (such as
// "containerd") gives containerd's.
func (c *Cluster) Logs(name string) string {
	if d, ok := c.Daemons[name]; ok {
		return d.Log
	}
	return filepath.Join(c.ContainerdDir, "containerd.log")
}

// RunKubectl runs kubectl against the cluster as cluster-admin and returns
// its combined output.
func (c *Cluster) RunKubectl(ctx context.Context, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, c.Kubectl, append([]string{"--kubeconfig", c.Kubeconfig}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, tail(out, 3000))
	}
	return out, nil
}

// KubectlCommand returns an unstarted kubectl command against the cluster,
// for long-running subcommands such as port-forward.
func (c *Cluster) KubectlCommand(ctx context.Context, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, c.Kubectl, append([]string{"--kubeconfig", c.Kubeconfig}, args...)...)
}

// IsNotFound reports whether err is the API server's NotFound, so that
// callers need not import apimachinery's errors for one check.
func IsNotFound(err error) bool { return apierrors.IsNotFound(err) }
