package extender

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"k8s.io/klog/v2"
)

// TLSFiles are the PEM files of the extender's HTTPS listener.
type TLSFiles struct {
	CertFile string // serving certificate, followed by its intermediates
	KeyFile  string
	// ClientCAFile, when set, makes every client present a certificate signed by one of its
	// CAs: kube-scheduler's extenders[].tlsConfig.certFile and keyFile.
	ClientCAFile string
}

// retryFailedLoad is how often files that failed to load are tried again although they look
// unchanged: a file caught half-written may keep its modification time once complete.
const retryFailedLoad = 10 * time.Second

// NewTLSConfig loads files and returns a server configuration that serves them, and reads them
// again, for the next connection, whenever one has changed. Kubernetes updates a mounted Secret
// by swapping a symlink, so files are compared by what they resolve to: device and inode,
// modification time and size, checked at each TLS handshake (a stat per file; kube-scheduler
// keeps its connections open). A change that does not load (a certificate without its new key
// yet, a truncated file) is logged and the previous certificate and CAs stay in use.
func NewTLSConfig(ctx context.Context, files TLSFiles) (*tls.Config, error) {
	r := &certReloader{files: files, logger: klog.FromContext(ctx), now: time.Now}
	if err := r.reload(); err != nil {
		return nil, err
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, GetConfigForClient: r.configForClient}, nil
}

type certReloader struct {
	files  TLSFiles
	logger klog.Logger
	now    func() time.Time

	mu       sync.Mutex
	current  *tls.Config   // from the last files that loaded
	seen     []os.FileInfo // the files as last tried, loaded or not
	failedAt time.Time     // zero when the last try loaded
}

func (r *certReloader) paths() []string {
	p := []string{r.files.CertFile, r.files.KeyFile}
	if r.files.ClientCAFile != "" {
		p = append(p, r.files.ClientCAFile)
	}
	return p
}

func (r *certReloader) configForClient(*tls.ClientHelloInfo) (*tls.Config, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.changedLocked() {
		if err := r.reloadLocked(); err != nil {
			r.logger.Error(err, "Keeping the previous TLS certificate and client CAs", "certFile", r.files.CertFile, "keyFile", r.files.KeyFile, "clientCAFile", r.files.ClientCAFile)
		}
	}
	return r.current, nil
}

// changedLocked reports whether a file differs from the last try, or the last try failed long
// enough ago to try again.
func (r *certReloader) changedLocked() bool {
	if !r.failedAt.IsZero() && r.now().Sub(r.failedAt) >= retryFailedLoad {
		return true
	}
	for i, p := range r.paths() {
		fi, err := os.Stat(p)
		if err != nil {
			// Gone for now (a symlink being swapped): keep serving; try once it is back.
			return false
		}
		old := r.seen[i]
		if old == nil || !os.SameFile(old, fi) || !old.ModTime().Equal(fi.ModTime()) || old.Size() != fi.Size() {
			return true
		}
	}
	return false
}

func (r *certReloader) reload() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reloadLocked()
}

func (r *certReloader) reloadLocked() error {
	paths := r.paths()
	seen := make([]os.FileInfo, len(paths))
	for i, p := range paths {
		seen[i], _ = os.Stat(p) // nil on error: the load below reports it
	}
	r.seen = seen
	cfg, err := r.load()
	if err != nil {
		r.failedAt = r.now()
		return err
	}
	r.failedAt = time.Time{}
	r.current = cfg
	leaf := cfg.Certificates[0].Leaf
	r.logger.Info("Loaded TLS certificate", "certFile", r.files.CertFile, "subject", leaf.Subject.String(),
		"serial", leaf.SerialNumber.String(), "notAfter", leaf.NotAfter, "clientCAFile", r.files.ClientCAFile)
	return nil
}

func (r *certReloader) load() (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(r.files.CertFile, r.files.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("load TLS certificate %s and key %s: %w", r.files.CertFile, r.files.KeyFile, err)
	}
	cfg := &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{cert},
		// The configuration replaces the server's for the connection, so it names the
		// protocols net/http's ServeTLS would have added.
		NextProtos: []string{"h2", "http/1.1"},
	}
	if r.files.ClientCAFile == "" {
		return cfg, nil
	}
	pem, err := os.ReadFile(r.files.ClientCAFile)
	if err != nil {
		return nil, fmt.Errorf("read client CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, errors.New("client CA file " + r.files.ClientCAFile + " holds no PEM certificate")
	}
	cfg.ClientCAs = pool
	cfg.ClientAuth = tls.RequireAndVerifyClientCert
	return cfg, nil
}
