package extender

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
)

// benchHandler is a handler over a cache of size nodes, 70% cold, 20% hot, 10% stale, fed through
// the informer event handlers directly; bench/extender runs the same calls over real informers.
func benchHandler(b *testing.B, size int) (*Handler, []*corev1.Node) {
	b.Helper()
	c := newNodeCache(DefaultConfig())
	c.synced = nil
	var nodes []*corev1.Node
	for i := 0; i < size; i++ {
		n := testNode{name: fmt.Sprintf("node-%05d", i), batchCPU: 4000, batchMemory: 16 * gi,
			metric: metricAt(20*time.Second, 2000, 8*gi, 1500, 6*gi, 3000, 8*gi)}
		switch {
		case i%10 < 2:
			n.metric = metricAt(20*time.Second, 6000, 8*gi, 5500, 6*gi, 500, 8*gi)
		case i%10 == 2:
			n.metric = metricAt(time.Hour, 2000, 8*gi, 1500, 6*gi, 3000, 8*gi)
		}
		node := n.build(b)
		c.onNode(klog.Background(), node)
		nodes = append(nodes, node)
	}
	h, err := NewHandler(DefaultConfig(), c, prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	h.now = func() time.Time { return testNow }
	return h, nodes
}

type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) WriteHeader(int)             {}
func (d *discard) Write(p []byte) (int, error) { return len(p), nil }

func benchVerb(b *testing.B, size int, full bool, path string) {
	h, nodes := benchHandler(b, size)
	args := extenderv1.ExtenderArgs{Pod: batchPod("spark-exec", "", "2000", "4Gi").build()}
	if full {
		args.Nodes = &corev1.NodeList{}
		for _, n := range nodes {
			args.Nodes.Items = append(args.Nodes.Items, *n)
		}
	} else {
		names := make([]string, len(nodes))
		for i, n := range nodes {
			names[i] = n.Name
		}
		args.NodeNames = &names
	}
	body, err := json.Marshal(args)
	if err != nil {
		b.Fatal(err)
	}
	w := &discard{h: http.Header{}}
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	b.ResetTimer()
	for b.Loop() {
		r, _ := http.NewRequest(http.MethodPost, path, strings.NewReader(string(body)))
		h.ServeHTTP(w, r)
	}
}

func BenchmarkFilter500Names(b *testing.B)      { benchVerb(b, 500, false, FilterPath) }
func BenchmarkPrioritize500Names(b *testing.B)  { benchVerb(b, 500, false, PrioritizePath) }
func BenchmarkFilter5000Names(b *testing.B)     { benchVerb(b, 5000, false, FilterPath) }
func BenchmarkPrioritize5000Names(b *testing.B) { benchVerb(b, 5000, false, PrioritizePath) }
func BenchmarkFilter500Nodes(b *testing.B)      { benchVerb(b, 500, true, FilterPath) }
