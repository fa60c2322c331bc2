package certs

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"maps"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

const (
	// syncAttempts bounds the read-decide-write rounds of one check: each lost round means another
	// replica wrote the Secret, and what it wrote is normally what this one wanted.
	syncAttempts = 5
	// syncTimeout bounds one check, so that a request the API server never answers cannot stop renewal.
	syncTimeout = 30 * time.Second
	// firstRetry is the wait after a failed check while no certificate is loaded, doubling up to
	// CheckInterval: until then the webhook cannot serve, so waiting the whole interval would be long.
	firstRetry = time.Second
)

// SelfSigned makes and renews its own CA and serving certificate, shared with the other replicas
// through a Secret, and keeps the caBundle of the webhook configurations current. See the package doc.
type SelfSigned struct {
	served
	client  kubernetes.Interface
	cfg     Config
	planner planner

	// mu serialises checks; Run is the only caller outside tests.
	mu sync.Mutex
	// published is the ca.crt every named webhook configuration carried at the end of the last check.
	published []byte
	// absent holds the configurations last seen missing, so that each is logged once, not every check.
	absent map[string]bool
}

// NewSelfSigned returns a SelfSigned for cfg. It makes no API call; Run does.
func NewSelfSigned(client kubernetes.Interface, cfg Config) (*SelfSigned, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	return &SelfSigned{
		client: client,
		cfg:    cfg,
		planner: planner{
			svc: cfg.ServiceName, names: cfg.dnsNames(),
			caValidity: cfg.CAValidity, certValidity: cfg.CertValidity,
		},
		absent: map[string]bool{},
	}, nil
}

// Run checks the Secret and the webhook configurations every CheckInterval, and whenever the Secret
// changes, until ctx ends. A failed check is logged and tried again; it does not end Run.
func (s *SelfSigned) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithValues("secret", klog.KRef(s.cfg.Namespace, s.cfg.SecretName))
	ctx = klog.NewContext(ctx, logger)
	logger.Info("Keeping the webhook serving certificate current", "service", s.cfg.ServiceName,
		"mutatingWebhookConfigurations", s.cfg.MutatingWebhookConfigurations,
		"validatingWebhookConfigurations", s.cfg.ValidatingWebhookConfigurations)

	changed := make(chan struct{}, 1)
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { s.watchSecret(ctx, changed) })

	retry := firstRetry
	for {
		wait := s.cfg.CheckInterval
		err := s.sync(ctx)
		switch {
		case err == nil:
			retry = firstRetry
		case ctx.Err() != nil: // stopping: the select below returns
		default:
			logger.Error(err, "Checking the webhook certificate failed; will retry")
			if !s.Ready() {
				wait, retry = min(retry, wait), retry*2
			}
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			logger.Info("Stopped keeping the webhook serving certificate current")
			return nil
		case <-t.C:
		case <-changed:
			t.Stop()
		}
	}
}

// watchSecret signals changed whenever the Secret changes, so that a replica serves what another wrote
// within moments instead of at its next check. It only triggers checks, which read the Secret afresh.
func (s *SelfSigned) watchSecret(ctx context.Context, changed chan<- struct{}) {
	// Selecting the one Secret by name lets RBAC restrict list and watch to it (resourceNames).
	sel := fields.OneTermEqualSelector("metadata.name", s.cfg.SecretName).String()
	inf := coreinformers.NewFilteredSecretInformer(s.client, s.cfg.Namespace, 0, cache.Indexers{},
		func(o *metav1.ListOptions) { o.FieldSelector = sel })
	notify := func(obj any) {
		if m, ok := obj.(metav1.Object); ok && m.GetName() != s.cfg.SecretName {
			return
		}
		select {
		case changed <- struct{}{}:
		default: // a check is already due
		}
	}
	logger := klog.FromContext(ctx)
	if _, err := inf.AddEventHandlerWithOptions(cache.ResourceEventHandlerFuncs{
		AddFunc:    notify,
		UpdateFunc: func(_, obj any) { notify(obj) },
		DeleteFunc: notify,
	}, cache.HandlerOptions{Logger: &logger}); err != nil {
		// Only a stopped informer refuses a handler; the periodic check still runs.
		logger.Error(err, "Watching the webhook certificate Secret failed; relying on periodic checks")
		return
	}
	inf.RunWithContext(ctx)
}

