package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestValidator: an AdmissionReview gets a denial for its UID naming the
// object and the pod; anything else a 400.
func TestValidator(t *testing.T) {
	h := validator("web-1 on node-b", &bytes.Buffer{})
	in := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID: types.UID("42"), Operation: admissionv1.Create,
			Kind:      metav1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"},
			Namespace: "ns", Name: "cm",
		},
	}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/validate", bytes.NewReader(b)))
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	var out admissionv1.AdmissionReview
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
		t.Fatal(err)
	}
	if out.APIVersion != "admission.k8s.io/v1" || out.Kind != "AdmissionReview" || out.Request != nil {
		t.Errorf("answer %+v: want an AdmissionReview v1 without the request", out)
	}
	r := out.Response
	if r == nil || r.UID != "42" || r.Allowed || r.Result == nil {
		t.Fatalf("response %+v: want a denial of UID 42", r)
	}
	for _, want := range []string{DenyMessage, "web-1 on node-b", "CREATE ConfigMap ns/cm"} {
		if !strings.Contains(r.Result.Message, want) {
			t.Errorf("message %q lacks %q", r.Result.Message, want)
		}
	}

	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/validate", strings.NewReader(`{}`)))
	if rec.Code != http.StatusBadRequest {
		t.Errorf("empty review: status %d, want 400", rec.Code)
	}
}
