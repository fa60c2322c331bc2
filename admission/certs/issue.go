package certs

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"time"
)

const (
	// notBeforeSkew backdates NotBefore, so that an API server whose clock is behind ours still accepts a
	// certificate made a moment ago (client-go's cert.GenerateSelfSignedCertKey does the same).
	notBeforeSkew = time.Hour
	// caRolloverDelay is how long a new CA sits in ca.crt, and in the webhook configurations, before the
	// serving certificate moves to it: API servers learn a new caBundle through a watch, which can lag.
	caRolloverDelay = 10 * time.Minute
)

// renewDue reports whether less than a third of c's validity remains at now.
func renewDue(c *x509.Certificate, now time.Time) bool {
	return c.NotAfter.Sub(now) < c.NotAfter.Sub(c.NotBefore)/3
}

// newKey makes an ECDSA P-256 key: generated in well under a millisecond where RSA 2048 takes tens to
// hundreds (two replicas starting together both generate before one loses the race), with smaller
// handshakes; every Kubernetes API server, being Go, verifies it.
func newKey() (*ecdsa.PrivateKey, error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate ECDSA key: %w", err)
	}
	return k, nil
}

func serialNumber() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, fmt.Errorf("generate serial number: %w", err)
	}
	return n, nil
}

// newCA makes a self-signed CA. Its name carries the time, so that CAs in one bundle, and in an
// operator's `openssl x509` output, are told apart.
func newCA(svc string, validity time.Duration, now time.Time) (*x509.Certificate, crypto.Signer, error) {
	key, err := newKey()
	if err != nil {
		return nil, nil, err
	}
	sn, err := serialNumber()
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          sn,
		Subject:               pkix.Name{CommonName: fmt.Sprintf("%s-ca@%d", svc, now.Unix())},
		NotBefore:             now.Add(-notBeforeSkew),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, nil, fmt.Errorf("create CA certificate: %w", err)
	}
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, fmt.Errorf("parse the CA certificate just made: %w", err)
	}
	return ca, key, nil
}

// newServing makes a serving certificate for names signed by ca. It ends no later than ca does: a chain
// is only as valid as its CA.
func newServing(ca *x509.Certificate, caKey crypto.Signer, names []string, validity time.Duration, now time.Time) (certPEM, keyPEM []byte, err error) {
	key, err := newKey()
	if err != nil {
		return nil, nil, err
	}
	sn, err := serialNumber()
	if err != nil {
		return nil, nil, err
	}
	notAfter := now.Add(validity)
	if notAfter.After(ca.NotAfter) {
		notAfter = ca.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber: sn,
		Subject:      pkix.Name{CommonName: names[2]}, // <svc>.<ns>.svc, the name the API server dials
		DNSNames:     names,
		NotBefore:    now.Add(-notBeforeSkew),
		NotAfter:     notAfter,
		// KeyEncipherment is for RSA key exchange; an ECDSA key only signs.
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey)
	if err != nil {
		return nil, nil, fmt.Errorf("create serving certificate: %w", err)
	}
	keyPEM, err = encodeKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM, nil
}

