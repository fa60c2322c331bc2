package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/tandemkit/tandem/admission"
	"github.com/tandemkit/tandem/bench/internal/controlplane"
)

// withToken is pod as the API server hands it to the webhooks: in ns, with the projected token
// volume the ServiceAccount admission plugin adds (under a random name) mounted in every container.
func withToken(p *corev1.Pod, ns, volume string) *corev1.Pod {
	q := p.DeepCopy()
	q.Namespace = ns
	q.Spec.Volumes = append(q.Spec.Volumes, corev1.Volume{Name: volume, VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptr.To[int64](3607)}}},
	}}})
	for i := range q.Spec.Containers {
		q.Spec.Containers[i].VolumeMounts = append(q.Spec.Containers[i].VolumeMounts,
			corev1.VolumeMount{Name: volume, ReadOnly: true, MountPath: "/var/run/secrets/kubernetes.io/serviceaccount"})
	}
	return q
}

// answer serves one review body on path and returns the AdmissionReview answered.
func answer(t *testing.T, h http.Handler, path, body string) (int, admissionv1.AdmissionReview) {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	var out admissionv1.AdmissionReview
	if w.Code == http.StatusOK {
		if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil {
			t.Fatalf("%s: %v: %s", path, err, w.Body)
		}
	}
	return w.Code, out
}

// TestFloorEchoesTandemWebhooksPatch: the floor, given what floorVariants asked tandem-webhook's
// handler at setup, answers another pod of each variant (another token volume name) with the very
// bytes tandem-webhook's handler answers for it.
func TestFloorEchoesTandemWebhooksPatch(t *testing.T) {
	t.Parallel()
	tandem, err := inProcessHandler(benchProfiles())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewTLSServer(tandem)
	defer srv.Close()
	pods := benchPods()
	var submitted [variants]*corev1.Pod
	for v := range variants {
		submitted[v] = withToken(pods[v], nsWebhook, tokenVolumePrefix+"abcde")
	}
	vs, err := floorVariants(context.Background(), srv.Client(), srv.URL, pods, submitted)
	if err != nil {
		t.Fatal(err)
	}
	if len(vs) != variants {
		t.Fatalf("%d variants", len(vs))
	}
	reg := prometheus.NewRegistry()
	floor, err := newFloorHandler(vs, reg)
	if err != nil {
		t.Fatal(err)
	}
	for v := range variants {
		if len(vs[v].Patch) < 2 {
			t.Errorf("%s: the patch does not name the token volume (%d pieces): the benchmark's pods should make tandem-webhook replace the containers", variantNames[v], len(vs[v].Patch))
		}
		pod := withToken(pods[v], nsFloor, tokenVolumePrefix+"zyxwv")
		fBody, err := reviewBody(pod, nsFloor)
		if err != nil {
			t.Fatal(err)
		}
		pod.Namespace = nsWebhook
		tBody, err := reviewBody(pod, nsWebhook)
		if err != nil {
			t.Fatal(err)
		}
		code, got := answer(t, floor, admission.MutatePodPath, fBody)
		_, want := answer(t, tandem, admission.MutatePodPath, tBody)
		if code != http.StatusOK || got.Response == nil || !got.Response.Allowed {
			t.Fatalf("%s: floor answered %d %+v", variantNames[v], code, got.Response)
		}
		if !bytes.Equal(got.Response.Patch, want.Response.Patch) {
			t.Errorf("%s: floor's patch\n%s\ntandem-webhook's\n%s", variantNames[v], got.Response.Patch, want.Response.Patch)
		}
		if bytes.Contains(got.Response.Patch, []byte("abcde")) || !bytes.Contains(got.Response.Patch, []byte("zyxwv")) {
			t.Errorf("%s: the floor's patch does not carry the pod's own token volume: %s", variantNames[v], got.Response.Patch)
		}
		if got.Response.UID != "5d0c8f4e-3a4b-4c2d-9e1f-0a1b2c3d4e5f" || got.Response.PatchType == nil || *got.Response.PatchType != admissionv1.PatchTypeJSONPatch ||
			got.APIVersion != "admission.k8s.io/v1" || got.Kind != "AdmissionReview" {
			t.Errorf("%s: answer %+v %+v", variantNames[v], got.TypeMeta, got.Response)
		}
		// Validation: allowed, no patch.
		for _, path := range []string{admission.ValidatePodPath, admission.ValidateProfilePath} {
			code, got := answer(t, floor, path, fBody)
			if code != http.StatusOK || got.Response == nil || !got.Response.Allowed || got.Response.Patch != nil {
				t.Errorf("%s %s: %d %+v", variantNames[v], path, code, got.Response)
			}
		}
	}
	// A pod of no variant is refused, so that the benchmark counts a failure.
	other := withToken(pods[variantWeb], nsFloor, tokenVolumePrefix+"q")
	other.GenerateName = "other-"
	body, err := reviewBody(other, nsFloor)
	if err != nil {
		t.Fatal(err)
	}
	if code, got := answer(t, floor, admission.MutatePodPath, body); code != http.StatusOK || got.Response.Allowed ||
		got.Response.Result == nil || !strings.Contains(got.Response.Result.Message, "floor webhook: no patch") || got.Response.UID == "" {
		t.Errorf("unknown pod: %d %+v", code, got.Response)
	}
	if code, _ := answer(t, floor, admission.MutatePodPath, "{"); code != http.StatusBadRequest {
		t.Errorf("broken review: %d", code)
	}
	// Timed into tandem-webhook's metric.
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]uint64{}
	for _, mf := range mfs {
		if mf.GetName() != "tandem_webhook_admission_duration_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			counts[m.GetLabel()[0].GetValue()] = m.GetHistogram().GetSampleCount()
		}
	}
	if counts[admission.MutatePodPath] != variants+1 || counts[admission.ValidatePodPath] != variants {
		t.Errorf("histogram counts %v", counts)
	}
	if s := patchSizes(vs); !strings.Contains(s, "web pod") || !strings.Contains(s, "batch pod") || !strings.Contains(s, "/metadata/annotations") {
		t.Errorf("patchSizes = %q", s)
	}
}

