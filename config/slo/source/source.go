// Package source follows the slo-controller-config tandem-proxy applies: Koordinator's ConfigMap read
// through the API server and matched against the labels of the node's own Node object, or, on a
// standalone node, a file of the same sections matched against labels given on the command line.
//
// Every change (the ConfigMap edited, created or deleted; the Node relabelled; the file rewritten) is parsed
// section by section (slo.Parse): a section that does not parse or validate is refused, reported in a log
// line and a Kubernetes Event naming the key, and keeps its last good value (at a first start, Koordinator's
// defaults), while the others apply. Nothing the configuration says makes the source fail: it is data, and
// the node keeps serving whatever it contains.
package source

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/fsnotify/fsnotify"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/tandemkit/tandem/config/slo"
)

// ReasonInvalid is the reason of the Warning Event a refused section raises.
const ReasonInvalid = "InvalidSLOConfig"

// DefaultConfigMap is where Koordinator keeps the configuration, so a Koordinator user's object works as it is.
const DefaultConfigMap = "koordinator-system/slo-controller-config"

// Client is the part of the API the source uses: *kubeclient.Client, or kubeclienttest.Clientset in tests.
type Client interface {
	ConfigMapListWatch(namespace, name string) cache.ListerWatcher
	NodeListWatch(name string) cache.ListerWatcher
	CreateEvent(ctx context.Context, event *corev1.Event) (*corev1.Event, error)
}

// Config says where the configuration comes from. File, when set, is the source (a standalone node, or an
// operator who prefers a file), with NodeLabels for the node strategies; otherwise the ConfigMap named
// "namespace/name" is, with the Node's own labels. Both empty: Koordinator's defaults, nothing followed.
type Config struct {
	ConfigMap  string
	File       string
	NodeName   string
	NodeLabels map[string]string
	// Debounce is how long a file must stay quiet before it is reread: editors and kubelet write in steps.
	Debounce time.Duration
}

// Update is the configuration to apply, handed to Deps.Apply on every change.
type Update struct {
	// Config is what the operator wrote, each refused section replaced by its last good value.
	Config *slo.Config
	// Resolved is Config resolved for this node's labels.
	Resolved slo.Resolved
	// Labels are the node labels Resolved was matched against.
	Labels map[string]string
	// Origin says where it came from, for logs: the ConfigMap and its resourceVersion, or the file.
	Origin string
}

// Deps are the source's collaborators.
type Deps struct {
	// Client reads the ConfigMap and the Node and records Events; nil in file mode on a node without API
	// access (refusals are then logged only). In file mode with a Client, Events go to the Node.
	Client Client
	// Apply receives every new configuration, from one goroutine, in order. It must not block for long.
	Apply func(ctx context.Context, u Update)
}

// Source follows the configuration. Run it once.
type Source struct {
	cfg  Config
	deps Deps
	ns   string
	name string

	// kick asks the file mode to read again: a client came (SetClient), so refusals can become Events.
	kick chan struct{}

	mu     sync.Mutex
	client Client

	// Below: owned by the goroutine that runs reload.
	last     *slo.Config
	reported map[string]bool // event keys already raised: one Event per distinct refusal
	missing  bool            // the ConfigMap's absence was logged
	fileRead string          // hash of the file's content last read, so an unchanged file is not applied again
}

// New checks cfg. A ConfigMap source needs a Client and a NodeName.
func New(cfg Config, deps Deps) (*Source, error) {
	if deps.Apply == nil {
		return nil, errors.New("slo source needs an Apply function")
	}
	if cfg.Debounce <= 0 {
		cfg.Debounce = 200 * time.Millisecond
	}
	s := &Source{cfg: cfg, deps: deps, reported: map[string]bool{}, kick: make(chan struct{}, 1), client: deps.Client}
	if cfg.File == "" && cfg.ConfigMap != "" {
		ns, name, ok := strings.Cut(cfg.ConfigMap, "/")
		if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
			return nil, fmt.Errorf("--slo-configmap %q: want namespace/name, such as %s", cfg.ConfigMap, DefaultConfigMap)
		}
		if deps.Client == nil {
			return nil, errors.New("--slo-configmap needs API access: pass --kubeconfig, or --slo-config for a standalone node")
		}
		if cfg.NodeName == "" {
			return nil, errors.New("--slo-configmap needs the node's name to match node strategies: pass --node-name")
		}
		s.ns, s.name = ns, name
	}
	return s, nil
}

// SetClient gives a file-mode source the API client that came after it started (tandem-proxy connects
// when kubelet's kubeconfig appears): the file is read again, and what it refuses becomes Events on the Node.
func (s *Source) SetClient(c Client) {
	s.mu.Lock()
	s.client = c
	s.mu.Unlock()
	signal(s.kick)
}

func (s *Source) getClient() Client {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.client
}

// Run follows the source until ctx is done; in file mode, and in ConfigMap mode once both the ConfigMap
// and the Node have been listed, it applies the first configuration before it waits for changes.
func (s *Source) Run(ctx context.Context) error {
	switch {
	case s.cfg.File != "":
		return s.runFile(ctx)
	case s.name != "":
		return s.runConfigMap(ctx)
	}
	s.apply(ctx, nil, s.cfg.NodeLabels, "defaults", nil)
	<-ctx.Done()
	return nil
}

