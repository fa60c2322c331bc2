package certs

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/tandemkit/tandem/internal/polltest"
)

var secretsGVR = corev1.SchemeGroupVersion.WithResource("secrets")

// countActions counts the recorded calls of verb on resource.
func countActions(cs interface{ Actions() []k8stesting.Action }, verb, resource string) int {
	n := 0
	for _, a := range cs.Actions() {
		if a.GetVerb() == verb && a.GetResource().Resource == resource {
			n++
		}
	}
	return n
}

func TestFirstStartCreatesSecret(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	clk := newClock()
	cs := newClient(mutatingConfig(testMutating, 2), validatingConfig(testValidting, 3))
	s := newManager(t, cs, testConfig(clk))
	if s.Ready() {
		t.Fatal("Ready before the first check")
	}
	if _, err := s.GetCertificate(nil); !errors.Is(err, ErrNotLoaded) {
		t.Fatalf("GetCertificate before the first check: %v, want ErrNotLoaded", err)
	}

	mustSync(t, ctx, s)

	sec := getSecret(t, cs)
	if sec.Type != corev1.SecretTypeTLS {
		t.Errorf("secret type %q, want %q", sec.Type, corev1.SecretTypeTLS)
	}
	for _, k := range []string{KeyTLSCert, KeyTLSKey, KeyCACert, KeyCAKey} {
		if len(sec.Data[k]) == 0 {
			t.Errorf("secret has no %s", k)
		}
	}
	verifyChain(t, sec.Data, clk.Now())
	cas := bundleOf(t, sec.Data[KeyCACert])
	if len(cas) != 1 || !cas[0].IsCA {
		t.Fatalf("ca.crt holds %d certificates, want 1 CA", len(cas))
	}
	if got, want := cas[0].NotAfter.Sub(clk.Now()), DefaultConfig().CAValidity; got != want {
		t.Errorf("CA valid for %s from now, want %s", got, want)
	}
	leaf := leafOf(t, sec.Data[KeyTLSCert])
	if got, want := leaf.NotAfter.Sub(clk.Now()), DefaultConfig().CertValidity; got != want {
		t.Errorf("serving certificate valid for %s from now, want %s", got, want)
	}
	if !s.Ready() || !servedLeaf(t, s).Equal(leaf) {
		t.Error("the manager does not serve the Secret's certificate")
	}
	bundles := caBundles(t, cs)
	if len(bundles) != 5 {
		t.Fatalf("%d webhooks, want 5", len(bundles))
	}
	for i, b := range bundles {
		if !bytes.Equal(b, sec.Data[KeyCACert]) {
			t.Errorf("webhook %d: caBundle is not the Secret's ca.crt", i)
		}
	}
	// What the API server sees: it trusts the caBundle only and dials <svc>.<ns>.svc.
	got, err := handshake(t, serve(t, s), bundles[0], clk.Now())
	if err != nil {
		t.Fatalf("handshake trusting the caBundle: %v", err)
	}
	if !got.Equal(leaf) {
		t.Error("the server presented another certificate than the Secret's")
	}

	// A second check finds nothing to do.
	secretUpdates, mutUpdates, valUpdates := countActions(cs, "update", "secrets"),
		countActions(cs, "update", "mutatingwebhookconfigurations"), countActions(cs, "update", "validatingwebhookconfigurations")
	mustSync(t, ctx, s)
	if countActions(cs, "update", "secrets") != secretUpdates ||
		countActions(cs, "update", "mutatingwebhookconfigurations") != mutUpdates ||
		countActions(cs, "update", "validatingwebhookconfigurations") != valUpdates {
		t.Error("a check with nothing to change wrote to the API server")
	}
}

