package kubeclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// apiServer is a stand-in for kube-apiserver, which does not run in unit tests (tier 2 of the e2e tests
// runs a real one): it records each request, answers the paths Tandem uses in JSON as the real server
// does when asked for it, and decodes request bodies with the API's own codecs, protobuf included.
type apiServer struct {
	t      *testing.T
	codecs serializer.CodecFactory

	mu   sync.Mutex
	reqs []request
}

type request struct {
	method, path, query, contentType string
	body                             runtime.Object
	raw                              []byte
}

func newAPIServer(t *testing.T) (*apiServer, *Client) {
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := policyv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	s := &apiServer{t: t, codecs: serializer.NewCodecFactory(scheme)}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	c, err := New(&rest.Config{Host: srv.URL}, "tandem-test")
	if err != nil {
		t.Fatal(err)
	}
	return s, c
}

func (s *apiServer) requests() []request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]request(nil), s.reqs...)
}

func pod(name, node string) corev1.Pod {
	return corev1.Pod{TypeMeta: metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name), ResourceVersion: "7"},
		Spec:       corev1.PodSpec{NodeName: node}}
}

func (s *apiServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(r.Body)
	req := request{method: r.Method, path: r.URL.Path, query: r.URL.RawQuery, contentType: r.Header.Get("Content-Type"), raw: raw}
	if len(raw) > 0 && !strings.Contains(req.contentType, "patch") {
		obj, _, err := s.codecs.UniversalDeserializer().Decode(raw, nil, nil)
		if err != nil {
			s.t.Errorf("%s %s: request body does not decode: %v", r.Method, r.URL.Path, err)
		}
		req.body = obj
	}
	s.mu.Lock()
	s.reqs = append(s.reqs, req)
	s.mu.Unlock()
	write := func(code int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(v)
	}
	node := corev1.Node{TypeMeta: metav1.TypeMeta{Kind: "Node", APIVersion: "v1"}, ObjectMeta: metav1.ObjectMeta{Name: "node-1",
		Annotations: map[string]string{"tandem.io/node-metric": "{}"}}}
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/api/v1/nodes/node-1",
		r.Method == http.MethodPatch && (r.URL.Path == "/api/v1/nodes/node-1" || r.URL.Path == "/api/v1/nodes/node-1/status"):
		write(http.StatusOK, node)
	case r.Method == http.MethodGet && r.URL.Path == "/api/v1/namespaces/default/pods/web":
		write(http.StatusOK, pod("web", "node-1"))
	case r.Method == http.MethodPost && r.URL.Path == "/api/v1/namespaces/default/pods/web/eviction":
		write(http.StatusCreated, metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusSuccess})
	case r.Method == http.MethodPost && r.URL.Path == "/api/v1/namespaces/default/pods/pdb/eviction":
		write(http.StatusTooManyRequests, metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure,
			Reason: metav1.StatusReasonTooManyRequests, Code: http.StatusTooManyRequests, Message: "Cannot evict pod as it would violate the pod's disruption budget."})
	case r.Method == http.MethodPost && r.URL.Path == "/api/v1/namespaces/default/events":
		ev, _ := req.body.(*corev1.Event)
		write(http.StatusCreated, ev)
	case r.Method == http.MethodGet && r.URL.Path == "/api/v1/pods":
		s.pods(w, r)
	default:
		write(http.StatusNotFound, metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure,
			Reason: metav1.StatusReasonNotFound, Code: http.StatusNotFound})
	}
}

// pods lists or watches the pods on the node the field selector names; a watch that asks for its initial
// events gets them and the bookmark that ends them, as a watch-list does.
func (s *apiServer) pods(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var items []corev1.Pod
	for _, p := range []corev1.Pod{pod("web", "node-1"), pod("db", "node-1"), pod("elsewhere", "node-2")} {
		if q.Get("fieldSelector") == "spec.nodeName="+p.Spec.NodeName {
			items = append(items, p)
		}
	}
	w.Header().Set("Content-Type", "application/json")
	if q.Get("watch") != "true" {
		_ = json.NewEncoder(w).Encode(corev1.PodList{TypeMeta: metav1.TypeMeta{Kind: "PodList", APIVersion: "v1"},
			ListMeta: metav1.ListMeta{ResourceVersion: "7"}, Items: items})
		return
	}
	enc := json.NewEncoder(w)
	if q.Get("sendInitialEvents") == "true" {
		for _, p := range items {
			_ = enc.Encode(metav1.WatchEvent{Type: "ADDED", Object: runtime.RawExtension{Object: &p}})
		}
		end := corev1.Pod{TypeMeta: metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"}, ObjectMeta: metav1.ObjectMeta{ResourceVersion: "7",
			Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}}}
		_ = enc.Encode(metav1.WatchEvent{Type: "BOOKMARK", Object: runtime.RawExtension{Object: &end}})
	}
	w.(http.Flusher).Flush()
	<-r.Context().Done()
}

