package proxy

import (
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Every call is counted under its method and code and timed under its method, whether its series are
// kept resolved (a CRI method) or looked up by label (a method newer than the vendored CRI).
func TestObserveCountsEveryCall(t *testing.T) {
	const known, unknown = "/runtime.v1.RuntimeService/Version", "/runtime.v1.RuntimeService/SomethingNew"
	for _, tc := range []struct {
		name   string
		method string
	}{{"CRI method", known}, {"method the proxy does not know", unknown}} {
		t.Run(tc.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			m, err := newMetrics(reg, criMethods())
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := m.known[known]; !ok {
				t.Fatalf("%s is not among the CRI methods", known)
			}
			for range 3 {
				m.observe(tc.method, nil, time.Millisecond)
			}
			m.observe(tc.method, status.Error(codes.NotFound, "gone"), time.Millisecond)
			m.observe(tc.method, errors.New("no status"), time.Millisecond)
			for code, want := range map[string]float64{"OK": 3, "NotFound": 1, "Unknown": 1} {
				if got := testutil.ToFloat64(m.requests.WithLabelValues(tc.method, code)); got != want {
					t.Errorf("requests_total{code=%q} = %v, want %v", code, got, want)
				}
			}
			if n := testutil.CollectAndCount(m.duration); n != 1 {
				t.Errorf("%d duration series, want 1: only the method called has one", n)
			}
			if n := testutil.CollectAndCount(m.requests); n != 3 {
				t.Errorf("%d request series, want 3 (one per code seen)", n)
			}
		})
	}
}

// BenchmarkObserve is what the metrics cost one relayed call: a CRI method's resolved series against
// the labelled lookup every call made before.
func BenchmarkObserve(b *testing.B) {
	m, err := newMetrics(prometheus.NewRegistry(), criMethods())
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct{ name, method string }{
		{"resolved", "/runtime.v1.RuntimeService/ListContainers"},
		{"labelled", "/runtime.v1.RuntimeService/NotInTheVendoredAPI"},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				m.observe(tc.method, nil, 300*time.Microsecond)
			}
		})
	}
}