// sync is one check: it brings the Secret up to date, serves its certificate, and sets the caBundle of
// the webhook configurations to its ca.crt.
func (s *SelfSigned) sync(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, syncTimeout)
	defer cancel()

	sec, err := s.ensureSecret(ctx)
	if err != nil {
		return err
	}
	if err := s.load(ctx, sec); err != nil {
		return err
	}
	bundle := sec.Data[KeyCACert]
	err = s.syncCABundles(ctx, bundle)
	if err == nil {
		s.published = bytes.Clone(bundle)
	} else {
		s.published = nil
	}
	return err
}

// ensureSecret reads the Secret and writes it when it must change, until a round sees its write land or
// nothing to change. It returns the Secret as stored.
func (s *SelfSigned) ensureSecret(ctx context.Context) (*corev1.Secret, error) {
	logger := klog.FromContext(ctx)
	secrets := s.client.CoreV1().Secrets(s.cfg.Namespace)
	ref := s.cfg.Namespace + "/" + s.cfg.SecretName
	for range syncAttempts {
		sec, err := secrets.Get(ctx, s.cfg.SecretName, metav1.GetOptions{})
		absent := apierrors.IsNotFound(err)
		if err != nil && !absent {
			return nil, fmt.Errorf("read secret %s: %w", ref, rbacHint(err))
		}
		var data map[string][]byte
		if !absent {
			data = sec.Data
		}
		now := s.cfg.Now()
		p, err := s.planner.plan(data, s.published, now)
		if err != nil {
			return nil, fmt.Errorf("secret %s: %w", ref, err)
		}
		if p == nil {
			return sec, nil
		}
		if absent {
			sec = &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Namespace: s.cfg.Namespace, Name: s.cfg.SecretName},
				Type:       corev1.SecretTypeTLS,
				Data:       p.data,
			}
			sec, err = secrets.Create(ctx, sec, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				logger.V(2).Info("Another replica created the webhook certificate Secret first; using theirs")
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("create secret %s: %w", ref, rbacHint(err))
			}
		} else {
			sec = sec.DeepCopy()
			// Keys other than ours are kept; the Secret's type cannot change, and need not.
			sec.Data = maps.Clone(sec.Data)
			if sec.Data == nil {
				sec.Data = map[string][]byte{}
			}
			maps.Copy(sec.Data, p.data)
			sec, err = secrets.Update(ctx, sec, metav1.UpdateOptions{})
			if apierrors.IsConflict(err) {
				logger.V(2).Info("Another replica updated the webhook certificate Secret first; reading it again")
				continue
			}
			if apierrors.IsNotFound(err) {
				continue // deleted since read: create it
			}
			if err != nil {
				return nil, fmt.Errorf("update secret %s: %w", ref, rbacHint(err))
			}
		}
		logPlan(logger, p)
		return sec, nil
	}
	return nil, fmt.Errorf("secret %s changed under every one of %d attempts to update it; if more than the webhook's replicas write it, stop the others", ref, syncAttempts)
}

func logPlan(logger klog.Logger, p *plan) {
	if p.newCA != nil {
		logger.Info("Made a new webhook CA", "reason", p.caReason, "notAfter", p.newCA.NotAfter,
			"subject", p.newCA.Subject.CommonName, "bundledCAs", p.bundled)
	}
	if p.dropped > 0 {
		logger.Info("Dropped expired or unusable CAs from the webhook CA bundle", "dropped", p.dropped)
	}
	if p.serving != nil {
		logger.Info("Issued a webhook serving certificate", "reason", p.reason, "notAfter", p.serving.NotAfter,
			"issuer", p.serving.Issuer.CommonName, "serial", p.serving.SerialNumber.Text(16))
	}
}

// load serves the Secret's certificate if it is not served already.
func (s *SelfSigned) load(ctx context.Context, sec *corev1.Secret) error {
	c, err := tls.X509KeyPair(sec.Data[KeyTLSCert], sec.Data[KeyTLSKey])
	if err != nil {
		// ensureSecret has just checked this pair: only a writer other than the replicas gets here.
		return fmt.Errorf("secret %s/%s holds no usable serving certificate (%w); delete the secret to have it made again", sec.Namespace, sec.Name, err)
	}
	if old := s.p.Load(); old != nil && bytes.Equal(old.Leaf.Raw, c.Leaf.Raw) {
		return nil
	}
	s.p.Store(&c)
	klog.FromContext(ctx).Info("Serving the webhook certificate", "notAfter", c.Leaf.NotAfter,
		"issuer", c.Leaf.Issuer.CommonName, "serial", c.Leaf.SerialNumber.Text(16))
	return nil
}

// rbacHint says which RBAC is missing when the API server refused a call.
func rbacHint(err error) error {
	if apierrors.IsForbidden(err) {
		return fmt.Errorf("%w; grant the webhook's service account the RBAC rules in the doc of package admission/certs", err)
	}
	return err
}
