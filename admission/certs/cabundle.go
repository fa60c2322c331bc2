package certs

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
)

// webhookConfigs is the part of the typed clients of Mutating- and ValidatingWebhookConfigurations used
// here, so that one function serves both.
type webhookConfigs[T any] interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error)
	Update(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error)
}

// syncCABundles sets the caBundle of every webhook of the named configurations to bundle. A
// configuration that does not exist yet is skipped (it is logged once): it is usually applied after the
// webhook's Deployment, and the next check patches it.
func (s *SelfSigned) syncCABundles(ctx context.Context, bundle []byte) error {
	reg := s.client.AdmissionregistrationV1()
	var errs []error
	for _, name := range s.cfg.MutatingWebhookConfigurations {
		errs = append(errs, syncCABundle(ctx, s, reg.MutatingWebhookConfigurations(), "MutatingWebhookConfiguration", name, bundle,
			func(c *admissionv1.MutatingWebhookConfiguration) []*admissionv1.WebhookClientConfig {
				ccs := make([]*admissionv1.WebhookClientConfig, len(c.Webhooks))
				for i := range c.Webhooks {
					ccs[i] = &c.Webhooks[i].ClientConfig
				}
				return ccs
			}))
	}
	for _, name := range s.cfg.ValidatingWebhookConfigurations {
		errs = append(errs, syncCABundle(ctx, s, reg.ValidatingWebhookConfigurations(), "ValidatingWebhookConfiguration", name, bundle,
			func(c *admissionv1.ValidatingWebhookConfiguration) []*admissionv1.WebhookClientConfig {
				ccs := make([]*admissionv1.WebhookClientConfig, len(c.Webhooks))
				for i := range c.Webhooks {
					ccs[i] = &c.Webhooks[i].ClientConfig
				}
				return ccs
			}))
	}
	return errors.Join(errs...)
}

// syncCABundle updates one configuration, reading it again when someone else updated it in between.
func syncCABundle[T any](ctx context.Context, s *SelfSigned, client webhookConfigs[T], kind, name string, bundle []byte,
	clientConfigs func(T) []*admissionv1.WebhookClientConfig) error {
	logger := klog.FromContext(ctx).WithValues("kind", kind, "name", name)
	key := kind + "/" + name
	var updated int
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		updated = 0
		c, err := client.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			if !s.absent[key] {
				logger.V(2).Info("Webhook configuration not found; will set its caBundle once it exists")
				s.absent[key] = true
			}
			return nil
		}
		if err != nil {
			return err
		}
		delete(s.absent, key)
		for _, cc := range clientConfigs(c) {
			if !bytes.Equal(cc.CABundle, bundle) {
				cc.CABundle = bytes.Clone(bundle)
				updated++
			}
		}
		if updated == 0 {
			return nil
		}
		_, err = client.Update(ctx, c, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("set caBundle of %s %s: %w", kind, name, rbacHint(err))
	}
	if updated > 0 {
		// After the first start, this line means someone reset the caBundle (a `kubectl apply` of the
		// configuration) or the CA rotated.
		logger.Info("Set caBundle of webhook configuration", "webhooks", updated)
	}
	return nil
}