// runConfigMap runs one informer for the ConfigMap and one for the Node, and reloads on any change.
func (s *Source) runConfigMap(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithValues("configMap", s.ns+"/"+s.name, "node", s.cfg.NodeName)
	ctx = klog.NewContext(ctx, logger)
	changed := make(chan struct{}, 1)
	notify := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { signal(changed) },
		UpdateFunc: func(any, any) { signal(changed) },
		DeleteFunc: func(any) { signal(changed) },
	}
	cms, cmInformer := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: s.client.ConfigMapListWatch(s.ns, s.name), ObjectType: &corev1.ConfigMap{}, Handler: notify,
	})
	nodes, nodeInformer := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: s.client.NodeListWatch(s.cfg.NodeName), ObjectType: &corev1.Node{}, Handler: notify,
	})
	var wg sync.WaitGroup
	defer wg.Wait()
	for _, inf := range []cache.Controller{cmInformer, nodeInformer} {
		wg.Go(func() { inf.RunWithContext(ctx) })
	}
	if !cache.WaitForCacheSync(ctx.Done(), cmInformer.HasSynced, nodeInformer.HasSynced) {
		return nil // ctx done
	}
	logger.Info("Following the slo-controller-config")
	// The Node changes every few seconds (kubelet's status, the reporter's own patches) and informers
	// resync; only the Node's labels and the ConfigMap's data matter here, so nothing else may rebuild
	// the policies.
	var lastData, lastLabels map[string]string
	lastPresent, first := false, true
	for {
		var cm *corev1.ConfigMap
		// The field selector asks for one object; a server (or fake) that ignores it must not mix others in.
		if obj, ok, _ := cms.GetByKey(s.ns + "/" + s.name); ok {
			cm, _ = obj.(*corev1.ConfigMap)
		}
		var labels map[string]string
		if obj, ok, _ := nodes.GetByKey(s.cfg.NodeName); ok {
			if n, ok := obj.(*corev1.Node); ok {
				labels = n.Labels
			}
		}
		var data map[string]string
		if cm != nil {
			data = cm.Data
		}
		if first || (cm != nil) != lastPresent || !maps.Equal(data, lastData) || !maps.Equal(labels, lastLabels) {
			s.reloadConfigMap(ctx, cm, labels)
			first, lastPresent, lastData, lastLabels = false, cm != nil, data, labels
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		}
	}
}

func (s *Source) reloadConfigMap(ctx context.Context, cm *corev1.ConfigMap, labels map[string]string) {
	logger := klog.FromContext(ctx)
	if cm == nil {
		if !s.missing {
			logger.Info("No slo-controller-config ConfigMap: Koordinator's defaults apply (colocation off) until it is created")
			s.missing = true
		}
		s.apply(ctx, nil, labels, s.ns+"/"+s.name+" (absent)", nil)
		return
	}
	s.missing = false
	s.apply(ctx, cm.Data, labels, s.ns+"/"+s.name+"@"+cm.ResourceVersion, func(key, msg string) *corev1.Event {
		return event(cm.Namespace, metav1.ObjectMeta{Name: cm.Name, Namespace: cm.Namespace, UID: cm.UID, ResourceVersion: cm.ResourceVersion},
			"ConfigMap", s.cfg.NodeName, msg)
	})
}

// runFile reads the file, then rereads it when its directory changes (a mounted ConfigMap is replaced by
// swapping a symlink, so the file itself is not watched).
func (s *Source) runFile(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithValues("sloConfig", s.cfg.File)
	ctx = klog.NewContext(ctx, logger)
	// Watch before the first read, so that a change made right after it is not missed.
	w, err := fsnotify.NewWatcher()
	if err == nil {
		defer w.Close()
		err = w.Add(filepath.Dir(s.cfg.File))
	}
	s.reloadFile(ctx, true)
	if err != nil {
		// Not fatal: the configuration read at start stays in force.
		logger.Error(err, "slo-config not watched; changes need a restart")
		<-ctx.Done()
		return nil
	}
	var debounce <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-w.Errors:
			logger.Error(err, "Watching slo-config")
		case ev := <-w.Events:
			// Only the file and kubelet's ..data symlink (swapped when a mounted ConfigMap changes): other
			// files in the directory, a log beside it say, must not reload the configuration.
			if name := filepath.Base(ev.Name); name == filepath.Base(s.cfg.File) || name == "..data" {
				debounce = time.After(s.cfg.Debounce)
			}
		case <-debounce:
			s.reloadFile(ctx, false)
		case <-s.kick:
			s.reloadFile(ctx, true)
		}
	}
}

