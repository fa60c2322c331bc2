// Package kubeclient is the Kubernetes API client of tandem-proxy: the pods of its node, its Node
// object, evictions and events, core/v1 and policy/v1 only.
//
// client-go's kubernetes.Clientset links and registers every API group of Kubernetes at start, and the
// pages that touches stay resident: measured with a pod informer, 21.2 MiB of RSS against 11.5 MiB for
// the same informer on this client, and an executable 18 MB larger. tandem-proxy runs on every node;
// docs/performance.md has its memory at rest.
package kubeclient

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

// Client calls the API server's core/v1 endpoints. It is safe for concurrent use.
type Client struct {
	rc     rest.Interface
	params runtime.ParameterCodec
	clock  *serverClock
}

// serverClock keeps the API server's clock minus the node's, from the Date header of every answer.
// Batch windows follow the node's clock; this is how a node learns that its clock is off without a
// request of its own. Date has whole seconds, so the offset is known to about a second.
type serverClock struct {
	offset   atomic.Int64 // nanoseconds
	measured atomic.Bool
	now      func() time.Time
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func (c *serverClock) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(req)
		if err == nil {
			c.observe(resp.Header.Get("Date"))
		}
		return resp, err
	})
}

func (c *serverClock) observe(date string) {
	server, err := http.ParseTime(date)
	if err != nil {
		return
	}
	// The server's clock read somewhere in the second Date names.
	c.offset.Store(int64(server.Add(500 * time.Millisecond).Sub(c.now())))
	c.measured.Store(true)
}

// ClockOffset is the API server's clock minus this node's, from the last answer's Date header; ok is
// false before any answer. Accurate to about a second.
func (c *Client) ClockOffset() (offset time.Duration, ok bool) {
	if !c.clock.measured.Load() {
		return 0, false
	}
	return time.Duration(c.clock.offset.Load()), true
}

// ErrNoConfig is returned by Config when there is neither a kubeconfig nor an in-cluster configuration:
// tandem-proxy then runs standalone.
var ErrNoConfig = errors.New("no kubeconfig and not in a cluster")

// Config reads the kubeconfig at path, or the in-cluster configuration when path is empty. A kubeconfig
// that does not exist (yet: kubelet writes its own after the TLS bootstrap) is an error that wraps
// fs.ErrNotExist, so that tandem-proxy can serve standalone and wait for it.
//
// A kubeconfig that names its client certificate and key as files (kubelet.conf names
// /var/lib/kubelet/pki/kubelet-client-current.pem, a symlink kubelet swaps when it rotates the certificate)
// needs no restart on rotation: client-go rereads the files (transport.CertCallbackRefreshDuration, every
// 5 minutes), and when they changed closes its connections so the next ones present the new certificate.
// Kubelet rotates well before the old certificate expires, so the old one stays valid in between.
func Config(path string) (*rest.Config, error) {
	if path != "" {
		if _, err := os.Stat(path); err != nil {
			return nil, fmt.Errorf("read the kubeconfig %s: %w", path, err)
		}
		rc, err := clientcmd.BuildConfigFromFlags("", path)
		if err != nil {
			return nil, fmt.Errorf("read the kubeconfig %s: %w", path, err)
		}
		return rc, nil
	}
	rc, err := rest.InClusterConfig()
	if errors.Is(err, rest.ErrNotInCluster) {
		return nil, ErrNoConfig
	}
	if err != nil {
		return nil, fmt.Errorf("in-cluster API configuration (pass a kubeconfig instead): %w", err)
	}
	return rc, nil
}

// New returns a client for the API server rc names. userAgent names the caller in the server's logs.
// Requests and answers are protobuf: pods are large in JSON, and protobuf halves the informer's list
// and every watch event.
func New(rc *rest.Config, userAgent string) (*Client, error) {
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := policyv1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	cfg := rest.CopyConfig(rc)
	clock := &serverClock{now: time.Now}
	cfg.Wrap(clock.wrap)
	cfg.UserAgent = userAgent
	cfg.APIPath = "/api"
	cfg.GroupVersion = &corev1.SchemeGroupVersion
	cfg.ContentType = runtime.ContentTypeProtobuf
	cfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	cfg.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	if cfg.RateLimiter == nil && cfg.QPS == 0 {
		// client-go's defaults for a typed client.
		cfg.QPS, cfg.Burst = rest.DefaultQPS, rest.DefaultBurst
	}
	restClient, err := rest.RESTClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("API client for %s: %w", rc.Host, err)
	}
	return &Client{rc: restClient, params: runtime.NewParameterCodec(scheme), clock: clock}, nil
}

