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

// The two nodes of the cluster. Both run on this machine, each with its own
// kubelet, containerd and tandem-proxy; NodeA also hosts the control plane
// (it carries the control-plane role label, so deploy/'s extender DaemonSet
// runs there, beside kube-scheduler, as on a kubeadm control-plane node).
const (
	NodeA = "node-a"
	NodeB = "node-b"
)

// NodeName is the node the single-node tests of earlier tiers used; it is
// NodeA now.
const NodeName = NodeA

// ExtenderURL is where deploy/'s tandem-extender DaemonSet listens (host
// network, loopback, HTTPS with client certificates) and where the shipped
// kube-scheduler configuration calls it.
const ExtenderURL = "https://127.0.0.1:10262"

// ControlPlaneLabel is the label deploy/'s extender DaemonSet selects.
const ControlPlaneLabel = "node-role.kubernetes.io/control-plane"

// Names of the cluster's daemons. The control plane's run once; TandemProxy
// and Kubelet run once per node, under the name NodeDaemon gives them.
// containerd is run by e2e/framework, one per node.
const (
	Etcd        = "etcd"
	TandemProxy = "tandem-proxy"
)

// NodeDaemon is the name under which a node's kubelet or tandem-proxy is
// kept (its log is logs/<name>.log, its pid run/<name>.pid).
func NodeDaemon(name, node string) string { return name + "@" + node }

func controlPlaneOrder() []string {
	return []string{Etcd, KubeAPIServer, KubeControllerManager, KubeScheduler}
}

// Options configure Up.
type Options struct {
	// Dir holds everything the cluster writes; it must not exist yet or be
	// empty. Keep it short: containerd's unix sockets live below it.
	Dir string
	// Flavor is the containerd of every node: framework.Flavor16 (Debian's,
	// the default) or framework.Flavor2.
	Flavor string
	// Policies, when set, is appended to tandem-proxy's command line as
	// --policies: NoPolicies for none. Empty (the default) runs the unit
	// `tandemctl node install` writes as it is: every default policy.
	Policies string
	// ProxyBinary is a tandem-proxy to install; empty builds
	// ./cmd/tandem-proxy of this checkout.
	ProxyBinary string
	// Tandemctl is the tandemctl that installs tandem-proxy on each node;
	// empty builds ./cmd/tandemctl of this checkout.
	Tandemctl string
	// VM adds the VM node (vm.go), a virtual machine with its own kernel joined by kubeadm, whose
	// containerd is VMContainerdDebian (Debian's own) or framework.Flavor2; empty: no VM node.
	VM string
	// HostNodes is how many host nodes run beside it: 2 (the default) or 1 (NodeA alone).
	HostNodes int
	// NRI runs Tandem as deploy/nri's DaemonSet, an NRI plugin of each
	// node's containerd, instead of tandem-proxy between kubelet and
	// containerd (nri.go). It needs Flavor2, the default then; Policies,
	// ProxyBinary and Tandemctl do not apply.
	NRI bool
}

// NoPolicies is the Options.Policies that runs tandem-proxy without built-in
// policies: it only carries kubelet's calls.
const NoPolicies = "none"

// Node is one kubelet of the cluster with its containerd and tandem-proxy.
type Node struct {
	Name string `json:"name"`
	// Dir holds the node's kubelet, proxy and containerd directories and the
	// prefix tandemctl installs into.
	Dir string `json:"dir"`
	// CgroupRoot is kubelet's cgroupRoot: its kubepods tree lives below
	// /<CgroupRoot> in every hierarchy, apart from the other node's.
	CgroupRoot string `json:"cgroupRoot"`
	// ProxySocket is the socket kubelet's containerRuntimeEndpoint names.
	ProxySocket  string `json:"proxySocket"`
	ProxyMetrics string `json:"proxyMetrics"` // host:port of /readyz and /metrics
	// NRISocket is containerd's NRI socket, in NRI mode.
	NRISocket string `json:"nriSocket,omitempty"`
	// StateDir is the agent's --state-dir on this machine.
	StateDir string `json:"stateDir"`
	// Kubeconfig is the node's credentials, user system:node:<Name> in
	// group system:nodes: kubelet's, and tandem-proxy's too.
	Kubeconfig    string `json:"kubeconfig"`
	ContainerdDir string `json:"containerdDir"`
	// Unit is the tandem-proxy.service that installed tandem-proxy; the
	// proxy runs with its ExecStart.
	Unit string `json:"unit"`
	// KubeletConfigDir is kubelet's --config-dir, where the runtime drop-in
	// is installed.
	KubeletConfigDir string `json:"kubeletConfigDir"`
	KubeletPort      int    `json:"kubeletPort"`
}

