package main

// The floor webhook: the leanest Go admission webhook that does the same job in the API server's
// eyes as tandem-webhook, so that kind C (namespace bench-floor, through the floor) against kind A
// (no webhook) is what calling any webhook costs, and kind B (through tandem-webhook) against C is
// what tandem-webhook itself adds.
//
// What the floor does, per review: read the body, decode it with encoding/json into the
// admission/v1 AdmissionReview (the pod stays raw bytes in Object.Raw, as it does in any Go
// webhook before its own logic decodes it), and answer allowed; on /mutate-pod with the JSON patch
// tandem-webhook answered for the same pod at setup, byte for byte, so the API server decodes,
// applies and re-decodes the same patch as for tandem-webhook. It picks the patch by a string only
// that pod variant's JSON holds (its generateName) and writes the pod's own service-account token
// volume name (kube-api-access-xxxxx, random per pod) into it where tandem-webhook's answer had
// one. It encodes the answer with encoding/json, serves over TLS (HTTP/2, a certificate from
// files) in a process of its own, and times each review into the same histogram as tandem-webhook
// (tandem_webhook_admission_duration_seconds, same buckets).
//
// What it does not do: decode the pod, look at profiles or namespaces, compute a patch, validate
// anything, log, or count decisions. So B − C is tandem-webhook's own work (decoding the pod,
// matching 20 profiles, applying them, diffing, validating) plus whatever its server does
// differently; it is not the network, TLS or the API server's patch handling, which C pays too.

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/tandemkit/tandem/admission"
	"github.com/tandemkit/tandem/bench/internal/controlplane"
	"github.com/tandemkit/tandem/e2e/framework"
)

// floorEnv, set to the path of a floorConfig file, makes this binary serve the floor webhook
// instead of running the benchmark: the benchmark starts its own executable that way, so the floor
// is a process of its own as tandem-webhook is (with its own scheduler, heap and garbage
// collector), and no separate package has to be built.
const floorEnv = "TANDEM_BENCH_ADMISSION_FLOOR"

// tokenVolumePrefix starts the name the ServiceAccount admission plugin gives the projected token
// volume it adds to every pod (then five random characters).
const tokenVolumePrefix = "kube-api-access-"

// floorConfig is what the floor process reads from the file floorEnv names.
type floorConfig struct {
	Listen        string         `json:"listen"`        // the webhook's TLS address
	MetricsListen string         `json:"metricsListen"` // plain HTTP: /metrics and /readyz
	CertFile      string         `json:"certFile"`
	KeyFile       string         `json:"keyFile"`
	Variants      []floorVariant `json:"variants"`
}

// floorVariant is the answer for one pod variant.
type floorVariant struct {
	Name string `json:"name"`
	// Marker is a string only this variant's pod JSON holds.
	Marker string `json:"marker"`
	// Patch is the JSON patch tandem-webhook answered for the variant, cut where the pod's token
	// volume name was: the floor joins the pieces with the name in the pod it is answering for.
	Patch []string `json:"patch"`
}

// floorHandler serves the floor's reviews.
type floorHandler struct {
	variants []floorAnswer
	latency  *prometheus.HistogramVec
}

type floorAnswer struct {
	marker []byte
	parts  [][]byte
}

func newFloorHandler(vs []floorVariant, reg prometheus.Registerer) (*floorHandler, error) {
	h := &floorHandler{latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
		// tandem-webhook's metric, name and buckets (admission/review.go), so both read alike.
		Name:    "tandem_webhook_admission_duration_seconds",
		Help:    "Time from a review's arrival to its answer, by webhook path (the benchmark's floor webhook).",
		Buckets: []float64{.0001, .00025, .0005, .001, .002, .005, .01, .025, .05, .1, .25, 1},
	}, []string{"webhook"})}
	if err := reg.Register(h.latency); err != nil {
		return nil, err
	}
	for _, v := range vs {
		if v.Marker == "" || len(v.Patch) == 0 {
			return nil, fmt.Errorf("floor variant %q: no marker or no patch", v.Name)
		}
		a := floorAnswer{marker: []byte(v.Marker)}
		for _, p := range v.Patch {
			a.parts = append(a.parts, []byte(p))
		}
		h.variants = append(h.variants, a)
	}
	return h, nil
}

