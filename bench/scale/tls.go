package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/util/keyutil"
)

// extenderTLS is the extender's TLS as docs/install.md has an operator make it: one CA signs the
// extender's serving certificate (for the name tandem-extender and 127.0.0.1) and kube-scheduler's
// client certificate. The files carry the names deploy/'s tlsConfig gives them.
type extenderTLS struct {
	dir, ca, cert, key, schedCert, schedKey string
}

func writeExtenderTLS(dir string) (extenderTLS, error) {
	p := func(n string) string { return filepath.Join(dir, n) }
	x := extenderTLS{dir: dir, ca: p("ca.crt"), cert: p("tls.crt"), key: p("tls.key"), schedCert: p("scheduler.crt"), schedKey: p("scheduler.key")}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return x, err
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return x, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "tandem-extender-ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature, BasicConstraintsValid: true, IsCA: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return x, err
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return x, err
	}
	if err := os.WriteFile(x.ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o600); err != nil {
		return x, err
	}
	issue := func(serial int64, tmpl *x509.Certificate, certPath, keyPath string) error {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return err
		}
		tmpl.SerialNumber = big.NewInt(serial)
		tmpl.NotBefore, tmpl.NotAfter = now.Add(-time.Hour), now.Add(24*time.Hour)
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		if err != nil {
			return fmt.Errorf("sign %s: %w", tmpl.Subject.CommonName, err)
		}
		keyPEM, err := keyutil.MarshalPrivateKeyToPEM(key)
		if err != nil {
			return err
		}
		if err := os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
			return err
		}
		return os.WriteFile(keyPath, keyPEM, 0o600)
	}
	if err := issue(2, &x509.Certificate{
		Subject: pkix.Name{CommonName: "tandem-extender"}, DNSNames: []string{"tandem-extender"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}, x.cert, x.key); err != nil {
		return x, err
	}
	return x, issue(3, &x509.Certificate{
		Subject: pkix.Name{CommonName: "kube-scheduler"}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, x.schedCert, x.schedKey)
}
