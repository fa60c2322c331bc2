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

// write generates every key and certificate. The certificates live for a
// day: a test cluster never needs more, and a stale directory cannot be
// reused by accident for long.
func (p pki) write() error {
	if err := os.MkdirAll(filepath.Dir(p.CACert), 0o700); err != nil {
		return fmt.Errorf("create pki dir: %w", err)
	}
	now := time.Now().Add(-time.Hour) // tolerate a little clock skew
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("generate CA key: %w", err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "tandem-e2e-ca"},
		NotBefore:             now,
		NotAfter:              now.Add(25 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return fmt.Errorf("sign CA certificate: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return fmt.Errorf("parse CA certificate: %w", err)
	}
	if err := writeCert(p.CACert, caDER); err != nil {
		return err
	}
	if err := writeECKey(p.CAKey, caKey); err != nil {
		return err
	}
	leaves := []struct {
		cert, key string
		tmpl      *x509.Certificate
	}{
		{p.ServingCert, p.ServingKey, &x509.Certificate{
			SerialNumber: big.NewInt(2),
			Subject:      pkix.Name{CommonName: "kube-apiserver"},
			DNSNames:     []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
			IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
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
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return fmt.Errorf("generate key for %s: %w", l.cert, err)
		}
		l.tmpl.NotBefore, l.tmpl.NotAfter = now, now.Add(25*time.Hour)
		l.tmpl.KeyUsage = x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment
		der, err := x509.CreateCertificate(rand.Reader, l.tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			return fmt.Errorf("sign %s: %w", l.cert, err)
		}
		if err := writeCert(l.cert, der); err != nil {
			return err
		}
		if err := writeECKey(l.key, key); err != nil {
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