func TestConcurrentStartAgrees(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	for range 10 {
		clk := newClock()
		cs := newClient()
		a, b := newManager(t, cs, testConfig(clk)), newManager(t, cs, testConfig(clk))
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i, m := range []*SelfSigned{a, b} {
			wg.Go(func() { errs[i] = m.sync(ctx) })
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		list, err := cs.CoreV1().Secrets(testNS).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(list.Items) != 1 {
			t.Fatalf("%d secrets, want 1", len(list.Items))
		}
		leaf := leafOf(t, list.Items[0].Data[KeyTLSCert])
		if !servedLeaf(t, a).Equal(leaf) || !servedLeaf(t, b).Equal(leaf) {
			t.Fatal("the two replicas serve different certificates")
		}
	}
}

// TestLostRace makes each write of one replica lose to the other's: the loser must serve what the winner
// wrote, without writing again.
func TestLostRace(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		verb string
		// setup prepares the Secret before the check; nil leaves it absent.
		setup func(t *testing.T, ctx context.Context, s *SelfSigned, clk *clock)
	}{
		{name: "create", verb: "create"},
		{name: "update", verb: "update", setup: func(t *testing.T, ctx context.Context, s *SelfSigned, clk *clock) {
			mustSync(t, ctx, s)
			clk.Set(dueAt(servedLeaf(t, s)).Add(time.Minute)) // the serving certificate needs renewing
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := testContext(t)
			clk := newClock()
			cs := newClient()
			s := newManager(t, cs, testConfig(clk))
			if tt.setup != nil {
				tt.setup(t, ctx, s, clk)
			}
			var theirs *corev1.Secret
			writes := 0
			cs.PrependReactor(tt.verb, "secrets", func(a k8stesting.Action) (bool, runtime.Object, error) {
				writes++
				if writes > 1 {
					return false, nil, nil
				}
				// The other replica writes first, from what it read: the same Secret.
				var data map[string][]byte
				cur, err := cs.Tracker().Get(secretsGVR, testNS, testSecret)
				if err == nil {
					data = cur.(*corev1.Secret).Data
				}
				p, err := s.planner.plan(data, nil, clk.Now())
				if err != nil || p == nil {
					t.Errorf("the other replica's plan: %v, %v", p, err)
					return true, nil, errors.New("test setup")
				}
				theirs = &corev1.Secret{
					ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: testSecret, ResourceVersion: "7"},
					Type:       corev1.SecretTypeTLS, Data: p.data,
				}
				gr := schema.GroupResource{Resource: "secrets"}
				if cur == nil {
					err = cs.Tracker().Add(theirs)
					return true, nil, errors.Join(err, apierrors.NewAlreadyExists(gr, testSecret))
				}
				err = cs.Tracker().Update(secretsGVR, theirs, testNS)
				return true, nil, errors.Join(err, apierrors.NewConflict(gr, testSecret, errors.New("stale")))
			})

			mustSync(t, ctx, s)

			if writes != 1 {
				t.Errorf("%d %s calls, want 1: the loser must take the winner's Secret as is", writes, tt.verb)
			}
			if theirs == nil {
				t.Fatal("the check did not write")
			}
			if sec := getSecret(t, cs); !bytes.Equal(sec.Data[KeyTLSCert], theirs.Data[KeyTLSCert]) {
				t.Error("the winner's Secret was overwritten")
			}
			if !servedLeaf(t, s).Equal(leafOf(t, theirs.Data[KeyTLSCert])) {
				t.Error("the loser does not serve the winner's certificate")
			}
		})
	}
}

