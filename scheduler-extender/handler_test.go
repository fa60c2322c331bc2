package extender

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/tandemkit/tandem/internal/polltest"
)

// extenderServer runs the handler over real HTTP against real client-go informers. The informers
// list and watch client-go's fake clientset because unit tests have no apiserver; the e2e tier
// runs the extender against a real cluster and kube-scheduler.
type extenderServer struct {
	url    string
	client *fake.Clientset
	nodes  *NodeCache
	h      *Handler
	reg    *prometheus.Registry
}

func startExtender(t *testing.T, cfg Config, nodes []testNode, pods []testPod, opts ...CacheOption) *extenderServer {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	var objs []runtime.Object
	for _, n := range nodes {
		objs = append(objs, n.build(t))
	}
	for _, p := range pods {
		objs = append(objs, p.build())
	}
	client := fake.NewClientset(objs...)
	cache, err := NewNodeCache(ctx, client, cfg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if !cache.WaitForSync(ctx) {
		t.Fatal("informers did not sync")
	}
	reg := prometheus.NewRegistry()
	h, err := NewHandler(cfg, cache, reg)
	if err != nil {
		t.Fatal(err)
	}
	h.now = func() time.Time { return testNow }
	srv := httptest.NewUnstartedServer(h)
	srv.Config.BaseContext = func(_ net.Listener) context.Context { return ctx }
	srv.Start()
	t.Cleanup(srv.Close)
	return &extenderServer{url: srv.URL, client: client, nodes: cache, h: h, reg: reg}
}

func (s *extenderServer) post(t *testing.T, path string, body []byte) (int, []byte) {
	t.Helper()
	resp, err := http.Post(s.url+path, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, out
}

// get answers the status of a GET of path, its body unread.
func (s *extenderServer) get(t *testing.T, path string) int {
	t.Helper()
	resp, err := http.Get(s.url + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	return resp.StatusCode
}

// cluster is three nodes: cold with room for batch work, hot above the cpu threshold, and stale.
func cluster() []testNode {
	return []testNode{
		{name: "cold", metric: metricAt(30*time.Second, 2000, 8*gi, 1500, 6*gi, 3000, 8*gi), batchCPU: 3000, batchMemory: 8 * gi},
		{name: "hot", metric: metricAt(30*time.Second, 6000, 8*gi, 5500, 6*gi, 1000, 8*gi), batchCPU: 1000, batchMemory: 8 * gi},
		{name: "stale", metric: metricAt(time.Hour, 0, 0, 0, 0, 6000, 16*gi), batchCPU: 6000, batchMemory: 16 * gi},
	}
}

// schedulerArgs is the body kube-scheduler sends: encoding/json of ExtenderArgs.
func schedulerArgs(t *testing.T, pod *corev1.Pod, names []string, nodes []*corev1.Node) []byte {
	t.Helper()
	args := extenderv1.ExtenderArgs{Pod: pod}
	if nodes != nil {
		args.Nodes = &corev1.NodeList{}
		for _, n := range nodes {
			args.Nodes.Items = append(args.Nodes.Items, *n)
		}
	} else {
		args.NodeNames = &names
	}
	b, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestFilterProtocol(t *testing.T) {
	t.Parallel()
	s := startExtender(t, DefaultConfig(), cluster(), nil)
	be := batchPod("spark-exec", "", "2000", "2Gi").build()
	ls := lsPod("web", "", "500m", "1Gi").build()
	names := []string{"cold", "hot", "stale", "gone"}

	// lowerCased is the same request with every top-level key in lower case.
	podJSON, _ := json.Marshal(be)
	lowerCased := []byte(`{"pod":` + string(podJSON) + `,"nodenames":["cold","hot","stale","gone"]}`)

	tests := []struct {
		name       string
		body       []byte
		want       []string
		failed     map[string]string
		unresolved map[string]string
	}{
		{
			name: "batch pod, node names as kube-scheduler sends them",
			body: schedulerArgs(t, be, names, nil),
			want: []string{"cold"},
			unresolved: map[string]string{
				"hot":   ReasonCPUUsage.message(),
				"stale": ReasonNodeMetricExpired.message(),
				"gone":  ReasonNodeUnknown.message(),
			},
		},
		{
			name: "lower-cased keys decode the same",
			body: lowerCased,
			want: []string{"cold"},
			unresolved: map[string]string{
				"hot":   ReasonCPUUsage.message(),
				"stale": ReasonNodeMetricExpired.message(),
				"gone":  ReasonNodeUnknown.message(),
			},
		},
		{
			name:       "service pod passes stale and unknown nodes",
			body:       schedulerArgs(t, ls, names, nil),
			want:       []string{"cold", "stale", "gone"},
			unresolved: map[string]string{"hot": ReasonCPUUsage.message()},
		},
		{
			name:   "batch pod larger than any free capacity is resolvable by preemption",
			body:   schedulerArgs(t, batchPod("big", "", "5000", "1Gi").build(), []string{"cold"}, nil),
			want:   []string{},
			failed: map[string]string{"cold": ReasonBatchCPU.message()},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body := s.post(t, FilterPath, tt.body)
			if code != http.StatusOK {
				t.Fatalf("status %d: %s", code, body)
			}
			// Decode into the type kube-scheduler decodes into.
			var res extenderv1.ExtenderFilterResult
			if err := json.Unmarshal(body, &res); err != nil {
				t.Fatal(err)
			}
			if res.Error != "" || res.NodeNames == nil || res.Nodes != nil {
				t.Fatalf("result = %s, want NodeNames only", body)
			}
			if !equalStrings(*res.NodeNames, tt.want) {
				t.Errorf("NodeNames = %v, want %v", *res.NodeNames, tt.want)
			}
			if !equalMaps(res.FailedNodes, tt.failed) {
				t.Errorf("FailedNodes = %v, want %v", res.FailedNodes, tt.failed)
			}
			if !equalMaps(res.FailedAndUnresolvableNodes, tt.unresolved) {
				t.Errorf("FailedAndUnresolvableNodes = %v, want %v", res.FailedAndUnresolvableNodes, tt.unresolved)
			}
		})
	}
}

func TestDecodeAcceptsSchedulerAndLowerCasedKeys(t *testing.T) {
	t.Parallel()
	pod := lsPod("web", "", "500m", "1Gi").build()
	exact := schedulerArgs(t, pod, []string{"a", "b"}, nil)
	if !bytes.Contains(exact, []byte(`"Pod":`)) || !bytes.Contains(exact, []byte(`"NodeNames":["a","b"]`)) {
		t.Fatalf("kube-scheduler's encoding changed: %s", exact)
	}
	lower := bytes.Replace(bytes.Replace(exact, []byte(`"Pod":`), []byte(`"pod":`), 1), []byte(`"NodeNames":`), []byte(`"nodeNames":`), 1)
	// Escapes are legal JSON that the fast path leaves to encoding/json.
	escaped := bytes.Replace(bytes.Replace(exact, []byte(`"Pod":`), []byte(`"P\u006fd":`), 1), []byte(`"NodeNames":["a","b"]`), []byte(`"nodenames":["\u0061","b"]`), 1)
	for name, body := range map[string][]byte{"exact": exact, "lower": lower, "escaped": escaped} {
		req, err := decodeRequest(body, defaultDecodeLimits())
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if req.pod.Name != "web" || !equalStrings(req.names, []string{"a", "b"}) {
			t.Fatalf("%s: decoded %+v", name, req)
		}
	}
}

func TestFilterFullNodes(t *testing.T) {
	t.Parallel()
	nodes := cluster()
	s := startExtender(t, DefaultConfig(), nodes, nil)
	var full []*corev1.Node
	for _, n := range nodes {
		full = append(full, n.build(t))
	}
	// A node kube-scheduler knows in a newer version than the cache: its copy is used.
	cooled := testNode{name: "hot", metric: metricAt(10*time.Second, 1000, 8*gi, 500, 6*gi, 5000, 8*gi), batchCPU: 5000, batchMemory: 8 * gi}.build(t)
	cooled.ResourceVersion = "999"
	full[1] = cooled

	code, body := s.post(t, FilterPath, schedulerArgs(t, batchPod("be", "", "2000", "2Gi").build(), nil, full))
	if code != http.StatusOK {
		t.Fatalf("status %d: %s", code, body)
	}
	var res extenderv1.ExtenderFilterResult
	if err := json.Unmarshal(body, &res); err != nil {
		t.Fatal(err)
	}
	if res.NodeNames != nil || res.Nodes == nil {
		t.Fatalf("result = %s, want Nodes only", body)
	}
	var got []string
	for _, n := range res.Nodes.Items {
		got = append(got, n.Name)
		if n.Status.Allocatable.Cpu().IsZero() {
			t.Errorf("node %s came back without its status", n.Name)
		}
	}
	if !equalStrings(got, []string{"cold", "hot"}) {
		t.Errorf("Nodes = %v, want [cold hot]", got)
	}
	if res.FailedAndUnresolvableNodes["stale"] != ReasonNodeMetricExpired.message() {
		t.Errorf("FailedAndUnresolvableNodes = %v", res.FailedAndUnresolvableNodes)
	}

	code, body = s.post(t, PrioritizePath, schedulerArgs(t, lsPod("web", "", "1", "1Gi").build(), nil, full))
	if code != http.StatusOK {
		t.Fatalf("status %d: %s", code, body)
	}
	var list extenderv1.HostPriorityList
	if err := json.Unmarshal(body, &list); err != nil {
		t.Fatal(err)
	}
	if len(list) != 3 || list[0].Host != "cold" || list[1].Host != "hot" || list[2].Host != "stale" {
		t.Fatalf("list = %+v", list)
	}
	if !(list[1].Score > list[0].Score && list[2].Score == 0) {
		t.Errorf("scores %+v: want the cooled node above cold and stale at 0", list)
	}
}

func TestPrioritizeProtocol(t *testing.T) {
	t.Parallel()
	s := startExtender(t, DefaultConfig(), cluster(), nil)
	code, body := s.post(t, PrioritizePath, schedulerArgs(t, lsPod("web", "", "500m", "1Gi").build(), []string{"hot", "cold", "stale", "gone"}, nil))
	if code != http.StatusOK {
		t.Fatalf("status %d: %s", code, body)
	}
	if !bytes.HasPrefix(body, []byte(`[{"Host":"hot","Score":`)) {
		t.Fatalf("body %s is not a HostPriorityList in request order", body)
	}
	var list extenderv1.HostPriorityList
	if err := json.Unmarshal(body, &list); err != nil {
		t.Fatal(err)
	}
	scores := map[string]int64{}
	for _, hp := range list {
		if hp.Score < extenderv1.MinExtenderPriority || hp.Score > extenderv1.MaxExtenderPriority {
			t.Errorf("%s score %d out of range", hp.Host, hp.Score)
		}
		scores[hp.Host] = hp.Score
	}
	if !(scores["cold"] > scores["hot"] && scores["stale"] == 0 && scores["gone"] == 0) {
		t.Errorf("scores = %v, want cold > hot and 0 for stale and unknown nodes", scores)
	}
}

// TestPodsAssignedSinceReport follows a burst: pods bound through the API after the last node
// report lower the node's score and its free reclaimable capacity until the reporter catches up.
func TestPodsAssignedSinceReport(t *testing.T) {
	t.Parallel()
	s := startExtender(t, DefaultConfig(), cluster(), nil)
	ctx := context.Background()
	filterCold := func() *extenderv1.ExtenderFilterResult {
		_, body := s.post(t, FilterPath, schedulerArgs(t, batchPod("be", "", "1500", "1Gi").build(), []string{"cold"}, nil))
		var res extenderv1.ExtenderFilterResult
		if err := json.Unmarshal(body, &res); err != nil {
			t.Fatal(err)
		}
		return &res
	}
	scoreCold := func() int64 {
		_, body := s.post(t, PrioritizePath, schedulerArgs(t, lsPod("web", "", "500m", "1Gi").build(), []string{"cold"}, nil))
		var list extenderv1.HostPriorityList
		if err := json.Unmarshal(body, &list); err != nil {
			t.Fatal(err)
		}
		return list[0].Score
	}
	if res := filterCold(); len(*res.NodeNames) != 1 {
		t.Fatalf("before the burst: %+v", res)
	}
	before := scoreCold()

	// Two batch pods of 1000m land on cold: 3000m reclaimable − 2000m leaves less than 1500m.
	for _, p := range []testPod{batchPod("be1", "cold", "1000", "1Gi"), batchPod("be2", "cold", "1000", "1Gi")} {
		if _, err := s.client.CoreV1().Pods("default").Create(ctx, p.build(), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	polltest.Until(t, "cold to fail batch pods on batch-cpu once two batch pods landed", func() bool { res := filterCold(); return res.FailedNodes["cold"] == ReasonBatchCPU.message() })
	if after := scoreCold(); after >= before {
		t.Errorf("score after the burst = %d, want below %d", after, before)
	}

	// One finishes: its request is free again.
	if err := s.client.CoreV1().Pods("default").Delete(ctx, "be1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	polltest.Until(t, "cold to fit batch pods again once one finished", func() bool { res := filterCold(); return len(*res.NodeNames) == 1 })
}

func TestRequestErrors(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.MaxRequestBodyBytes = 4096
	s := startExtender(t, cfg, cluster(), nil)
	tests := []struct {
		name     string
		path     string
		body     string
		wantCode int
		wantText string
	}{
		{"truncated JSON", FilterPath, `{"Pod":{"metadata":{"name":"x"}`, http.StatusBadRequest, "not ExtenderArgs JSON"},
		{"not JSON at all", PrioritizePath, `hello`, http.StatusBadRequest, "not ExtenderArgs JSON"},
		{"wrong type", FilterPath, `{"Pod":{},"NodeNames":"a"}`, http.StatusBadRequest, "not ExtenderArgs JSON"},
		{"no pod", FilterPath, `{"NodeNames":["a"]}`, http.StatusBadRequest, "Pod is missing"},
		{"no nodes", PrioritizePath, `{"Pod":{}}`, http.StatusBadRequest, "NodeNames and Nodes are missing"},
		{"oversized body", FilterPath, `{"Pod":{},"NodeNames":["` + strings.Repeat("n", 5000) + `"]}`, http.StatusRequestEntityTooLarge, "maxRequestBodyBytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body := s.post(t, tt.path, []byte(tt.body))
			if code != tt.wantCode || !strings.Contains(string(body), tt.wantText) {
				t.Fatalf("got %d %q, want %d containing %q", code, body, tt.wantCode, tt.wantText)
			}
		})
	}
	if code := s.get(t, FilterPath); code != http.StatusMethodNotAllowed {
		t.Errorf("GET %s = %d, want 405", FilterPath, code)
	}
	if got := testutil.ToFloat64(s.h.metrics.requests.WithLabelValues("filter", "400")); got != 3 {
		t.Errorf("requests_total{verb=filter,code=400} = %v, want 3", got)
	}
}

func TestHealthAndMetrics(t *testing.T) {
	t.Parallel()
	s := startExtender(t, DefaultConfig(), cluster(), nil)
	for _, path := range []string{HealthzPath, ReadyzPath} {
		if code := s.get(t, path); code != http.StatusOK {
			t.Errorf("GET %s = %d", path, code)
		}
	}
	s.post(t, FilterPath, schedulerArgs(t, batchPod("be", "", "1000", "1Gi").build(), []string{"cold", "hot", "stale"}, nil))
	want := `
# HELP tandem_extender_filter_decisions_total Nodes that filter passed or rejected.
# TYPE tandem_extender_filter_decisions_total counter
tandem_extender_filter_decisions_total{decision="pass"} 1
tandem_extender_filter_decisions_total{decision="reject"} 2
# HELP tandem_extender_filter_rejections_total Nodes that filter rejected, by reason.
# TYPE tandem_extender_filter_rejections_total counter
tandem_extender_filter_rejections_total{reason="BatchCapacityReserved"} 0
tandem_extender_filter_rejections_total{reason="CPUUsageAboveThreshold"} 1
tandem_extender_filter_rejections_total{reason="InsufficientBatchCPU"} 0
tandem_extender_filter_rejections_total{reason="InsufficientBatchMemory"} 0
tandem_extender_filter_rejections_total{reason="MemoryUsageAboveThreshold"} 0
tandem_extender_filter_rejections_total{reason="NodeMetricExpired"} 1
tandem_extender_filter_rejections_total{reason="NodeMetricMissing"} 0
tandem_extender_filter_rejections_total{reason="NodeUnknown"} 0
tandem_extender_filter_rejections_total{reason="ReservedOnAnotherNode"} 0
`
	if err := testutil.GatherAndCompare(s.reg, strings.NewReader(want), "tandem_extender_filter_decisions_total", "tandem_extender_filter_rejections_total"); err != nil {
		t.Error(err)
	}
	if n, err := testutil.GatherAndCount(s.reg, "tandem_extender_request_duration_seconds"); err != nil || n != 1 {
		t.Errorf("request_duration_seconds series = %d, %v; want 1 (filter)", n, err)
	}
}

func TestReadyzBeforeSync(t *testing.T) {
	t.Parallel()
	never := func() bool { return false }
	c := newNodeCache(DefaultConfig())
	c.synced = append(c.synced, never)
	h, err := NewHandler(DefaultConfig(), c, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, ReadyzPath, nil))
	if rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("readyz before sync = %d, want 503", rec.Code)
	}
	// A half-filled cache must not answer: kube-scheduler would see real nodes as unknown.
	rec = httptest.NewRecorder()
	body := schedulerArgs(t, batchPod("be", "", "1000", "1Gi").build(), []string{"n1"}, nil)
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, FilterPath, bytes.NewReader(body)))
	if rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("filter before sync = %d, want 503", rec.Code)
	}
}