// Cluster is a running cluster. Its fields are saved to Dir/cluster.json so
// that another process (a test, `cluster down`) can Load and drive it.
type Cluster struct {
	Dir        string  `json:"dir"`
	Flavor     string  `json:"flavor"`
	Kubeconfig string  `json:"kubeconfig"` // cluster-admin, token auth
	APIServer  string  `json:"apiServer"`  // https://127.0.0.1:<port>
	Kubectl    string  `json:"kubectl"`
	Nodes      []*Node `json:"nodes"`
	// HostIP is this machine's address (hostIP), where both kubelets
	// register and where pods on the pod network reach kube-apiserver (see
	// APIServerForPods); empty when the machine has no default route, and
	// kube-apiserver then serves on 127.0.0.1 alone.
	HostIP string `json:"hostIP,omitempty"`
	// Problems lists what of the documented installation could not be done
	// as documented (a missing tandemctl command, image or manifest): the
	// cluster still comes up so that the rest can be tested, and
	// TestInstalledAsDocumented fails naming each.
	Problems []string           `json:"problems,omitempty"`
	Daemons  map[string]*daemon `json:"daemons"`
	// NRI is Options.NRI: Tandem runs as the tandem-nri DaemonSet.
	NRI bool `json:"nri,omitempty"`
	// NRIMetricsPort is the port of the tandem-nri pods' /metrics, /healthz
	// and /readyz (NRI mode).
	NRIMetricsPort int `json:"nriMetricsPort,omitempty"`
	// VM is the VM node, when Options.VM asked for one.
	VM *VMNode `json:"vm,omitempty"`
	// HostNet is what the cluster changed on this machine's network settings.
	HostNet hostNetState `json:"hostNet"`
}

// stateFile is the name of the saved Cluster below Dir.
const stateFile = "cluster.json"

