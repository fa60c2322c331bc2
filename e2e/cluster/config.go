package cluster

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

// tokenUser is one line of the static token file.
type tokenUser struct {
	key    string // what the caller looks the token up by
	name   string
	groups []string
}

// controlPlaneUsers are the identities kubeadm gives the admin, the
// controller manager and the scheduler (bound by the API server's bootstrap
// RBAC).
func controlPlaneUsers() []tokenUser {
	return []tokenUser{
		{"admin", "admin", []string{"system:masters"}},
		{KubeControllerManager, "system:kube-controller-manager", nil},
		{KubeScheduler, "system:kube-scheduler", nil},
	}
}

// nodeUser is a node's identity as the Node authorizer expects it: kubelet's,
// and tandem-proxy's on that node.
func nodeUser(node string) tokenUser {
	return tokenUser{NodeDaemon(Kubelet, node), "system:node:" + node, []string{"system:nodes"}}
}

// writeTokens writes kube-apiserver's --token-auth-file and returns each
// user's token by key.
func writeTokens(path string, users []tokenUser) (map[string]string, error) {
	tokens := map[string]string{}
	var b strings.Builder
	for _, u := range users {
		tok, err := randomHex(16)
		if err != nil {
			return nil, err
		}
		tokens[u.key] = tok
		fmt.Fprintf(&b, "%s,%s,%s", tok, u.name, u.name)
		if len(u.groups) > 0 {
			fmt.Fprintf(&b, ",%q", strings.Join(u.groups, ","))
		}
		b.WriteByte('\n')
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		return nil, fmt.Errorf("write token file: %w", err)
	}
	return tokens, nil
}

// writeKubeconfig writes a kubeconfig that verifies the API server against
// the cluster CA and authenticates with a bearer token.
func writeKubeconfig(path, server, caFile, token string) error {
	ca, err := os.ReadFile(caFile)
	if err != nil {
		return fmt.Errorf("read CA: %w", err)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["tandem"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca}
	cfg.AuthInfos["user"] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["tandem"] = &clientcmdapi.Context{Cluster: "tandem", AuthInfo: "user"}
	cfg.CurrentContext = "tandem"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("write kubeconfig %s: %w", path, err)
	}
	return os.Chmod(path, 0o600)
}

type kubeletConfigParams struct {
	Dir        string
	Port       int
	CACert     string
	CgroupRoot string
	// RuntimeEndpoint is containerRuntimeEndpoint; empty leaves it to the
	// drop-in in --config-dir.
	RuntimeEndpoint string
}

// SystemReservedCPU is what each kubelet reserves of the machine's 2 CPUs,
// leaving 1900m allocatable per node. The LSE and LSR pods of Koordinator's
// QoS example, scaled to one whole CPU each, then cannot land on the same node: on one node they
// would take both CPUs and leave the LS pool empty. kube-scheduler sees that
// from allocatable alone, so it puts them on different nodes.
const SystemReservedCPU = "100m"

// writeKubeletConfig writes kubelet's --config. Without p.RuntimeEndpoint it
// deliberately leaves containerRuntimeEndpoint unset: deploy/kubelet's
// drop-in, loaded through --config-dir, must be what points kubelet at
// tandem-proxy, as on a node. In NRI mode kubelet talks to containerd, as on
// a node without Tandem.
func writeKubeletConfig(path string, p kubeletConfigParams) error {
	cfg := kubeletv1beta1.KubeletConfiguration{
		TypeMeta: metav1.TypeMeta{APIVersion: kubeletv1beta1.SchemeGroupVersion.String(), Kind: "KubeletConfiguration"},
		// Port is picked free; kubelet tells the API server through the
		// node's status, where kubectl logs/exec/port-forward find it.
		Port:         int32(p.Port),
		ReadOnlyPort: 0,
		HealthzPort:  ptr.To[int32](0),
		Authentication: kubeletv1beta1.KubeletAuthentication{
			X509:      kubeletv1beta1.KubeletX509Authentication{ClientCAFile: p.CACert},
			Webhook:   kubeletv1beta1.KubeletWebhookAuthentication{Enabled: ptr.To(true)},
			Anonymous: kubeletv1beta1.KubeletAnonymousAuthentication{Enabled: ptr.To(false)},
		},
		Authorization: kubeletv1beta1.KubeletAuthorization{Mode: kubeletv1beta1.KubeletAuthorizationModeWebhook},
		// This host is cgroup v1 without systemd as init.
		CgroupDriver:   "cgroupfs",
		FailCgroupV1:   ptr.To(false),
		FailSwapOn:     ptr.To(false),
		CgroupsPerQOS:  ptr.To(true),
		CgroupRoot:     p.CgroupRoot,
		SystemReserved: map[string]string{"cpu": SystemReservedCPU},
		PodLogsDir:     filepath.Join(p.Dir, "pods"),
		ResolverConfig: ptr.To(""),
		// The shared test machine's disk and memory are not ours to
		// police: evict only when nearly nothing is left.
		EvictionHard: map[string]string{
			"memory.available":  "50Mi",
			"nodefs.available":  "1%",
			"nodefs.inodesFree": "1%",
			"imagefs.available": "1%",
		},
		// Images cannot be pulled again here: never collect them.
		ImageGCHighThresholdPercent: ptr.To[int32](100),
		ImageGCLowThresholdPercent:  ptr.To[int32](99),
		// Status reaches the API server quickly, so tests wait less.
		NodeStatusUpdateFrequency: metav1.Duration{Duration: 5 * time.Second},
		SyncFrequency:             metav1.Duration{Duration: 10 * time.Second},
		FileCheckFrequency:        metav1.Duration{Duration: 10 * time.Second},
		RegisterNode:              ptr.To(true),
		ServerTLSBootstrap:        false,
		ContainerRuntimeEndpoint:  p.RuntimeEndpoint,
	}
	b, err := yaml.Marshal(cfg)
	if err != nil {
		return fmt.Errorf("encode kubelet config: %w", err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("write kubelet config: %w", err)
	}
	return nil
}

// NodeRuntimeEndpoint is the endpoint deploy/'s files give kubelet and
// tandem-proxy's --listen; the cluster substitutes its private socket.
const NodeRuntimeEndpoint = "unix:///var/run/tandem/tandem.sock"

// deployFile returns the path of a file below the repository's deploy/.
func deployFile(rel string) (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "deploy", rel), nil
}

