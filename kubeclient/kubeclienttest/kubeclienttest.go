// Package kubeclienttest gives tests kubeclient's methods on a client-go clientset, such as the fake one
// from k8s.io/client-go/kubernetes/fake: unit tests script the API server with it, where no real API
// server runs (tier 2 of the e2e tests has one). Only tests import it, so tandem-proxy does not link
// every API group for it.
package kubeclienttest

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// Clientset has the methods of *kubeclient.Client, answered by a clientset.
type Clientset struct{ kubernetes.Interface }

// GetNode reads a Node.
func (c Clientset) GetNode(ctx context.Context, name string) (*corev1.Node, error) {
	return c.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
}

// PatchNode patches a Node or one of its subresources.
func (c Clientset) PatchNode(ctx context.Context, name string, pt types.PatchType, data []byte, subresources ...string) (*corev1.Node, error) {
	return c.CoreV1().Nodes().Patch(ctx, name, pt, data, metav1.PatchOptions{}, subresources...)
}

// GetPod reads a Pod.
func (c Clientset) GetPod(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	return c.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
}

// EvictPod evicts a pod.
func (c Clientset) EvictPod(ctx context.Context, eviction *policyv1.Eviction) error {
	return c.CoreV1().Pods(eviction.Namespace).EvictV1(ctx, eviction)
}

// CreateEvent records an Event.
func (c Clientset) CreateEvent(ctx context.Context, event *corev1.Event) (*corev1.Event, error) {
	return c.CoreV1().Events(event.Namespace).Create(ctx, event, metav1.CreateOptions{})
}

// PodListWatch lists and watches the pods that fieldSelector selects. It tells the informer whether the
// clientset streams its initial list (the fake one does not), as client-go's own informers do.
func (c Clientset) PodListWatch(fieldSelector string) cache.ListerWatcher {
	return cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.FieldSelector = fieldSelector
			return c.CoreV1().Pods(metav1.NamespaceAll).List(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.FieldSelector = fieldSelector
			return c.CoreV1().Pods(metav1.NamespaceAll).Watch(ctx, opts)
		},
	}, c.Interface)
}

// ConfigMapListWatch lists and watches the one ConfigMap namespace/name, selected by metadata.name.
func (c Clientset) ConfigMapListWatch(namespace, name string) cache.ListerWatcher {
	selector := fields.OneTermEqualSelector("metadata.name", name).String()
	return cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.FieldSelector = selector
			return c.CoreV1().ConfigMaps(namespace).List(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.FieldSelector = selector
			return c.CoreV1().ConfigMaps(namespace).Watch(ctx, opts)
		},
	}, c.Interface)
}

// NodeListWatch lists and watches the one Node name, selected by metadata.name.
func (c Clientset) NodeListWatch(name string) cache.ListerWatcher {
	selector := fields.OneTermEqualSelector("metadata.name", name).String()
	return cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.FieldSelector = selector
			return c.CoreV1().Nodes().List(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.FieldSelector = selector
			return c.CoreV1().Nodes().Watch(ctx, opts)
		},
	}, c.Interface)
}
