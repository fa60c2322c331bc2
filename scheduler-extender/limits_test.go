package extender

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/tandemkit/tandem/scheduler-extender/extendertest"
)

// rejected reads tandem_extender_rejected_requests_total{reason}.
func (s *extenderServer) rejected(t *testing.T, reason string) float64 {
	t.Helper()
	return testutil.ToFloat64(s.h.metrics.rejectedRequests.WithLabelValues(reason))
}

// postStalled sends a request that declares contentLength bytes and sends none of them, so that
// only a server that answers without reading the body answers at all.
func postStalled(t *testing.T, url string, contentLength int64) (status int, header http.Header, body []byte) {
	t.Helper()
	pr, pw := io.Pipe()
	t.Cleanup(func() {
		if err := pw.Close(); err != nil {
			t.Error(err)
		}
	})
	req, err := http.NewRequest(http.MethodPost, url, pr)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = contentLength
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("no answer without the body: %v", err)
	}
	defer resp.Body.Close()
	body, _ = io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, body
}

// TestBodyLimit: a request declaring more than maxRequestBodyBytes gets 413 before a byte of its
// body is read, with a message naming the limit, the config key and the flag.
func TestBodyLimit(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.MaxRequestBodyBytes = 4096
	s := startExtender(t, cfg, cluster(), nil)

	status, _, body := postStalled(t, s.url+FilterPath, 1<<30)
	if status != http.StatusRequestEntityTooLarge {
		t.Fatalf("status %d %q, want 413", status, body)
	}
	for _, want := range []string{"4096", "maxRequestBodyBytes", "--max-request-body-bytes"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("413 message %q does not name %s", body, want)
		}
	}
	if got := s.rejected(t, rejectBodySize); got != 1 {
		t.Errorf("rejected_requests_total{reason=%q} = %v, want 1", rejectBodySize, got)
	}

	// Without a Content-Length the size is unknown until the body is read: refused, so that
	// every admitted request's memory is known up front.
	req, err := http.NewRequest(http.MethodPost, s.url+PrioritizePath, io.MultiReader(strings.NewReader(`{"Pod":{},"NodeNames":[]}`)))
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = -1
	chunked, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer chunked.Body.Close()
	if chunked.StatusCode != http.StatusLengthRequired {
		t.Errorf("chunked request: status %d, want 411", chunked.StatusCode)
	}
}

// TestInflightLimit: with maxRequestsInflight requests being served, or one larger than 1 MiB
// and another of that size arriving, the next one gets 429 with Retry-After at once, without its
// body being read; small requests still get in beside a large one; once the requests in flight
// finish, requests are served again.
func TestInflightLimit(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.MaxRequestsInflight = 3
	s := startExtender(t, cfg, cluster(), nil)
	entered := make(chan struct{})
	release := make(chan struct{})
	s.h.admitted = func() {
		entered <- struct{}{}
		<-release
	}
	small := schedulerArgs(t, lsPod("web", "", "500m", "1Gi").build(), []string{"cold"}, nil)
	big := lsPod("web", "", "500m", "1Gi").build()
	big.Annotations = map[string]string{"last-applied": strings.Repeat("x", smallRequestBytes)}
	large := schedulerArgs(t, big, []string{"cold"}, nil)

	var wg sync.WaitGroup
	codes := make(chan int, cfg.MaxRequestsInflight)
	start := func(body []byte) {
		wg.Go(func() {
			resp, err := http.Post(s.url+FilterPath, "application/json", bytes.NewReader(body))
			if err != nil {
				t.Error(err)
				return
			}
			defer resp.Body.Close()
			codes <- resp.StatusCode
		})
		<-entered
	}
	refused := func(contentLength int64, why string) {
		t.Helper()
		status, header, msg := postStalled(t, s.url+PrioritizePath, contentLength)
		if status != http.StatusTooManyRequests {
			t.Fatalf("%s: status %d %q, want 429", why, status, msg)
		}
		if ra, err := strconv.Atoi(header.Get("Retry-After")); err != nil || ra < 1 {
			t.Errorf("%s: Retry-After = %q, want a number of seconds", why, header.Get("Retry-After"))
		}
		if !strings.Contains(string(msg), "maxRequestsInflight") || !strings.Contains(string(msg), "--max-requests-inflight") {
			t.Errorf("%s: 429 message %q does not name the setting", why, msg)
		}
	}

	start(large)
	refused(int64(len(large)), "a second large request")
	for range cfg.MaxRequestsInflight - 1 {
		start(small)
	}
	refused(int64(len(small)), "a request past maxRequestsInflight")
	if got := s.rejected(t, rejectInflight); got != 2 {
		t.Errorf("rejected_requests_total{reason=%q} = %v, want 2", rejectInflight, got)
	}

	close(release)
	wg.Wait()
	close(codes)
	for code := range codes {
		if code != http.StatusOK {
			t.Errorf("a request admitted before the limit was reached got %d", code)
		}
	}
	s.h.admitted = nil
	for _, body := range [][]byte{large, small} {
		if code, out := s.post(t, FilterPath, body); code != http.StatusOK {
			t.Errorf("after the burst: status %d %.200q, want 200", code, out)
		}
	}
}

