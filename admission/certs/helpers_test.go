package certs

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/prometheus/client_golang/prometheus"
)

// These tests run against client-go's fake clientset, not an API server: tier 2 of the e2e tests runs
// the webhook against a real one. The fake neither sets resourceVersion nor refuses a stale Update, so
// newClient adds both, since the replicas' agreement rests on them.

const (
	testNS        = "tandem-system"
	testSecret    = "tandem-webhook-cert"
	testSvc       = "tandem-webhook"
	testMutating  = "tandem-mutating"
	testValidting = "tandem-validating"
)

// clock is a settable Config.Now, safe for managers that check concurrently.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

func testConfig(c *clock) Config {
	return Config{
		Namespace: testNS, SecretName: testSecret, ServiceName: testSvc,
		MutatingWebhookConfigurations:   []string{testMutating},
		ValidatingWebhookConfigurations: []string{testValidting},
		Now:                             c.Now,
	}
}

func testContext(t *testing.T) context.Context {
	_, ctx := ktesting.NewTestContext(t)
	return ctx
}

// bufferedContext also keeps the log, for tests that count log lines.
func bufferedContext(t *testing.T) (context.Context, ktesting.Buffer) {
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
	return klog.NewContext(t.Context(), logger), logger.GetSink().(ktesting.Underlier).GetBuffer()
}

// newClient returns a fake clientset holding objs whose creates and updates follow the API server's
// optimistic concurrency: an Update whose resourceVersion is not the stored one fails with Conflict.
func newClient(objs ...runtime.Object) *fake.Clientset {
	cs := fake.NewClientset(objs...)
	rv := 100 // the fake's reactors run under one lock, so no further locking
	next := func() string { rv++; return strconv.Itoa(rv) }
	cs.PrependReactor("create", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		m, err := meta.Accessor(a.(k8stesting.CreateAction).GetObject())
		if err != nil {
			return false, nil, nil
		}
		m.SetResourceVersion(next())
		return false, nil, nil // the default reactor stores it
	})
	cs.PrependReactor("update", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		m, err := meta.Accessor(a.(k8stesting.UpdateAction).GetObject())
		if err != nil {
			return false, nil, nil
		}
		cur, err := cs.Tracker().Get(a.GetResource(), a.GetNamespace(), m.GetName())
		if err != nil {
			return false, nil, nil // the default reactor answers NotFound
		}
		cm, _ := meta.Accessor(cur)
		if cm.GetResourceVersion() != m.GetResourceVersion() {
			return true, nil, apierrors.NewConflict(a.GetResource().GroupResource(), m.GetName(),
				fmt.Errorf("resourceVersion %s is not %s", m.GetResourceVersion(), cm.GetResourceVersion()))
		}
		m.SetResourceVersion(next())
		return false, nil, nil
	})
	return cs
}

func newManager(t *testing.T, cs *fake.Clientset, cfg Config) *SelfSigned {
	t.Helper()
	s, err := NewSelfSigned(cs, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func mustSync(t *testing.T, ctx context.Context, s *SelfSigned) {
	t.Helper()
	if err := s.sync(ctx); err != nil {
		t.Fatalf("sync: %v", err)
	}
}

func getSecret(t *testing.T, cs *fake.Clientset) *corev1.Secret {
	t.Helper()
	sec, err := cs.CoreV1().Secrets(testNS).Get(t.Context(), testSecret, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return sec
}

func mutatingConfig(name string, webhooks int) *admissionv1.MutatingWebhookConfiguration {
	c := &admissionv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: "1"}}
	for i := range webhooks {
		c.Webhooks = append(c.Webhooks, admissionv1.MutatingWebhook{Name: fmt.Sprintf("w%d.tandem.io", i)})
	}
	return c
}

func validatingConfig(name string, webhooks int) *admissionv1.ValidatingWebhookConfiguration {
	c := &admissionv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: "1"}}
	for i := range webhooks {
		c.Webhooks = append(c.Webhooks, admissionv1.ValidatingWebhook{Name: fmt.Sprintf("w%d.tandem.io", i)})
	}
	return c
}

