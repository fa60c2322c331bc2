// Package podspec gives policies what the CRI request leaves out of a pod: its spec as the API server
// holds it. Kubelet sends neither extended resources (kubernetes.io/batch-cpu, kubernetes.io/batch-memory)
// nor memory requests to the runtime, so a Source keeps an informer on the pods bound to this node and
// answers from its cache.
//
// The cache can lag: kubelet creates the sandbox as soon as its own watch sees the pod, and the proxy's
// watch may see it a little later. A lookup that misses therefore waits for the pod, for a bounded time
// (Config.Wait, shortened to fit the caller's deadline), woken by the informer's events rather than by
// polling. When the wait runs out, one direct GET to the API server follows (Config.GetTimeout; 0 turns
// it off). The trade-off: a pod whose watch event is late costs one API call, once, instead of losing its
// resources for good; the hot path never calls the API server for a pod the cache holds, and a pod that
// could not be found is remembered, so later calls for it neither wait nor GET again.
//
// Without any API configuration (no kubeconfig, not in a cluster) New returns a nil Source and the proxy
// runs standalone; every method of a nil Source answers "unknown".
package podspec

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/tandemkit/tandem/hooks"
)

// Kubelet's annotations on the pods it runs (they reach the sandbox with the pod's other annotations).
// Static pods have a source other than "api" and a UID of kubelet's own; the API server knows them only
// as mirror pods, which carry the static pod's hash.
const (
	annotationConfigSource = "kubernetes.io/config.source"
	annotationConfigHash   = "kubernetes.io/config.hash"
	annotationConfigMirror = "kubernetes.io/config.mirror"
	configSourceAPI        = "api"
)

// rememberFor bounds how long a deleted or missed pod, or one read by GET, is remembered.
const rememberFor = 10 * time.Minute

// returnSlack is kept free before the caller's deadline, so an answer arrives while the caller still waits.
const returnSlack = 100 * time.Millisecond

// Config configures a Source.
type Config struct {
	// Kubeconfig is a kubeconfig file; empty uses the in-cluster configuration when there is one.
	Kubeconfig string `json:"kubeconfig"`
	// NodeName is this node's name as kubelet registers it; only pods bound to it are watched.
	NodeName string `json:"nodeName"`
	// Wait bounds how long a lookup waits for a pod the cache does not hold yet; 0 does not wait.
	Wait time.Duration `json:"wait"`
	// GetTimeout bounds the one direct GET after a wait that found nothing; 0 turns the GET off.
	GetTimeout time.Duration `json:"getTimeout"`
	// SyncTimeout bounds the wait for the first list at start. After it, lookups stop waiting for
	// events until the cache has synced, since an unreachable API server would only delay every call.
	SyncTimeout time.Duration `json:"syncTimeout"`
}

// DefaultConfig waits 2 s for a lagging informer, then tries one GET of up to 500 ms.
func DefaultConfig() Config {
	return Config{Wait: 2 * time.Second, GetTimeout: 500 * time.Millisecond, SyncTimeout: 30 * time.Second}
}

// Validate names each invalid field.
func (c Config) Validate() error {
	var errs []error
	if c.NodeName == "" {
		errs = append(errs, errors.New("nodeName: empty; set it to this node's name as kubelet registers it"))
	}
	for name, d := range map[string]time.Duration{"wait": c.Wait, "getTimeout": c.GetTimeout, "syncTimeout": c.SyncTimeout} {
		if d < 0 {
			errs = append(errs, fmt.Errorf("%s: %v is negative", name, d))
		}
	}
	return errors.Join(errs...)
}

// API is what a Source needs of the API server; *kubeclient.Client has it.
type API interface {
	GetPod(ctx context.Context, namespace, name string) (*corev1.Pod, error)
	PodListWatch(fieldSelector string) cache.ListerWatcher
}

// Source answers questions about the pods of this node from an informer cache.
type Source struct {
	cfg      Config
	client   API
	informer cache.SharedIndexInformer
	lister   corelisters.PodLister
	// gaveUp is set when the first sync did not finish within SyncTimeout.
	gaveUp atomic.Bool

	mu sync.Mutex
	// waiters are closed when an add or update of their namespace/name arrives.
	waiters map[string]*waiter
	// settled are UIDs not worth waiting for: deleted pods and pods that a wait and a GET missed.
	settled map[types.UID]time.Time
	// fetched are pods read by GET, until the informer has them.
	fetched map[types.UID]fetchedPod
}

type waiter struct {
	ch    chan struct{}
	users int
}