// Up builds or finds every binary, starts the cluster in opts.Dir and waits
// until both nodes are Ready and schedulable, the default ServiceAccount
// exists and deploy/ is applied. On failure it tears down what it started.
func Up(ctx context.Context, opts Options) (_ *Cluster, err error) {
	logger := klog.FromContext(ctx)
	if opts.Dir == "" {
		opts.Dir = DefaultDir
	}
	if opts.Flavor == "" {
		opts.Flavor = framework.Flavor16
		if opts.NRI {
			opts.Flavor = framework.Flavor2
		}
	}
	if opts.NRI && opts.Flavor != framework.Flavor2 {
		return nil, fmt.Errorf("NRI mode needs containerd %s: containerd %s has no NRI plugin socket", framework.Flavor2, opts.Flavor)
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
	var vmImage VMImage
	if opts.VM != "" {
		if opts.VM != VMContainerdDebian && opts.VM != framework.Flavor2 {
			return nil, fmt.Errorf("VM containerd %q: want %q or %q", opts.VM, VMContainerdDebian, framework.Flavor2)
		}
		if vmImage, err = EnsureVMImage(ctx); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(opts.Dir, 0o711); err != nil {
		return nil, fmt.Errorf("create cluster dir: %w", err)
	}
	binDir := filepath.Join(opts.Dir, "bin")
	// In NRI mode the plugin comes from its image (make images), and nothing is installed on the nodes.
	if opts.ProxyBinary == "" && !opts.NRI {
		if opts.ProxyBinary, err = framework.BuildProxy(ctx, binDir); err != nil {
			return nil, err
		}
	}
	if opts.Tandemctl == "" && !opts.NRI {
		if opts.Tandemctl, err = framework.BuildCommand(ctx, binDir, "tandemctl"); err != nil {
			return nil, err
		}
	}
	c, err := newCluster(opts, bins)
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
	if err := c.start(ctx, opts, vmImage); err != nil {
		return nil, err
	}
	if err := c.save(); err != nil {
		return nil, err
	}
	for _, p := range c.Problems {
		logger.Info("WARNING: not installed as documented", "problem", p)
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
	if _, err := cmd.CombinedOutput(); err != nil {
		// A fresh machine may not have read its package lists yet.
		upd := exec.CommandContext(ctx, "apt-get", "update")
		if uout, uerr := upd.CombinedOutput(); uerr != nil {
			return fmt.Errorf("apt-get update: %w: %s", uerr, tail(uout, 2000))
		}
		cmd = exec.CommandContext(ctx, "apt-get", "install", "-y", "--no-install-recommends", "etcd-server")
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		if out, err := cmd.CombinedOutput(); err != nil {
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

func randomHex(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("read random bytes: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// newCluster lays out Dir (keys, tokens, kubeconfigs, configs) and fills in
// the control plane's command lines; the nodes' are filled in by start,
// after tandemctl has installed tandem-proxy. It starts nothing.
func newCluster(opts Options, bins string) (*Cluster, error) {
	dir := opts.Dir
	hostNodes := []string{NodeA, NodeB}
	switch opts.HostNodes {
	case 0, 2:
	case 1:
		hostNodes = hostNodes[:1]
	default:
		return nil, fmt.Errorf("%d host nodes: want 1 or 2", opts.HostNodes)
	}
	ports, err := framework.FreePorts(3 + 2*len(hostNodes))
	if err != nil {
		return nil, err
	}
	etcdPort, etcdPeer, apiPort := ports[0], ports[1], ports[2]
	for _, d := range []string{"run", "logs"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o711); err != nil {
			return nil, fmt.Errorf("create cluster dirs: %w", err)
		}
	}
	// etcd refuses a data directory others may read.
	if err := os.MkdirAll(filepath.Join(dir, "etcd"), 0o700); err != nil {
		return nil, fmt.Errorf("create etcd dir: %w", err)
	}
	// kubelet's --node-ip, and where pods on the pod network reach the API
	// server; without a default route, none (startNode says so).
	var extraIPs []net.IP
	ip, err := hostIP()
	if err == nil {
		extraIPs = append(extraIPs, net.ParseIP(ip))
	}
	if opts.VM != "" {
		// The VM reaches the API server at this machine's end of their link.
		extraIPs = append(extraIPs, net.ParseIP(vmHostAddr))
	}
	c := &Cluster{
		HostIP:     ip,
		Dir:        dir,
		Flavor:     opts.Flavor,
		NRI:        opts.NRI,
		Kubeconfig: filepath.Join(dir, "admin.kubeconfig"),
		APIServer:  fmt.Sprintf("https://127.0.0.1:%d", apiPort),
		Kubectl:    filepath.Join(bins, Kubectl),
		Daemons:    map[string]*daemon{},
	}
	for i, name := range hostNodes {
		nd := filepath.Join(dir, name)
		c.Nodes = append(c.Nodes, &Node{
			Name: name,
			Dir:  nd,
			// deploy/ and docs/install.md name the root after the node.
			CgroupRoot:       "/" + name,
			ProxySocket:      filepath.Join(nd, "proxy", "tandem.sock"),
			ProxyMetrics:     fmt.Sprintf("127.0.0.1:%d", ports[3+2*i]),
			KubeletPort:      ports[4+2*i],
			Kubeconfig:       filepath.Join(nd, "kubelet.kubeconfig"),
			ContainerdDir:    filepath.Join(nd, "c"),
			KubeletConfigDir: filepath.Join(nd, "prefix", KubeletConfigDir),
		})
	}
	p := newPKI(filepath.Join(dir, "pki"))
	if err := p.write(extraIPs...); err != nil {
		return nil, err
	}
	users := controlPlaneUsers()
	for _, n := range c.Nodes {
		users = append(users, nodeUser(n.Name))
	}
	tokens, err := writeTokens(filepath.Join(dir, "pki", "tokens.csv"), users)
	if err != nil {
		return nil, err
	}
	kubeconfigs := map[string]string{
		"admin":               c.Kubeconfig,
		KubeControllerManager: filepath.Join(dir, "controller-manager.kubeconfig"),
		KubeScheduler:         filepath.Join(dir, "scheduler.kubeconfig"),
	}
	for _, n := range c.Nodes {
		kubeconfigs[NodeDaemon(Kubelet, n.Name)] = n.Kubeconfig
		for _, d := range []string{"kubelet", "pods", "proxy", "prefix"} {
			if err := os.MkdirAll(filepath.Join(n.Dir, d), 0o711); err != nil {
				return nil, fmt.Errorf("create node dirs: %w", err)
			}
		}
	}
	for user, path := range kubeconfigs {
		if err := writeKubeconfig(path, c.APIServer, p.CACert, tokens[user]); err != nil {
			return nil, err
		}
	}
	extTLS := c.extenderTLS()
	if err := extTLS.write(); err != nil {
		return nil, err
	}
	if err := writeSchedulerConfig(c.schedulerConfig(), kubeconfigs[KubeScheduler], extTLS.Dir, ""); err != nil {
		return nil, err
	}

	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", etcdPort)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", etcdPeer)
	c.add(Etcd, etcdBinary,
		"--name=tandem",
		"--data-dir="+filepath.Join(dir, "etcd"),
		"--listen-client-urls="+etcdURL,
		"--advertise-client-urls="+etcdURL,
		"--listen-peer-urls="+peerURL,
		"--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=tandem="+peerURL,
	)
	// Pods on the pod network (tandem-webhook's) reach the API server at the
	// machine's address, which the serving certificate names too (this
	// cluster has no kube-proxy to carry the kubernetes Service's ClusterIP
	// there). 0.0.0.0 keeps 127.0.0.1, where the kubeconfigs, kubelet and
	// hostNetwork pods reach it; it also serves on every other address of
	// the machine, to clients that still need a token (anonymous requests
	// get /healthz, /livez, /readyz and /version only). Without a host
	// address: loopback alone, as before.
	bind := "127.0.0.1"
	if c.HostIP != "" || opts.VM != "" {
		bind = "0.0.0.0"
	}
	c.add(KubeAPIServer, filepath.Join(bins, KubeAPIServer),
		"--etcd-servers="+etcdURL,
		"--bind-address="+bind,
		"--advertise-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", apiPort),
		"--tls-cert-file="+p.ServingCert,
		"--tls-private-key-file="+p.ServingKey,
		"--client-ca-file="+p.CACert,
		"--token-auth-file="+filepath.Join(dir, "pki", "tokens.csv"),
		// As kubeadm sets it: the Node authorizer and NodeRestriction
		// keep each node's credentials (kubelet's and tandem-proxy's) to
		// its own Node and pods.
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction",
		// kubeadm's: a joining node's kubelet authenticates with a bootstrap token (vm.go).
		"--enable-bootstrap-token-auth=true",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+p.SAPub,
		"--service-account-signing-key-file="+p.ServiceAccountKey,
		"--service-cluster-ip-range=10.96.0.0/16",
		"--kubelet-client-certificate="+p.KubeletClientCert,
		"--kubelet-client-key="+p.KCKey,
		// Both kubelets share the machine's address, told apart by port.
		"--kubelet-preferred-address-types=InternalIP,Hostname",
		// The API server calls admission webhooks (tandem-webhook) and
		// aggregated APIs at a Service. This cluster runs no kube-proxy,
		// so a Service's ClusterIP leads nowhere: with aggregator routing
		// the API server resolves the Service to one of its ready endpoints
		// (a pod IP, which this machine routes to over the nodes' CNI
		// bridges) and dials that. kube-apiserver v1.36 hands the same
		// resolver to the webhook admission plugins as to the aggregator
		// (cmd/kube-apiserver/app/server.go buildServiceResolver, passed to
		// pkg/controlplane/apiserver/admission/config.go). Real clusters,
		// where kube-proxy makes ClusterIPs work, do not need this flag.
		"--enable-aggregator-routing=true",
		"--allow-privileged=true",
		"--cert-dir="+filepath.Join(dir, "pki", "apiserver"),
		"--v=1",
	)
	c.add(KubeControllerManager, filepath.Join(bins, KubeControllerManager),
		"--kubeconfig="+kubeconfigs[KubeControllerManager],
		// As kubeadm runs it: each controller acts as its own
		// ServiceAccount, so RBAC denials show up as they would on a node.
		"--use-service-account-credentials=true",
		"--service-account-private-key-file="+p.ServiceAccountKey,
		"--root-ca-file="+p.CACert,
		// As kubeadm runs it: the cluster CA signs the client certificates of kubelets that join
		// by TLS bootstrap, bootstrapsigner signs cluster-info for kubeadm join's discovery.
		"--cluster-signing-cert-file="+p.CACert,
		"--cluster-signing-key-file="+p.CAKey,
		"--cluster-signing-duration="+ClientCertLifetime.String(),
		"--controllers=*,bootstrapsigner,tokencleaner",
		"--leader-elect=false",
		"--secure-port=0",
		// Two kubelets on one machine: a node is lost fast when a test
		// stops one, not after the default 40s.
		"--node-monitor-grace-period=20s",
		"--v=1",
	)
	c.add(KubeScheduler, filepath.Join(bins, KubeScheduler),
		"--config="+c.schedulerConfig(),
		"--secure-port=0",
		"--v=2",
	)
	return c, nil
}

// add records a daemon of the cluster under name.
func (c *Cluster) add(name, bin string, args ...string) *daemon {
	d := &daemon{
		Name: name, Bin: bin, Args: args,
		Log: filepath.Join(c.Dir, "logs", name+".log"),
		PID: filepath.Join(c.Dir, "run", name+".pid"),
	}
	c.Daemons[name] = d
	return d
}

// Node returns the node called name, or nil.
func (c *Cluster) Node(name string) *Node {
	for _, n := range c.Nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// NodeNames returns the names of the cluster's nodes.
func (c *Cluster) NodeNames() []string {
	var out []string
	for _, n := range c.Nodes {
		out = append(out, n.Name)
	}
	return out
}

// start starts etcd, the control plane and each node (containerd,
// tandem-proxy as installed by tandemctl, kubelet), then installs deploy/'s
// cluster side.
func (c *Cluster) start(ctx context.Context, opts Options, vmImage VMImage) error {
	if c.NRI {
		if err := c.shareDir(); err != nil {
			return err
		}
	}
	for _, name := range controlPlaneOrder() {
		if err := c.startDaemon(ctx, name); err != nil {
			return err
		}
	}
	// The VM boots (about a minute, emulated) while the host nodes start.
	if opts.VM != "" {
		if err := c.startVM(ctx, vmImage, opts.VM); err != nil {
			return fmt.Errorf("VM node: %w", err)
		}
	}
	bins := filepath.Dir(c.Kubectl)
	for _, n := range c.Nodes {
		if err := c.startNode(ctx, n, bins, opts); err != nil {
			return fmt.Errorf("node %s: %w", n.Name, err)
		}
	}
	if err := c.WaitNodesReady(ctx, 3*time.Minute); err != nil {
		return err
	}
	if c.VM != nil {
		if err := c.joinVM(ctx); err != nil {
			return fmt.Errorf("VM node: %w", err)
		}
	}
	return c.installClusterSide(ctx)
}

// startNode starts one node: its containerd, tandem-proxy from the unit
// `tandemctl node install` writes, and kubelet. In NRI mode containerd
// serves NRI on the node's own socket, and kubelet talks to it directly:
// the plugin comes with the cluster side (installClusterSide).
func (c *Cluster) startNode(ctx context.Context, n *Node, bins string, opts Options) error {
	logger := klog.FromContext(ctx)
	t := time.Now()
	ctrdOpts := framework.ContainerdOptions{Flavor: c.Flavor, Dir: n.ContainerdDir, CNI: true}
	if c.NRI {
		if err := c.prepareNRINode(n); err != nil {
			return err
		}
		ctrdOpts.NRISocket = n.NRISocket
	}
	if _, err := framework.StartContainerd(ctx, ctrdOpts); err != nil {
		return fmt.Errorf("start containerd %s: %w", c.Flavor, err)
	}
	logger.Info("Started", "daemon", "containerd", "node", n.Name, "flavor", c.Flavor, "nri", c.NRI, "elapsed", time.Since(t).Round(time.Millisecond))
	if err := prepareCgroupRoot(n.CgroupRoot); err != nil {
		return err
	}
	var daemons []string
	// Unset, kubelet's runtime endpoint is the drop-in's that tandemctl installed: the proxy.
	runtimeEndpoint := ""
	if c.NRI {
		runtimeEndpoint = n.ContainerdEndpoint()
	} else {
		proxyArgs, problem, err := c.installProxy(ctx, n, opts)
		if err != nil {
			return err
		}
		if problem != "" {
			c.Problems = append(c.Problems, problem)
		}
		if opts.Policies != "" {
			pol := opts.Policies
			if pol == NoPolicies {
				pol = ""
			}
			proxyArgs = append(proxyArgs[:len(proxyArgs):len(proxyArgs)], "--policies="+pol)
		}
		proxy := NodeDaemon(TandemProxy, n.Name)
		c.add(proxy, proxyArgs[0], proxyArgs[1:]...).Ready = "http://" + n.ProxyMetrics + "/readyz"
		daemons = append(daemons, proxy)
	}

	kubeletConfig := filepath.Join(n.Dir, "kubelet-config.yaml")
	ca := filepath.Join(c.Dir, "pki", "ca.crt")
	if err := writeKubeletConfig(kubeletConfig, kubeletConfigParams{
		Dir: n.Dir, Port: n.KubeletPort, CACert: ca, CgroupRoot: n.CgroupRoot, RuntimeEndpoint: runtimeEndpoint,
	}); err != nil {
		return err
	}
	args := []string{
		"--config=" + kubeletConfig,
		"--kubeconfig=" + n.Kubeconfig,
		"--root-dir=" + filepath.Join(n.Dir, "kubelet"),
		"--cert-dir=" + filepath.Join(n.Dir, "kubelet", "pki"),
		"--hostname-override=" + n.Name,
		"--v=1",
	}
	if c.HostIP != "" {
		args = append(args, "--node-ip="+c.HostIP)
	} else {
		logger.Info("No --node-ip (no default route with an IPv4 address): kubelet picks the address")
	}
	if !c.NRI {
		// Where tandemctl installed the drop-in; in NRI mode kubelet is left as it is.
		args = append(args, "--config-dir="+n.KubeletConfigDir)
	}
	c.add(NodeDaemon(Kubelet, n.Name), filepath.Join(bins, Kubelet), args...)
	daemons = append(daemons, NodeDaemon(Kubelet, n.Name))
	if err := c.save(); err != nil {
		return err
	}
	for _, name := range daemons {
		if err := c.startDaemon(ctx, name); err != nil {
			return err
		}
	}
	return nil
}

// APIServerForPods returns the host and port at which pods on the pod
// network reach kube-apiserver: this machine's address and the API server's
// port, for their KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT (this
// cluster has no kube-proxy, so the kubernetes Service's ClusterIP that
// in-cluster configuration names leads nowhere). The serving certificate
// names that address, so clients verify it against kube-root-ca.crt as
// in-cluster clients do.
func (c *Cluster) APIServerForPods() (host, port string, err error) {
	_, port, _ = strings.Cut(strings.TrimPrefix(c.APIServer, "https://"), ":")
	if c.HostIP == "" {
		return "", "", errors.New("this machine has no default route with an IPv4 address: pods on the pod network cannot reach the API server")
	}
	return c.HostIP, port, nil
}

// hostIP returns the IPv4 address of the interface of the default route:
// the address both kubelets register (kubelet refuses a loopback one).
func hostIP() (string, error) {
	b, err := os.ReadFile("/proc/net/route")
	if err != nil {
		return "", fmt.Errorf("read routes: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 2 || f[1] != "00000000" {
			continue
		}
		ifi, err := net.InterfaceByName(f[0])
		if err != nil {
			return "", fmt.Errorf("default route interface %s: %w", f[0], err)
		}
		addrs, err := ifi.Addrs()
		if err != nil {
			return "", fmt.Errorf("addresses of %s: %w", f[0], err)
		}
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil {
				return ipn.IP.String(), nil
			}
		}
	}
	return "", errors.New("no default route with an IPv4 address")
}

// startDaemon starts one daemon and waits until it serves.
func (c *Cluster) startDaemon(ctx context.Context, name string) error {
	d := c.Daemons[name]
	if d == nil {
		return fmt.Errorf("unknown daemon %q", name)
	}
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
// WaitNodesReady.
func (c *Cluster) waitServing(ctx context.Context, name string, timeout time.Duration) error {
	d := c.Daemons[name]
	var check func(ctx context.Context) error
	switch {
	case name == Etcd:
		url := argValue(d.Args, "--listen-client-urls") + "/health"
		check = func(ctx context.Context) error { return httpOK(ctx, http.DefaultClient, url) }
	case name == KubeAPIServer:
		check = func(ctx context.Context) error {
			cs, err := c.Client()
			if err != nil {
				return err
			}
			_, err = cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
			return err
		}
	case d.Ready != "":
		check = func(ctx context.Context) error { return httpOK(ctx, http.DefaultClient, d.Ready) }
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
			return fmt.Errorf("%s did not become ready (last error: %w): see %s: %w", name, last, d.Log, ctx.Err())
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
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s answered %d", url, resp.StatusCode)
	}
	return nil
}

// Client returns a cluster-admin clientset.
func (c *Cluster) Client() (kubernetes.Interface, error) {
	return clientFrom(c.Kubeconfig)
}

// NodeClient returns a clientset with a node's own credentials
// (system:node:<name>), which tandem-proxy uses on that node.
func (c *Cluster) NodeClient(node string) (kubernetes.Interface, error) {
	n := c.Node(node)
	if n == nil {
		return nil, fmt.Errorf("no node %q in the cluster", node)
	}
	return clientFrom(n.Kubeconfig)
}

func clientFrom(kubeconfig string) (kubernetes.Interface, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig %s: %w", kubeconfig, err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("create clientset: %w", err)
	}
	return cs, nil
}

// WaitNodesReady waits until every node is Ready without the not-ready
// taint (the controller manager removes it) and the controller manager has
// created the default ServiceAccount and kube-root-ca.crt: then Deployments
// can run.
func (c *Cluster) WaitNodesReady(ctx context.Context, timeout time.Duration) error {
	cs, err := c.Client()
	if err != nil {
		return err
	}
	var last string
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		for _, n := range c.Nodes {
			for _, name := range []string{NodeDaemon(Kubelet, n.Name), NodeDaemon(TandemProxy, n.Name)} {
				if d := c.Daemons[name]; d != nil && d.pid() == 0 {
					return false, fmt.Errorf("%s is not running: see %s: %s", name, d.Log, d.logTail())
				}
			}
			node, err := cs.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
			if err != nil {
				last = fmt.Sprintf("get node %s: %v", n.Name, err)
				return false, nil
			}
			if !NodeReady(node) {
				last = "node " + n.Name + " is not Ready"
				return false, nil
			}
			for _, t := range node.Spec.Taints {
				if t.Key == corev1.TaintNodeNotReady || t.Key == corev1.TaintNodeUnreachable {
					last = "node " + n.Name + " still has taint " + t.Key
					return false, nil
				}
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
		return fmt.Errorf("nodes not ready for pods (%s): see %s: %w", last, filepath.Join(c.Dir, "logs"), err)
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

// Containerd returns a handle on the node's containerd.
func (c *Cluster) Containerd(ctx context.Context, node string) (*framework.Containerd, error) {
	n := c.Node(node)
	if n == nil {
		return nil, fmt.Errorf("no node %q in the cluster", node)
	}
	return framework.AttachContainerd(ctx, c.Flavor, n.ContainerdDir)
}

// ContainerdEndpoint is containerd's own CRI endpoint, for checks that must
// bypass the proxy.
func (n *Node) ContainerdEndpoint() string {
	return "unix://" + filepath.Join(n.ContainerdDir, "containerd.sock")
}

// PID returns the pid of a daemon (etcd, kube-*, or a node's kubelet or
// tandem-proxy by its NodeDaemon name), 0 when it does not run.
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

// StopDaemon SIGTERMs one daemon and waits until it is gone.
func (c *Cluster) StopDaemon(ctx context.Context, name string) error {
	d, ok := c.Daemons[name]
	if !ok {
		return fmt.Errorf("unknown daemon %q", name)
	}
	return d.stop(ctx, syscall.SIGTERM, 20*time.Second)
}

// StartDaemon starts a stopped daemon again with its original command line
// and waits until it serves.
func (c *Cluster) StartDaemon(ctx context.Context, name string) error {
	if _, ok := c.Daemons[name]; !ok {
		return fmt.Errorf("unknown daemon %q", name)
	}
	return c.startDaemon(ctx, name)
}

// Logs returns the path of a daemon's log.
func (c *Cluster) Logs(name string) string {
	if d, ok := c.Daemons[name]; ok {
		return d.Log
	}
	return filepath.Join(c.Dir, "logs")
}

// ContainerdLog returns the path of a node's containerd log.
func (n *Node) ContainerdLog() string {
	return filepath.Join(n.ContainerdDir, "containerd.log")
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
