package certs

import (
	"testing"
	"time"
)

// A CA is renewed when a third of its validity remains, so with CertValidity above a third of
// CAValidity a serving certificate can outlive its CA; it must end with it instead.
func TestServingEndsWithCA(t *testing.T) {
	t.Parallel()
	now := newClock().Now()
	ca, key, err := newCA(testSvc, 48*time.Hour, now.Add(-40*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	c, _, err := newServing(ca, key, testConfig(newClock()).dnsNames(), 24*time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	if got := leafOf(t, c).NotAfter; !got.Equal(ca.NotAfter) {
		t.Errorf("serving certificate ends %s, want with its CA at %s", got, ca.NotAfter)
	}
}

// FuzzPlan: whatever the Secret holds, one plan makes it serve a chain that verifies, and a second plan
// at the same time finds nothing to change, so that replicas do not keep rewriting it.
func FuzzPlan(f *testing.F) {
	now := newClock().Now()
	p := planner{svc: testSvc, names: testConfig(newClock()).dnsNames(), caValidity: 10 * 365 * 24 * time.Hour, certValidity: 365 * 24 * time.Hour}
	good, err := p.plan(nil, nil, now)
	if err != nil {
		f.Fatal(err)
	}
	d := good.data
	f.Add(d[KeyTLSCert], d[KeyTLSKey], d[KeyCACert], d[KeyCAKey])
	f.Add([]byte{}, []byte{}, []byte{}, []byte{})
	f.Add(d[KeyTLSCert], d[KeyTLSKey], []byte("garbage"), d[KeyCAKey])
	f.Add(d[KeyTLSCert], d[KeyTLSKey], d[KeyCACert], []byte("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"))
	f.Add(d[KeyCACert], d[KeyCAKey], d[KeyTLSCert], d[KeyTLSKey])
	f.Fuzz(func(t *testing.T, tlsCert, tlsKey, caCert, caKey []byte) {
		data := map[string][]byte{KeyTLSCert: tlsCert, KeyTLSKey: tlsKey, KeyCACert: caCert, KeyCAKey: caKey}
		first, err := p.plan(data, nil, now)
		if err != nil {
			t.Fatal(err)
		}
		if first != nil {
			data = first.data
		}
		verifyChain(t, data, now)
		again, err := p.plan(data, data[KeyCACert], now)
		if err != nil {
			t.Fatal(err)
		}
		if again != nil {
			t.Fatalf("a second plan changes the Secret again (CA: %q, serving: %q)", again.caReason, again.reason)
		}
	})
}
