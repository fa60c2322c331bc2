package extender

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime/debug"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
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
	cfg      Config
	nodes    *NodeCache
	metrics  *metrics
	now      func() time.Time
	mux      *http.ServeMux
	scratch  sync.Pool // *scratch
	inflight *inflight
	limits   decodeLimits
	// admitted, when set, runs once a request holds its in-flight token; tests block in it.
	admitted func()
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
	h := &Handler{cfg: cfg, nodes: nodes, metrics: m, now: time.Now, mux: http.NewServeMux(),
		inflight: &inflight{maxRequests: cfg.MaxRequestsInflight}, limits: defaultDecodeLimits()}
	reservations := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "tandem", Subsystem: "extender", Name: "reservations",
		Help: "Reservations holding batch room: Available on a node, not expired, no owner pod bound there yet. 0 where they are not watched.",
	}, func() float64 { return float64(nodes.activeReservations(h.now())) })
	if err := reg.Register(reservations); err != nil {
		return nil, fmt.Errorf("register extender metrics: %w", err)
	}
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
	body     []byte
	out      []byte
	pieces   net.Buffers // the answer: out, or out around the passing nodes' JSON
	names    []string
	states   []*nodeState
	node     corev1.Node // the Node of a full-node request being decoded
	passed   []int       // indices into names
	rejected []rejection
	scores   []int64
}

// verbFunc answers a decoded request whose nodes are sc.names and sc.states, in sc.pieces.
type verbFunc func(ctx context.Context, req *request, sc *scratch)

func (h *Handler) verb(name string, do verbFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		code := h.serveVerb(w, r, do)
		h.metrics.observe(name, code, time.Since(start))
	})
}

// serveVerb admits a request only when its memory is bounded: its size is declared and within
// maxRequestBodyBytes, and inflight has room for it. Both are decided before a byte of the body
// is read, so a refused request costs nothing; decodeRequest then bounds what the body decodes to.
func (h *Handler) serveVerb(w http.ResponseWriter, r *http.Request, do verbFunc) int {
	switch size := r.ContentLength; {
	case size < 0:
		return h.refuse(w, http.StatusLengthRequired, rejectLengthRequired,
			"send Content-Length: the extender refuses requests whose size it cannot check before reading them")
	case size > h.cfg.MaxRequestBodyBytes:
		return h.refuse(w, http.StatusRequestEntityTooLarge, rejectBodySize, fmt.Sprintf(
			"request body of %d bytes is larger than maxRequestBodyBytes (--max-request-body-bytes) %d: raise it, or set nodeCacheCapable: true in the scheduler configuration",
			size, h.cfg.MaxRequestBodyBytes))
	}
	if !h.inflight.acquire(r.ContentLength) {
		// As kube-apiserver past --max-requests-inflight: kube-scheduler takes the error as the
		// extender's (ignorable: it places the pod without it); another client may retry.
		w.Header().Set("Retry-After", "1")
		return h.refuse(w, http.StatusTooManyRequests, rejectInflight, fmt.Sprintf(
			"too many requests in flight: at most %d (maxRequestsInflight, --max-requests-inflight), of which one larger than %d bytes; retry later",
			h.cfg.MaxRequestsInflight, smallRequestBytes))
	}
	defer h.inflight.release(r.ContentLength)
	if h.admitted != nil {
		h.admitted()
	}
	if !h.nodes.Ready() {
		// A half-filled cache would reject nodes it has not listed yet; an error lets
		// kube-scheduler retry the pod once the informers have synced.
		return h.refuse(w, http.StatusServiceUnavailable, rejectNotReady, "node and pod informers have not synced yet")
	}
	sc := h.scratch.Get().(*scratch)
	defer h.putScratch(sc)
	sc.body = slices.Grow(sc.body[:0], int(r.ContentLength))[:r.ContentLength]
	if _, err := io.ReadFull(r.Body, sc.body); err != nil {
		return h.reject(w, http.StatusBadRequest, rejectMalformed, "read request body: "+err.Error())
	}
	req, err := decodeRequest(sc.body, h.limits)
	if err == nil {
		err = h.nodeStates(req, sc)
	}
	if err != nil {
		klog.FromContext(r.Context()).V(2).Info("Rejected extender request", "path", r.URL.Path, "err", err)
		if errors.Is(err, errTooLarge) {
			return h.reject(w, http.StatusRequestEntityTooLarge, rejectDecodedSize, err.Error())
		}
		return h.reject(w, http.StatusBadRequest, rejectMalformed, err.Error())
	}
	do(r.Context(), req, sc)
	size := 0
	for _, p := range sc.pieces {
		size += len(p)
	}
	w.Header().Set("Content-Type", "application/json")
	// Declared, so that the client has the whole answer before this request's memory is
	// collected (inflight.release).
	w.Header().Set("Content-Length", strconv.Itoa(size))
	for _, p := range sc.pieces {
		if _, err := w.Write(p); err != nil {
			break // the client is gone
		}
	}
	return http.StatusOK
}

