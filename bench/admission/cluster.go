package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/procfs"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/tandemkit/tandem/bench/internal/runctx"
	"github.com/tandemkit/tandem/e2e/framework"
)

// kubernetesVersion is the kube-apiserver the tier-2 harness builds and caches (e2e/cluster/build.go,
// KubernetesVersion): this benchmark runs that binary and never builds it.
const kubernetesVersion = "v1.36.3"

// adminUser is the static token's user; system:masters passes every authorization check.
const adminUser = "bench-admin"

// kubeAPIServerPath is where the tier-2 harness caches kube-apiserver (e2e/cluster KubernetesBinDir).
func kubeAPIServerPath() string {
	return filepath.Join(framework.CacheDir(), "kubernetes-"+kubernetesVersion, "kube-apiserver")
}

// pki is the run's certificates: one CA that signs the API server's and the webhook's serving
// certificates, both for 127.0.0.1 (the floor webhook serves the webhook's too), and the
// service-account key pair kube-apiserver insists on.
type pki struct {
	caPEM                        []byte
	apiCert, apiKey              string
	webhookCert, webhookKey      string
	saPub, saKey                 string
	tokenFile, token, kubeconfig string
}

func newPKI(dir string) (*pki, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	p := &pki{
		apiCert: filepath.Join(dir, "apiserver.crt"), apiKey: filepath.Join(dir, "apiserver.key"),
		webhookCert: filepath.Join(dir, "webhook.crt"), webhookKey: filepath.Join(dir, "webhook.key"),
		saPub: filepath.Join(dir, "sa.pub"), saKey: filepath.Join(dir, "sa.key"),
		tokenFile: filepath.Join(dir, "tokens.csv"),
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "tandem-bench-admission-ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature, BasicConstraintsValid: true, IsCA: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	p.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	// ECDSA P-256 serving keys, as tandem-webhook's own self-signed certificates (admission/certs).
	for i, leaf := range []struct{ cn, cert, key string }{
		{"kube-apiserver", p.apiCert, p.apiKey},
		{"tandem-webhook", p.webhookCert, p.webhookKey},
	} {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, err
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(int64(2 + i)), Subject: pkix.Name{CommonName: leaf.cn},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
			IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			return nil, err
		}
		keyDER, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			return nil, err
		}
		if err := writePEM(leaf.cert, "CERTIFICATE", der); err != nil {
			return nil, err
		}
		if err := writePEM(leaf.key, "EC PRIVATE KEY", keyDER); err != nil {
			return nil, err
		}
	}
	sa, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	pub, err := x509.MarshalPKIXPublicKey(&sa.PublicKey)
	if err != nil {
		return nil, err
	}
	if err := writePEM(p.saKey, "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(sa)); err != nil {
		return nil, err
	}
	if err := writePEM(p.saPub, "PUBLIC KEY", pub); err != nil {
		return nil, err
	}
	tok := make([]byte, 16)
	if _, err := rand.Read(tok); err != nil {
		return nil, err
	}
	p.token = hex.EncodeToString(tok)
	line := fmt.Sprintf("%s,%s,%s,\"system:masters\"\n", p.token, adminUser, adminUser)
	if err := os.WriteFile(p.tokenFile, []byte(line), 0o600); err != nil {
		return nil, err
	}
	return p, nil
}

func writePEM(path, typ string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}

// writeKubeconfig writes the admin kubeconfig tandem-webhook reads.
func (p *pki) writeKubeconfig(path, server string) error {
	p.kubeconfig = path
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["bench"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: p.caPEM}
	cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{Token: p.token}
	cfg.Contexts["bench"] = &clientcmdapi.Context{Cluster: "bench", AuthInfo: "admin"}
	cfg.CurrentContext = "bench"
	return clientcmd.WriteToFile(*cfg, path)
}

// restConfig is the benchmark's own client configuration: no client-side rate limit (QPS < 0), so
// the open-loop schedule is what reaches the API server.
func (p *pki) restConfig(server string) *rest.Config {
	return &rest.Config{
		Host: server, BearerToken: p.token, TLSClientConfig: rest.TLSClientConfig{CAData: p.caPEM},
		QPS: -1, UserAgent: "tandem-bench-admission", Timeout: 30 * time.Second,
	}
}

