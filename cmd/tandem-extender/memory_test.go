package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/procfs"
	corev1 "k8s.io/api/core/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/tandemkit/tandem/e2e/framework"
	"github.com/tandemkit/tandem/internal/polltest"
	extender "github.com/tandemkit/tandem/scheduler-extender"
	"github.com/tandemkit/tandem/scheduler-extender/extendertest"
)

// peakRSSBound is what the extender may reach under any mix of requests with the default limits.
// At most one request larger than 1 MiB is served at a time, and it holds about its body (at most
// the default maxRequestBodyBytes, 96 MiB) plus what the decoding limits allow it (about 10 MiB
// for 5000 Node objects or 50000 node names); with the cache and runtime (about 30 MiB) that is
// a live heap of at most ~140 MiB, which Go's collector lets grow to twice that before it
// collects (GOGC=100). 384 MiB leaves room for the allocator and stays well under the 1 GiB
// limit of deploy/'s DaemonSet, whose rest the node and pod cache of a large cluster needs.
const peakRSSBound = 384 << 20

// clients is how many clients load the extender at once.
const clients = 32

// TestMemoryUnderHostileLoad runs the tandem-extender binary with its default limits and drives
// it with 32 clients for a few seconds, each sending one kind of body as large as the limits
// allow, or larger: 5000-node requests without nodeCacheCapable (the largest kube-scheduler
// sends, answered in full), node names at the limit, bodies whose decoded form would be a
// thousand times their size, and bodies past the size limit. Its peak RSS (VmHWM) must stay
// under peakRSSBound. Before the limits, the same load (its bodies cut to the 32 MiB the body
// limit was then) took it past 3 GiB in seconds, where the watchdog below stops it.
func TestMemoryUnderHostileLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and loads it for seconds")
	}
	bin := buildExtender(t)
	api := fakeAPIServer(t)
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: fake, cluster: {server: %q}}]
contexts: [{name: fake, context: {cluster: fake, user: fake}}]
users: [{name: fake, user: {}}]
current-context: fake
`, api.URL)), 0o600); err != nil {
		t.Fatal(err)
	}
	listen, metricsListen := freeAddr(t), freeAddr(t)
	logFile, err := os.Create(filepath.Join(dir, "extender.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	// The read and write timeouts are raised from 10 s: under -race, with other packages' tests
	// beside it, a 96 MiB body can take longer than that to read and decode, and the answer lost to
	// the timeout would count as starvation; the limits under test are the memory ones.
	cmd := exec.Command(bin, "--kubeconfig="+kubeconfig, "--listen="+listen, "--metrics-listen="+metricsListen,
		"--read-timeout=1m", "--write-timeout=1m")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Kill()
		waitErr := <-exited
		if t.Failed() {
			b, _ := os.ReadFile(logFile.Name())
			t.Logf("extender (%v) log:\n%s", waitErr, tail(b, 4000))
		}
	}()
	waitReady(t, "http://"+metricsListen+extender.ReadyzPath, exited)

	// A watchdog stops the process long before it could take the machine with it.
	var peak atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	var watch sync.WaitGroup
	watch.Go(func() {
		for ctx.Err() == nil {
			if st, err := procStatus(cmd.Process.Pid); err == nil && int64(st.VmRSS) > 8*peakRSSBound {
				peak.Store(int64(st.VmRSS))
				_ = cmd.Process.Kill()
				return
			}
			time.Sleep(10 * time.Millisecond) // the watchdog samples RSS; it waits for no condition
		}
	})

	limit := extender.DefaultConfig().MaxRequestBodyBytes
	bodies := hostileBodies(t, int(limit))
	var mu sync.Mutex
	outcomes := map[string]int{}
	count := func(what string) {
		mu.Lock()
		outcomes[what]++
		mu.Unlock()
	}
	// The load lasts a few seconds, and until every kind of body was answered at least once
	// with something else than 429, so that each limit was reached under load.
	answered := make(map[string]chan struct{}, len(bodies))
	for _, b := range bodies {
		answered[b.name] = make(chan struct{})
	}
	// unanswered picks, for a client refused with 429, a kind of body not answered yet, if any:
	// every body but one is larger than 1 MiB, so all compete for the one large-request slot, and
	// under -race on a busy 2-CPU machine only a couple of dozen of them win it in minutes. Left
	// to chance, a kind can lose every time (seen in CI); the extender promises bounded memory,
	// not fairness among hostile clients, so the clients share the wins out instead.
	unanswered := func(c int) (body, bool) {
		mu.Lock()
		defer mu.Unlock()
		var left []body
		for _, b := range bodies {
			select {
			case <-answered[b.name]:
			default:
				left = append(left, b)
			}
		}
		if len(left) == 0 {
			return body{}, false
		}
		return left[c%len(left)], true
	}
	loadCtx, stopLoad := context.WithCancel(ctx)
	var load sync.WaitGroup
	for c := range clients {
		own := bodies[c%len(bodies)]
		load.Go(func() {
			client := &http.Client{Timeout: 30 * time.Second}
			b := own
			for loadCtx.Err() == nil {
				outcome := send(client, "http://"+listen+[]string{extender.FilterPath, extender.PrioritizePath}[c%2], b)
				count(b.name + ": " + outcome)
				if outcome == "429" {
					// Retry soon but not in a tight loop: 31 clients spinning on 429s starve the ones
					// whose bodies need the one large-request slot on a busy 2-CPU machine, and the test
					// would measure that starvation instead of the limits. The pressure stays: every
					// client is back within 100 ms, far sooner than the Retry-After of 1 s.
					time.Sleep(time.Duration(rand.Int64N(int64(100 * time.Millisecond))))
					if next, ok := unanswered(c); ok {
						b = next
					} else {
						b = own
					}
				}
				if _, err := strconv.Atoi(outcome); err == nil && outcome != "429" {
					mu.Lock()
					select {
					case <-answered[b.name]:
					default:
						close(answered[b.name])
					}
					mu.Unlock()
				}
			}
		})
	}
	time.Sleep(4 * time.Second) // time must pass: the load runs 4 s before the bodies' answers count
	loadStart := time.Now()
	waitCtx, stopWaiting := context.WithTimeout(ctx, 3*time.Minute)
	for name, ch := range answered {
		select {
		case <-ch:
		case <-waitCtx.Done():
			t.Errorf("%q was never answered but with 429 in 3 minutes of load", name)
		}
	}
	stopWaiting()
	t.Logf("every kind of body answered %v after the first 4 s of load", time.Since(loadStart).Round(time.Second))
	stopLoad()
	load.Wait()
	cancel()
	watch.Wait()

	st, err := procStatus(cmd.Process.Pid)
	if err != nil {
		t.Fatalf("the extender is gone (peak RSS %d MiB when the watchdog stopped it): %v", peak.Load()>>20, err)
	}
	hwm := int64(st.VmHWM)
	for k, n := range outcomes {
		t.Logf("%5d × %s", n, k)
	}
	t.Logf("peak RSS (VmHWM) %d MiB under %d clients; bound %d MiB", hwm>>20, clients, peakRSSBound>>20)
	if hwm > peakRSSBound {
		t.Errorf("peak RSS %d MiB, above the %d MiB bound", hwm>>20, peakRSSBound>>20)
	}
	// Each body met the limit meant for it, and the largest requests kube-scheduler sends were
	// answered in full, under the load and after it.
	for _, want := range []string{"5000 full nodes: 200", "names at the limit: 200", "5000 full nodes: 429",
		"empty Node objects: 413", "empty containers: 413", "one Pod string: 413", "over the body limit: 413"} {
		if outcomes[want] == 0 {
			t.Errorf("no %q among the outcomes", want)
		}
	}
	// Requests of clients that gave up may still be served: after the load a request is retried on
	// 429, as its Retry-After says, for up to a minute.
	client := &http.Client{Timeout: 30 * time.Second}
	for _, b := range bodies[:2] {
		got := send(client, "http://"+listen+extender.FilterPath, b)
		for deadline := time.Now().Add(time.Minute); got == "429" && time.Now().Before(deadline); {
			time.Sleep(time.Second) // the 429's Retry-After: 1 s
			got = send(client, "http://"+listen+extender.FilterPath, b)
		}
		if got != "200" {
			t.Errorf("%s after the load: %s, want 200", b.name, got)
		}
	}
	if resp, err := http.Get("http://" + metricsListen + "/metrics"); err == nil {
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "tandem_extender_rejected_requests_total") {
				t.Log(l)
			}
		}
	}
}

type body struct {
	name string
	data []byte
	// declared, when above len(data), is the Content-Length sent: the server must answer
	// from the header alone.
	declared int64
}

// hostileBodies are the request bodies of TestMemoryUnderHostileLoad, each at most limit bytes
// unless it is about the limit.
func hostileBodies(t *testing.T, limit int) []body {
	t.Helper()
	args := extenderv1.ExtenderArgs{Pod: &corev1.Pod{}, Nodes: &corev1.NodeList{}}
	args.Pod.Name, args.Pod.Namespace = "spark-exec", "default"
	now := time.Now()
	for i := range 5000 {
		args.Nodes.Items = append(args.Nodes.Items, extendertest.Node(i, now))
	}
	full, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	if len(full) > limit {
		t.Fatalf("5000 full nodes take %d bytes, above the default limit %d", len(full), limit)
	}

	repeat := func(prefix, unit, suffix string, size int) []byte {
		var b bytes.Buffer
		b.Grow(size)
		b.WriteString(prefix)
		b.WriteString(strings.TrimPrefix(unit, ","))
		for b.Len()+len(unit)+len(suffix) <= size {
			b.WriteString(unit)
		}
		b.WriteString(suffix)
		return b.Bytes()
	}
	const podJSON = `{"metadata":{"name":"p","namespace":"default"}}`
	// 50000 names of 252 characters: about the most NodeNames may hold, all unknown to the extender,
	// so each comes back with a reason.
	name := strings.Repeat("n", 249)
	var names bytes.Buffer
	names.WriteString(`{"Pod":` + podJSON + `,"NodeNames":[`)
	for i := range 50000 {
		if i > 0 {
			names.WriteByte(',')
		}
		fmt.Fprintf(&names, `"%s%03d"`, name, i%1000)
	}
	names.WriteString(`]}`)
	return []body{
		{name: "5000 full nodes", data: full},
		{name: "names at the limit", data: names.Bytes()},
		{name: "empty Node objects", data: repeat(`{"Pod":`+podJSON+`,"Nodes":{"items":[`, `,{}`, `]}}`, limit)},
		{name: "empty containers", data: repeat(`{"NodeNames":["a"],"Pod":{"spec":{"containers":[`, `,{}`, `]}}}`, limit)},
		{name: "one Pod string", data: repeat(`{"NodeNames":["a"],"Pod":{"metadata":{"name":"`, `x`, `"}}}`, limit)},
		{name: "over the body limit", data: full, declared: int64(limit) + 1},
	}
}

// send posts b and returns the status code, or what went wrong.
func send(client *http.Client, url string, b body) string {
	var r io.Reader = bytes.NewReader(b.data)
	if b.declared > int64(len(b.data)) {
		r = io.MultiReader(r, zeros{})
	}
	req, err := http.NewRequest(http.MethodPost, url, r)
	if err != nil {
		return err.Error()
	}
	req.ContentLength = int64(len(b.data))
	if b.declared > 0 {
		req.ContentLength = b.declared
	}
	resp, err := client.Do(req)
	if err != nil {
		// A server that answers without reading the body closes the connection, which a
		// client still writing it may see first.
		if strings.Contains(err.Error(), "reset by peer") || strings.Contains(err.Error(), "broken pipe") {
			return "closed while sending"
		}
		return err.Error()
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return strconv.Itoa(resp.StatusCode)
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

func buildExtender(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "tandem-extender")
	if out, err := exec.Command(framework.GoBinary(), "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// fakeAPIServer answers the extender's informers as an API server of an empty cluster: the
// lists are empty and the watches stay open. The tests of this package have no API server; the
// tier-2 e2e runs the extender against a real one.
func fakeAPIServer(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		kind := map[string]string{"/api/v1/nodes": "Node", "/api/v1/pods": "Pod"}[r.URL.Path]
		if kind == "" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Query().Get("watch") != "true" && r.URL.Query().Get("watch") != "1" {
			fmt.Fprintf(w, `{"kind":"%sList","apiVersion":"v1","metadata":{"resourceVersion":"1"},"items":[]}`, kind)
			return
		}
		if r.URL.Query().Get("sendInitialEvents") == "true" {
			// The end of the (empty) initial list, for client-go's streaming list.
			fmt.Fprintf(w, `{"type":"BOOKMARK","object":{"kind":"%s","apiVersion":"v1","metadata":{"resourceVersion":"1","annotations":{"k8s.io/initial-events-end":"true"}}}}`+"\n", kind)
		}
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	srv.Start()
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
	})
	return srv
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func waitReady(t *testing.T, url string, exited <-chan error) {
	t.Helper()
	polltest.Within(t, 30*time.Second, url+" answering 200", func() bool {
		select {
		case err := <-exited:
			t.Fatalf("the extender exited before it was ready: %v", err)
		default:
		}
		return answersOK(url)
	})
}

// answersOK reports whether a GET of url answers 200.
func answersOK(url string) bool {
	resp, err := http.Get(url)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// procStatus reads /proc/<pid>/status (VmRSS, VmHWM in bytes).
func procStatus(pid int) (procfs.ProcStatus, error) {
	proc, err := procfs.NewProc(pid)
	if err != nil {
		return procfs.ProcStatus{}, err
	}
	return proc.NewStatus()
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