func TestRequests(t *testing.T) {
	s, c := newAPIServer(t)
	ctx := t.Context()
	uid := types.UID("uid-web")
	tests := []struct {
		name string
		call func() error
		// want is the request the server must have seen.
		want request
	}{
		{name: "get node", call: func() error {
			n, err := c.GetNode(ctx, "node-1")
			if err == nil && n.Annotations["tandem.io/node-metric"] != "{}" {
				err = fmt.Errorf("node decoded as %+v", n)
			}
			return err
		}, want: request{method: "GET", path: "/api/v1/nodes/node-1"}},
		{name: "patch node status", call: func() error {
			_, err := c.PatchNode(ctx, "node-1", types.StrategicMergePatchType, []byte(`{"status":{}}`), "status")
			return err
		}, want: request{method: "PATCH", path: "/api/v1/nodes/node-1/status", contentType: string(types.StrategicMergePatchType), raw: []byte(`{"status":{}}`)}},
		{name: "patch node metadata", call: func() error {
			_, err := c.PatchNode(ctx, "node-1", types.MergePatchType, []byte(`{"metadata":{}}`))
			return err
		}, want: request{method: "PATCH", path: "/api/v1/nodes/node-1", contentType: string(types.MergePatchType), raw: []byte(`{"metadata":{}}`)}},
		{name: "get pod", call: func() error {
			p, err := c.GetPod(ctx, "default", "web")
			if err == nil && p.UID != uid {
				err = fmt.Errorf("pod decoded as %+v", p)
			}
			return err
		}, want: request{method: "GET", path: "/api/v1/namespaces/default/pods/web"}},
		{name: "get a pod that is gone", call: func() error {
			_, err := c.GetPod(ctx, "default", "gone")
			if err == nil {
				return errors.New("got no error, want NotFound")
			}
			if !apierrors.IsNotFound(err) {
				return fmt.Errorf("got %w, want NotFound", err)
			}
			return nil
		}, want: request{method: "GET", path: "/api/v1/namespaces/default/pods/gone"}},
		{name: "evict", call: func() error {
			return c.EvictPod(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
				DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}})
		}, want: request{method: "POST", path: "/api/v1/namespaces/default/pods/web/eviction", contentType: runtime.ContentTypeProtobuf,
			body: &policyv1.Eviction{TypeMeta: metav1.TypeMeta{Kind: "Eviction", APIVersion: "policy/v1"}, ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
				DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}}}},
		{name: "eviction a disruption budget refuses", call: func() error {
			if err := c.EvictPod(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "pdb"}}); err == nil {
				return errors.New("got no error, want TooManyRequests")
			} else if !apierrors.IsTooManyRequests(err) {
				return fmt.Errorf("got %w, want TooManyRequests", err)
			}
			return nil
		}, want: request{method: "POST", path: "/api/v1/namespaces/default/pods/pdb/eviction", contentType: runtime.ContentTypeProtobuf}},
		{name: "event", call: func() error {
			ev, err := c.CreateEvent(ctx, &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: "default", GenerateName: "web."}, Reason: "Evicted"})
			if err == nil && ev.Reason != "Evicted" {
				err = fmt.Errorf("event decoded as %+v", ev)
			}
			return err
		}, want: request{method: "POST", path: "/api/v1/namespaces/default/events", contentType: runtime.ContentTypeProtobuf}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.call(); err != nil {
				t.Fatal(err)
			}
			reqs := s.requests()
			if len(reqs) != i+1 {
				t.Fatalf("the server saw %d requests, want %d", len(reqs), i+1)
			}
			got := reqs[i]
			if got.method != tt.want.method || got.path != tt.want.path {
				t.Fatalf("request %s %s, want %s %s", got.method, got.path, tt.want.method, tt.want.path)
			}
			if tt.want.contentType != "" && got.contentType != tt.want.contentType {
				t.Errorf("Content-Type %q, want %q", got.contentType, tt.want.contentType)
			}
			if tt.want.raw != nil && string(got.raw) != string(tt.want.raw) {
				t.Errorf("body %s, want %s", got.raw, tt.want.raw)
			}
			if tt.want.body != nil && fmt.Sprint(got.body) != fmt.Sprint(tt.want.body) {
				t.Errorf("body %+v, want %+v", got.body, tt.want.body)
			}
		})
	}
}