func TestRenewal(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		at      func(leaf *x509.Certificate) time.Time
		wantNew bool
	}{
		{"more than a third left", func(l *x509.Certificate) time.Time { return dueAt(l).Add(-time.Minute) }, false},
		{"less than a third left", func(l *x509.Certificate) time.Time { return dueAt(l).Add(time.Minute) }, true},
		{"expired", func(l *x509.Certificate) time.Time { return l.NotAfter.Add(time.Hour) }, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := testContext(t)
			clk := newClock()
			cs := newClient()
			s := newManager(t, cs, testConfig(clk))
			mustSync(t, ctx, s)
			before := getSecret(t, cs)
			old := leafOf(t, before.Data[KeyTLSCert])

			clk.Set(tt.at(old))
			mustSync(t, ctx, s)

			after := getSecret(t, cs)
			renewed := !bytes.Equal(after.Data[KeyTLSCert], before.Data[KeyTLSCert])
			if renewed != tt.wantNew {
				t.Fatalf("renewed: %v, want %v", renewed, tt.wantNew)
			}
			if !bytes.Equal(after.Data[KeyCAKey], before.Data[KeyCAKey]) || !bytes.Equal(after.Data[KeyCACert], before.Data[KeyCACert]) {
				t.Error("the CA changed; only the serving certificate was due")
			}
			verifyChain(t, after.Data, clk.Now())
			if !servedLeaf(t, s).Equal(leafOf(t, after.Data[KeyTLSCert])) {
				t.Error("the renewed certificate is not served")
			}
		})
	}
}

