package certs

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Config configures SelfSigned. Zero durations take the defaults of DefaultConfig.
type Config struct {
	// Namespace and SecretName name the Secret all replicas share.
	Namespace  string `json:"namespace"`
	SecretName string `json:"secretName"`
	// ServiceName is the webhook's Service; the certificate covers <svc>, <svc>.<ns>, <svc>.<ns>.svc
	// (the name the API server dials) and <svc>.<ns>.svc.cluster.local.
	ServiceName string `json:"serviceName"`
	// MutatingWebhookConfigurations and ValidatingWebhookConfigurations name the configurations whose every
	// webhook's clientConfig.caBundle is kept equal to the Secret's ca.crt.
	MutatingWebhookConfigurations   []string `json:"mutatingWebhookConfigurations"`
	ValidatingWebhookConfigurations []string `json:"validatingWebhookConfigurations"`
	// CAValidity and CertValidity are how long a new CA and a new serving certificate are valid. Each is
	// renewed when less than a third of its validity remains.
	CAValidity   time.Duration `json:"caValidity"`
	CertValidity time.Duration `json:"certValidity"`
	// CheckInterval is how often the Secret and the webhook configurations are checked; the Secret is also
	// checked whenever it changes. The configurations have no watch: a `kubectl apply` that resets a
	// caBundle is repaired at the next check.
	CheckInterval time.Duration `json:"checkInterval"`
	// Now is the clock, for tests; nil is time.Now.
	Now func() time.Time `json:"-"`
}

// DefaultConfig returns the defaults of the durations; the names have none.
func DefaultConfig() Config {
	return Config{
		CAValidity:    10 * 365 * 24 * time.Hour,
		CertValidity:  365 * 24 * time.Hour,
		CheckInterval: time.Minute,
	}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.CAValidity == 0 {
		c.CAValidity = d.CAValidity
	}
	if c.CertValidity == 0 {
		c.CertValidity = d.CertValidity
	}
	if c.CheckInterval == 0 {
		c.CheckInterval = d.CheckInterval
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Validate checks c with defaults applied. Its errors are of class errdefs.ErrInvalidArgument.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	name := func(field, v string, check func(string) []string) {
		if v == "" {
			errs = append(errs, fmt.Errorf("%s is empty", field))
		} else if msgs := check(v); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("%s %q: %s", field, v, strings.Join(msgs, "; ")))
		}
	}
	name("namespace", c.Namespace, validation.IsDNS1123Label)
	name("secretName", c.SecretName, validation.IsDNS1123Subdomain)
	name("serviceName", c.ServiceName, validation.IsDNS1123Label)
	for _, n := range c.MutatingWebhookConfigurations {
		name("mutatingWebhookConfigurations", n, validation.IsDNS1123Subdomain)
	}
	for _, n := range c.ValidatingWebhookConfigurations {
		name("validatingWebhookConfigurations", n, validation.IsDNS1123Subdomain)
	}
	// Below an hour the backdating of NotBefore (notBeforeSkew) would take most of the validity.
	if c.CertValidity < time.Hour {
		errs = append(errs, fmt.Errorf("certValidity %s: want at least 1h", c.CertValidity))
	}
	if c.CAValidity < c.CertValidity {
		errs = append(errs, fmt.Errorf("caValidity %s is shorter than certValidity %s: want it longer", c.CAValidity, c.CertValidity))
	}
	// A certificate is renewed when a third of its validity remains; checks further apart than that
	// could miss the window.
	if c.CheckInterval < 0 || c.CheckInterval > c.CertValidity/3 {
		errs = append(errs, fmt.Errorf("checkInterval %s: want a positive duration below a third of certValidity", c.CheckInterval))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("webhook certificate config: %w: %w", err, errdefs.ErrInvalidArgument)
	}
	return nil
}

// dnsNames are the names the serving certificate must cover.
func (c Config) dnsNames() []string {
	svc, ns := c.ServiceName, c.Namespace
	return []string{svc, svc + "." + ns, svc + "." + ns + ".svc", svc + "." + ns + ".svc.cluster.local"}
}