// FuzzDecodeArgs holds decodeRequest to encoding/json decoding into extenderv1.ExtenderArgs, which
// is what kube-scheduler's own types promise: the same bodies accepted, the same values decoded.
// Whatever decodes is then judged, which must not panic either.
func FuzzDecodeArgs(f *testing.F) {
	f.Add([]byte(`{"Pod":{"metadata":{"name":"p"}},"NodeNames":["a","b"]}`))
	f.Add([]byte(`{"pod":{"spec":{"containers":[{"resources":{"requests":{"kubernetes.io/batch-cpu":"1000"}}}]}},"nodes":{"items":[{"metadata":{"name":"n"}}]}}`))
	f.Add([]byte(` { "Pod" : {} , "nodenames" : [ "a" , "b\u0041" ] , "Error": null } `))
	f.Add([]byte(`{"Pod":{"metadata":{"name":"a"}},"pod":{"spec":{}},"NodeNames":null,"NodeNames":[]}`))
	f.Add([]byte(`{"Pod":null}`))
	f.Add([]byte(`[]`))
	// Past the limits, which the target makes small so that such bodies stay small: nodes,
	// values and bytes, at the bottom and over the top level.
	lim := decodeLimits{nodes: 4, values: 32, objectBytes: 1024}
	f.Add([]byte(`{"Pod":{},"Nodes":{"items":[{},{},{},{},{}]}}`))
	f.Add([]byte(`{"Pod":{},"nodes":{"items":[null,null,null,null,null]}}`))
	f.Add([]byte(`{"Pod":{},"N\u006fdeNames":["","","","",""]}`))
	f.Add(hostileBody(`{"NodeNames":[],"Pod":{"spec":{"containers":[`, `,{}`, `]}}}`, 3*(lim.values+1)))
	f.Add(hostileBody(`{"Pod":{},"Nodes":{"items":[{"status":{"images":[`, `,{"names":[]}`, `]}}]}}`, 13*(lim.values/2+1)))
	f.Add(hostileBody(`{"Pod":{"metadata":{"name":"`, `x`, `"}},"NodeNames":[]}`, lim.objectBytes+8))
	f.Add([]byte(`{"Pod":{},"NodeNames":["` + strings.Repeat("n", maxNodeNameLength+1) + `"]}`))
	f.Add([]byte(`{"Pod":{},"Nodes":{"items":[{"metadata":{"name":"` + strings.Repeat("n", maxNodeNameLength+1) + `"}}]}}`))
	// Repeated keys that encoding/json merges: the Pod counts every occurrence; Nodes is refused.
	f.Add([]byte(`{"Pod":{"metadata":{"labels":{"a":""}}},"pod":{"metadata":{"labels":{"b":""}}},"NodeNames":["a"]}`))
	f.Add([]byte(`{"Pod":{},"Nodes":{"items":[{"metadata":{"name":"a"}}]},"nodes":{"items":[{}]}}`))
	f.Add([]byte(`{"Pod":{},"Nodes":{"items":[{}],"Items":[{},{}]}}`))
	// Node elements that are not Nodes, and a comma inside a plain name.
	f.Add([]byte(`{"Pod":{},"Nodes":{"kind":"NodeList","items":[1,{"metadata":{"name":"a"}}]}}`))
	f.Add([]byte(`{"Pod":{},"NodeNames":["a,b,c",""]}`))
	cfg := DefaultConfig()
	c := newNodeCache(cfg)
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := decodeRequest(body, lim)
		if errors.Is(err, errTooLarge) || errors.Is(err, errNodesTwice) {
			return // refused on purpose, whatever encoding/json makes of it
		}
		var args extenderv1.ExtenderArgs
		refErr := json.Unmarshal(body, &args)
		var node corev1.Node
		var names []string
		if err == nil && req.nodes != nil {
			err = eachNode(req.nodes, lim, &node, func(i int, n *corev1.Node) {
				if refErr == nil && (args.Nodes == nil || i >= len(args.Nodes.Items) || !reflect.DeepEqual(*n, args.Nodes.Items[i])) {
					t.Fatalf("node %d of %q decodes as %+v, encoding/json decodes %+v", i, body, n, args.Nodes)
				}
				names = append(names, n.Name)
				st := c.stateFor(n)
				d := demandOf(req.pod, cfg.DefaultEstimatedUsage)
				cfg.filterNode(st, n.Name, d, nil, testNow)
				cfg.scoreNode(st, n.Name, d, nil, testNow)
			})
			if errors.Is(err, errTooLarge) {
				return
			}
		}
		if refErr != nil {
			if err == nil {
				t.Fatalf("accepted %q, which encoding/json rejects: %v", body, refErr)
			}
			return
		}
		wantErr := args.Pod == nil || (args.NodeNames == nil) == (args.Nodes == nil)
		if (err != nil) != wantErr {
			t.Fatalf("decodeRequest(%q) error = %v, want error %v", body, err, wantErr)
		}
		if err != nil {
			return
		}
		if !reflect.DeepEqual(req.pod, args.Pod) || (args.Nodes != nil) != (req.nodes != nil) ||
			(args.Nodes != nil && len(req.nodes) != len(args.Nodes.Items)) ||
			(args.NodeNames != nil && !equalStrings(req.names, *args.NodeNames)) {
			t.Fatalf("decodeRequest(%q) = %+v, encoding/json decodes %+v", body, req, args)
		}
		if req.names != nil {
			names = req.names
			d := demandOf(req.pod, cfg.DefaultEstimatedUsage)
			states := make([]*nodeState, len(names))
			c.lookup(names, states)
			for i, st := range states {
				cfg.filterNode(st, names[i], d, nil, testNow)
				cfg.scoreNode(st, names[i], d, nil, testNow)
			}
		}
		var rejected []rejection
		all := make([]int, len(names))
		for i, n := range names {
			all[i] = i
			rejected = append(rejected, rejection{name: n, reason: ReasonBatchCPU}, rejection{name: n, reason: ReasonNodeUnknown})
		}
		var res extenderv1.ExtenderFilterResult
		if err := json.Unmarshal(appendFilterResult(nil, names, all, rejected), &res); err != nil {
			t.Fatalf("filter result for names %q is not JSON: %v", names, err)
		}
		if !equalStrings(*res.NodeNames, names) {
			t.Fatalf("names %q came back as %q", names, *res.NodeNames)
		}
		if req.nodes != nil {
			var out []byte
			out = append(out, `{"Nodes":{"metadata":{},"items":[`...)
			for i, n := range req.nodes {
				if i > 0 {
					out = append(out, ',')
				}
				out = append(out, n...)
			}
			out = appendFilterTail(out, rejected)
			res = extenderv1.ExtenderFilterResult{}
			if err := json.Unmarshal(out, &res); err != nil || res.Nodes == nil || len(res.Nodes.Items) != len(args.Nodes.Items) {
				t.Fatalf("filter result %q for nodes of %q: %v", out, body, err)
			}
			for i := range res.Nodes.Items {
				if !reflect.DeepEqual(res.Nodes.Items[i], args.Nodes.Items[i]) {
					t.Fatalf("node %d of %q comes back as %+v", i, body, res.Nodes.Items[i])
				}
			}
		}
		var list extenderv1.HostPriorityList
		if err := json.Unmarshal(appendPriorities(nil, names, make([]int64, len(names))), &list); err != nil || len(list) != len(names) {
			t.Fatalf("priorities for names %q: %v", names, err)
		}
	})
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
