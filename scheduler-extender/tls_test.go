package extender

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
)

// testCA signs certificates for the TLS tests.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue returns a leaf certificate and its key, PEM-encoded: for 127.0.0.1 and the name
// tandem-extender when server, else a client certificate for cn.
func (ca *testCA) issue(t *testing.T, serial int64, cn string, server bool) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.DNSNames = []string{"tandem-extender"}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
}

// secretVolume lays files out as kubelet mounts a Secret: each name is a symlink to ..data/name,
// and ..data a symlink to a directory of this version, swapped atomically on update.
type secretVolume struct {
	dir     string
	version int
}

func (v *secretVolume) update(t *testing.T, files map[string][]byte) {
	t.Helper()
	v.version++
	ts := filepath.Join(v.dir, "..v"+strings.Repeat("x", v.version))
	if err := os.Mkdir(ts, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(ts, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
		link := filepath.Join(v.dir, name)
		if _, err := os.Lstat(link); errors.Is(err, os.ErrNotExist) {
			if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
				t.Fatal(err)
			}
		}
	}
	tmp := filepath.Join(v.dir, "..data_tmp")
	if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(v.dir, "..data")); err != nil {
		t.Fatal(err)
	}
}

// TestTLSClientCertificatesAndReload serves HTTPS from certificates in a Secret-style volume: a
// client without a certificate, or with one from another CA, is refused; kube-scheduler's, signed
// by the client CA, is served; a rotated serving certificate or client CA is used by the next
// connection, with one log line; a broken update keeps the previous certificate.
func TestTLSClientCertificatesAndReload(t *testing.T) {
	t.Parallel()
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
	ctx := klog.NewContext(context.Background(), logger)
	logs := logger.GetSink().(ktesting.Underlier).GetBuffer()
	count := func(msg string) int {
		n := 0
		for _, e := range logs.Data() {
			if e.Message == msg {
				n++
			}
		}
		return n
	}

	serverCA, clientCA, otherCA := newTestCA(t, "extender-ca"), newTestCA(t, "client-ca"), newTestCA(t, "other-ca")
	vol := &secretVolume{dir: t.TempDir()}
	crt, key := serverCA.issue(t, 2, "tandem-extender", true)
	vol.update(t, map[string][]byte{"tls.crt": crt, "tls.key": key, "client-ca.crt": clientCA.pem})
	files := TLSFiles{
		CertFile:     filepath.Join(vol.dir, "tls.crt"),
		KeyFile:      filepath.Join(vol.dir, "tls.key"),
		ClientCAFile: filepath.Join(vol.dir, "client-ca.crt"),
	}
	cfg, err := NewTLSConfig(ctx, files)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{
		Handler:   http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) }),
		TLSConfig: cfg,
		ErrorLog:  log.New(io.Discard, "", 0), // the refused handshakes
	}
	go func() { _ = srv.ServeTLS(lis, "", "") }()
	t.Cleanup(func() { _ = srv.Close() })
	url := "https://" + lis.Addr().String() + "/healthz"

	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(serverCA.pem)
	// get makes a new connection, as a new kube-scheduler would, with the client certificate
	// of ca (none when ca is nil), and returns the serving certificate's serial.
	get := func(ca *testCA, serial int64) (int64, error) {
		tc := &tls.Config{RootCAs: roots, ServerName: "tandem-extender"}
		if ca != nil {
			c, k := ca.issue(t, serial, "kube-scheduler", false)
			pair, err := tls.X509KeyPair(c, k)
			if err != nil {
				t.Fatal(err)
			}
			tc.Certificates = []tls.Certificate{pair}
		}
		client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: tc, DisableKeepAlives: true}}
		resp, err := client.Get(url)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return 0, errors.New(resp.Status)
		}
		return resp.TLS.PeerCertificates[0].SerialNumber.Int64(), nil
	}

	if _, err := get(nil, 0); err == nil {
		t.Error("a client without a certificate was served")
	}
	if _, err := get(otherCA, 10); err == nil {
		t.Error("a client with a certificate from another CA was served")
	}
	if serial, err := get(clientCA, 11); err != nil || serial != 2 {
		t.Fatalf("kube-scheduler's client certificate: serial %d, %v; want served with serial 2", serial, err)
	}

	// Rotation as kubelet does it for a Secret volume.
	crt, key = serverCA.issue(t, 3, "tandem-extender", true)
	vol.update(t, map[string][]byte{"tls.crt": crt, "tls.key": key, "client-ca.crt": clientCA.pem})
	if serial, err := get(clientCA, 12); err != nil || serial != 3 {
		t.Fatalf("after rotating the serving certificate: serial %d, %v; want 3", serial, err)
	}
	if n := count("Loaded TLS certificate"); n != 2 {
		t.Errorf("%d \"Loaded TLS certificate\" lines after one rotation, want 2 (start, rotation)", n)
	}

	// A new client CA: the old clients are refused, the new ones served.
	newClientCA := newTestCA(t, "client-ca-2")
	vol.update(t, map[string][]byte{"tls.crt": crt, "tls.key": key, "client-ca.crt": newClientCA.pem})
	if _, err := get(clientCA, 13); err == nil {
		t.Error("a client certificate of the replaced client CA was served")
	}
	if serial, err := get(newClientCA, 14); err != nil || serial != 3 {
		t.Errorf("a client certificate of the new client CA: serial %d, %v; want served", serial, err)
	}

	// A certificate that does not match its key: logged, and the previous pair stays.
	crt4, _ := serverCA.issue(t, 4, "tandem-extender", true)
	vol.update(t, map[string][]byte{"tls.crt": crt4, "tls.key": key, "client-ca.crt": newClientCA.pem})
	if serial, err := get(newClientCA, 15); err != nil || serial != 3 {
		t.Errorf("after a broken update: serial %d, %v; want the previous certificate, 3", serial, err)
	}
	if n := count("Keeping the previous TLS certificate and client CAs"); n != 1 {
		t.Errorf("%d error lines for one broken update, want 1", n)
	}
	if _, err := get(newClientCA, 16); err != nil {
		t.Error(err)
	}
	if n := count("Keeping the previous TLS certificate and client CAs"); n != 1 {
		t.Errorf("%d error lines after a second connection, want still 1: unchanged files are not read again", n)
	}
}

func TestNewTLSConfigRefusesBadFiles(t *testing.T) {
	t.Parallel()
	_, ctx := ktesting.NewTestContext(t)
	dir := t.TempDir()
	ca := newTestCA(t, "ca")
	crt, key := ca.issue(t, 2, "tandem-extender", true)
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	crtFile, keyFile, caFile, junk := write("tls.crt", crt), write("tls.key", key), write("ca.crt", ca.pem), write("junk", []byte("junk"))
	for name, files := range map[string]TLSFiles{
		"missing key":      {CertFile: crtFile, KeyFile: filepath.Join(dir, "none")},
		"key of junk":      {CertFile: crtFile, KeyFile: junk},
		"client CA junk":   {CertFile: crtFile, KeyFile: keyFile, ClientCAFile: junk},
		"client CA absent": {CertFile: crtFile, KeyFile: keyFile, ClientCAFile: filepath.Join(dir, "none")},
	} {
		if _, err := NewTLSConfig(ctx, files); err == nil {
			t.Errorf("%s: NewTLSConfig accepted %+v", name, files)
		}
	}
	if _, err := NewTLSConfig(ctx, TLSFiles{CertFile: crtFile, KeyFile: keyFile, ClientCAFile: caFile}); err != nil {
		t.Error(err)
	}
}