// freePorts returns n distinct free TCP ports on 127.0.0.1. Another process may take one before
// the caller binds it; the caller then fails with the port in the message.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
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

// process is a daemon this benchmark started. It runs in a process group of its own, so that a
// Ctrl-C in the terminal reaches only the benchmark, which then stops it; and it gets SIGKILL if
// the benchmark dies without doing so.
type process struct {
	name, log string
	cmd       *exec.Cmd
	done      chan struct{}
	err       error
}

// env, if any, is added to the benchmark's own environment.
func startProcess(name, bin string, args, env []string, logPath string) (*process, error) {
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("start %s (%s): %w", name, bin, err)
	}
	p := &process{name: name, log: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		log.Close()
		close(p.done)
	}()
	return p, nil
}

func (p *process) pid() int { return p.cmd.Process.Pid }

// exited returns an error naming the process and the end of its log if it has exited.
func (p *process) exited() error {
	select {
	case <-p.done:
		return fmt.Errorf("%s exited (%v); the end of its log:\n%s", p.name, p.err, p.logTail(3000))
	default:
		return nil
	}
}

func (p *process) logTail(n int) string {
	b, err := os.ReadFile(p.log)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// stop sends SIGTERM, and SIGKILL if the process is still there after grace.
func (p *process) stop(grace time.Duration) {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// cpuSeconds is the user+system CPU time the process has used so far.
func cpuSeconds(pid int) (float64, error) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return 0, err
	}
	st, err := p.Stat()
	if err != nil {
		return 0, err
	}
	return st.CPUTime(), nil
}

// waitHTTP polls url until it answers 200 (with want in the body, when set), p exits, or timeout.
func waitHTTP(ctx context.Context, p *process, client *http.Client, url, token, want string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last string
	for {
		if err := p.exited(); err != nil {
			return err
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && (want == "" || bytes.Contains(body, []byte(want))) {
				return nil
			}
			last = fmt.Sprintf("status %d: %s", resp.StatusCode, strings.TrimSpace(string(body)))
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready at %s within %s (last answer: %s); the end of its log:\n%s", p.name, url, timeout, last, p.logTail(3000))
		}
		if err := runctx.Sleep(ctx, 200*time.Millisecond); err != nil {
			return err
		}
	}
}

// tlsClient trusts the run's CA.
func tlsClient(caPEM []byte) *http.Client {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
}

// servers is what the benchmark runs: etcd, kube-apiserver, tandem-webhook and the floor webhook,
// in its temp dir.
type servers struct {
	dir                          string
	pki                          *pki
	etcd, apiserver, hook, floor *process
	apiURL                       string
	webhookPort, floorPort       int
	metricsURL                   string // tandem-webhook's plain-HTTP /metrics
	floorMetricsURL              string // the floor's
}

// stop stops what was started, the webhooks first, etcd last.
func (s *servers) stop() {
	for _, p := range []*process{s.floor, s.hook, s.apiserver, s.etcd} {
		if p != nil {
			p.stop(10 * time.Second)
		}
	}
}

// startControlPlane starts etcd and kube-apiserver and waits until the API server is ready.
func (s *servers) startControlPlane(ctx context.Context, etcdBin, apiserverBin string) error {
	ports, err := freePorts(7)
	if err != nil {
		return err
	}
	etcdPort, peerPort, apiPort := ports[0], ports[1], ports[2]
	s.webhookPort, s.floorPort = ports[3], ports[5]
	s.metricsURL = fmt.Sprintf("http://127.0.0.1:%d", ports[4])
	s.floorMetricsURL = fmt.Sprintf("http://127.0.0.1:%d", ports[6])
	if s.pki, err = newPKI(filepath.Join(s.dir, "pki")); err != nil {
		return fmt.Errorf("make certificates: %w", err)
	}
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", etcdPort)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", peerPort)
	s.etcd, err = startProcess("etcd", etcdBin, []string{
		"--name=bench", "--data-dir=" + filepath.Join(s.dir, "etcd"),
		"--listen-client-urls=" + etcdURL, "--advertise-client-urls=" + etcdURL,
		"--listen-peer-urls=" + peerURL, "--initial-advertise-peer-urls=" + peerURL,
		"--initial-cluster=bench=" + peerURL,
	}, nil, filepath.Join(s.dir, "etcd.log"))
	if err != nil {
		return err
	}
	if err := waitHTTP(ctx, s.etcd, &http.Client{Timeout: 5 * time.Second}, etcdURL+"/health", "", `"true"`, 60*time.Second); err != nil {
		return err
	}
	s.apiURL = fmt.Sprintf("https://127.0.0.1:%d", apiPort)
	s.apiserver, err = startProcess("kube-apiserver", apiserverBin, []string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", apiPort),
		"--tls-cert-file=" + s.pki.apiCert, "--tls-private-key-file=" + s.pki.apiKey,
		"--token-auth-file=" + s.pki.tokenFile,
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + s.pki.saPub,
		"--service-account-signing-key-file=" + s.pki.saKey,
		"--service-cluster-ip-range=10.96.0.0/16",
		"--cert-dir=" + filepath.Join(s.dir, "pki", "apiserver"),
	}, nil, filepath.Join(s.dir, "kube-apiserver.log"))
	if err != nil {
		return err
	}
	if err := waitHTTP(ctx, s.apiserver, tlsClient(s.pki.caPEM), s.apiURL+"/readyz", s.pki.token, "", 3*time.Minute); err != nil {
		return err
	}
	return s.pki.writeKubeconfig(filepath.Join(s.dir, "admin.kubeconfig"), s.apiURL)
}

