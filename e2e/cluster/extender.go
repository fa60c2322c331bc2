package cluster

import (
	"bytes"
	"context"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	schedulerv1 "k8s.io/kube-scheduler/config/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

// SchedulerConfig is deploy/'s KubeSchedulerConfiguration: profiles
// default-scheduler and koord-scheduler, both calling tandem-extender. The
// cluster's kube-scheduler runs with it.
const SchedulerConfig = "extender/kube-scheduler-config.yaml"

// ExtenderSecret is the Secret deploy/'s extender DaemonSet mounts its TLS
// files from (docs/install.md, step 3).
const ExtenderSecret = "tandem-extender-tls"

// extenderTLS holds the extender's TLS files as docs/install.md has an
// operator make them: one CA signs the extender's serving certificate (for
// the name tandem-extender and 127.0.0.1) and kube-scheduler's client
// certificate, and each side trusts it for the other. The names are those of
// the Secret's keys (tls.crt, tls.key, ca.crt) and of deploy/'s tlsConfig
// (ca.crt, scheduler.crt, scheduler.key).
type extenderTLS struct {
	Dir                         string
	CA, CAKey                   string
	Cert, Key                   string
	SchedulerCert, SchedulerKey string
}

func newExtenderTLS(dir string) extenderTLS {
	p := func(name string) string { return filepath.Join(dir, name) }
	return extenderTLS{
		Dir: dir, CA: p("ca.crt"), CAKey: p("ca.key"),
		Cert: p("tls.crt"), Key: p("tls.key"),
		SchedulerCert: p("scheduler.crt"), SchedulerKey: p("scheduler.key"),
	}
}

func (x extenderTLS) write() error {
	if err := os.MkdirAll(x.Dir, 0o700); err != nil {
		return fmt.Errorf("create extender pki dir: %w", err)
	}
	ca, err := newCA("tandem-extender-ca", x.CA, x.CAKey)
	if err != nil {
		return err
	}
	if err := ca.issue(&x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "tandem-extender"},
		DNSNames:     []string{"tandem-extender"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}, x.Cert, x.Key); err != nil {
		return err
	}
	return ca.issue(&x509.Certificate{
		SerialNumber: big.NewInt(3),
		Subject:      pkix.Name{CommonName: "kube-scheduler"},
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, x.SchedulerCert, x.SchedulerKey)
}

// writeSchedulerConfig writes deploy/'s KubeSchedulerConfiguration (or src,
// when set), decoded strictly with kube-scheduler's v1 types so that a field
// it does not know fails here, with only what names the node's files
// replaced: clientConnection.kubeconfig, the files of each extender's
// tlsConfig (by their names, found in tlsDir), and no leader election (one
// scheduler, and leases would slow its start). Profiles and the extender's
// URL stay as shipped: the tier checks them.
func writeSchedulerConfig(path, kubeconfig, tlsDir, src string) error {
	if src == "" {
		var err error
		if src, err = deployFile(SchedulerConfig); err != nil {
			return err
		}
	}
	b, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("read scheduler config: %w", err)
	}
	var cfg schedulerv1.KubeSchedulerConfiguration
	if err := yaml.UnmarshalStrict(b, &cfg); err != nil {
		return fmt.Errorf("%s is not a KubeSchedulerConfiguration: %w", src, err)
	}
	if gv := schedulerv1.SchemeGroupVersion.String(); cfg.APIVersion != gv || cfg.Kind != "KubeSchedulerConfiguration" {
		return fmt.Errorf("%s is a %s %s: want a %s KubeSchedulerConfiguration", src, cfg.APIVersion, cfg.Kind, gv)
	}
	cfg.ClientConnection.Kubeconfig = kubeconfig
	cfg.LeaderElection.LeaderElect = ptr.To(false)
	for _, e := range cfg.Extenders {
		if e.TLSConfig == nil {
			continue
		}
		for _, f := range []*string{&e.TLSConfig.CAFile, &e.TLSConfig.CertFile, &e.TLSConfig.KeyFile} {
			if *f == "" {
				continue
			}
			*f = filepath.Join(tlsDir, filepath.Base(*f))
			if _, err := os.Stat(*f); err != nil {
				return fmt.Errorf("extender %s: tlsConfig names a file the cluster does not make: %w", e.URLPrefix, err)
			}
		}
	}
	out, err := yaml.Marshal(cfg)
	if err != nil {
		return fmt.Errorf("encode scheduler config: %w", err)
	}
	if err := os.WriteFile(path, out, 0o644); err != nil {
		return fmt.Errorf("write scheduler config: %w", err)
	}
	return nil
}

// extenderClient is an HTTP client for the first extender of the scheduler
// configuration at path, with its tlsConfig built the way kube-scheduler
// builds it (client-go's rest.TLSConfigFor).
func extenderClient(path string) (*http.Client, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read scheduler config: %w", err)
	}
	var cfg schedulerv1.KubeSchedulerConfiguration
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(cfg.Extenders) == 0 {
		return nil, fmt.Errorf("%s has no extender", path)
	}
	var rc rest.TLSClientConfig
	if t := cfg.Extenders[0].TLSConfig; t != nil {
		rc = rest.TLSClientConfig{Insecure: t.Insecure, ServerName: t.ServerName, CAFile: t.CAFile, CertFile: t.CertFile, KeyFile: t.KeyFile}
	}
	tc, err := rest.TLSConfigFor(&rest.Config{TLSClientConfig: rc})
	if err != nil {
		return nil, fmt.Errorf("extender tlsConfig of %s: %w", path, err)
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: tc}}, nil
}

// schedulerConfig is kube-scheduler's --config file in the cluster.
func (c *Cluster) schedulerConfig() string { return filepath.Join(c.Dir, "kube-scheduler-config.yaml") }

// extenderTLS returns the cluster's files of the extender's TLS.
func (c *Cluster) extenderTLS() extenderTLS {
	return newExtenderTLS(filepath.Join(c.Dir, "pki", "extender"))
}

// ExtenderScores asks the extender, as kube-scheduler does (its client certificate, the prioritize
// verb, node names only: nodeCacheCapable), to score the named nodes for pod, and returns each node's
// score, 0-10.
func (c *Cluster) ExtenderScores(ctx context.Context, pod *corev1.Pod, nodes ...string) (map[string]int64, error) {
	client, err := extenderClient(c.schedulerConfig())
	if err != nil {
		return nil, err
	}
	body, err := json.Marshal(extenderv1.ExtenderArgs{Pod: pod, NodeNames: &nodes})
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, ExtenderURL+"/prioritize", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("prioritize: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return nil, fmt.Errorf("prioritize answered %d: %s", resp.StatusCode, b)
	}
	var list extenderv1.HostPriorityList
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		return nil, fmt.Errorf("decode prioritize's answer: %w", err)
	}
	out := map[string]int64{}
	for _, p := range list {
		out[p.Host] = p.Score
	}
	return out, nil
}
