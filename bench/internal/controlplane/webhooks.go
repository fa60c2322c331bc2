package controlplane

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/tandemkit/tandem/admission"
	"github.com/tandemkit/tandem/bench/internal/runctx"
)

var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// ApplyCRD creates deploy/webhook/crd.yaml and waits until it is Established.
func ApplyCRD(ctx context.Context, dyn dynamic.Interface, root string) error {
	b, err := os.ReadFile(filepath.Join(root, "deploy", "webhook", "crd.yaml"))
	if err != nil {
		return err
	}
	var obj map[string]any
	if err := yaml.Unmarshal(b, &obj); err != nil {
		return fmt.Errorf("deploy/webhook/crd.yaml: %w", err)
	}
	u := &unstructured.Unstructured{Object: obj}
	if _, err := dyn.Resource(crdResource).Create(ctx, u, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create the ClusterColocationProfile CRD: %w", err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		got, err := dyn.Resource(crdResource).Get(ctx, u.GetName(), metav1.GetOptions{})
		if err == nil {
			conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
			for _, c := range conds {
				m, _ := c.(map[string]any)
				if m["type"] == "Established" && m["status"] == "True" {
					return nil
				}
			}
		}
		if time.Now().After(deadline) {
			if err != nil {
				return fmt.Errorf("CRD %s not Established within a minute: %w", u.GetName(), err)
			}
			return fmt.Errorf("CRD %s not Established within a minute", u.GetName())
		}
		if err := runctx.Sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
}

// WebhookSet is one registration of tandem-webhook's webhooks (deploy/webhook), or of a webhook
// registered alike but for the names, the port and the namespaces it takes.
type WebhookSet struct {
	Config string // the two configurations' name
	Domain string // the webhooks are named pods.mutate.<domain>, pods.validate.<domain>, ...
	App    string // their app.kubernetes.io/name label
	// Namespaces selects the namespaces whose pods are sent to the webhook.
	Namespaces *metav1.LabelSelector
	Port       int // on 127.0.0.1
}

// RegisterWebhooks registers the webhooks of deploy/webhook/webhooks.yaml at the
// set's URL, with failurePolicy Fail (a request the webhook did not answer fails rather than
// passes unmeasured) and a namespaceSelector that takes only the set's namespaces.
func RegisterWebhooks(ctx context.Context, cs kubernetes.Interface, ws WebhookSet, caPEM []byte) error {
	url := func(path string) *string { return ptr.To(fmt.Sprintf("https://127.0.0.1:%d%s", ws.Port, path)) }
	fail := ptr.To(admissionregistrationv1.Fail)
	none := ptr.To(admissionregistrationv1.SideEffectClassNone)
	podRule := []admissionregistrationv1.RuleWithOperations{{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
		Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"},
			Scope: ptr.To(admissionregistrationv1.NamespacedScope)},
	}}
	nsSel := ws.Namespaces
	meta := metav1.ObjectMeta{Name: ws.Config, Labels: map[string]string{"app.kubernetes.io/name": ws.App}}
	if _, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: meta,
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name: "pods.mutate." + ws.Domain, AdmissionReviewVersions: []string{"v1"}, SideEffects: none, FailurePolicy: fail,
			TimeoutSeconds: ptr.To[int32](5),
			ClientConfig:   admissionregistrationv1.WebhookClientConfig{URL: url(admission.MutatePodPath), CABundle: caPEM},
			Rules:          podRule, NamespaceSelector: nsSel,
		}},
	}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create MutatingWebhookConfiguration %s: %w", ws.Config, err)
	}
	if _, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: meta,
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name: "pods.validate." + ws.Domain, AdmissionReviewVersions: []string{"v1"}, SideEffects: none, FailurePolicy: fail,
			TimeoutSeconds: ptr.To[int32](5),
			ClientConfig:   admissionregistrationv1.WebhookClientConfig{URL: url(admission.ValidatePodPath), CABundle: caPEM},
			Rules:          podRule, NamespaceSelector: nsSel,
		}, {
			Name: "clustercolocationprofiles.validate." + ws.Domain, AdmissionReviewVersions: []string{"v1"}, SideEffects: none, FailurePolicy: fail,
			TimeoutSeconds: ptr.To[int32](5),
			ClientConfig:   admissionregistrationv1.WebhookClientConfig{URL: url(admission.ValidateProfilePath), CABundle: caPEM},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{"config.koordinator.sh"}, APIVersions: []string{"v1alpha1"},
					Resources: []string{"clustercolocationprofiles"}, Scope: ptr.To(admissionregistrationv1.ClusterScope)},
			}},
		}},
	}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create ValidatingWebhookConfiguration %s: %w", ws.Config, err)
	}
	return nil
}
