package extender

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
)

// Paths served by Handler. kube-scheduler calls urlPrefix + "/" + verb, so a scheduler
// configuration with filterVerb "filter" and prioritizeVerb "prioritize" reaches these.
const (
	FilterPath     = "/" + verbFilter
	PrioritizePath = "/" + verbPrioritize
	HealthzPath    = "/healthz"
	ReadyzPath     = "/readyz"
)

// Handler serves the extender verbs and the health endpoints.
type Handler struct {
	cfg     Config
	nodes   *NodeCache
	metrics *metrics
	now     func() time.Time
	mux     *http.ServeMux
	scratch sync.Pool // *scratch
}

// NewHandler builds a Handler answering from nodes, with its metrics registered on reg.
func NewHandler(cfg Config, nodes *NodeCache, reg prometheus.Registerer) (*Handler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid extender config: %w", err)
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	h := &Handler{cfg: cfg, nodes: nodes, metrics: m, now: time.Now, mux: http.NewServeMux()}
	h.scratch.New = func() any { return new(scratch) }
	h.mux.Handle("POST "+FilterPath, h.verb(verbFilter, h.filter))
	h.mux.Handle("POST "+PrioritizePath, h.verb(verbPrioritize, h.prioritize))
	h.mux.HandleFunc("GET "+HealthzPath, func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	h.mux.HandleFunc("GET "+ReadyzPath, func(w http.ResponseWriter, _ *http.Request) {
		if !nodes.Ready() {
			http.Error(w, "node and pod informers have not synced yet", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	return h, nil
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

// errRequest is a request kube-scheduler should not have sent; it becomes HTTP 400.
var errRequest = errors.New("bad extender request")

// scratch is the per-request memory, reused across requests: at 5000 nodes it is ~200 KiB that
// would otherwise be garbage on every call.
type scratch struct {
	body     bytes.Buffer
	out      []byte
	states   []*nodeState
	passed   []string
	rejected []rejection
	scores   []int64
}

func (h *Handler) verb(name string, do func(context.Context, *request, *scratch) ([]byte, error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		code := h.serveVerb(w, r, do)
		h.metrics.observe(name, code, time.Since(start))
	})
}

func (h *Handler) serveVerb(w http.ResponseWriter, r *http.Request, do func(context.Context, *request, *scratch) ([]byte, error)) int {
	if !h.nodes.Ready() {
		// A half-filled cache would reject nodes it has not listed yet; an error lets
		// kube-scheduler retry the pod once the informers have synced.
		http.Error(w, "node and pod informers have not synced yet", http.StatusServiceUnavailable)
		return http.StatusServiceUnavailable
	}
	sc := h.scratch.Get().(*scratch)
	defer h.putScratch(sc)
	sc.body.Reset()
	if _, err := sc.body.ReadFrom(http.MaxBytesReader(w, r.Body, h.cfg.MaxRequestBodyBytes)); err != nil {
		if errors.As(err, new(*http.MaxBytesError)) {
			msg := fmt.Sprintf("request body is larger than %d bytes: raise maxRequestBodyBytes, or set nodeCacheCapable: true in the scheduler configuration", h.cfg.MaxRequestBodyBytes)
			http.Error(w, msg, http.StatusRequestEntityTooLarge)
			return http.StatusRequestEntityTooLarge
		}
		http.Error(w, "read request body: "+err.Error(), http.StatusBadRequest)
		return http.StatusBadRequest
	}
	req, err := decodeRequest(sc.body.Bytes())
	if err != nil {
		klog.FromContext(r.Context()).V(2).Info("Rejected extender request", "path", r.URL.Path, "err", err)
		http.Error(w, err.Error(), http.StatusBadRequest)
		return http.StatusBadRequest
	}
	out, err := do(r.Context(), req, sc)
	if err != nil {
		http.Error(w, "encode response: "+err.Error(), http.StatusInternalServerError)
		return http.StatusInternalServerError
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(out)
	return http.StatusOK
}

// putScratch keeps scratch of ordinary size for reuse; one giant full-Node request must not pin
// its memory for the life of the process.
func (h *Handler) putScratch(sc *scratch) {
	if sc.body.Cap() > 4<<20 || cap(sc.out) > 4<<20 {
		return
	}
	clear(sc.states[:cap(sc.states)]) // drop references to replaced node states
	clear(sc.passed[:cap(sc.passed)])
	clear(sc.rejected[:cap(sc.rejected)])
	h.scratch.Put(sc)
}

func (h *Handler) filter(ctx context.Context, req *request, sc *scratch) ([]byte, error) {
	logger := klog.FromContext(ctx)
	now := h.now()
	d := demandOf(req.pod, h.cfg.DefaultEstimatedUsage)
	sc.rejected = sc.rejected[:0]
	var passed int
	judge := func(name string, st *nodeState) bool {
		r := h.cfg.filterNode(st, d, now)
		if r == "" {
			passed++
			return true
		}
		sc.rejected = append(sc.rejected, rejection{name: name, reason: r})
		if v := logger.V(5); v.Enabled() {
			v.Info("Rejected node", "pod", klog.KObj(req.pod), "node", name, "reason", r, "detail", h.cfg.explain(r, st, d, now))
		}
		return false
	}
	var out []byte
	if req.names != nil {
		sc.states = slices.Grow(sc.states[:0], len(req.names))[:len(req.names)]
		h.nodes.lookup(req.names, sc.states)
		sc.passed = sc.passed[:0]
		for i, st := range sc.states {
			if judge(req.names[i], st) {
				sc.passed = append(sc.passed, req.names[i])
			}
		}
		sc.out = appendFilterResult(sc.out[:0], sc.passed, sc.rejected)
		out = sc.out
	} else {
		// Without nodeCacheCapable the answer carries whole Node objects; encoding/json writes them.
		items := req.nodes.Items
		result := extenderv1.ExtenderFilterResult{Nodes: &corev1.NodeList{Items: make([]corev1.Node, 0, len(items))}}
		for i := range items {
			if judge(items[i].Name, h.nodes.stateFor(&items[i])) {
				result.Nodes.Items = append(result.Nodes.Items, items[i])
			}
		}
		for _, r := range sc.rejected {
			failed := &result.FailedAndUnresolvableNodes
			if r.reason.resolvable() {
				failed = &result.FailedNodes
			}
			if *failed == nil {
				*failed = extenderv1.FailedNodesMap{}
			}
			(*failed)[r.name] = r.reason.message()
		}
		var err error
		if out, err = json.Marshal(&result); err != nil {
			return nil, err
		}
	}
	h.metrics.passed.Add(float64(passed))
	h.metrics.rejected.Add(float64(len(sc.rejected)))
	for _, r := range sc.rejected {
		h.metrics.rejections[r.reason].Inc()
	}
	logger.V(4).Info("Filtered nodes", "pod", klog.KObj(req.pod), "passed", passed, "rejected", len(sc.rejected))
	return out, nil
}

func (h *Handler) prioritize(ctx context.Context, req *request, sc *scratch) ([]byte, error) {
	now := h.now()
	d := demandOf(req.pod, h.cfg.DefaultEstimatedUsage)
	names := req.names
	if names != nil {
		sc.states = slices.Grow(sc.states[:0], len(names))[:len(names)]
		h.nodes.lookup(names, sc.states)
	} else {
		items := req.nodes.Items
		names = make([]string, len(items))
		sc.states = sc.states[:0]
		for i := range items {
			names[i] = items[i].Name
			sc.states = append(sc.states, h.nodes.stateFor(&items[i]))
		}
	}
	sc.scores = slices.Grow(sc.scores[:0], len(names))[:len(names)]
	for i, st := range sc.states {
		sc.scores[i] = h.cfg.scoreNode(st, d, now)
	}
	sc.out = appendPriorities(sc.out[:0], names, sc.scores)
	klog.FromContext(ctx).V(4).Info("Scored nodes", "pod", klog.KObj(req.pod), "nodes", len(names))
	return sc.out, nil
}