// rsaCA is a CA made by hand, as an operator might put in the Secret, with its key in PKCS #1.
func rsaCA(t *testing.T, now time.Time) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(42), Subject: pkix.Name{CommonName: "hand-made"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(5 * 365 * 24 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
}

// TestRepair starts from a good Secret, spoils it, and checks what one check makes of it.
func TestRepair(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// spoil changes the good Secret's data; other is a second good Secret's data, now the clock.
		spoil func(t *testing.T, data, other map[string][]byte, now time.Time)
		svc   string // another service name for the check, if set
		// what the check must have kept
		keepCA, keepServing bool
		bundled             int
	}{
		{name: "all garbage", spoil: func(_ *testing.T, d, _ map[string][]byte, _ time.Time) {
			for k := range d {
				d[k] = []byte("garbage")
			}
		}, bundled: 1},
		{name: "empty", spoil: func(_ *testing.T, d, _ map[string][]byte, _ time.Time) { clear(d) }, bundled: 1},
		{name: "serving certificate garbage", spoil: func(_ *testing.T, d, _ map[string][]byte, _ time.Time) {
			d[KeyTLSCert] = []byte("-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n")
		}, keepCA: true, bundled: 1},
		{name: "serving key of another pair", spoil: func(_ *testing.T, d, o map[string][]byte, _ time.Time) {
			d[KeyTLSKey] = o[KeyTLSKey]
		}, keepCA: true, bundled: 1},
		{name: "serving certificate from another CA", spoil: func(_ *testing.T, d, o map[string][]byte, _ time.Time) {
			d[KeyTLSCert], d[KeyTLSKey] = o[KeyTLSCert], o[KeyTLSKey]
		}, keepCA: true, bundled: 1},
		{name: "serving certificate for another service", svc: "other-webhook", keepCA: true, bundled: 1},
		{
			// The old CA is still valid: it stays in the bundle, and so does the certificate it signed.
			name: "CA key garbage", spoil: func(_ *testing.T, d, _ map[string][]byte, _ time.Time) {
				d[KeyCAKey] = []byte("garbage")
			}, keepServing: true, bundled: 2,
		},
		{
			// ca.key then matches no CA, and nothing trusts the serving certificate.
			name: "CA certificate garbage", spoil: func(_ *testing.T, d, _ map[string][]byte, _ time.Time) {
				d[KeyCACert] = []byte("garbage")
			}, bundled: 1,
		},
		{name: "bundle with a non-CA and an expired CA", spoil: func(t *testing.T, d, o map[string][]byte, now time.Time) {
			expired, _ := rsaCA(t, now.Add(-6*365*24*time.Hour))
			d[KeyCACert] = bytes.Join([][]byte{d[KeyCACert], o[KeyTLSCert], expired, []byte("junk\n")}, nil)
		}, keepCA: true, keepServing: true, bundled: 1},
		{name: "hand-made RSA CA", spoil: func(t *testing.T, d, _ map[string][]byte, now time.Time) {
			d[KeyCACert], d[KeyCAKey] = rsaCA(t, now)
			delete(d, KeyTLSCert)
			delete(d, KeyTLSKey)
		}, keepCA: true, bundled: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := testContext(t)
			clk := newClock()
			cs := newClient()
			mustSync(t, ctx, newManager(t, cs, testConfig(clk)))
			other := newClient()
			mustSync(t, ctx, newManager(t, other, testConfig(clk)))

			sec := getSecret(t, cs)
			if tt.spoil != nil {
				tt.spoil(t, sec.Data, getSecret(t, other).Data, clk.Now())
				if _, err := cs.CoreV1().Secrets(testNS).Update(ctx, sec, metav1.UpdateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			before := getSecret(t, cs).Data
			cfg := testConfig(clk)
			if tt.svc != "" {
				cfg.ServiceName = tt.svc
			}
			s := newManager(t, cs, cfg)

			mustSync(t, ctx, s)

			after := getSecret(t, cs).Data
			if tt.svc == "" {
				verifyChain(t, after, clk.Now())
			} else if err := leafOf(t, after[KeyTLSCert]).VerifyHostname(tt.svc + "." + testNS + ".svc"); err != nil {
				t.Error(err)
			}
			if kept := bytes.Equal(after[KeyCAKey], before[KeyCAKey]); kept != tt.keepCA {
				t.Errorf("CA kept: %v, want %v", kept, tt.keepCA)
			}
			if kept := bytes.Equal(after[KeyTLSCert], before[KeyTLSCert]); kept != tt.keepServing {
				t.Errorf("serving certificate kept: %v, want %v", kept, tt.keepServing)
			}
			cas := bundleOf(t, after[KeyCACert])
			if len(cas) != tt.bundled {
				t.Errorf("ca.crt holds %d CAs, want %d", len(cas), tt.bundled)
			}
			if key, err := parseKey(after[KeyCAKey]); err != nil || signerOf(cas, key) != cas[0] {
				t.Errorf("ca.key is not the key of the first CA in ca.crt (%v)", err)
			}
			if !servedLeaf(t, s).Equal(leafOf(t, after[KeyTLSCert])) {
				t.Error("the repaired certificate is not served")
			}
			// Repaired means stable: another check changes nothing.
			updates := countActions(cs, "update", "secrets")
			mustSync(t, ctx, s)
			if n := countActions(cs, "update", "secrets"); n != updates {
				t.Errorf("a second check updated the Secret %d more times", n-updates)
			}
		})
	}
}

// rotationSetup runs a manager with a 30-day CA and 1-day serving certificates, checking every 12 hours as
// the periodic check would, up to just before its CA is due for renewal. It returns the first CA and the
// bundle that held only it.
func rotationSetup(t *testing.T, ctx context.Context, cs *fake.Clientset) (s *SelfSigned, clk *clock, oldCA *x509.Certificate, oldBundle []byte) {
	t.Helper()
	clk = newClock()
	cfg := testConfig(clk)
	cfg.CAValidity, cfg.CertValidity = 30*24*time.Hour, 24*time.Hour
	s = newManager(t, cs, cfg)
	mustSync(t, ctx, s)
	oldBundle = getSecret(t, cs).Data[KeyCACert]
	oldCA = bundleOf(t, oldBundle)[0]
	for due := dueAt(oldCA); clk.Now().Add(12 * time.Hour).Before(due); {
		clk.Set(clk.Now().Add(12 * time.Hour))
		mustSync(t, ctx, s)
	}
	// Start the rotation from a fresh serving certificate, as the common case is: remove it, and the
	// check before the CA is due issues another from the old CA.
	clk.Set(dueAt(oldCA).Add(-time.Minute))
	sec := getSecret(t, cs)
	delete(sec.Data, KeyTLSCert)
	delete(sec.Data, KeyTLSKey)
	if _, err := cs.CoreV1().Secrets(testNS).Update(ctx, sec, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	mustSync(t, ctx, s)
	if sec := getSecret(t, cs); !bytes.Equal(sec.Data[KeyCACert], oldBundle) {
		t.Fatal("the CA changed before it was due")
	}
	return s, clk, oldCA, oldBundle
}

func TestCARotation(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	cs := newClient(mutatingConfig(testMutating, 1), validatingConfig(testValidting, 1))
	s, clk, oldCA, oldBundle := rotationSetup(t, ctx, cs)
	srv := serve(t, s)
	servingBefore := getSecret(t, cs).Data[KeyTLSCert]

	// The CA is due: a new one joins the bundle, ahead of the old one, but nothing is signed by it yet.
	clk.Set(dueAt(oldCA).Add(time.Minute))
	mustSync(t, ctx, s)
	sec := getSecret(t, cs)
	cas := bundleOf(t, sec.Data[KeyCACert])
	if len(cas) != 2 || cas[0].Equal(oldCA) || !cas[1].Equal(oldCA) {
		t.Fatalf("ca.crt holds %d CAs, want the new one and then the old one", len(cas))
	}
	newCA := cas[0]
	if !bytes.Equal(sec.Data[KeyTLSCert], servingBefore) {
		t.Fatal("the serving certificate moved to the new CA before the API servers could trust it")
	}
	for i, b := range caBundles(t, cs) {
		if !bytes.Equal(b, sec.Data[KeyCACert]) {
			t.Errorf("webhook %d: caBundle is not the new bundle", i)
		}
	}
	for name, bundle := range map[string][]byte{"old": oldBundle, "new": sec.Data[KeyCACert]} {
		if _, err := handshake(t, srv, bundle, clk.Now()); err != nil {
			t.Errorf("API server holding the %s caBundle: %v", name, err)
		}
	}

	// Within the rollover delay nothing moves.
	clk.Set(clk.Now().Add(caRolloverDelay / 2))
	mustSync(t, ctx, s)
	if !bytes.Equal(getSecret(t, cs).Data[KeyTLSCert], servingBefore) {
		t.Fatal("the serving certificate moved within the rollover delay")
	}

	// After it, the serving certificate is signed by the new CA and verifies against the bundle.
	clk.Set(clk.Now().Add(caRolloverDelay))
	mustSync(t, ctx, s)
	sec = getSecret(t, cs)
	leaf := leafOf(t, sec.Data[KeyTLSCert])
	if err := leaf.CheckSignatureFrom(newCA); err != nil {
		t.Fatalf("the serving certificate is not signed by the new CA: %v", err)
	}
	verifyChain(t, sec.Data, clk.Now())
	got, err := handshake(t, srv, sec.Data[KeyCACert], clk.Now())
	if err != nil {
		t.Fatalf("handshake trusting the bundle: %v", err)
	}
	if !got.Equal(leaf) {
		t.Error("the server does not present the new certificate without a restart")
	}
	if _, err := handshake(t, srv, oldBundle, clk.Now()); err == nil {
		t.Error("a client trusting only the old CA accepted the new certificate; the test proves nothing")
	}

	// Once the old CA expires it leaves the bundle, in the Secret and in the configurations.
	for !clk.Now().After(oldCA.NotAfter) {
		clk.Set(clk.Now().Add(12 * time.Hour))
		mustSync(t, ctx, s)
	}
	sec = getSecret(t, cs)
	if cas := bundleOf(t, sec.Data[KeyCACert]); len(cas) != 1 || !cas[0].Equal(newCA) {
		t.Fatalf("ca.crt holds %d CAs after the old one expired, want the new one only", len(cas))
	}
	verifyChain(t, sec.Data, clk.Now())
	for i, b := range caBundles(t, cs) {
		if !bytes.Equal(b, sec.Data[KeyCACert]) {
			t.Errorf("webhook %d: caBundle still holds the expired CA", i)
		}
	}
}

// TestCARolloverWaitsForConfigurations: while a configuration cannot be updated, API servers may not
// trust the new CA, so the serving certificate stays with the old one.
func TestCARolloverWaitsForConfigurations(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	cs := newClient(mutatingConfig(testMutating, 1), validatingConfig(testValidting, 1))
	s, clk, oldCA, _ := rotationSetup(t, ctx, cs)
	servingBefore := getSecret(t, cs).Data[KeyTLSCert]
	cs.PrependReactor("update", "validatingwebhookconfigurations", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "admissionregistration.k8s.io", Resource: "validatingwebhookconfigurations"}, testValidting, errors.New("RBAC"))
	})

	clk.Set(dueAt(oldCA).Add(time.Minute))
	err := s.sync(ctx)
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "RBAC rules") {
		t.Fatalf("check with a forbidden update: %v, want Forbidden with a hint", err)
	}
	clk.Set(clk.Now().Add(2 * caRolloverDelay))
	_ = s.sync(ctx)
	if !bytes.Equal(getSecret(t, cs).Data[KeyTLSCert], servingBefore) {
		t.Fatal("the serving certificate moved to a CA a configuration does not carry")
	}
	if len(bundleOf(t, getSecret(t, cs).Data[KeyCACert])) != 2 {
		t.Fatal("the new CA did not join the bundle")
	}
}

