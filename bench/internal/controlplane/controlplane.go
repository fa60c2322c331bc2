// Package controlplane starts what the cluster benchmarks run against: a private etcd (Debian's) and
// the kube-apiserver and kube-scheduler the tier-2 harness builds and caches, with one self-signed
// certificate and a static admin token, in a directory of the caller's. It also holds the small
// helpers those benchmarks share around such servers: free ports, waiting for an HTTP endpoint or an
// idle process, and a process's CPU time.
package controlplane

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/klog/v2"

	"github.com/tandemkit/tandem/bench/internal/procstat"
	"github.com/tandemkit/tandem/bench/internal/runctx"
	"github.com/tandemkit/tandem/e2e/framework"
)

// KubernetesVersion is the release the tier-2 harness builds and caches (e2e/cluster/build.go,
// KubernetesVersion): the benchmarks run those binaries and never build them.
const KubernetesVersion = "v1.36.3"

// Binary returns the cached Kubernetes command name (kube-apiserver, kube-scheduler), or override
// when set, or says how to build it.
func Binary(name, override string) (string, error) {
	p := override
	if p == "" {
		p = filepath.Join(framework.CacheDir(), "kubernetes-"+KubernetesVersion, name)
	}
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("%s %s not found at %s: run `make cluster-up` or `make e2e-cluster` once to build and cache it (or pass its path)", name, KubernetesVersion, p)
	}
	return p, nil
}

// FindEtcd returns Debian's etcd, or says how to get it.
func FindEtcd() (string, error) {
	p, err := exec.LookPath("etcd")
	if err != nil {
		return "", errors.New("etcd not found: apt-get install -y etcd-server (hack/install-deps.sh installs it)")
	}
	return p, nil
}

// ControlPlane is a running etcd and kube-apiserver.
type ControlPlane struct {
	Dir             string
	PKI             *PKI
	Etcd, APIServer *framework.Daemon
	// URL is kube-apiserver's https://127.0.0.1:<port>.
	URL string
	// EtcdURL is etcd's client URL.
	EtcdURL string
}

// Start starts etcd and kube-apiserver in dir, with apiArgs appended to kube-apiserver's command
// line, and waits until the API server is ready. Stop undoes it, also after an error.
func Start(ctx context.Context, dir, etcdBin, apiBin string, apiArgs ...string) (*ControlPlane, error) {
	ports, err := FreePorts(3)
	if err != nil {
		return nil, err
	}
	c := &ControlPlane{Dir: dir}
	if c.PKI, err = NewPKI(filepath.Join(dir, "pki")); err != nil {
		return c, fmt.Errorf("make certificates: %w", err)
	}
	c.EtcdURL = fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	c.Etcd, err = framework.StartDaemon("etcd", etcdBin, []string{
		"--name=bench", "--data-dir=" + filepath.Join(dir, "etcd"),
		"--listen-client-urls=" + c.EtcdURL, "--advertise-client-urls=" + c.EtcdURL,
		"--listen-peer-urls=" + peerURL, "--initial-advertise-peer-urls=" + peerURL,
		"--initial-cluster=bench=" + peerURL,
	}, nil, filepath.Join(dir, "etcd.log"))
	if err != nil {
		return c, err
	}
	if err := WaitHTTP(ctx, c.Etcd, &http.Client{Timeout: 5 * time.Second}, c.EtcdURL+"/health", "", `"true"`, 60*time.Second); err != nil {
		return c, err
	}
	c.URL = fmt.Sprintf("https://127.0.0.1:%d", ports[2])
	args := append([]string{
		"--etcd-servers=" + c.EtcdURL,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", ports[2]),
		"--tls-cert-file=" + c.PKI.Cert, "--tls-private-key-file=" + c.PKI.Key,
		"--token-auth-file=" + c.PKI.TokenFile,
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + c.PKI.Key,
		"--service-account-signing-key-file=" + c.PKI.Key,
		"--service-cluster-ip-range=10.96.0.0/16",
		"--cert-dir=" + filepath.Join(dir, "pki", "apiserver"),
	}, apiArgs...)
	c.APIServer, err = framework.StartDaemon("kube-apiserver", apiBin, args, nil, filepath.Join(dir, "kube-apiserver.log"))
	if err != nil {
		return c, err
	}
	if err := WaitHTTP(ctx, c.APIServer, TLSClient(c.PKI.CAPEM), c.URL+"/readyz", c.PKI.Token, "", 3*time.Minute); err != nil {
		return c, err
	}
	return c, c.PKI.WriteKubeconfig(filepath.Join(dir, "admin.kubeconfig"), c.URL)
}

// Stop stops kube-apiserver, then etcd; nil-safe.
func (c *ControlPlane) Stop(ctx context.Context) {
	if c == nil {
		return
	}
	StopAll(ctx, c.APIServer, c.Etcd)
}

// StopAll stops each daemon that was started, in order, logging what fails.
func StopAll(ctx context.Context, ds ...*framework.Daemon) {
	for _, d := range ds {
		if d != nil {
			if err := d.Stop(ctx, 10*time.Second); err != nil {
				klog.FromContext(ctx).Error(err, "Stopping a server of the benchmark", "server", d.Name())
			}
		}
	}
}

// FreePorts is framework.FreePorts, named here beside the servers that take the ports.
func FreePorts(n int) ([]int, error) { return framework.FreePorts(n) }

// WaitHTTP polls url until it answers 200 (with want in the body, when set), p exits, or timeout.
func WaitHTTP(ctx context.Context, p *framework.Daemon, client *http.Client, url, token, want string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last string
	for {
		if err := p.Exited(); err != nil {
			return err
		}
		body, err := Fetch(ctx, client, url, token)
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

// TLSClient trusts caPEM.
func TLSClient(caPEM []byte) *http.Client {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
}

// Fetch GETs url with the client (and token, if any) and returns the body.
func Fetch(ctx context.Context, client *http.Client, url, token string) ([]byte, error) {
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

// WaitIdle waits until p used less than cores of CPU in each of n consecutive seconds, or timeout
// passed (then it goes on: a busy machine must not stop the run). It says which.
func WaitIdle(ctx context.Context, p *framework.Daemon, cores float64, n int, timeout time.Duration) (string, error) {
	start := time.Now()
	quiet := 0
	last, err := CPUSeconds(p.PID())
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
		now, err := CPUSeconds(p.PID())
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

// CPUSeconds is the user+system CPU time process pid has used so far.
func CPUSeconds(pid int) (float64, error) {
	t, err := procstat.CPUTime(pid)
	return t.Seconds(), err
}
