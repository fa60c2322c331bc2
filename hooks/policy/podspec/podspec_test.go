package podspec

// These tests run a real client-go informer factory on the fake clientset (k8s.io/client-go/kubernetes/fake):
// unit tests have no API server, and the fake's object tracker serves list and watch with resource versions
// as the informer needs them. The fake ignores field selectors, so the node filter is checked in two
// halves: the selector the informer sends, and the lookup refusing pods bound elsewhere. The tier-2
// cluster tests run the same code against a real API server.

import (
	"context"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"

	"github.com/tandemkit/tandem/hooks"
	"github.com/tandemkit/tandem/hooks/policy/batchresource"
	"github.com/tandemkit/tandem/hooks/policy/memoryqos"
	"github.com/tandemkit/tandem/internal/polltest"
	"github.com/tandemkit/tandem/kubeclient/kubeclienttest"
	"github.com/tandemkit/tandem/resource/batch"
)

// The policies that read pod specs take a Source as it is.
var (
	_ batchresource.BatchLookup = (*Source)(nil)
	_ memoryqos.Requests        = (*Source)(nil)
)

const node = "node-a"

type ctrSpec struct {
	name              string
	requests, limits  map[string]string
	init, restartable bool
}

func newPod(name, uid, nodeName string, ctrs ...ctrSpec) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID(uid)},
		Spec:       corev1.PodSpec{NodeName: nodeName},
	}
	for _, c := range ctrs {
		k := corev1.Container{Name: c.name, Resources: corev1.ResourceRequirements{Requests: list(c.requests), Limits: list(c.limits)}}
		if c.restartable {
			always := corev1.ContainerRestartPolicyAlways
			k.RestartPolicy = &always
		}
		if c.init {
			p.Spec.InitContainers = append(p.Spec.InitContainers, k)
		} else {
			p.Spec.Containers = append(p.Spec.Containers, k)
		}
	}
	return p
}

func list(m map[string]string) corev1.ResourceList {
	if m == nil {
		return nil
	}
	l := corev1.ResourceList{}
	for k, v := range m {
		l[corev1.ResourceName(k)] = resource.MustParse(v)
	}
	return l
}

// seedBE is the BE pod of Koordinator's documented QoS example (nginx-be): 2 batch CPUs and 1 GiB of
// batch memory, the pod users try first.
func seedBE(uid string) *corev1.Pod {
	return newPod("nginx-be", uid, node, ctrSpec{
		name:     "nginx",
		requests: map[string]string{batch.CPU: "2k", batch.Memory: "1Gi"},
		limits:   map[string]string{batch.CPU: "2k", batch.Memory: "1Gi"},
	})
}

func info(p *corev1.Pod) *hooks.PodInfo {
	return &hooks.PodInfo{Namespace: p.Namespace, Name: p.Name, UID: string(p.UID)}
}

func testConfig(wait time.Duration) Config {
	cfg := DefaultConfig()
	cfg.NodeName = node
	cfg.Wait = wait
	cfg.GetTimeout = 0
	return cfg
}