// GetNode reads a Node.
func (c *Client) GetNode(ctx context.Context, name string) (*corev1.Node, error) {
	node := &corev1.Node{}
	err := c.rc.Get().Resource("nodes").Name(name).Do(ctx).Into(node)
	return node, err
}

// PatchNode patches a Node, or one of its subresources ("status").
func (c *Client) PatchNode(ctx context.Context, name string, pt types.PatchType, data []byte, subresources ...string) (*corev1.Node, error) {
	node := &corev1.Node{}
	err := c.rc.Patch(pt).Resource("nodes").Name(name).SubResource(subresources...).Body(data).Do(ctx).Into(node)
	return node, err
}

// GetPod reads a Pod.
func (c *Client) GetPod(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	pod := &corev1.Pod{}
	err := c.rc.Get().Namespace(namespace).Resource("pods").Name(name).Do(ctx).Into(pod)
	return pod, err
}

// EvictPod asks the API server to evict a pod, which honours its PodDisruptionBudgets.
func (c *Client) EvictPod(ctx context.Context, eviction *policyv1.Eviction) error {
	return c.rc.Post().Namespace(eviction.Namespace).Resource("pods").Name(eviction.Name).SubResource("eviction").
		Body(eviction).Do(ctx).Error()
}

// CreateEvent records an Event.
func (c *Client) CreateEvent(ctx context.Context, event *corev1.Event) (*corev1.Event, error) {
	out := &corev1.Event{}
	err := c.rc.Post().Namespace(event.Namespace).Resource("events").Body(event).Do(ctx).Into(out)
	return out, err
}

// PodListWatch lists and watches the pods of every namespace that fieldSelector selects, for an informer.
func (c *Client) PodListWatch(fieldSelector string) cache.ListerWatcher {
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.FieldSelector = fieldSelector
			list := &corev1.PodList{}
			err := c.rc.Get().Resource("pods").VersionedParams(&opts, c.params).Do(ctx).Into(list)
			return list, err
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.FieldSelector = fieldSelector
			opts.Watch = true
			return c.rc.Get().Resource("pods").VersionedParams(&opts, c.params).Watch(ctx)
		},
	}
}

// ConfigMapListWatch lists and watches the one ConfigMap namespace/name, for an informer. It selects by
// metadata.name because an RBAC rule with resourceNames grants list and watch only to requests that name
// the object that way (the Role deploy/ ships for system:nodes).
func (c *Client) ConfigMapListWatch(namespace, name string) cache.ListerWatcher {
	selector := fields.OneTermEqualSelector("metadata.name", name).String()
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.FieldSelector = selector
			list := &corev1.ConfigMapList{}
			err := c.rc.Get().Namespace(namespace).Resource("configmaps").VersionedParams(&opts, c.params).Do(ctx).Into(list)
			return list, err
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.FieldSelector = selector
			opts.Watch = true
			return c.rc.Get().Namespace(namespace).Resource("configmaps").VersionedParams(&opts, c.params).Watch(ctx)
		},
	}
}

// NodeListWatch lists and watches the one Node name, for an informer: its labels select the node
// strategies of the slo-controller-config. The Node authorizer lets a node read its own Node only.
func (c *Client) NodeListWatch(name string) cache.ListerWatcher {
	selector := fields.OneTermEqualSelector("metadata.name", name).String()
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.FieldSelector = selector
			list := &corev1.NodeList{}
			err := c.rc.Get().Resource("nodes").VersionedParams(&opts, c.params).Do(ctx).Into(list)
			return list, err
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.FieldSelector = selector
			opts.Watch = true
			return c.rc.Get().Resource("nodes").VersionedParams(&opts, c.params).Watch(ctx)
		},
	}
}