func TestPatchFor(t *testing.T) {
	t.Parallel()
	h, err := newFloorHandler([]floorVariant{
		{Name: "one", Marker: `"generateName":"one-"`, Patch: []string{`[{"op":"add","path":"/x","value":"`, `"}]`}},
		{Name: "two", Marker: `"generateName":"two-"`, Patch: []string{`[]`}},
	}, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, pod, want string
		err             bool
	}{
		{"volume name written in", `{"metadata":{"generateName":"one-"},"spec":{"volumes":[{"name":"kube-api-access-k2x9z","projected":{}}]}}`, `[{"op":"add","path":"/x","value":"kube-api-access-k2x9z"}]`, false},
		{"first occurrence, a mount", `{"metadata":{"generateName":"one-"},"spec":{"containers":[{"volumeMounts":[{"name":"kube-api-access-aaaaa"}]}]}}`, `[{"op":"add","path":"/x","value":"kube-api-access-aaaaa"}]`, false},
		{"no volume where the patch needs one", `{"metadata":{"generateName":"one-"}}`, "", true},
		{"patch without the volume", `{"metadata":{"generateName":"two-"}}`, `[]`, false},
		{"no variant", `{"metadata":{"generateName":"three-"}}`, "", true},
	}
	for _, tt := range tests {
		got, err := h.patchFor([]byte(tt.pod))
		if (err != nil) != tt.err || string(got) != tt.want {
			t.Errorf("%s: patchFor = %q, %v; want %q (error %v)", tt.name, got, err, tt.want, tt.err)
		}
	}
	if _, err := newFloorHandler([]floorVariant{{Name: "x"}}, prometheus.NewRegistry()); err == nil {
		t.Error("a variant without marker or patch was taken")
	}
}