// start runs a Source on a fake clientset holding objs and waits for its first sync.
func start(t *testing.T, cfg Config, objs ...runtime.Object) (*Source, *fake.Clientset, context.Context) {
	t.Helper()
	client := fake.NewSimpleClientset(objs...)
	s, err := NewForClient(kubeclienttest.Clientset{Interface: client}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	syncCtx, stop := context.WithTimeout(ctx, 10*time.Second)
	defer stop()
	if !cache.WaitForCacheSync(syncCtx.Done(), s.informer.HasSynced) {
		t.Fatal("pod informer did not sync")
	}
	return s, client, ctx
}

func createLater(t *testing.T, client *fake.Clientset, after time.Duration, p *corev1.Pod) {
	t.Helper()
	time.AfterFunc(after, func() {
		if _, err := client.CoreV1().Pods(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
			t.Errorf("create pod: %v", err)
		}
	})
}

func gets(client *fake.Clientset) int {
	n := 0
	for _, a := range client.Actions() {
		if a.GetVerb() == "get" && a.GetResource().Resource == "pods" {
			n++
		}
	}
	return n
}

func TestBatchResources(t *testing.T) {
	t.Parallel()
	mirror := newPod("etcd-node-a", "mirror-uid", node, ctrSpec{name: "etcd", requests: map[string]string{batch.CPU: "500"}})
	mirror.Annotations = map[string]string{annotationConfigMirror: "hash1"}
	tests := []struct {
		name   string
		cached []runtime.Object
		pod    *hooks.PodInfo
		want   map[string]batch.Container
	}{
		{name: "the example's BE pod in the cache", cached: []runtime.Object{seedBE("u1")}, pod: info(seedBE("u1")),
			want: map[string]batch.Container{"nginx": {CPURequestMilli: 2000, CPULimitMilli: 2000, MemoryRequest: 1 << 30, MemoryLimit: 1 << 30}}},
		{name: "sidecar listed, plain init container and containers without batch resources as Kubernetes counts them",
			cached: []runtime.Object{newPod("be", "u1", node,
				ctrSpec{name: "app", requests: map[string]string{batch.CPU: "1000"}, limits: map[string]string{batch.CPU: "1500"}},
				ctrSpec{name: "plain"},
				ctrSpec{name: "setup", init: true, requests: map[string]string{batch.CPU: "4000"}},
				ctrSpec{name: "proxy", init: true, restartable: true, requests: map[string]string{batch.Memory: "64Mi"}})},
			pod: &hooks.PodInfo{Namespace: "default", Name: "be", UID: "u1"},
			want: map[string]batch.Container{
				"app": {CPURequestMilli: 1000, CPULimitMilli: 1500}, "plain": {}, "proxy": {MemoryRequest: 64 << 20}}},
		{name: "no batch resources: plain BE", cached: []runtime.Object{newPod("be", "u1", node, ctrSpec{name: "app", requests: map[string]string{"memory": "1Gi"}})},
			pod: &hooks.PodInfo{Namespace: "default", Name: "be", UID: "u1"}},
		{name: "recreated pod with the same name: old spec not used", cached: []runtime.Object{seedBE("old")}, pod: info(seedBE("new"))},
		{name: "pod bound to another node not used", cached: []runtime.Object{newPod("nginx-be", "u1", "node-b", ctrSpec{name: "nginx", requests: map[string]string{batch.CPU: "1"}})},
			pod: info(seedBE("u1"))},
		{name: "pod not in the API", pod: info(seedBE("u1"))},
		{name: "static pod: its mirror pod", cached: []runtime.Object{mirror},
			pod: &hooks.PodInfo{Namespace: "default", Name: "etcd-node-a", UID: "static-uid",
				Annotations: map[string]string{annotationConfigSource: "file", annotationConfigHash: "hash1"}},
			want: map[string]batch.Container{"etcd": {CPURequestMilli: 500}}},
		{name: "static pod: a mirror of another version not used", cached: []runtime.Object{mirror},
			pod: &hooks.PodInfo{Namespace: "default", Name: "etcd-node-a", UID: "static-uid",
				Annotations: map[string]string{annotationConfigSource: "file", annotationConfigHash: "hash2"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			const wait = 200 * time.Millisecond
			s, _, ctx := start(t, testConfig(wait), tt.cached...)
			begin := time.Now()
			got, ok, err := s.BatchResources(ctx, tt.pod)
			if err != nil {
				t.Fatal(err)
			}
			if took := time.Since(begin); took > wait+time.Second {
				t.Errorf("lookup took %v, want at most about %v", took, wait)
			}
			if ok != (tt.want != nil) || len(got) != len(tt.want) {
				t.Fatalf("BatchResources = %v, %v; want %v", got, ok, tt.want)
			}
			for name, w := range tt.want {
				if got[name] != w {
					t.Errorf("container %s: %+v, want %+v", name, got[name], w)
				}
			}
		})
	}
}

func TestLookupWaitsForLaggingInformer(t *testing.T) {
	t.Parallel()
	const wait = 2 * time.Second
	s, client, ctx := start(t, testConfig(wait))
	createLater(t, client, 300*time.Millisecond, seedBE("u1"))
	begin := time.Now()
	got, ok, err := s.BatchResources(ctx, info(seedBE("u1")))
	took := time.Since(begin)
	if err != nil || !ok || got["nginx"].CPULimitMilli != 2000 {
		t.Fatalf("BatchResources = %v, %v, %v; want the pod created 300ms later", got, ok, err)
	}
	if took < 250*time.Millisecond || took >= wait {
		t.Errorf("lookup took %v; want it to end when the pod arrives, about 300ms", took)
	}
	if n := gets(client); n != 0 {
		t.Errorf("%d GETs of pods; the informer event alone must answer", n)
	}
}

func TestLookupRecreatedPodArrivesDuringWait(t *testing.T) {
	t.Parallel()
	s, client, ctx := start(t, testConfig(2*time.Second), seedBE("old"))
	time.AfterFunc(200*time.Millisecond, func() {
		if err := client.CoreV1().Pods("default").Delete(context.Background(), "nginx-be", metav1.DeleteOptions{}); err != nil {
			t.Errorf("delete: %v", err)
		}
	})
	createLater(t, client, 300*time.Millisecond, seedBE("new"))
	got, ok, err := s.BatchResources(ctx, info(seedBE("new")))
	if err != nil || !ok || got["nginx"].CPURequestMilli != 2000 {
		t.Fatalf("BatchResources = %v, %v, %v; want the recreated pod's spec", got, ok, err)
	}
}

func TestLookupBound(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		wait     time.Duration
		deadline time.Duration // of the caller's context; 0 = none
		want     time.Duration // how long the lookup should take, about
	}{
		{name: "pod never arrives: Config.Wait", wait: 400 * time.Millisecond, want: 400 * time.Millisecond},
		{name: "caller's deadline shorter than the wait", wait: 5 * time.Second, deadline: 600 * time.Millisecond, want: 600*time.Millisecond - returnSlack},
		{name: "no wait configured", wait: 0, want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, _, ctx := start(t, testConfig(tt.wait))
			if tt.deadline > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tt.deadline)
				defer cancel()
			}
			begin := time.Now()
			got, ok, err := s.BatchResources(ctx, info(seedBE("u1")))
			took := time.Since(begin)
			if got != nil || ok || err != nil {
				t.Fatalf("BatchResources = %v, %v, %v; want nothing", got, ok, err)
			}
			if took < tt.want-50*time.Millisecond || took > tt.want+500*time.Millisecond {
				t.Errorf("lookup took %v, want about %v", took, tt.want)
			}
			if tt.deadline > 0 && ctx.Err() != nil {
				t.Errorf("lookup returned after the caller's deadline")
			}
			// A pod missed once is not waited for again.
			begin = time.Now()
			if _, ok, _ := s.BatchResources(ctx, info(seedBE("u1"))); ok {
				t.Fatal("second lookup found a pod that does not exist")
			}
			if took := time.Since(begin); took > 50*time.Millisecond {
				t.Errorf("second lookup took %v; a missed pod must answer at once", took)
			}
		})
	}
}