// caBundles returns the caBundle of every webhook of the test configurations that exist.
func caBundles(t *testing.T, cs *fake.Clientset) [][]byte {
	t.Helper()
	var out [][]byte
	if m, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(t.Context(), testMutating, metav1.GetOptions{}); err == nil {
		for _, w := range m.Webhooks {
			out = append(out, w.ClientConfig.CABundle)
		}
	}
	if v, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(t.Context(), testValidting, metav1.GetOptions{}); err == nil {
		for _, w := range v.Webhooks {
			out = append(out, w.ClientConfig.CABundle)
		}
	}
	return out
}

func leafOf(t *testing.T, certPEM []byte) *x509.Certificate {
	t.Helper()
	c, err := parseLeaf(certPEM)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func bundleOf(t *testing.T, bundle []byte) []*x509.Certificate {
	t.Helper()
	var out []*x509.Certificate
	for {
		var b *pem.Block
		b, bundle = pem.Decode(bundle)
		if b == nil {
			return out
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, c)
	}
}

// verifyChain fails the test unless the Secret's serving certificate verifies against its ca.crt at now
// for every name the API server or a client in the cluster may dial.
func verifyChain(t *testing.T, data map[string][]byte, now time.Time) {
	t.Helper()
	if _, err := tls.X509KeyPair(data[KeyTLSCert], data[KeyTLSKey]); err != nil {
		t.Fatalf("tls.crt and tls.key: %v", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(data[KeyCACert]) {
		t.Fatalf("ca.crt holds no certificate")
	}
	leaf := leafOf(t, data[KeyTLSCert])
	for _, n := range []string{testSvc, testSvc + "." + testNS, testSvc + "." + testNS + ".svc", testSvc + "." + testNS + ".svc.cluster.local"} {
		if _, err := leaf.Verify(x509.VerifyOptions{
			DNSName: n, Roots: roots, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		}); err != nil {
			t.Errorf("serving certificate for %s: %v", n, err)
		}
	}
}

// servedLeaf is the certificate src presents in a handshake.
func servedLeaf(t *testing.T, src Source) *x509.Certificate {
	t.Helper()
	c, err := src.GetCertificate(nil)
	if err != nil {
		t.Fatal(err)
	}
	return c.Leaf
}

// handshake connects to a TLS server serving src as the API server would: trusting caBundle only and
// dialing <svc>.<ns>.svc, with its clock at now. It returns the certificate the server presented.
func handshake(t *testing.T, srv *httptest.Server, caBundle []byte, now time.Time) (*x509.Certificate, error) {
	t.Helper()
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caBundle)
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs: roots, ServerName: testSvc + "." + testNS + ".svc", Time: func() time.Time { return now },
	}}}
	defer c.CloseIdleConnections()
	resp, err := c.Get(srv.URL)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return resp.TLS.PeerCertificates[0], nil
}

// serve starts a TLS server whose certificate comes from src, as tandem-webhook's does.
func serve(t *testing.T, src Source) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	srv.TLS = &tls.Config{GetCertificate: src.GetCertificate, MinVersion: tls.VersionTLS12}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

// dueAt is when less than a third of c's validity remains.
func dueAt(c *x509.Certificate) time.Time {
	return c.NotAfter.Add(-c.NotAfter.Sub(c.NotBefore) / 3)
}

// gaugeValue is the value of the one gauge registered on reg.
func gaugeValue(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil || len(mfs) != 1 {
		t.Fatalf("gather: %v, %d families", err, len(mfs))
	}
	if got := mfs[0].GetName(); got != "tandem_webhook_certificate_expiration_timestamp_seconds" {
		t.Fatalf("metric %s", got)
	}
	return mfs[0].GetMetric()[0].GetGauge().GetValue()
}
