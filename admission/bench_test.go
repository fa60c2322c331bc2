package admission

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// twentyProfiles is Koordinator's colocation-profile-example and 19 others, half of them matching the
// example's pod, as bench/admission registers them.
func twentyProfiles(b *testing.B) func() []*Profile {
	var seed ClusterColocationProfile
	readYAML(&testing.T{}, "testdata/seed-001-profile.yaml", &seed)
	ps := []*Profile{}
	c, err := Compile(&seed)
	if err != nil {
		b.Fatal(err)
	}
	ps = append(ps, c)
	for i := range 19 {
		sel := map[string]string{"koordinator.sh/enable-colocation": "true"}
		if i%2 == 1 {
			sel = map[string]string{"app": "other"}
		}
		p := &ClusterColocationProfile{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("profile-%02d", i)}, Spec: ClusterColocationProfileSpec{
			Selector: &metav1.LabelSelector{MatchLabels: sel},
			Labels:   map[string]string{fmt.Sprintf("team-%d", i): "x"}, Annotations: map[string]string{fmt.Sprintf("note-%d", i): "y"},
		}}
		if c, err = Compile(p); err != nil {
			b.Fatal(err)
		}
		ps = append(ps, c)
	}
	return fixed(ps...)
}

func BenchmarkMutateSeed001(b *testing.B) {
	raw := readYAML(&testing.T{}, "testdata/seed-001-pod.yaml", nil)
	m := NewMutator(newFakeCluster(), twentyProfiles(b), func(int) int { return 0 })
	b.ReportAllocs()
	for b.Loop() {
		if _, err := m.Mutate(context.Background(), "colocation", raw); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkServeMutateSeed001(b *testing.B) {
	raw := readYAML(&testing.T{}, "testdata/seed-001-pod.yaml", nil)
	h := NewHandler(NewMutator(newFakeCluster(), twentyProfiles(b), func(int) int { return 0 }), prometheus.NewRegistry())
	body, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{UID: "1", Operation: admissionv1.Create, Namespace: "colocation",
			Resource: metav1.GroupVersionResource{Version: "v1", Resource: "pods"}, Object: runtime.RawExtension{Raw: raw}},
	})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, MutatePodPath, bytes.NewReader(body)))
		if rec.Code != http.StatusOK {
			b.Fatal(rec.Code)
		}
	}
}