func TestLookupCancelled(t *testing.T) {
	t.Parallel()
	s, _, ctx := start(t, testConfig(5*time.Second))
	ctx, cancel := context.WithCancel(ctx)
	time.AfterFunc(100*time.Millisecond, cancel)
	_, ok, err := s.BatchResources(ctx, info(seedBE("u1")))
	if ok || !errors.Is(err, context.Canceled) {
		t.Fatalf("BatchResources = %v, %v; want context.Canceled", ok, err)
	}
}

func TestDeletedPodAnswersAtOnce(t *testing.T) {
	t.Parallel()
	s, client, ctx := start(t, testConfig(5*time.Second), seedBE("u1"))
	if _, ok, _ := s.BatchResources(ctx, info(seedBE("u1"))); !ok {
		t.Fatal("pod in the cache not found")
	}
	if err := client.CoreV1().Pods("default").Delete(ctx, "nginx-be", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// The delete event reaches the handler asynchronously.
	polltest.Until(t, "the delete event", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		_, settled := s.settled["u1"]
		return settled
	})
	// Stop and remove calls for a deleted pod's containers must not wait for a pod that will not come back.
	begin := time.Now()
	if _, ok, _ := s.BatchResources(ctx, info(seedBE("u1"))); ok {
		t.Fatal("deleted pod still found")
	}
	if took := time.Since(begin); took > 100*time.Millisecond {
		t.Errorf("lookup of a deleted pod took %v", took)
	}
}