func (h *floorHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	body, err := io.ReadAll(r.Body)
	var in admissionv1.AdmissionReview
	if err == nil {
		err = json.Unmarshal(body, &in)
	}
	if err == nil && in.Request == nil {
		err = errors.New("no request in it")
	}
	if err != nil {
		http.Error(w, "read the AdmissionReview: "+err.Error(), http.StatusBadRequest)
		return
	}
	resp := &admissionv1.AdmissionResponse{UID: in.Request.UID, Allowed: true}
	if r.URL.Path == admission.MutatePodPath {
		patch, err := h.patchFor(in.Request.Object.Raw)
		if err != nil {
			resp = floorDeny(in.Request, err)
		} else {
			pt := admissionv1.PatchTypeJSONPatch
			resp.Patch, resp.PatchType = patch, &pt
		}
	}
	b, err := json.Marshal(admissionv1.AdmissionReview{TypeMeta: in.TypeMeta, Response: resp})
	if err != nil {
		http.Error(w, "encode the answer: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
	h.latency.WithLabelValues(r.URL.Path).Observe(time.Since(start).Seconds())
}

// floorDeny refuses a pod the floor has no answer for: the benchmark then counts a failed request
// rather than a pod that was silently not mutated.
func floorDeny(req *admissionv1.AdmissionRequest, err error) *admissionv1.AdmissionResponse {
	return &admissionv1.AdmissionResponse{UID: req.UID, Result: &metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusForbidden, Reason: metav1.StatusReasonForbidden, Message: "floor webhook: " + err.Error(),
	}}
}

// patchFor returns the patch of the variant whose marker the pod holds, with the pod's token
// volume name in it.
func (h *floorHandler) patchFor(pod []byte) ([]byte, error) {
	for _, v := range h.variants {
		if !bytes.Contains(pod, v.marker) {
			continue
		}
		if len(v.parts) == 1 {
			return v.parts[0], nil
		}
		name := tokenVolumeName(pod)
		if name == nil {
			return nil, errors.New("the pod has no " + tokenVolumePrefix + "* volume for the patch")
		}
		return bytes.Join(v.parts, name), nil
	}
	return nil, errors.New("no patch for this pod: it is none of the benchmark's variants")
}

// tokenVolumeName finds the first kube-api-access-* name in a pod's JSON (its volume or a
// container's mount of it), or nil.
func tokenVolumeName(pod []byte) []byte {
	i := bytes.Index(pod, []byte(`"`+tokenVolumePrefix))
	if i < 0 {
		return nil
	}
	rest := pod[i+1:]
	j := bytes.IndexByte(rest, '"')
	if j < 0 {
		return nil
	}
	return rest[:j]
}

// serveFloor is the body of the floor's own process: it serves until ctx ends.
func serveFloor(ctx context.Context, configPath string) error {
	b, err := os.ReadFile(configPath)
	if err != nil {
		return err
	}
	var cfg floorConfig
	if err := json.Unmarshal(b, &cfg); err != nil {
		return fmt.Errorf("%s: %w", configPath, err)
	}
	cert, err := tls.LoadX509KeyPair(cfg.CertFile, cfg.KeyFile)
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	h, err := newFloorHandler(cfg.Variants, reg)
	if err != nil {
		return err
	}
	// As tandem-webhook serves (cmd/tandem-webhook): a ServeMux with the three paths, the same
	// server timeouts, TLS 1.2 or later, HTTP/2 (ServeTLS turns it on).
	mux := http.NewServeMux()
	for _, p := range []string{admission.MutatePodPath, admission.ValidatePodPath, admission.ValidateProfilePath} {
		mux.Handle(p, h)
	}
	plain := http.NewServeMux()
	plain.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	plain.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	webhook := &http.Server{
		Handler: mux, ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second, IdleTimeout: 90 * time.Second,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
	}
	metrics := &http.Server{Handler: plain, ReadHeaderTimeout: 5 * time.Second}
	wl, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return err
	}
	ml, err := net.Listen("tcp", cfg.MetricsListen)
	if err != nil {
		return errors.Join(err, wl.Close())
	}
	errs := make(chan error, 2)
	go func() { errs <- webhook.ServeTLS(wl, "", "") }()
	go func() { errs <- metrics.Serve(ml) }()
	klog.FromContext(ctx).Info("Floor webhook serving", "listen", cfg.Listen, "metrics", cfg.MetricsListen, "variants", len(cfg.Variants))
	var first error
	select {
	case first = <-errs:
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	return errors.Join(first, webhook.Shutdown(sctx), metrics.Shutdown(sctx))
}

// askPatch posts the mutating review body of the named variant's pod to tandem-webhook at url and
// returns the JSON patch it answers with.
func askPatch(ctx context.Context, client *http.Client, url, body, name string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("ask tandem-webhook for the %s pod's patch: %w", name, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("read tandem-webhook's answer for the %s pod: %w", name, err)
	}
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(b, &review); err != nil {
		return nil, fmt.Errorf("tandem-webhook's answer for the %s pod (status %d): %w", name, resp.StatusCode, err)
	}
	if review.Response == nil || !review.Response.Allowed || len(review.Response.Patch) == 0 {
		return nil, fmt.Errorf("tandem-webhook did not patch the %s pod: %s", name, b)
	}
	return review.Response.Patch, nil
}

// floorVariants asks the running tandem-webhook, once, for its answer to each variant's mutating
// review as the API server sends it for namespace bench-webhook (the pod the API server answered
// for bench-plain: defaulted, in-tree admission done, token volume added), and returns what the
// floor needs to give the same answer.
func floorVariants(ctx context.Context, client *http.Client, webhookURL string, pods, submitted [variants]*corev1.Pod) ([]floorVariant, error) {
	var out []floorVariant
	for v := range variants {
		body, err := reviewBody(submitted[v], nsWebhook)
		if err != nil {
			return nil, err
		}
		patch, err := askPatch(ctx, client, webhookURL+admission.MutatePodPath, body, variantNames[v])
		if err != nil {
			return nil, err
		}
		fv := floorVariant{Name: variantNames[v], Marker: variantMarker(pods[v]), Patch: []string{string(patch)}}
		if name := tokenVolumeName([]byte(body)); name != nil {
			fv.Patch = strings.Split(fv.Patch[0], string(name))
		}
		out = append(out, fv)
	}
	// Each marker must pick its own variant only.
	for v := range variants {
		raw, err := json.Marshal(submitted[v])
		if err != nil {
			return nil, err
		}
		for w, fv := range out {
			if has := bytes.Contains(raw, []byte(fv.Marker)); has != (v == w) {
				return nil, fmt.Errorf("the floor's marker %q for the %s pod does not tell it from the %s pod", fv.Marker, fv.Name, variantNames[v])
			}
		}
	}
	return out, nil
}

// patchSizes describes the floor's patches for the report: operations and bytes of each.
func patchSizes(vs []floorVariant) string {
	var out []string
	for _, v := range vs {
		var ops []admission.PatchOperation
		p := strings.Join(v.Patch, tokenVolumePrefix+"xxxxx")
		if err := json.Unmarshal([]byte(p), &ops); err != nil {
			out = append(out, v.Name+" pod: "+err.Error())
			continue
		}
		paths := make([]string, len(ops))
		for i, op := range ops {
			paths[i] = op.Op + " " + op.Path
		}
		out = append(out, fmt.Sprintf("%s pod %d ops, %.1f KiB: %s", v.Name, len(ops), float64(len(p))/1024, strings.Join(paths, ", ")))
	}
	return strings.Join(out, "; ")
}

// variantMarker is the string the floor recognises a variant's pod by: its generateName, as the
// API server's JSON spells it.
func variantMarker(p *corev1.Pod) string {
	return `"generateName":"` + p.GenerateName + `"`
}

// startFloor writes the floor's configuration and starts this binary again as the floor webhook,
// and waits until it serves.
func (s *servers) startFloor(ctx context.Context, vs []floorVariant) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find own binary to start the floor webhook: %w", err)
	}
	cfg := floorConfig{
		Listen:        fmt.Sprintf("127.0.0.1:%d", s.floorPort),
		MetricsListen: strings.TrimPrefix(s.floorMetricsURL, "http://"),
		CertFile:      s.pki.Cert, KeyFile: s.pki.Key,
		Variants: vs,
	}
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return err
	}
	path := filepath.Join(s.dir, "floor.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return err
	}
	s.floor, err = framework.StartDaemon("floor webhook", exe, nil, []string{floorEnv + "=" + path}, filepath.Join(s.dir, "floor.log"))
	if err != nil {
		return err
	}
	return controlplane.WaitHTTP(ctx, s.floor, &http.Client{Timeout: 5 * time.Second}, s.floorMetricsURL+"/readyz", "", "", time.Minute)
}
