package certs

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Source gives the serving certificate to a tls.Config:
//
//	&tls.Config{GetCertificate: src.GetCertificate, MinVersion: tls.VersionTLS12}
type Source interface {
	// GetCertificate returns the certificate loaded last. It ignores the hello, which may be nil.
	GetCertificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error)
	// Run keeps the certificate current until ctx ends, then returns nil. Call it once.
	Run(ctx context.Context) error
	// Ready reports whether a certificate is loaded, for a readiness probe.
	Ready() bool
}

var (
	_ Source = (*SelfSigned)(nil)
	_ Source = (*Files)(nil)
)

// Keys of the Secret's data.
const (
	KeyTLSCert = "tls.crt" // serving certificate, PEM
	KeyTLSKey  = "tls.key" // its private key, PEM
	KeyCACert  = "ca.crt"  // the CA bundle, PEM, newest first; what caBundle is set to
	KeyCAKey   = "ca.key"  // the private key of the newest CA, PEM
)

// ErrNotLoaded is returned by GetCertificate before a certificate is loaded.
var ErrNotLoaded = errors.New("no serving certificate loaded yet; see the log of the certificate loop")

// served holds the certificate presented in handshakes. It is swapped whole, so a handshake sees the old
// certificate or the new one, never half of each.
type served struct {
	p atomic.Pointer[tls.Certificate]
}

// GetCertificate returns the certificate loaded last, for tls.Config.GetCertificate. It ignores the
// hello, which may be nil.
func (s *served) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	c := s.p.Load()
	if c == nil {
		return nil, ErrNotLoaded
	}
	return c, nil
}

// Ready reports whether a certificate is loaded, for a readiness probe.
func (s *served) Ready() bool { return s.p.Load() != nil }

// RegisterMetrics registers tandem_webhook_certificate_expiration_timestamp_seconds for src on reg.
func RegisterMetrics(reg prometheus.Registerer, src Source) error {
	g := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "tandem", Subsystem: "webhook", Name: "certificate_expiration_timestamp_seconds",
		Help: "NotAfter of the webhook's serving certificate, in Unix seconds; 0 before one is loaded.",
	}, func() float64 {
		c, err := src.GetCertificate(nil)
		if err != nil || c.Leaf == nil {
			return 0
		}
		return float64(c.Leaf.NotAfter.Unix())
	})
	if err := reg.Register(g); err != nil {
		return fmt.Errorf("register webhook certificate metrics: %w", err)
	}
	return nil
}