// An informer on PodListWatch syncs with the pods of its node only.
func TestPodInformer(t *testing.T) {
	s, c := newAPIServer(t)
	ctx, cancel := context.WithCancel(t.Context())
	inf := cache.NewSharedIndexInformer(c.PodListWatch("spec.nodeName=node-1"), &corev1.Pod{}, 0, cache.Indexers{})
	done := make(chan struct{})
	go func() { defer close(done); inf.RunWithContext(ctx) }()
	defer func() { cancel(); <-done }()
	syncCtx, stop := context.WithTimeout(ctx, 10*time.Second)
	defer stop()
	if !cache.WaitForCacheSync(syncCtx.Done(), inf.HasSynced) {
		t.Fatalf("the informer did not sync; the server saw %+v", s.requests())
	}
	keys := inf.GetStore().ListKeys()
	if len(keys) != 2 || !strings.Contains(strings.Join(keys, ","), "default/web") || strings.Contains(strings.Join(keys, ","), "elsewhere") {
		t.Fatalf("the informer holds %v, want default/web and default/db", keys)
	}
	for _, r := range s.requests() {
		if r.path == "/api/v1/pods" && !strings.Contains(r.query, "fieldSelector=spec.nodeName%3Dnode-1") {
			t.Errorf("pods listed or watched without the node's field selector: %s", r.query)
		}
	}
}

func TestConfig(t *testing.T) {
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	const kc = `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`
	if err := os.WriteFile(kubeconfig, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	inCluster := os.Getenv("KUBERNETES_SERVICE_HOST") != ""
	tests := []struct {
		name     string
		path     string
		wantHost string
		wantErr  error
		anyErr   bool
	}{
		{name: "kubeconfig", path: kubeconfig, wantHost: "https://127.0.0.1:6443"},
		{name: "missing kubeconfig file", path: filepath.Join(dir, "none"), anyErr: true},
		{name: "no configuration: standalone", wantErr: ErrNoConfig},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.path == "" && inCluster {
				t.Skip("running inside a cluster: the in-cluster configuration exists")
			}
			rc, err := Config(tt.path)
			switch {
			case tt.anyErr:
				if err == nil {
					t.Fatalf("Config(%s) = %v, want an error", tt.path, rc.Host)
				}
			case !errors.Is(err, tt.wantErr):
				t.Fatalf("Config(%q) error %v, want %v", tt.path, err, tt.wantErr)
			case err == nil:
				if rc.Host != tt.wantHost {
					t.Fatalf("host %s, want %s", rc.Host, tt.wantHost)
				}
				if _, err := New(rc, "tandem-test"); err != nil {
					t.Fatalf("New on it: %v", err)
				}
			}
		})
	}
}

// TestNamedListWatch: the ConfigMap and the Node are listed and watched by metadata.name, which is what
// lets an RBAC rule with resourceNames (ConfigMap) and the Node authorizer (own Node) allow them.
func TestNamedListWatch(t *testing.T) {
	t.Parallel()
	s, c := newAPIServer(t)
	ctx := t.Context()
	for _, lw := range []cache.ListerWatcher{c.ConfigMapListWatch("koordinator-system", "slo-controller-config"), c.NodeListWatch("node-1")} {
		// The stand-in answers 404: only the requests matter here.
		lwc := cache.ToListerWatcherWithContext(lw)
		_, _ = lwc.ListWithContext(ctx, metav1.ListOptions{})
		if w, err := lwc.WatchWithContext(ctx, metav1.ListOptions{}); err == nil {
			w.Stop()
		}
	}
	want := []struct{ path, selector string }{
		{"/api/v1/namespaces/koordinator-system/configmaps", "metadata.name=slo-controller-config"},
		{"/api/v1/namespaces/koordinator-system/configmaps", "metadata.name=slo-controller-config"},
		{"/api/v1/nodes", "metadata.name=node-1"},
		{"/api/v1/nodes", "metadata.name=node-1"},
	}
	reqs := s.requests()
	if len(reqs) != len(want) {
		t.Fatalf("%d requests, want %d: %+v", len(reqs), len(want), reqs)
	}
	for i, r := range reqs {
		q, _ := url.ParseQuery(r.query)
		if r.path != want[i].path || q.Get("fieldSelector") != want[i].selector {
			t.Errorf("request %d: %s ?%s, want %s with fieldSelector=%s", i, r.path, r.query, want[i].path, want[i].selector)
		}
	}
}

// TestClockOffset: the client learns the API server's clock from the Date of its answers.
func TestClockOffset(t *testing.T) {
	for _, skew := range []time.Duration{0, 5 * time.Minute, -90 * time.Second} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Date", time.Now().Add(skew).UTC().Format(http.TimeFormat))
			http.NotFound(w, nil)
		}))
		c, err := New(&rest.Config{Host: srv.URL}, "tandem-test")
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := c.ClockOffset(); ok {
			t.Fatal("offset known before any answer")
		}
		_, _ = c.GetNode(t.Context(), "n")
		got, ok := c.ClockOffset()
		if !ok || (got-skew).Abs() > 1500*time.Millisecond {
			t.Errorf("skew %v: offset %v (known %v)", skew, got, ok)
		}
		srv.Close()
	}
}