// KubeletDropIn is deploy/'s KubeletConfiguration drop-in.
const KubeletDropIn = "kubelet/50-tandem-runtime.conf"

// writeKubeletDropIn copies deploy/'s KubeletConfiguration drop-in into
// kubelet's --config-dir with the cluster's proxy socket in place of the
// node path.
func writeKubeletDropIn(dir, endpoint string) error {
	src, err := deployFile(KubeletDropIn)
	if err != nil {
		return err
	}
	b, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("read kubelet drop-in: %w", err)
	}
	if !bytes.Contains(b, []byte(NodeRuntimeEndpoint)) {
		return fmt.Errorf("%s does not name %s: update the cluster tier with it", src, NodeRuntimeEndpoint)
	}
	b = bytes.ReplaceAll(b, []byte(NodeRuntimeEndpoint), []byte(endpoint))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create kubelet config dir: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, filepath.Base(src)), b, 0o644); err != nil {
		return fmt.Errorf("write kubelet drop-in: %w", err)
	}
	return nil
}

// ProxyUnit is deploy/'s systemd unit for tandem-proxy.
const ProxyUnit = "systemd/tandem-proxy.service"

// proxyUnitSubstitutions are the private values the cluster gives the flags
// of deploy/'s unit that name host paths or ports.
type proxyUnitSubstitutions struct {
	Listen, RuntimeEndpoint, StateDir, MetricsAddr, HooksDir string
}

// proxyArgsFromUnit returns the arguments of the unit's ExecStart with the
// node paths replaced: the cluster runs tandem-proxy with the flags the unit
// ships, so a flag the proxy does not know fails the tier.
func proxyArgsFromUnit(s proxyUnitSubstitutions) ([]string, error) {
	path, err := deployFile(ProxyUnit)
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read tandem-proxy unit: %w", err)
	}
	words, err := ExecStart(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	subst := map[string]string{
		"--listen":           s.Listen,
		"--runtime-endpoint": s.RuntimeEndpoint,
		"--state-dir":        s.StateDir,
		"--metrics-addr":     s.MetricsAddr,
		"--hooks-dir":        s.HooksDir,
	}
	seen := map[string]bool{}
	var args []string
	for _, w := range words[1:] {
		name, _, hasValue := strings.Cut(w, "=")
		if v, ok := subst[name]; ok {
			if !hasValue {
				return nil, fmt.Errorf("%s: write %s as %s=VALUE", path, name, name)
			}
			w = name + "=" + v
			seen[name] = true
		}
		args = append(args, w)
	}
	for name := range subst {
		if !seen[name] {
			return nil, fmt.Errorf("%s: ExecStart lacks %s", path, name)
		}
	}
	return args, nil
}

// ExecStart returns the words of a systemd unit's ExecStart= line, joining
// backslash continuations. Quoting is not supported: the unit needs none.
func ExecStart(unit []byte) ([]string, error) {
	sc := bufio.NewScanner(bytes.NewReader(unit))
	var line strings.Builder
	in := false
	for sc.Scan() {
		t := strings.TrimSpace(sc.Text())
		if !in {
			rest, ok := strings.CutPrefix(t, "ExecStart=")
			if !ok {
				continue
			}
			in, t = true, rest
		}
		cont := strings.HasSuffix(t, `\`)
		line.WriteString(strings.TrimSuffix(t, `\`))
		line.WriteByte(' ')
		if !cont {
			break
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read unit: %w", err)
	}
	words := strings.Fields(line.String())
	if len(words) == 0 {
		return nil, fmt.Errorf("no ExecStart= line")
	}
	if strings.ContainsAny(line.String(), `"'`) {
		return nil, fmt.Errorf("ExecStart= uses quotes, which this reader does not support")
	}
	return words, nil
}