func encodeKey(k crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, fmt.Errorf("encode private key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

func encodeCerts(cs []*x509.Certificate) []byte {
	var b bytes.Buffer
	for _, c := range cs {
		_ = pem.Encode(&b, &pem.Block{Type: "CERTIFICATE", Bytes: c.Raw}) // a bytes.Buffer does not fail
	}
	return b.Bytes()
}

// parseCAs returns the CA certificates of a PEM bundle that have not expired at now, in bundle order,
// and how many blocks it left out: expired CAs, and blocks that are not CA certificates at all, so that
// rewriting the bundle repairs it.
func parseCAs(bundle []byte, now time.Time) (cas []*x509.Certificate, dropped int) {
	for {
		var b *pem.Block
		b, bundle = pem.Decode(bundle)
		if b == nil {
			return cas, dropped
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if b.Type != "CERTIFICATE" || err != nil || !c.IsCA || !now.Before(c.NotAfter) {
			dropped++
			continue
		}
		cas = append(cas, c)
	}
}

// parseKey accepts the encodings openssl and Go write (PKCS #8, SEC 1, PKCS #1), so that a CA made by
// hand can be put in the Secret.
func parseKey(p []byte) (crypto.Signer, error) {
	b, _ := pem.Decode(p)
	if b == nil {
		return nil, errors.New("no PEM block")
	}
	if k, err := x509.ParsePKCS8PrivateKey(b.Bytes); err == nil {
		if s, ok := k.(crypto.Signer); ok {
			return s, nil
		}
		return nil, fmt.Errorf("a %T cannot sign", k)
	}
	if k, err := x509.ParseECPrivateKey(b.Bytes); err == nil {
		return k, nil
	}
	if k, err := x509.ParsePKCS1PrivateKey(b.Bytes); err == nil {
		return k, nil
	}
	return nil, fmt.Errorf("%s block is not a PKCS #8, EC or RSA private key", b.Type)
}

// signerOf returns the CA among cas whose key is key.
func signerOf(cas []*x509.Certificate, key crypto.Signer) *x509.Certificate {
	if key == nil {
		return nil
	}
	pub, ok := key.Public().(interface{ Equal(crypto.PublicKey) bool })
	if !ok {
		return nil
	}
	for _, c := range cas {
		if pub.Equal(c.PublicKey) {
			return c
		}
	}
	return nil
}

// plan is what the Secret must become.
type plan struct {
	data map[string][]byte // the four keys, to write over the Secret's
	// newCA is the CA made by this plan, and caReason why; nil if none.
	newCA    *x509.Certificate
	caReason string
	// serving is the serving certificate issued by this plan, and reason why; nil if none.
	serving *x509.Certificate
	reason  string
	// dropped counts blocks left out of ca.crt: expired CAs, or not CAs at all; bundled counts the CAs
	// it holds.
	dropped, bundled int
}

// planner decides, from a Secret's data, what it must become. It is a pure function of its inputs and
// the time, so that two replicas looking at the same Secret agree.
type planner struct {
	svc                      string
	names                    []string
	caValidity, certValidity time.Duration
}

// plan returns nil when data needs no change. published is the bundle every webhook configuration was
// last seen to carry (nil if unknown): the serving certificate moves to a new CA only once it is there.
func (p planner) plan(data map[string][]byte, published []byte, now time.Time) (*plan, error) {
	out := &plan{data: map[string][]byte{KeyCAKey: data[KeyCAKey]}}
	var cas []*x509.Certificate
	cas, out.dropped = parseCAs(data[KeyCACert], now)
	key, keyErr := parseKey(data[KeyCAKey])
	signer := signerOf(cas, key)
	switch {
	case len(data[KeyCACert]) == 0 && len(data[KeyCAKey]) == 0:
		out.caReason = "absent"
	case keyErr != nil:
		out.caReason = "ca.key unusable: " + keyErr.Error()
	case signer == nil:
		out.caReason = "ca.key matches no valid CA in ca.crt"
	case renewDue(signer, now):
		out.caReason = "expiring"
	}
	if out.caReason != "" {
		ca, k, err := newCA(p.svc, p.caValidity, now)
		if err != nil {
			return nil, err
		}
		if out.data[KeyCAKey], err = encodeKey(k); err != nil {
			return nil, err
		}
		out.newCA, signer, key = ca, ca, k
		cas = append([]*x509.Certificate{ca}, cas...)
	}
	out.data[KeyCACert], out.bundled = encodeCerts(cas), len(cas)

	out.data[KeyTLSCert], out.data[KeyTLSKey] = data[KeyTLSCert], data[KeyTLSKey]
	if out.reason = p.servingReason(data, cas, signer, bytes.Equal(published, out.data[KeyCACert]), now); out.reason != "" {
		c, k, err := newServing(signer, key, p.names, p.certValidity, now)
		if err != nil {
			return nil, err
		}
		out.data[KeyTLSCert], out.data[KeyTLSKey] = c, k
		if out.serving, err = parseLeaf(c); err != nil {
			return nil, err
		}
	}
	if out.newCA == nil && out.serving == nil && bytes.Equal(out.data[KeyCACert], data[KeyCACert]) {
		return nil, nil
	}
	return out, nil
}

// servingReason says why the serving certificate in data must be issued again, or "" if it need not be.
// published tells whether the webhook configurations carry the bundle cas.
func (p planner) servingReason(data map[string][]byte, cas []*x509.Certificate, signer *x509.Certificate, published bool, now time.Time) string {
	if len(data[KeyTLSCert]) == 0 && len(data[KeyTLSKey]) == 0 {
		return "absent"
	}
	pair, err := tls.X509KeyPair(data[KeyTLSCert], data[KeyTLSKey])
	if err != nil {
		return "unusable"
	}
	leaf := pair.Leaf
	if renewDue(leaf, now) {
		return "expiring"
	}
	for _, n := range p.names {
		if leaf.VerifyHostname(n) != nil {
			return "does not cover " + n
		}
	}
	roots := x509.NewCertPool()
	for _, c := range cas {
		roots.AddCert(c)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{
		Roots: roots, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}); err != nil {
		return "untrusted" // e.g. ca.crt replaced by hand
	}
	if leaf.CheckSignatureFrom(signer) != nil {
		// Signed by an older CA still in the bundle: move to the newest once the API servers trust it.
		if published && now.After(signer.NotBefore.Add(notBeforeSkew+caRolloverDelay)) {
			return "CA rotated"
		}
	}
	return ""
}

func parseLeaf(certPEM []byte) (*x509.Certificate, error) {
	b, _ := pem.Decode(certPEM)
	if b == nil {
		return nil, errors.New("no PEM block in certificate")
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parse certificate: %w", err)
	}
	return c, nil
}