type fetchedPod struct {
	pod *corev1.Pod
	at  time.Time
}

// NewForClient builds a Source on client. Run starts it.
func NewForClient(client API, cfg Config) (*Source, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("pod spec source: %w", err)
	}
	onNode := fields.OneTermEqualSelector("spec.nodeName", cfg.NodeName).String()
	informer := cache.NewSharedIndexInformer(client.PodListWatch(onNode), &corev1.Pod{}, 0,
		cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	s := &Source{
		cfg: cfg, client: client, informer: informer, lister: corelisters.NewPodLister(informer.GetIndexer()),
		waiters: map[string]*waiter{}, settled: map[types.UID]time.Time{}, fetched: map[types.UID]fetchedPod{},
	}
	// Managed fields are most of a pod object's size and of no use here.
	if err := s.informer.SetTransform(func(obj any) (any, error) {
		if m, err := meta.Accessor(obj); err == nil {
			m.SetManagedFields(nil)
		}
		return obj, nil
	}); err != nil {
		return nil, fmt.Errorf("pod informer transform: %w", err)
	}
	if _, err := s.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { s.seen(obj) },
		UpdateFunc: func(_, obj any) { s.seen(obj) },
		DeleteFunc: s.gone,
	}); err != nil {
		return nil, fmt.Errorf("pod informer handler: %w", err)
	}
	return s, nil
}

// Run starts the informer and stops it when ctx ends. It waits up to SyncTimeout for the first list and
// returns when ctx is done. Call it once.
func (s *Source) Run(ctx context.Context) {
	if s == nil {
		return
	}
	logger := klog.FromContext(ctx).WithValues("node", s.cfg.NodeName)
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		s.informer.RunWithContext(ctx)
	}()
	defer func() { <-stopped }()
	start := time.Now()
	syncCtx, cancel := context.WithTimeout(ctx, s.cfg.SyncTimeout)
	synced := cache.WaitForCacheSync(syncCtx.Done(), s.informer.HasSynced)
	cancel()
	switch {
	case synced:
		logger.Info("Pod spec cache synced", "pods", len(s.informer.GetStore().ListKeys()), "took", time.Since(start))
	case ctx.Err() == nil:
		s.gaveUp.Store(true)
		logger.Info("Pod spec cache not synced; lookups answer from what arrives without waiting (check the API server and this node's RBAC for pods)",
			"syncTimeout", s.cfg.SyncTimeout)
	}
	<-ctx.Done()
}

// seen wakes the lookups waiting for the pod and forgets that it was missed.
func (s *Source) seen(obj any) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	key := p.Namespace + "/" + p.Name
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.settled, p.UID)
	delete(s.fetched, p.UID)
	if w, ok := s.waiters[key]; ok {
		close(w.ch)
		delete(s.waiters, key)
	}
}

// gone remembers a deleted pod: calls for its containers (stop, remove, pool refresh) must not wait for it.
func (s *Source) gone(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.fetched, p.UID)
	s.settle(p.UID)
}

// settle records uid as not worth waiting for; s.mu is held.
func (s *Source) settle(uid types.UID) {
	now := time.Now()
	for u, at := range s.settled {
		if now.Sub(at) > rememberFor {
			delete(s.settled, u)
		}
	}
	s.settled[uid] = now
}

// remember keeps a pod read by GET; s.mu is held.
func (s *Source) remember(uid types.UID, p *corev1.Pod) {
	now := time.Now()
	for u, f := range s.fetched {
		if now.Sub(f.at) > rememberFor {
			delete(s.fetched, u)
		}
	}
	s.fetched[uid] = fetchedPod{pod: p, at: now}
}

// matches reports whether p is the pod the runtime call is about. A recreated pod keeps its name but not
// its UID, and its predecessor's spec must not be used. An empty UID (no kubelet in front) matches by name.
func (s *Source) matches(p *corev1.Pod, uid types.UID) bool {
	return p != nil && p.Spec.NodeName == s.cfg.NodeName && (uid == "" || p.UID == uid)
}

func (s *Source) cached(ns, name string, uid types.UID) *corev1.Pod {
	p, err := s.lister.Pods(ns).Get(name)
	if err != nil || !s.matches(p, uid) {
		return nil
	}
	return p
}