// refuse answers a request whose body is left unread. The connection closes after the answer:
// otherwise net/http would read and discard the body first, which a slow client makes last until
// the read timeout.
func (h *Handler) refuse(w http.ResponseWriter, code int, reason, msg string) int {
	w.Header().Set("Connection", "close")
	return h.reject(w, code, reason, msg)
}

// smallRequestBytes is the largest request served beside others: a nodeCacheCapable request for
// 5000 nodes is about 100 KiB, 250 KiB with long cloud host names. Larger requests are served
// one at a time.
const smallRequestBytes = 1 << 20

// inflight admits filter and prioritize requests: at most maxRequests at once, of which one at
// most larger than smallRequestBytes. A request holds memory a few times the size of its body
// (the body, kept to answer full Node objects from, and up to twice as much for node names and
// the answer), so the bound on memory is one request of the largest size plus a few small ones.
// kube-scheduler calls its extenders from its one scheduling loop, a pod at a time, so even
// without nodeCacheCapable its requests do not wait for each other.
type inflight struct {
	maxRequests int

	mu              sync.Mutex
	requests, large int
}

func (f *inflight) acquire(size int64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.requests >= f.maxRequests || (size > smallRequestBytes && f.large > 0) {
		return false
	}
	f.requests++
	if size > smallRequestBytes {
		f.large++
	}
	return true
}