func TestGetAfterWait(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		served *corev1.Pod // what a GET returns; the informer never sees it
		wantOK bool
	}{
		{name: "pod the watch missed", served: seedBE("u1"), wantOK: true},
		{name: "GET finds the predecessor", served: seedBE("old")},
		{name: "GET finds nothing"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := testConfig(200 * time.Millisecond)
			cfg.GetTimeout = time.Second
			client := fake.NewSimpleClientset()
			// A reactor, not the tracker, serves the GET, so the informer's watch never delivers the pod:
			// the state of a watch that is reconnecting while the API server itself answers.
			client.PrependReactor("get", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
				if tt.served == nil {
					return false, nil, nil
				}
				return true, tt.served.DeepCopy(), nil
			})
			s, err := NewForClient(kubeclienttest.Clientset{Interface: client}, cfg)
			if err != nil {
				t.Fatal(err)
			}
			_, ctx := ktesting.NewTestContext(t)
			ctx, cancel := context.WithCancel(ctx)
			done := make(chan struct{})
			go func() { s.Run(ctx); close(done) }()
			defer func() { cancel(); <-done }()
			for range 2 {
				got, ok, err := s.BatchResources(ctx, info(seedBE("u1")))
				if err != nil || ok != tt.wantOK || (ok && got["nginx"].CPURequestMilli != 2000) {
					t.Fatalf("BatchResources = %v, %v, %v; want ok %v", got, ok, err, tt.wantOK)
				}
			}
			if n := gets(client); n != 1 {
				t.Errorf("%d GETs for two lookups of one pod, want 1", n)
			}
		})
	}
}

func TestInformerWatchesThisNodeOnly(t *testing.T) {
	t.Parallel()
	_, client, _ := start(t, testConfig(0))
	// The watch starts after the list has been handed over, so it may come a moment after the sync.
	polltest.Until(t, "a list and a watch of this node's pods", func() bool {
		var listed, watched bool
		for _, a := range client.Actions() {
			if a.GetResource().Resource != "pods" {
				continue
			}
			var sel string
			switch r := a.(type) {
			case k8stesting.ListAction:
				sel = r.GetListRestrictions().Fields.String()
			case k8stesting.WatchAction:
				sel = r.GetWatchRestrictions().Fields.String()
			default:
				continue
			}
			if sel != "spec.nodeName="+node {
				t.Fatalf("%s of pods with field selector %q, want spec.nodeName=%s", a.GetVerb(), sel, node)
			}
			listed = listed || a.GetVerb() == "list"
			watched = watched || a.GetVerb() == "watch"
		}
		return listed && watched
	})
}