func TestSameAnswer(t *testing.T) {
	t.Parallel()
	base := withToken(benchPods()[variantBatch], nsWebhook, tokenVolumePrefix+"abcde")
	base.Name, base.UID = "spark-etl-exec-x1", types.UID("u1")
	same := withToken(benchPods()[variantBatch], nsFloor, tokenVolumePrefix+"fghij")
	same.Name, same.UID = "spark-etl-exec-y2", types.UID("u2")
	if err := sameAnswer(base, same); err != nil {
		t.Errorf("same answer but for name, namespace, uid and token volume: %v", err)
	}
	other := same.DeepCopy()
	other.Labels["admitted-by"] = "someone-else"
	if err := sameAnswer(base, other); err == nil || !strings.Contains(err.Error(), "someone-else") {
		t.Errorf("a different label: %v", err)
	}
	prio := same.DeepCopy()
	prio.Spec.Priority = ptr.To[int32](5000)
	if err := sameAnswer(base, prio); err == nil {
		t.Error("a different priority went unnoticed")
	}
}

// TestServeFloor runs the floor's process body (not the process) and calls it as the API server
// does: TLS with the run's CA, HTTP/2.
func TestServeFloor(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p, err := controlplane.NewPKI(filepath.Join(dir, "pki"))
	if err != nil {
		t.Fatal(err)
	}
	ports, err := controlplane.FreePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	cfg := floorConfig{
		Listen: fmt.Sprintf("127.0.0.1:%d", ports[0]), MetricsListen: fmt.Sprintf("127.0.0.1:%d", ports[1]),
		CertFile: p.Cert, KeyFile: p.Key,
		Variants: []floorVariant{{Name: "web", Marker: variantMarker(benchPods()[variantWeb]), Patch: []string{`[{"op":"add","path":"/metadata/labels/x","value":"y"}]`}}},
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "floor.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serveFloor(ctx, path) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serveFloor: %v", err)
		}
	}()
	plain := &http.Client{Timeout: 5 * time.Second}
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := controlplane.Fetch(ctx, plain, "http://"+cfg.MetricsListen+"/readyz", "")
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("floor not ready: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(p.CAPEM)
	h2 := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{ForceAttemptHTTP2: true, TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	body, err := reviewBody(withToken(benchPods()[variantWeb], nsFloor, tokenVolumePrefix+"abcde"), nsFloor)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := h2.Post("https://"+cfg.Listen+admission.MutatePodPath, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out admissionv1.AdmissionReview
	err = json.NewDecoder(resp.Body).Decode(&out)
	if err != nil || resp.ProtoMajor != 2 || out.Response == nil || !out.Response.Allowed || string(out.Response.Patch) != cfg.Variants[0].Patch[0] {
		t.Fatalf("answer over %s: %+v, %v", resp.Proto, out.Response, err)
	}
	body2, err := controlplane.Fetch(ctx, plain, "http://"+cfg.MetricsListen+"/metrics", "")
	if err != nil {
		t.Fatal(err)
	}
	hs, err := parseHistograms(body2, "tandem_webhook_admission_duration_seconds", "webhook")
	if err != nil || hs[admission.MutatePodPath] == nil || hs[admission.MutatePodPath].count != 1 {
		t.Fatalf("floor metrics: %v %v", hs, err)
	}
}

func TestOptionsValidate(t *testing.T) {
	t.Parallel()
	ok := options{rate: 50, duration: 120 * time.Second, warmup: 5 * time.Second, timeout: 10 * time.Second}
	tests := []struct {
		name string
		edit func(*options)
		want string // in the error; empty for none
	}{
		{"defaults", func(*options) {}, ""},
		{"short but 100 per kind", func(o *options) { o.rate, o.duration = 30, 10*time.Second }, ""},
		{"too few per kind", func(o *options) { o.duration = 5 * time.Second }, "83 requests per kind"},
		{"no rate", func(o *options) { o.rate = 0 }, "-rate must be positive"},
		{"negative warm-up", func(o *options) { o.warmup = -time.Second }, "-warmup not negative"},
	}
	for _, tt := range tests {
		o := ok
		tt.edit(&o)
		err := o.validate()
		if (err == nil) != (tt.want == "") || (err != nil && !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("%s: validate = %v, want %q", tt.name, err, tt.want)
		}
	}
}