// reloadFile reads the file and applies it; unless force, only when its content changed since the last
// read (an editor's save, a touch or a rewrite with the same bytes changes nothing).
func (s *Source) reloadFile(ctx context.Context, force bool) {
	logger := klog.FromContext(ctx)
	onNode := func(key, msg string) *corev1.Event {
		// Node events live in the default namespace, where kubelet records its own.
		return event(metav1.NamespaceDefault, metav1.ObjectMeta{Name: s.cfg.NodeName}, "Node", s.cfg.NodeName, msg)
	}
	raw, err := os.ReadFile(s.cfg.File)
	if h := hash(raw); err == nil && !force && h == s.fileRead {
		return
	} else if err == nil {
		s.fileRead = h
	}
	var cfg *slo.Config
	if err == nil {
		cfg, err = slo.ParseFile(raw)
	}
	if err != nil {
		// The whole file is unreadable: every section keeps what is in force (defaults at a first start).
		err = fmt.Errorf("--slo-config %s: %w; every section keeps the settings in force", s.cfg.File, err)
		logger.Error(err, "slo-config refused")
		s.report(ctx, "file:"+hash(raw), err.Error(), onNode)
		if s.last == nil {
			s.apply(ctx, nil, s.cfg.NodeLabels, s.cfg.File+" (refused)", nil)
		}
		return
	}
	s.applyParsed(ctx, cfg, sectionText(raw), s.cfg.NodeLabels, s.cfg.File, onNode)
}

// apply parses ConfigMap data and applies it.
func (s *Source) apply(ctx context.Context, data map[string]string, labels map[string]string, origin string, ev func(key, msg string) *corev1.Event) {
	s.applyParsed(ctx, slo.Parse(data), func(key string) string { return data[key] }, labels, origin, ev)
}

// applyParsed reports what was refused, keeps the last good value of each refused section, resolves for
// the labels and hands the result to Apply.
func (s *Source) applyParsed(ctx context.Context, parsed *slo.Config, text func(key string) string, labels map[string]string,
	origin string, ev func(key, msg string) *corev1.Event) {
	logger := klog.FromContext(ctx)
	for _, w := range parsed.Warnings() {
		logger.Info("slo-config note", "origin", origin, "note", w)
	}
	current := map[string]bool{}
	for _, r := range parsed.Refused() {
		keep := "keeps its last good value"
		if s.last == nil {
			keep = "uses Koordinator's defaults"
		}
		msg := fmt.Sprintf("slo-controller-config key %q refused, the section %s; the other sections apply: %v", r.Key, keep, r.Err)
		logger.Error(r.Err, "slo-config section refused", "key", r.Key, "origin", origin)
		k := r.Key + ":" + hash([]byte(text(r.Key)))
		current[k] = true
		s.report(ctx, k, msg, ev)
	}
	// Forget refusals that are gone, so the same typo put back later is reported again.
	for k := range s.reported {
		if !current[k] {
			delete(s.reported, k)
		}
	}
	cfg := parsed.KeepLastGood(s.last)
	r, err := cfg.ForNode(labels)
	if err != nil {
		// Validate checks every selector, so this is not expected: keep what is in force, or at a first
		// start run the defaults, so that the node still gets a configuration.
		logger.Error(err, "slo-config not resolved for this node; the settings in force stay", "origin", origin)
		if s.last != nil {
			return
		}
		cfg = &slo.Config{}
		if r, err = cfg.ForNode(labels); err != nil {
			return
		}
	}
	s.last = cfg
	s.deps.Apply(ctx, Update{Config: cfg, Resolved: r, Labels: maps.Clone(labels), Origin: origin})
}

// report records one Event per distinct refusal.
func (s *Source) report(ctx context.Context, key, msg string, ev func(key, msg string) *corev1.Event) {
	client := s.getClient()
	if s.reported[key] || client == nil || ev == nil || s.cfg.NodeName == "" {
		return
	}
	s.reported[key] = true
	if _, err := client.CreateEvent(ctx, ev(key, msg)); err != nil {
		klog.FromContext(ctx).Error(err, "Event about a refused slo-config section not recorded; the log line above says it", "key", key)
	}
}

// maxMessage bounds an Event's message as events.k8s.io bounds its note; the log line has all of it.
const maxMessage = 1024

func event(namespace string, obj metav1.ObjectMeta, kind, node, msg string) *corev1.Event {
	if len(msg) > maxMessage {
		cut := maxMessage - len("…")
		for cut > 0 && !utf8.RuneStart(msg[cut]) {
			cut--
		}
		msg = msg[:cut] + "…"
	}
	now := metav1.Now()
	return &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: fmt.Sprintf("%s.%x", obj.Name, now.UnixNano())},
		InvolvedObject: corev1.ObjectReference{Kind: kind, APIVersion: "v1", Namespace: obj.Namespace, Name: obj.Name,
			UID: obj.UID, ResourceVersion: obj.ResourceVersion},
		Reason: ReasonInvalid, Message: msg, Type: corev1.EventTypeWarning, Action: "RefuseConfig",
		Source:         corev1.EventSource{Component: "tandem-proxy", Host: node},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
		ReportingController: "tandem.io/tandem-proxy", ReportingInstance: "tandem-proxy-" + node,
	}
}

// sectionText returns a section's text in a file, for telling one refusal from another: the file's hash
// stands in for every section, so that any edit reports a still-refused section again.
func sectionText(raw []byte) func(string) string {
	h := hash(raw)
	return func(string) string { return h }
}

func hash(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
