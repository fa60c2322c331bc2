package certs

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"time"

	"k8s.io/klog/v2"
)

// DefaultPollInterval is the Files poll interval when none is given. Kubelet itself takes up to a minute
// or more to project a changed Secret into a volume, so polling more often gains little.
const DefaultPollInterval = 10 * time.Second

// Files serves a certificate and key read from files, such as a cert-manager Secret mounted as a volume,
// and reads them again when they change.
type Files struct {
	served
	certFile, keyFile string
	interval          time.Duration

	// lastCert and lastKey are the contents last tried, loaded or refused, so that a bad pair is logged
	// once rather than at every poll. Only the constructor and Run touch them.
	lastCert, lastKey []byte
}

// NewFiles loads the pair at certFile and keyFile, and returns an error if it cannot. pollInterval 0 is
// DefaultPollInterval.
func NewFiles(certFile, keyFile string, pollInterval time.Duration) (*Files, error) {
	if pollInterval < 0 {
		return nil, fmt.Errorf("webhook certificate poll interval %s: want a positive duration", pollInterval)
	}
	if pollInterval == 0 {
		pollInterval = DefaultPollInterval
	}
	f := &Files{certFile: certFile, keyFile: keyFile, interval: pollInterval}
	cert, key, err := f.read()
	if err != nil {
		return nil, err
	}
	c, err := tls.X509KeyPair(cert, key)
	if err != nil {
		return nil, fmt.Errorf("webhook certificate %s and key %s: %w; check that they are PEM and belong together", certFile, keyFile, err)
	}
	f.lastCert, f.lastKey = cert, key
	f.p.Store(&c)
	return f, nil
}

// Run polls the files until ctx ends. Contents are compared rather than modification times: kubelet
// updates a Secret volume by swapping a symlink to a new directory, which a file's mtime need not show;
// and each poll opens the paths again, so it follows the swap.
func (f *Files) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithValues("certFile", f.certFile, "keyFile", f.keyFile)
	ctx = klog.NewContext(ctx, logger)
	if c, _ := f.GetCertificate(nil); c != nil {
		logger.Info("Serving the webhook certificate from files", "notAfter", c.Leaf.NotAfter, "pollInterval", f.interval)
	}
	t := time.NewTicker(f.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			f.reload(ctx)
		}
	}
}

// reload loads the files if they changed. A pair that does not load is logged and the old one kept: the
// webhook keeps serving while whoever writes the files fixes them. A writer that replaces the two files
// one at a time may be caught in between; the next poll then loads the finished pair.
func (f *Files) reload(ctx context.Context) {
	logger := klog.FromContext(ctx)
	cert, key, err := f.read()
	if err != nil {
		logger.Error(err, "Reading the webhook certificate failed; still serving the previous one")
		return
	}
	if bytes.Equal(cert, f.lastCert) && bytes.Equal(key, f.lastKey) {
		return
	}
	f.lastCert, f.lastKey = cert, key
	c, err := tls.X509KeyPair(cert, key)
	if err != nil {
		logger.Error(err, "The changed webhook certificate and key do not load; still serving the previous ones")
		return
	}
	f.p.Store(&c)
	logger.Info("Serving the webhook certificate from files", "notAfter", c.Leaf.NotAfter,
		"issuer", c.Leaf.Issuer.CommonName, "serial", c.Leaf.SerialNumber.Text(16))
}

func (f *Files) read() (cert, key []byte, err error) {
	if cert, err = os.ReadFile(f.certFile); err != nil {
		return nil, nil, fmt.Errorf("read webhook certificate: %w", err)
	}
	if key, err = os.ReadFile(f.keyFile); err != nil {
		return nil, nil, fmt.Errorf("read webhook certificate key: %w", err)
	}
	return cert, key, nil
}