func (f *inflight) release(size int64) {
	if size > smallRequestBytes {
		// The request's memory is garbage now: collect it, and give it back, before the next
		// large request allocates its own, while this one still holds the large slot. Otherwise
		// bodies pile up faster than the collector frees them (measured at the default limits:
		// three bodies at once, a peak RSS of 361 MiB even with GOGC=50; with this, 229 to 285).
		debug.FreeOSMemory()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests--
	if size > smallRequestBytes {
		f.large--
	}
}

func (h *Handler) reject(w http.ResponseWriter, code int, reason, msg string) int {
	h.metrics.rejectedRequests.WithLabelValues(reason).Inc()
	http.Error(w, msg, code)
	return code
}

// nodeStates fills sc.names and sc.states with the request's nodes: looked up by name, or, for
// full Node objects, from each object as decodeRequest's eachNode decodes it.
func (h *Handler) nodeStates(req *request, sc *scratch) error {
	if req.names != nil {
		sc.names = req.names
		sc.states = slices.Grow(sc.states[:0], len(req.names))[:len(req.names)]
		h.nodes.lookup(req.names, sc.states)
		return nil
	}
	sc.names = slices.Grow(sc.names[:0], len(req.nodes))[:len(req.nodes)]
	sc.states = slices.Grow(sc.states[:0], len(req.nodes))[:len(req.nodes)]
	return eachNode(req.nodes, h.limits, &sc.node, func(i int, node *corev1.Node) {
		sc.names[i] = node.Name
		sc.states[i] = h.nodes.stateFor(node)
	})
}

// putScratch keeps scratch of ordinary size for reuse; one giant full-Node request must not pin
// its memory for the life of the process, and must leave nothing that reaches its body.
func (h *Handler) putScratch(sc *scratch) {
	if cap(sc.body) > 4<<20 || cap(sc.out) > 4<<20 || cap(sc.pieces) > 1<<16 {
		*sc = scratch{}
		return
	}
	clear(sc.names[:cap(sc.names)]) // drop references to the request's names
	clear(sc.states[:cap(sc.states)])
	clear(sc.rejected[:cap(sc.rejected)])
	clear(sc.pieces[:cap(sc.pieces)])
	sc.node = corev1.Node{}
	h.scratch.Put(sc)
}

func (h *Handler) filter(ctx context.Context, req *request, sc *scratch) {
	logger := klog.FromContext(ctx)
	now := h.now()
	d := demandOf(req.pod, h.cfg.DefaultEstimatedUsage)
	cl := h.nodes.claimsOf(req.pod, d, now)
	sc.passed, sc.rejected = sc.passed[:0], sc.rejected[:0]
	var elsewhere string // the same for every node, so worked out once
	for i, st := range sc.states {
		r := h.cfg.filterNode(st, sc.names[i], d, cl, now)
		if r == "" {
			sc.passed = append(sc.passed, i)
			continue
		}
		rej := rejection{name: sc.names[i], reason: r}
		switch r {
		case ReasonReservedElsewhere:
			if elsewhere == "" {
				elsewhere = rejectMessage(r, st, cl, now)
			}
			rej.message = elsewhere
		case ReasonBatchReserved:
			rej.message = rejectMessage(r, st, cl, now)
		}
		sc.rejected = append(sc.rejected, rej)
		if v := logger.V(5); v.Enabled() {
			v.Info("Rejected node", "pod", klog.KObj(req.pod), "node", sc.names[i], "reason", r, "detail", h.cfg.explain(r, st, d, cl, now))
		}
	}
	if req.names != nil {
		sc.out = appendFilterResult(sc.out[:0], sc.names, sc.passed, sc.rejected)
		sc.pieces = append(sc.pieces[:0], sc.out)
	} else {
		// Without nodeCacheCapable the answer carries whole Node objects: those kube-scheduler
		// sent, byte for byte, so fields newer than this build's k8s.io/api survive. They are
		// written from the request body, never copied: out holds the JSON around them.
		sc.out = append(sc.out[:0], `{"Nodes":{"metadata":{},"items":[,`...)
		head := len(sc.out) - 1
		sc.out = appendFilterTail(sc.out, sc.rejected)
		sc.pieces = append(sc.pieces[:0], sc.out[:head])
		for j, i := range sc.passed {
			if j > 0 {
				sc.pieces = append(sc.pieces, sc.out[head:head+1])
			}
			sc.pieces = append(sc.pieces, req.nodes[i])
		}
		sc.pieces = append(sc.pieces, sc.out[head+1:])
	}
	h.metrics.passed.Add(float64(len(sc.passed)))
	h.metrics.rejected.Add(float64(len(sc.rejected)))
	for _, r := range sc.rejected {
		h.metrics.rejections[r.reason].Inc()
	}
	logger.V(4).Info("Filtered nodes", "pod", klog.KObj(req.pod), "passed", len(sc.passed), "rejected", len(sc.rejected))
}

func (h *Handler) prioritize(ctx context.Context, req *request, sc *scratch) {
	now := h.now()
	d := demandOf(req.pod, h.cfg.DefaultEstimatedUsage)
	cl := h.nodes.claimsOf(req.pod, d, now)
	sc.scores = slices.Grow(sc.scores[:0], len(sc.names))[:len(sc.names)]
	for i, st := range sc.states {
		sc.scores[i] = h.cfg.scoreNode(st, sc.names[i], d, cl, now)
	}
	sc.out = appendPriorities(sc.out[:0], sc.names, sc.scores)
	sc.pieces = append(sc.pieces[:0], sc.out)
	klog.FromContext(ctx).V(4).Info("Scored nodes", "pod", klog.KObj(req.pod), "nodes", len(sc.names))
}