func TestMemoryRequest(t *testing.T) {
	t.Parallel()
	ls := newPod("web", "u1", node,
		ctrSpec{name: "app", requests: map[string]string{"memory": "1Gi"}},
		ctrSpec{name: "log", requests: map[string]string{"memory": "256Mi"}},
		ctrSpec{name: "nomem", requests: map[string]string{"cpu": "1"}},
		ctrSpec{name: "migrate", init: true, requests: map[string]string{"memory": "4Gi"}},
		ctrSpec{name: "mesh", init: true, restartable: true, requests: map[string]string{"memory": "128Mi"}})
	ls.Spec.Overhead = list(map[string]string{"memory": "64Mi"})
	podLevel := newPod("pl", "u2", node, ctrSpec{name: "app", requests: map[string]string{"memory": "1Gi"}})
	podLevel.Spec.Resources = &corev1.ResourceRequirements{Requests: list(map[string]string{"memory": "3Gi"})}
	cached := []runtime.Object{ls, podLevel, seedBE("u3"), newPod("empty", "u4", node, ctrSpec{name: "app"})}
	tests := []struct {
		name   string
		pod    *hooks.PodInfo
		ctr    string // "" asks for the pod
		want   int64
		wantOK bool
	}{
		{name: "container memory request", pod: info(ls), ctr: "app", want: 1 << 30, wantOK: true},
		{name: "init container asked by name", pod: info(ls), ctr: "migrate", want: 4 << 30, wantOK: true},
		{name: "container without a memory request", pod: info(ls), ctr: "nomem"},
		{name: "container not in the spec", pod: info(ls), ctr: "other"},
		{name: "pod: app containers, sidecar and overhead; not the init container", pod: info(ls),
			want: 1<<30 + 256<<20 + 128<<20 + 64<<20, wantOK: true},
		{name: "pod-level resources win", pod: info(podLevel), want: 3 << 30, wantOK: true},
		{name: "BE container: batch-memory", pod: info(seedBE("u3")), ctr: "nginx", want: 1 << 30, wantOK: true},
		{name: "BE pod: batch-memory sum", pod: info(seedBE("u3")), want: 1 << 30, wantOK: true},
		{name: "pod without memory requests", pod: &hooks.PodInfo{Namespace: "default", Name: "empty", UID: "u4"}},
		{name: "unknown pod", pod: &hooks.PodInfo{Namespace: "default", Name: "gone", UID: "u9"}},
	}
	s, _, ctx := start(t, testConfig(50*time.Millisecond), cached...)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var ctr *hooks.ContainerInfo
			if tt.ctr != "" {
				ctr = &hooks.ContainerInfo{Name: tt.ctr}
			}
			got, ok := s.MemoryRequest(ctx, tt.pod, ctr)
			if got != tt.want || ok != tt.wantOK {
				t.Fatalf("MemoryRequest = %d, %v; want %d, %v", got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func TestNilSource(t *testing.T) {
	t.Parallel()
	_, ctx := ktesting.NewTestContext(t)
	var s *Source
	s.Run(ctx)
	if got, ok, err := s.BatchResources(ctx, info(seedBE("u1"))); got != nil || ok || err != nil {
		t.Errorf("BatchResources on a nil Source = %v, %v, %v", got, ok, err)
	}
	if got, ok := s.MemoryRequest(ctx, info(seedBE("u1")), nil); got != 0 || ok {
		t.Errorf("MemoryRequest on a nil Source = %d, %v", got, ok)
	}
}

// TestNewForClientValidates: a configuration that cannot work is refused before any API call.
func TestNewForClientValidates(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		cfg     Config
		wantErr bool
	}{
		{name: "valid", cfg: Config{NodeName: node}},
		{name: "no node name", cfg: Config{}, wantErr: true},
		{name: "negative wait", cfg: Config{NodeName: node, Wait: -time.Second}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			client := fake.NewSimpleClientset()
			s, err := NewForClient(kubeclienttest.Clientset{Interface: client}, tt.cfg)
			if (err != nil) != tt.wantErr || (s != nil) == tt.wantErr {
				t.Fatalf("NewForClient = %v, %v; want error %v", s, err, tt.wantErr)
			}
			if n := len(client.Actions()); n != 0 {
				t.Fatalf("NewForClient made %d API calls; it must make none before Run", n)
			}
		})
	}
}