// lookup finds the spec of pod. The error is the caller's context ending; a pod not found is (nil, nil).
func (s *Source) lookup(ctx context.Context, pod *hooks.PodInfo) (*corev1.Pod, error) {
	if s == nil || pod == nil {
		return nil, nil
	}
	if src, ok := pod.Annotations[annotationConfigSource]; ok && src != configSourceAPI {
		return s.mirror(pod), nil
	}
	uid := types.UID(pod.UID)
	if p := s.cached(pod.Namespace, pod.Name, uid); p != nil {
		return p, nil
	}
	s.mu.Lock()
	f, fetched := s.fetched[uid]
	_, settled := s.settled[uid]
	s.mu.Unlock()
	switch {
	case uid == "":
		// Nothing to remember such a pod by: it waits every time.
	case fetched && time.Since(f.at) < rememberFor:
		return f.pod, nil
	case settled:
		return nil, nil
	}

	start := time.Now()
	p, err := s.await(ctx, pod.Namespace, pod.Name, uid)
	if p != nil || err != nil {
		return p, err
	}
	logger := klog.FromContext(ctx)
	got := s.get(ctx, pod.Namespace, pod.Name, uid)
	if p = got; p == nil {
		p = s.cached(pod.Namespace, pod.Name, uid) // it may have arrived during the GET
	}
	s.mu.Lock()
	switch {
	case uid == "":
	case got != nil:
		s.remember(uid, got)
	case p == nil:
		s.settle(uid)
	}
	s.mu.Unlock()
	if got != nil {
		logger.V(2).Info("Pod spec read from the API server; the pod informer lags", "pod", klog.KRef(pod.Namespace, pod.Name), "uid", uid, "waited", time.Since(start))
	}
	if p != nil {
		return p, nil
	}
	logger.V(2).Info("Pod spec not found; the pod gets no resources from it", "pod", klog.KRef(pod.Namespace, pod.Name), "uid", uid, "waited", time.Since(start))
	return nil, nil
}

// mirror finds a static pod's mirror pod. No wait: a static pod may run before the API server does
// (it may be the API server), and its mirror pod is created after it.
func (s *Source) mirror(pod *hooks.PodInfo) *corev1.Pod {
	hash := pod.Annotations[annotationConfigHash]
	p, err := s.lister.Pods(pod.Namespace).Get(pod.Name)
	if err != nil || hash == "" || p.Annotations[annotationConfigMirror] != hash || !s.matches(p, "") {
		return nil
	}
	return p
}

// await waits for the informer to deliver the pod, until Config.Wait or shortly before ctx's deadline,
// leaving room for the GET.
func (s *Source) await(ctx context.Context, ns, name string, uid types.UID) (*corev1.Pod, error) {
	if !s.informer.HasSynced() && s.gaveUp.Load() {
		return nil, nil
	}
	end := time.Now().Add(s.cfg.Wait)
	if d, ok := ctx.Deadline(); ok {
		if d = d.Add(-returnSlack - s.cfg.GetTimeout); d.Before(end) {
			end = d
		}
	}
	key := ns + "/" + name
	for {
		ch := s.watch(key)
		// Checked after registering, so an event between the first look and now is not lost.
		p := s.cached(ns, name, uid)
		left := time.Until(end)
		if p != nil || left <= 0 {
			s.unwatch(key, ch)
			return p, nil
		}
		timer := time.NewTimer(left)
		select {
		case <-ch:
			// Some version of the pod arrived; the next turn checks its UID.
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			s.unwatch(key, ch)
			return nil, fmt.Errorf("waiting for the spec of pod %s: %w", key, ctx.Err())
		}
		timer.Stop()
		s.unwatch(key, ch)
	}
}

func (s *Source) watch(key string) chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	w, ok := s.waiters[key]
	if !ok {
		w = &waiter{ch: make(chan struct{})}
		s.waiters[key] = w
	}
	w.users++
	return w.ch
}

func (s *Source) unwatch(key string, ch chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w, ok := s.waiters[key]; ok && w.ch == ch {
		if w.users--; w.users == 0 {
			delete(s.waiters, key)
		}
	}
}

// get is the one direct read after a wait that found nothing.
func (s *Source) get(ctx context.Context, ns, name string, uid types.UID) *corev1.Pod {
	if s.cfg.GetTimeout <= 0 {
		return nil
	}
	timeout := s.cfg.GetTimeout
	if d, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(d)-returnSlack)
	}
	if timeout <= 0 {
		return nil
	}
	gctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	p, err := s.client.GetPod(gctx, ns, name)
	if err != nil {
		if !apierrors.IsNotFound(err) {
			klog.FromContext(ctx).V(2).Info("Pod spec GET failed", "pod", klog.KRef(ns, name), "err", err)
		}
		return nil
	}
	if !s.matches(p, uid) {
		return nil
	}
	return p
}
