package admission

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

func podFromJSON(t *testing.T, s string) *corev1.Pod {
	t.Helper()
	var p corev1.Pod
	if err := json.Unmarshal([]byte(s), &p); err != nil {
		t.Fatal(err)
	}
	if p.Namespace == "" {
		p.Namespace = "default"
	}
	return &p
}

func TestValidatePod(t *testing.T) {
	for _, tc := range []struct {
		name string
		pod  string
		// want lists what the message must contain; empty: the pod is allowed.
		want []string
	}{
		{name: "LSE whole CPUs", pod: `{"metadata":{"name":"web","labels":{"koordinator.sh/qosClass":"LSE"}},"spec":{"containers":[{"name":"app","resources":{"requests":{"cpu":"2"},"limits":{"cpu":"2"}}}]}}`},
		{name: "LSE 1500m", pod: `{"metadata":{"name":"web","labels":{"koordinator.sh/qosClass":"LSE"}},"spec":{"containers":[{"name":"app","resources":{"requests":{"cpu":"1500m"},"limits":{"cpu":"1500m"}}}]}}`,
			want: []string{"pod default/web, container app: rule exclusive-cpus", "1500m", "ask for 1 or 2"}},
		{name: "LSR request below limit", pod: `{"metadata":{"name":"db","labels":{"koordinator.sh/qosClass":"LSR"}},"spec":{"containers":[{"name":"app","resources":{"requests":{"cpu":"1"},"limits":{"cpu":"2"}}}]}}`,
			want: []string{"container app: rule exclusive-cpus", "requests.cpu 1 and limits.cpu 2"}},
		{name: "LSE without CPU", pod: `{"metadata":{"name":"web","labels":{"koordinator.sh/qosClass":"LSE"}},"spec":{"containers":[{"name":"app"}]}}`,
			want: []string{"rule exclusive-cpus", "asks for no CPU"}},
		{name: "LSE init container fractional", pod: `{"metadata":{"name":"web","labels":{"koordinator.sh/qosClass":"LSE"}},"spec":{"initContainers":[{"name":"setup","resources":{"requests":{"cpu":"500m"},"limits":{"cpu":"500m"}}}],"containers":[{"name":"app","resources":{"requests":{"cpu":"1"},"limits":{"cpu":"1"}}}]}}`,
			want: []string{"container setup: rule exclusive-cpus", "ask for 1"}},
		{name: "openFuyao HLS fractional", pod: `{"metadata":{"name":"web","annotations":{"openfuyao.com/QoS-level":"HLS"}},"spec":{"containers":[{"name":"app","resources":{"requests":{"cpu":"2500m"},"limits":{"cpu":"2500m"}}}]}}`,
			want: []string{"container app: rule exclusive-cpus", "annotation openfuyao.com/QoS-level"}},
		{name: "LS fractional is fine", pod: `{"metadata":{"name":"web","labels":{"koordinator.sh/qosClass":"LS"}},"spec":{"containers":[{"name":"app","resources":{"requests":{"cpu":"1500m"}}}]}}`},
		{name: "unknown class", pod: `{"metadata":{"name":"web","labels":{"koordinator.sh/qosClass":"GOLD"}},"spec":{"containers":[{"name":"app"}]}}`,
			want: []string{"pod default/web: rule qos-class", `"GOLD"`}},
		{name: "unknown openFuyao level", pod: `{"metadata":{"name":"web","annotations":{"openfuyao.com/QoS-level":"ULTRA"}},"spec":{"containers":[{"name":"app"}]}}`,
			want: []string{"rule qos-class", "ULTRA"}},
		{name: "malformed resource-spec", pod: `{"metadata":{"name":"web","annotations":{"scheduling.koordinator.sh/resource-spec":"{\"preferredCPUBindPolicy\":"}},"spec":{"containers":[{"name":"app"}]}}`,
			want: []string{"rule resource-spec", "scheduling.koordinator.sh/resource-spec"}},
		{name: "unknown bind policy", pod: `{"metadata":{"name":"web","annotations":{"scheduling.koordinator.sh/resource-spec":"{\"preferredCPUBindPolicy\":\"Sideways\"}"}},"spec":{"containers":[{"name":"app"}]}}`,
			want: []string{"rule resource-spec", "Sideways"}},
		{name: "known bind policy", pod: `{"metadata":{"name":"web","annotations":{"scheduling.koordinator.sh/resource-spec":"{\"preferredCPUBindPolicy\":\"SpreadByPCPUs\"}"}},"spec":{"containers":[{"name":"app"}]}}`},
		{name: "malformed extended-resource-spec", pod: `{"metadata":{"name":"job","labels":{"koordinator.sh/qosClass":"BE"},"annotations":{"node.koordinator.sh/extended-resource-spec":"{\"containers\":{\"a\":{\"limits\":{\"kubernetes.io/batch-cpu\":\"many\"}}}}"}},"spec":{"containers":[{"name":"a"}]}}`,
			want: []string{"rule extended-resource-spec", "container a"}},
		{name: "batch resources on LS", pod: `{"metadata":{"name":"job"},"spec":{"containers":[{"name":"a","resources":{"limits":{"kubernetes.io/batch-cpu":"500"}}}]}}`,
			want: []string{"pod default/job, container a: rule batch-resources-need-be", "koordinator.sh/qosClass=BE"}},
		{name: "BE with batch resources", pod: `{"metadata":{"name":"job","labels":{"koordinator.sh/qosClass":"BE"}},"spec":{"priority":5000,"containers":[{"name":"a","resources":{"limits":{"kubernetes.io/batch-cpu":"500"}}}]}}`},
		{name: "BE in the prod band", pod: `{"metadata":{"name":"job","labels":{"koordinator.sh/qosClass":"BE"}},"spec":{"priority":9000,"containers":[{"name":"a"}]}}`,
			want: []string{"rule be-not-in-prod-band", "9000"}},
		{name: "two rules at once", pod: `{"metadata":{"name":"web","labels":{"koordinator.sh/qosClass":"LSE"},"annotations":{"scheduling.koordinator.sh/resource-spec":"x"}},"spec":{"containers":[{"name":"app","resources":{"requests":{"cpu":"1500m"},"limits":{"cpu":"1500m"}}}]}}`,
			want: []string{"rule exclusive-cpus", "rule resource-spec"}},
		{name: "plain pod", pod: `{"metadata":{"name":"web"},"spec":{"containers":[{"name":"app","resources":{"requests":{"cpu":"100m"}}}]}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidatePod(podFromJSON(t, tc.pod))
			// The webhook decodes only what the rules read; it must judge as on the whole pod.
			lite, derr := decodeForValidation([]byte(tc.pod))
			if derr != nil {
				t.Fatal(derr)
			}
			lite.Namespace = "default"
			if liteErr := ValidatePod(lite); fmt.Sprint(liteErr) != fmt.Sprint(err) {
				t.Errorf("on the decoded part: %v; on the whole pod: %v", liteErr, err)
			}
			if len(tc.want) == 0 {
				if err != nil {
					t.Errorf("refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("allowed")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("message %q lacks %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "invalid argument") {
				t.Errorf("message %q carries errdefs' suffix", err)
			}
		})
	}
}

// review sends one AdmissionReview through the handler, as the API server does.
func review(t *testing.T, h http.Handler, path string, req admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	t.Helper()
	b, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request:  &req,
	})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, path, bytes.NewReader(b)))
	if rec.Code != http.StatusOK {
		t.Fatalf("HTTP %d: %s", rec.Code, rec.Body)
	}
	var out admissionv1.AdmissionReview
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
		t.Fatal(err)
	}
	if out.Kind != "AdmissionReview" || out.APIVersion != "admission.k8s.io/v1" || out.Response == nil || out.Response.UID != req.UID {
		t.Fatalf("answer %+v: want an AdmissionReview answering uid %s", out, req.UID)
	}
	return out.Response
}

func TestHandler(t *testing.T) {
	var prof ClusterColocationProfile
	readYAML(t, "testdata/seed-001-profile.yaml", &prof)
	reg := prometheus.NewRegistry()
	h := NewHandler(NewMutator(newFakeCluster(), fixed(compile(t, &prof)), nil), reg)
	pods := metav1.GroupVersionResource{Version: "v1", Resource: "pods"}
	pod := readYAML(t, "testdata/seed-001-pod.yaml", nil)

	resp := review(t, h, MutatePodPath, admissionv1.AdmissionRequest{UID: "1", Operation: admissionv1.Create, Namespace: "colocation", Resource: pods, Object: runtime.RawExtension{Raw: pod}})
	if !resp.Allowed || resp.PatchType == nil || *resp.PatchType != admissionv1.PatchTypeJSONPatch || !bytes.Contains(resp.Patch, []byte("kubernetes.io/batch-cpu")) {
		t.Errorf("mutate: %+v, want allowed with a JSONPatch converting the resources", resp)
	}
	// Updates and subresources pass untouched.
	resp = review(t, h, MutatePodPath, admissionv1.AdmissionRequest{UID: "2", Operation: admissionv1.Update, Namespace: "colocation", Resource: pods, Object: runtime.RawExtension{Raw: pod}})
	if !resp.Allowed || len(resp.Patch) > 0 {
		t.Errorf("update: %+v, want allowed unchanged", resp)
	}

	lse := []byte(`{"metadata":{"name":"web","namespace":"default","labels":{"koordinator.sh/qosClass":"LSE"}},"spec":{"containers":[{"name":"app","resources":{"requests":{"cpu":"1500m"},"limits":{"cpu":"1500m"}}}]}}`)
	resp = review(t, h, ValidatePodPath, admissionv1.AdmissionRequest{UID: "3", Operation: admissionv1.Create, Namespace: "default", Resource: pods, Object: runtime.RawExtension{Raw: lse}})
	if resp.Allowed || resp.Result == nil || resp.Result.Code != http.StatusForbidden || !strings.Contains(resp.Result.Message, "rule exclusive-cpus") {
		t.Errorf("validate LSE 1500m: %+v, want refused naming the rule", resp)
	}

	bad := []byte(`{"metadata":{"name":"broken"},"spec":{"qosClass":"GOLD"}}`)
	profiles := metav1.GroupVersionResource{Group: ProfileResource.Group, Version: ProfileResource.Version, Resource: ProfileResource.Resource}
	resp = review(t, h, ValidateProfilePath, admissionv1.AdmissionRequest{UID: "4", Operation: admissionv1.Create, Resource: profiles, Object: runtime.RawExtension{Raw: bad}})
	if resp.Allowed || !strings.Contains(resp.Result.Message, "ClusterColocationProfile broken: spec.qosClass") {
		t.Errorf("validate a broken profile: %+v", resp)
	}

	if got := testutil.ToFloat64(h.requests.WithLabelValues(MutatePodPath, decisionPatched)); got != 1 {
		t.Errorf("patched count %v, want 1", got)
	}
	if got := testutil.ToFloat64(h.requests.WithLabelValues(ValidatePodPath, decisionDenied)); got != 1 {
		t.Errorf("denied count %v, want 1", got)
	}

	// Garbage gets HTTP 400 and is counted, never a crash.
	for _, body := range []string{"", "{", `{"request":null}`} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, MutatePodPath, strings.NewReader(body)))
		if rec.Code != http.StatusBadRequest {
			t.Errorf("body %q: HTTP %d, want 400", body, rec.Code)
		}
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, MutatePodPath, bytes.NewReader(make([]byte, maxReviewBytes+10))))
	if rec.Code != http.StatusBadRequest {
		t.Errorf("oversized body: HTTP %d, want 400", rec.Code)
	}
}
