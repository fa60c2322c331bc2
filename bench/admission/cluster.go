package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
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
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/util/keyutil"
	"k8s.io/klog/v2"

	"github.com/tandemkit/tandem/bench/internal/procstat"
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

// pki is the run's certificates and credentials: one self-signed serving certificate for 127.0.0.1
// that kube-apiserver and both webhooks serve (tandem-webhook's own certificates, admission/certs, name
// only the in-cluster Service, which nothing here resolves); its key also signs the service-account
// tokens kube-apiserver insists on; and a static admin token.
type pki struct {
	caPEM                        []byte // the serving certificate, its own CA: what every client trusts
	cert, key                    string
	tokenFile, token, kubeconfig string
}

func newPKI(dir string) (*pki, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create the certificates' directory: %w", err)
	}
	certPEM, keyPEM, err := newServingCert()
	if err != nil {
		return nil, fmt.Errorf("make a serving certificate for 127.0.0.1: %w", err)
	}
	tok := make([]byte, 16)
	if _, err := rand.Read(tok); err != nil {
		return nil, err
	}
	p := &pki{caPEM: certPEM, cert: filepath.Join(dir, "serving.crt"), key: filepath.Join(dir, "serving.key"),
		tokenFile: filepath.Join(dir, "tokens.csv"), token: hex.EncodeToString(tok)}
	line := fmt.Sprintf("%s,%s,%s,\"system:masters\"\n", p.token, adminUser, adminUser)
	for path, data := range map[string][]byte{p.cert: certPEM, p.key: keyPEM, p.tokenFile: []byte(line)} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// newServingCert makes the run's serving certificate: an ECDSA P-256 key, as tandem-webhook's own
// certificates have (admission/certs), so that the TLS the API server does toward a webhook costs what
// it costs on a cluster; for 127.0.0.1 and localhost; self-signed, so that it is its own CA.
func newServingCert() (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "tandem-bench-admission"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage:    x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, BasicConstraintsValid: true, IsCA: true,
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	if keyPEM, err = keyutil.MarshalPrivateKeyToPEM(key); err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM, nil
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

// waitHTTP polls url until it answers 200 (with want in the body, when set), p exits, or timeout.
func waitHTTP(ctx context.Context, p *framework.Daemon, client *http.Client, url, token, want string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last string
	for {
		if err := p.Exited(); err != nil {
			return err
		}
		body, err := fetch(ctx, client, url, token)
		switch {
		case err != nil:
			last = err.Error()
		case want == "" || bytes.Contains(body, []byte(want)):
			return nil
		default:
			last = fmt.Sprintf("status 200 without %q: %s", want, strings.TrimSpace(string(body[:min(len(body), 300)])))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready at %s within %s (last answer: %s); the end of its log:\n%s", p.Name(), url, timeout, last, p.LogTail(3000))
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
	etcd, apiserver, hook, floor *framework.Daemon
	apiURL                       string
	webhookPort, floorPort       int
	metricsURL                   string // tandem-webhook's plain-HTTP /metrics
	floorMetricsURL              string // the floor's
}

// stop stops what was started, the webhooks first, etcd last.
func (s *servers) stop(ctx context.Context) {
	for _, p := range []*framework.Daemon{s.floor, s.hook, s.apiserver, s.etcd} {
		if p != nil {
			if err := p.Stop(ctx, 10*time.Second); err != nil {
				klog.ErrorS(err, "Stopping a server of the benchmark")
			}
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
	s.etcd, err = framework.StartDaemon("etcd", etcdBin, []string{
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
	s.apiserver, err = framework.StartDaemon("kube-apiserver", apiserverBin, []string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", apiPort),
		"--tls-cert-file=" + s.pki.cert, "--tls-private-key-file=" + s.pki.key,
		"--token-auth-file=" + s.pki.tokenFile,
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + s.pki.key,
		"--service-account-signing-key-file=" + s.pki.key,
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
	s.hook, err = framework.StartDaemon("tandem-webhook", bin, []string{
		fmt.Sprintf("--listen=127.0.0.1:%d", s.webhookPort),
		"--metrics-listen=" + metricsAddr,
		"--kubeconfig=" + s.pki.kubeconfig,
		"--tls-cert-file=" + s.pki.cert, "--tls-private-key-file=" + s.pki.key,
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
func waitIdle(ctx context.Context, p *framework.Daemon, cores float64, n int, timeout time.Duration) (string, error) {
	start := time.Now()
	quiet := 0
	last, err := cpuSeconds(p.PID())
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
		now, err := cpuSeconds(p.PID())
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

// cpuSeconds is the user+system CPU time process pid has used so far.
func cpuSeconds(pid int) (float64, error) {
	t, err := procstat.CPUTime(pid)
	return t.Seconds(), err
}