// hostileBody builds a body of about size bytes: prefix, then unit repeated, then suffix.
func hostileBody(prefix, unit, suffix string, size int) []byte {
	var b bytes.Buffer
	b.Grow(size + len(suffix))
	b.WriteString(prefix)
	b.WriteString(strings.TrimPrefix(unit, ","))
	for b.Len() < size {
		b.WriteString(unit)
	}
	b.WriteString(suffix)
	return b.Bytes()
}

// TestDecodedSizeLimits: bodies within maxRequestBodyBytes whose decoded form would be far larger
// (encoding/json turns the 3 bytes of `{},` into a 768-byte Node, one MiB of them into a GiB
// across decoding, judging and answering) are refused with 413 before they are decoded.
func TestDecodedSizeLimits(t *testing.T) {
	t.Parallel()
	s := startExtender(t, DefaultConfig(), cluster(), nil)
	const pod = `{"metadata":{"name":"p"}}`
	tests := []struct {
		name     string
		body     []byte
		wantText string
	}{
		{
			name:     "empty Node objects",
			body:     hostileBody(`{"Pod":`+pod+`,"Nodes":{"items":[`, `,{}`, `]}}`, 3*(maxNodesPerRequest+100)),
			wantText: "nodes",
		},
		{
			name:     "null Node objects",
			body:     hostileBody(`{"Pod":`+pod+`,"Nodes":{"items":[`, `,null`, `]}}`, 5*(maxNodesPerRequest+100)),
			wantText: "nodes",
		},
		{
			name:     "empty node names",
			body:     hostileBody(`{"Pod":`+pod+`,"NodeNames":[`, `,""`, `]}`, 3*(maxNodesPerRequest+100)),
			wantText: "nodes",
		},
		{
			name:     "escaped key, the path that encoding/json decodes on its own",
			body:     hostileBody(`{"P\u006fd":`+pod+`,"N\u006fdes":{"items":[`, `,{}`, `]}}`, 3*(maxNodesPerRequest+100)),
			wantText: "nodes",
		},
		{
			name:     "empty containers in the Pod",
			body:     hostileBody(`{"NodeNames":["cold"],"Pod":{"spec":{"containers":[`, `,{}`, `]}}}`, 3*(maxObjectValues+100)),
			wantText: "Pod",
		},
		{
			name:     "labels in the Pod",
			body:     hostileBody(`{"NodeNames":["cold"],"Pod":{"metadata":{"labels":{`, `,"":""`, `}}}}`, 6*(maxObjectValues+100)),
			wantText: "Pod",
		},
		{
			name:     "empty conditions in one Node",
			body:     hostileBody(`{"Pod":`+pod+`,"Nodes":{"items":[{"status":{"conditions":[`, `,{}`, `]}}]}}`, 3*(maxObjectValues+100)),
			wantText: "node",
		},
		{
			name:     "one node name the size of the body",
			body:     hostileBody(`{"Pod":`+pod+`,"NodeNames":["`, `x`, `"]}`, defaultDecodeLimits().namesBytes()+64),
			wantText: "NodeNames",
		},
		{
			name:     "a Node object with a name no node can have",
			body:     []byte(`{"Pod":` + pod + `,"Nodes":{"items":[{"metadata":{"name":"` + strings.Repeat("x", maxNodeNameLength+1) + `"}}]}}`),
			wantText: "name",
		},
		{
			name:     "one Pod string beyond any object the API server stores",
			body:     hostileBody(`{"NodeNames":["cold"],"Pod":{"metadata":{"name":"`, `x`, `"}}}`, maxObjectBytes+64),
			wantText: "Pod",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if int64(len(tt.body)) > DefaultConfig().MaxRequestBodyBytes {
				t.Fatalf("body of %d bytes is past the body limit; the test is about decoding", len(tt.body))
			}
			for _, path := range []string{FilterPath, PrioritizePath} {
				code, out := s.post(t, path, tt.body)
				if code != http.StatusRequestEntityTooLarge || !strings.Contains(string(out), tt.wantText) {
					t.Errorf("%s: status %d %.200q, want 413 naming %s", path, code, out, tt.wantText)
				}
			}
		})
	}
	if got := s.rejected(t, rejectDecodedSize); got != float64(2*len(tests)) {
		t.Errorf("rejected_requests_total{reason=%q} = %v, want %d", rejectDecodedSize, got, 2*len(tests))
	}
	if code, out := s.post(t, FilterPath, []byte(`{"Pod":{},"Nodes":{"items":[]},"nodes":{"items":[]}}`)); code != http.StatusBadRequest || !strings.Contains(string(out), "Nodes") {
		t.Errorf("Nodes given twice: status %d %q, want 400", code, out)
	}
}