func TestCABundleKeptCurrent(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	clk := newClock()
	cs := newClient(mutatingConfig(testMutating, 2), validatingConfig(testValidting, 2))
	s := newManager(t, cs, testConfig(clk))
	mustSync(t, ctx, s)
	want := getSecret(t, cs).Data[KeyCACert]

	// `kubectl apply` of the configurations resets their caBundles.
	m, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, testMutating, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	m.Webhooks[1].ClientConfig.CABundle = nil
	if _, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Update(ctx, m, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	v, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, testValidting, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	v.Webhooks[0].ClientConfig.CABundle = []byte("stale")
	if _, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Update(ctx, v, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// And the first update of each loses to another writer.
	for _, res := range []string{"mutatingwebhookconfigurations", "validatingwebhookconfigurations"} {
		lost := false
		cs.PrependReactor("update", res, func(a k8stesting.Action) (bool, runtime.Object, error) {
			if lost {
				return false, nil, nil
			}
			lost = true
			return true, nil, apierrors.NewConflict(a.GetResource().GroupResource(), "x", errors.New("stale"))
		})
	}

	mustSync(t, ctx, s)

	b := caBundles(t, cs)
	if len(b) != 4 {
		t.Fatalf("%d webhooks, want 4", len(b))
	}
	for i := range b {
		if !bytes.Equal(b[i], want) {
			t.Errorf("webhook %d: caBundle %q, want the Secret's ca.crt", i, b[i])
		}
	}
}

func TestAbsentConfigurationPatchedOnceCreated(t *testing.T) {
	t.Parallel()
	ctx, logs := bufferedContext(t)
	clk := newClock()
	cs := newClient()
	s := newManager(t, cs, testConfig(clk))
	mustSync(t, ctx, s)
	mustSync(t, ctx, s)
	if !s.Ready() {
		t.Fatal("an absent configuration kept the certificate from being served")
	}
	if n := strings.Count(logs.String(), "Webhook configuration not found"); n != 2 {
		t.Errorf("%d lines say a configuration is absent after two checks of two configurations, want 2 (once each)", n)
	}

	if _, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, mutatingConfig(testMutating, 1), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, validatingConfig(testValidting, 1), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	mustSync(t, ctx, s)
	want := getSecret(t, cs).Data[KeyCACert]
	b := caBundles(t, cs)
	if len(b) != 2 {
		t.Fatalf("%d webhooks, want 2", len(b))
	}
	for i := range b {
		if !bytes.Equal(b[i], want) {
			t.Errorf("webhook %d: caBundle not set once the configuration exists", i)
		}
	}
}

// TestRunFollowsSecret runs the loop with a check interval longer than the test, so that only the watch
// on the Secret can make it serve what another replica wrote.
func TestRunFollowsSecret(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(testContext(t))
	defer cancel()
	clk := newClock()
	cs := newClient()
	cfg := testConfig(clk)
	cfg.CheckInterval = time.Hour
	s := newManager(t, cs, cfg)
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()

	polltest.Until(t, "the first certificate", s.Ready)
	first := servedLeaf(t, s)

	// Another replica renews the certificate.
	clk.Set(dueAt(first).Add(time.Minute))
	mustSync(t, ctx, newManager(t, cs, cfg))
	renewed := leafOf(t, getSecret(t, cs).Data[KeyTLSCert])
	if renewed.Equal(first) {
		t.Fatal("the other replica did not renew")
	}
	polltest.Until(t, "the renewed certificate", func() bool {
		c, err := s.GetCertificate(nil)
		return err == nil && c.Leaf.Equal(renewed)
	})

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
}

// TestRunRetriesUntilReady: while the API server refuses, Run logs why and tries again well before the
// check interval, as the webhook cannot serve until it has a certificate.
func TestRunRetriesUntilReady(t *testing.T) {
	t.Parallel()
	ctx, logs := bufferedContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	clk := newClock()
	cs := newClient()
	refused := 0
	cs.PrependReactor("get", "secrets", func(k8stesting.Action) (bool, runtime.Object, error) {
		if refused < 2 {
			refused++
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, testSecret, errors.New("RBAC"))
		}
		return false, nil, nil
	})
	cfg := testConfig(clk)
	cfg.CheckInterval = time.Hour
	s := newManager(t, cs, cfg)
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()

	polltest.Until(t, "a certificate once the API server allows", s.Ready)
	if n := strings.Count(logs.String(), "grant the webhook's service account the RBAC rules"); n != 2 {
		t.Errorf("%d log lines name the missing RBAC, want 2", n)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}

func TestMetrics(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	clk := newClock()
	s := newManager(t, newClient(), testConfig(clk))
	reg := prometheus.NewRegistry()
	if err := RegisterMetrics(reg, s); err != nil {
		t.Fatal(err)
	}
	if v := gaugeValue(t, reg); v != 0 {
		t.Errorf("before a certificate is loaded: %v, want 0", v)
	}
	mustSync(t, ctx, s)
	if got, want := gaugeValue(t, reg), float64(servedLeaf(t, s).NotAfter.Unix()); got != want {
		t.Errorf("got %v, want NotAfter %v", got, want)
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	clk := newClock()
	tests := []struct {
		name    string
		change  func(*Config)
		wantErr bool
	}{
		{"defaults", func(*Config) {}, false},
		{"no namespace", func(c *Config) { c.Namespace = "" }, true},
		{"bad secret name", func(c *Config) { c.SecretName = "Not_A_Name" }, true},
		{"no service", func(c *Config) { c.ServiceName = "" }, true},
		{"bad configuration name", func(c *Config) { c.ValidatingWebhookConfigurations = []string{""} }, true},
		{"CA shorter than certificate", func(c *Config) { c.CAValidity = 24 * time.Hour }, true},
		{"certificate under an hour", func(c *Config) { c.CertValidity = time.Minute }, true},
		{"checks further apart than a third", func(c *Config) { c.CertValidity, c.CheckInterval = 3*time.Hour, 2*time.Hour }, true},
		{"negative interval", func(c *Config) { c.CheckInterval = -time.Second }, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := testConfig(clk)
			tt.change(&cfg)
			_, err := NewSelfSigned(newClient(), cfg)
			if (err != nil) != tt.wantErr {
				t.Fatalf("error %v, want one: %v", err, tt.wantErr)
			}
			if err != nil && !errdefs.IsInvalidArgument(err) {
				t.Errorf("error %v is not InvalidArgument", err)
			}
		})
	}
}
