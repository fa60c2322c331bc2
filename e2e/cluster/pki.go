package cluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// pki holds the paths of the cluster's keys and certificates, all below
// Dir/pki. One CA signs the API server's serving certificate and the client
// certificate it presents to kubelet; kubelet trusts that CA for clients.
type pki struct {
	CACert, CAKey            string
	ServingCert, ServingKey  string
	KubeletClientCert, KCKey string
	ServiceAccountKey, SAPub string
}

func newPKI(dir string) pki {
	p := func(name string) string { return filepath.Join(dir, name) }
	return pki{
		CACert: p("ca.crt"), CAKey: p("ca.key"),
		ServingCert: p("apiserver.crt"), ServingKey: p("apiserver.key"),
		KubeletClientCert: p("apiserver-kubelet-client.crt"), KCKey: p("apiserver-kubelet-client.key"),
		ServiceAccountKey: p("sa.key"), SAPub: p("sa.pub"),
	}
}

// write generates every key and certificate (see certLifetime). The API
// server's serving certificate is valid for localhost and 127.0.0.1, where
// the kubeconfigs, kubelet and hostNetwork pods reach it, and for each of
// extraIPs: this machine's address, where pods on the pod network reach it.
func (p pki) write(extraIPs ...net.IP) error {
	if err := os.MkdirAll(filepath.Dir(p.CACert), 0o700); err != nil {
		return fmt.Errorf("create pki dir: %w", err)
	}
	ca, err := newCA("tandem-e2e-ca", p.CACert, p.CAKey)
	if err != nil {
		return err
	}
	servingIPs := append([]net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}, extraIPs...)
	leaves := []struct {
		cert, key string
		tmpl      *x509.Certificate
	}{
		{p.ServingCert, p.ServingKey, &x509.Certificate{
			SerialNumber: big.NewInt(2),
			Subject:      pkix.Name{CommonName: "kube-apiserver"},
			DNSNames:     []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
			IPAddresses:  servingIPs,
			ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		}},
		{p.KubeletClientCert, p.KCKey, &x509.Certificate{
			SerialNumber: big.NewInt(3),
			// kubelet asks the API server (webhook authorization) whether
			// this user may use its API; system:masters may.
			Subject:     pkix.Name{CommonName: "kube-apiserver-kubelet-client", Organization: []string{"system:masters"}},
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		}},
	}
	for _, l := range leaves {
		if err := ca.issue(l.tmpl, l.cert, l.key); err != nil {
			return err
		}
	}
	// Service-account tokens are signed with RSA (RS256), the algorithm every
	// Kubernetes component accepts.
	sa, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return fmt.Errorf("generate service-account key: %w", err)
	}
	if err := writePEM(p.ServiceAccountKey, "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(sa), 0o600); err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&sa.PublicKey)
	if err != nil {
		return fmt.Errorf("encode service-account public key: %w", err)
	}
	return writePEM(p.SAPub, "PUBLIC KEY", pub, 0o644)
}

// certAuthority signs the leaf certificates of the cluster.
type certAuthority struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// certLifetime starts an hour back, to tolerate a little clock skew, and
// lasts a day: a test cluster never needs more, and a stale directory cannot
// be reused by accident for long.
func certLifetime() (notBefore, notAfter time.Time) {
	now := time.Now().Add(-time.Hour)
	return now, now.Add(25 * time.Hour)
}

// newCA generates a CA and writes its certificate and key.
func newCA(cn, certPath, keyPath string) (*certAuthority, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate CA key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: cn},
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	tmpl.NotBefore, tmpl.NotAfter = certLifetime()
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("sign CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parse CA certificate: %w", err)
	}
	if err := writeCert(certPath, der); err != nil {
		return nil, err
	}
	if err := writeECKey(keyPath, key); err != nil {
		return nil, err
	}
	return &certAuthority{cert: cert, key: key}, nil
}

// issue signs a leaf certificate of tmpl for a new key and writes both.
func (ca *certAuthority) issue(tmpl *x509.Certificate, certPath, keyPath string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("generate key for %s: %w", certPath, err)
	}
	tmpl.NotBefore, tmpl.NotAfter = certLifetime()
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return fmt.Errorf("sign %s: %w", certPath, err)
	}
	if err := writeCert(certPath, der); err != nil {
		return err
	}
	return writeECKey(keyPath, key)
}

func writeCert(path string, der []byte) error {
	return writePEM(path, "CERTIFICATE", der, 0o644)
}

func writeECKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return fmt.Errorf("encode key %s: %w", path, err)
	}
	return writePEM(path, "EC PRIVATE KEY", der, 0o600)
}

func writePEM(path, typ string, der []byte, mode os.FileMode) error {
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), mode); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