// TestFullNodesOf5000PassTheDefaultLimit: without nodeCacheCapable kube-scheduler sends every
// Node; a 5000-node cluster (Kubernetes' supported maximum) must still fit the default body limit
// and the decoding limits, and come back whole.
func TestFullNodesOf5000PassTheDefaultLimit(t *testing.T) {
	t.Parallel()
	const size = 5000
	args := extenderv1.ExtenderArgs{Pod: batchPod("spark-exec", "", "1000", "1Gi").build(), Nodes: &corev1.NodeList{}}
	for i := range size {
		args.Nodes.Items = append(args.Nodes.Items, extendertest.Node(i, testNow))
	}
	body, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	limit := DefaultConfig().MaxRequestBodyBytes
	t.Logf("%d full nodes: %d bytes (%.1f MiB), %.0f%% of the default maxRequestBodyBytes", size, len(body), float64(len(body))/(1<<20), 100*float64(len(body))/float64(limit))
	if int64(len(body))*6/5 > limit {
		t.Errorf("%d full nodes take %d bytes: the default limit %d leaves less than 20%% headroom", size, len(body), limit)
	}
	one, _ := json.Marshal(args.Nodes.Items[0])
	if n := countValues(one); n*4 > maxObjectValues || len(one)*16 > maxObjectBytes {
		t.Errorf("one realistic node holds %d JSON values in %d bytes: the per-object limits (%d, %d) leave too little headroom", n, len(one), maxObjectValues, maxObjectBytes)
	}

	s := startExtender(t, DefaultConfig(), nil, nil)
	code, out := s.post(t, FilterPath, body)
	if code != http.StatusOK {
		t.Fatalf("status %d %.300q", code, out)
	}
	var res extenderv1.ExtenderFilterResult
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatal(err)
	}
	if res.Nodes == nil || len(res.Nodes.Items) != size {
		t.Fatalf("%d nodes came back, want all %d (each has room for the pod)", len(res.Nodes.Items), size)
	}
	if got, want := res.Nodes.Items[size-1], args.Nodes.Items[size-1]; got.Name != want.Name || len(got.Status.Images) != 50 || len(got.ManagedFields) != len(want.ManagedFields) {
		t.Errorf("node %s came back as %s with %d images and %d managedFields entries", want.Name, got.Name, len(got.Status.Images), len(got.ManagedFields))
	}
}
