package kubeclient

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/transport"

	"github.com/tandemkit/tandem/internal/polltest"
)

// testCA issues certificates for one test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
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

// issue returns a certificate and its key in one PEM, the way kubelet writes kubelet-client-*.pem.
func (ca *testCA) issue(t *testing.T, serial int64, cn string, usage x509.ExtKeyUsage, ips ...net.IP) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn, Organization: []string{"system:nodes"}},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage}, IPAddresses: ips}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return append(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})...)
}

// TestClientCertificateRotation: kubelet rotates its client certificate by writing a new
// kubelet-client-<date>.pem and swapping the kubelet-client-current.pem symlink. A client built once from
// kubelet.conf must present the new certificate without a restart. The API server stand-in requires a
// client certificate and answers GET node with the Node named after the certificate's CN.
func TestClientCertificateRotation(t *testing.T) {
	// client-go rereads the files every CertCallbackRefreshDuration (5 minutes); the variable is there for
	// tests. Not parallel: it is client-go's package state.
	saved := transport.CertCallbackRefreshDuration
	transport.CertCallbackRefreshDuration = 100 * time.Millisecond
	t.Cleanup(func() { transport.CertCallbackRefreshDuration = saved })

	ca := newTestCA(t)
	serverPEM := ca.issue(t, 2, "kube-apiserver", x509.ExtKeyUsageServerAuth, net.ParseIP("127.0.0.1"))
	serverCert, err := tls.X509KeyPair(serverPEM, serverPEM)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cn := r.TLS.PeerCertificates[0].Subject.CommonName
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(corev1.Node{TypeMeta: metav1.TypeMeta{Kind: "Node", APIVersion: "v1"}, ObjectMeta: metav1.ObjectMeta{Name: cn}})
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{serverCert}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool, MinVersion: tls.VersionTLS12}
	srv.StartTLS()
	t.Cleanup(srv.Close)

	dir := t.TempDir()
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	caFile := write("ca.crt", ca.pem)
	first := write("kubelet-client-1.pem", ca.issue(t, 3, "system:node:first", x509.ExtKeyUsageClientAuth))
	second := write("kubelet-client-2.pem", ca.issue(t, 4, "system:node:second", x509.ExtKeyUsageClientAuth))
	current := filepath.Join(dir, "kubelet-client-current.pem")
	if err := os.Symlink(first, current); err != nil {
		t.Fatal(err)
	}
	kubeconfig := write("kubelet.conf", []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "`+srv.URL+`", certificate-authority: "`+caFile+`"}}]
users: [{name: u, user: {client-certificate: "`+current+`", client-key: "`+current+`"}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`))

	rc, err := Config(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(rc, "tandem-test")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	n, err := c.GetNode(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	if n.Name != "system:node:first" {
		t.Fatalf("server saw %q, want the first certificate", n.Name)
	}

	// Rotate as kubelet does: a new symlink renamed over the old one.
	tmp := filepath.Join(dir, "kubelet-client-current.pem.tmp")
	if err := os.Symlink(second, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, current); err != nil {
		t.Fatal(err)
	}
	polltest.Until(t, "the server to see the second certificate after the rotation", func() bool {
		n, err := c.GetNode(ctx, "x")
		return err == nil && n.Name == "system:node:second"
	})
}
