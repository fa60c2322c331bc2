package controlplane

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/util/keyutil"
)

// AdminUser is the static token's user; system:masters passes every authorization check.
const AdminUser = "bench-admin"

// PKI is a run's certificates and credentials: one self-signed serving certificate for 127.0.0.1
// that kube-apiserver and the webhooks serve (tandem-webhook's own certificates, admission/certs,
// name only the in-cluster Service, which nothing here resolves); its key also signs the
// service-account tokens kube-apiserver insists on; and a static admin token.
type PKI struct {
	// CAPEM is the serving certificate, its own CA: what every client trusts.
	CAPEM                        []byte
	Cert, Key                    string
	TokenFile, Token, Kubeconfig string
}

// NewPKI writes a PKI into dir.
func NewPKI(dir string) (*PKI, error) {
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
	p := &PKI{CAPEM: certPEM, Cert: filepath.Join(dir, "serving.crt"), Key: filepath.Join(dir, "serving.key"),
		TokenFile: filepath.Join(dir, "tokens.csv"), Token: hex.EncodeToString(tok)}
	line := fmt.Sprintf("%s,%s,%s,\"system:masters\"\n", p.Token, AdminUser, AdminUser)
	for path, data := range map[string][]byte{p.Cert: certPEM, p.Key: keyPEM, p.TokenFile: []byte(line)} {
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
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "tandem-bench"},
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

// WriteKubeconfig writes the admin kubeconfig the servers under test read, and remembers its path.
func (p *PKI) WriteKubeconfig(path, server string) error {
	p.Kubeconfig = path
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["bench"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: p.CAPEM}
	cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{Token: p.Token}
	cfg.Contexts["bench"] = &clientcmdapi.Context{Cluster: "bench", AuthInfo: "admin"}
	cfg.CurrentContext = "bench"
	return clientcmd.WriteToFile(*cfg, path)
}

// RESTConfig is a benchmark's own client configuration: no client-side rate limit (QPS < 0), so
// the load the benchmark schedules is what reaches the API server.
func (p *PKI) RESTConfig(server, userAgent string) *rest.Config {
	return &rest.Config{
		Host: server, BearerToken: p.Token, TLSClientConfig: rest.TLSClientConfig{CAData: p.CAPEM},
		QPS: -1, UserAgent: userAgent, Timeout: 30 * time.Second,
	}
}