// startWebhook starts the built tandem-webhook with the run's serving certificate from files and
// waits for its /readyz (caches synced, which needs the CRD applied first).
func (s *servers) startWebhook(ctx context.Context, bin string) error {
	metricsAddr := strings.TrimPrefix(s.metricsURL, "http://")
	var err error
	s.hook, err = startProcess("tandem-webhook", bin, []string{
		fmt.Sprintf("--listen=127.0.0.1:%d", s.webhookPort),
		"--metrics-listen=" + metricsAddr,
		"--kubeconfig=" + s.pki.kubeconfig,
		"--tls-cert-file=" + s.pki.webhookCert, "--tls-private-key-file=" + s.pki.webhookKey,
		"--webhook-configuration=" + webhookConfigName,
	}, nil, filepath.Join(s.dir, "tandem-webhook.log"))
	if err != nil {
		return err
	}
	return waitHTTP(ctx, s.hook, &http.Client{Timeout: 5 * time.Second}, s.metricsURL+"/readyz", "", "", 2*time.Minute)
}

// fetch GETs url with the client (and token, if any) and returns the body.
func fetch(ctx context.Context, client *http.Client, url, token string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: status %d: %s", url, resp.StatusCode, strings.TrimSpace(string(b[:min(len(b), 300)])))
	}
	return b, nil
}

// findEtcd returns Debian's etcd, or says how to get it.
func findEtcd() (string, error) {
	p, err := exec.LookPath("etcd")
	if err != nil {
		return "", errors.New("etcd not found: apt-get install -y etcd-server (hack/install-deps.sh installs it)")
	}
	return p, nil
}

// findAPIServer returns the cached kube-apiserver, or says how to build it.
func findAPIServer(override string) (string, error) {
	p := override
	if p == "" {
		p = kubeAPIServerPath()
	}
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("kube-apiserver %s not found at %s: run `make cluster-up` or `make e2e-cluster` once to build and cache it (or pass -kube-apiserver)", kubernetesVersion, p)
	}
	return p, nil
}

// waitIdle waits until p used less than cores of CPU in each of n consecutive seconds, or timeout
// passed (then it goes on: a busy machine must not stop the run). It says which.
func waitIdle(ctx context.Context, p *process, cores float64, n int, timeout time.Duration) (string, error) {
	start := time.Now()
	quiet := 0
	last, err := cpuSeconds(p.pid())
	if err != nil {
		return "", err
	}
	for quiet < n {
		if time.Since(start) > timeout {
			return fmt.Sprintf("still busy after %s, measuring anyway", timeout), nil
		}
		if err := runctx.Sleep(ctx, time.Second); err != nil {
			return "", err
		}
		now, err := cpuSeconds(p.pid())
		if err != nil {
			return "", err
		}
		if now-last < cores {
			quiet++
		} else {
			quiet = 0
		}
		last = now
	}
	return fmt.Sprintf("under %.0f%% of a CPU for %ds, after %s", 100*cores, n, time.Since(start).Round(time.Second)), nil
}
