// Command extender measures tandem-extender's filter and prioritize calls as kube-scheduler makes
// them: the handler decodes a request body exactly as kube-scheduler encodes it, judges every node
// from a cache fed by real client-go informers (over the fake clientset: no apiserver here), and
// encodes the answer. It prints p50/p99 latency, allocations per request and the throughput of 8
// concurrent callers for 500 and 5000 node names and for 500 full Node objects, next to the
// targets of the extender issue.
//
// Columns: wall p50/p99 is the time a call takes on one goroutine; cpu p50/p99 is the CPU time of
// the calling thread for the same calls, i.e. the latency on an otherwise idle core (a shared
// build machine makes wall-clock tails mostly a measure of its other load); proc cpu is the whole
// process's CPU per call, garbage collection included; allocs and KiB are allocated per call;
// per s x8 is calls (or filter+prioritize pairs) per second from 8 concurrent callers.
//
//	go run ./bench/extender            # full run, about a minute
//	go run ./bench/extender -quick     # fewer iterations
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/tandemkit/tandem/bench/internal/figures"
	"github.com/tandemkit/tandem/metrics/nodemetric"
	"github.com/tandemkit/tandem/resource/qos"
	extender "github.com/tandemkit/tandem/scheduler-extender"
)

func main() {
	if err := run(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "bench/extender:", err)
		os.Exit(1)
	}
}

type scenario struct {
	name      string
	nodes     int  // nodes in the request
	full      bool // Node objects instead of names (nodeCacheCapable: false)
	iters     int
	targetP50 time.Duration // 0: no target
	targetP99 time.Duration
}

func run(ctx context.Context) error {
	quick := flag.Bool("quick", false, "fewer iterations, for a smoke run")
	clusterSize := flag.Int("cluster", 5000, "nodes in the cluster")
	podsPerNode := flag.Int("pods-per-node", 10, "assigned pods per node in the cache")
	concurrency := flag.Int("concurrency", 8, "concurrent callers for the throughput figure")
	throughputFor := flag.Duration("throughput-duration", 3*time.Second, "how long each throughput run lasts")
	flag.Parse()

	ctx, cancel := context.WithCancel(klog.NewContext(ctx, klog.Background()))
	defer cancel()
	// Quiet informer logs; the figures are the output.
	klog.SetOutput(io.Discard)
	klog.LogToStderr(false)

	start := time.Now()
	client, nodes := buildCluster(*clusterSize, *podsPerNode)
	cfg := extender.DefaultConfig()
	cache, err := extender.NewNodeCache(ctx, client, cfg)
	if err != nil {
		return err
	}
	if !cache.WaitForSync(ctx) {
		return fmt.Errorf("informers did not sync")
	}
	h, err := extender.NewHandler(cfg, cache, prometheus.NewRegistry())
	if err != nil {
		return err
	}
	fmt.Printf("cluster: %d nodes, %d assigned pods, cache synced in %s\nmachine: %s\n",
		*clusterSize, *clusterSize**podsPerNode, time.Since(start).Round(time.Millisecond), figures.ReadMachine().Line())
	fmt.Printf("pod: a Spark executor requesting kubernetes.io/batch-cpu 1000 and batch-memory 2Gi\n")

	scale := 1
	if *quick {
		scale = 10
	}
	scenarios := []scenario{
		{name: "500 node names", nodes: 500, iters: 4000 / scale, targetP50: 150 * time.Microsecond, targetP99: time.Millisecond},
		{name: "5000 node names", nodes: 5000, iters: 600 / scale, targetP99: 5 * time.Millisecond},
		{name: "500 full Nodes", nodes: 500, full: true, iters: 200 / scale},
	}
	fmt.Printf("%-16s %-18s %9s %9s %9s %9s %9s %7s %8s %10s  %s\n", "request", "call", "wall p50", "wall p99",
		"cpu p50", "cpu p99", "proc cpu", "allocs", "KiB", "per s x8", "target")
	for _, sc := range scenarios {
		if err := runScenario(h, sc, nodes, *clusterSize, *concurrency, *throughputFor/time.Duration(scale)); err != nil {
			return err
		}
	}
	return loopback(h, nodes, *clusterSize, 2000/scale)
}

// runScenario prints one scenario's rows: filter, prioritize and both, on the nodes asked about.
func runScenario(h http.Handler, sc scenario, nodes []*corev1.Node, clusterSize, concurrency int, throughputFor time.Duration) error {
	pod := batchPod()
	var names []string
	var full []*corev1.Node
	for i := 0; i < sc.nodes; i++ {
		// Spread the asked-about nodes over the cluster, as kube-scheduler's sampling does; the
		// prime stride visits distinct nodes and mixes cold, hot and stale ones.
		idx := (i * 7919) % clusterSize
		names = append(names, nodes[idx].Name)
		full = append(full, nodes[idx])
	}
	filterBody := requestBody(pod, names, full, sc.full)
	// kube-scheduler asks prioritize about the nodes filter let through.
	passed, err := call(h, extender.FilterPath, filterBody)
	if err != nil {
		return err
	}
	prioritizeBody, err := prioritizeRequest(pod, passed, full, sc.full)
	if err != nil {
		return err
	}
	if _, err := call(h, extender.PrioritizePath, prioritizeBody); err != nil {
		return err
	}
	passRate, err := passedShare(passed, sc.nodes)
	if err != nil {
		return err
	}
	fmt.Printf("%s: filter passes %.0f%% of the nodes asked about (the rest: above the cpu threshold, stale metric, or no room)\n", sc.name, passRate)

	rows := []struct {
		call   string
		bodies [][2]string // path, body pairs per iteration
	}{
		{"filter", [][2]string{{extender.FilterPath, filterBody}}},
		{"prioritize", [][2]string{{extender.PrioritizePath, prioritizeBody}}},
		{"filter+prioritize", [][2]string{{extender.FilterPath, filterBody}, {extender.PrioritizePath, prioritizeBody}}},
	}
	for _, row := range rows {
		m, err := measure(h, row.bodies, sc.iters)
		if err != nil {
			return err
		}
		tput, err := throughput(h, row.bodies, concurrency, throughputFor)
		if err != nil {
			return err
		}
		p50, p99 := figures.Nearest(m.wall, 0.50), figures.Nearest(m.wall, 0.99)
		c50, c99 := figures.Nearest(m.onCPU, 0.50), figures.Nearest(m.onCPU, 0.99)
		target := "-"
		if row.call == "filter+prioritize" && (sc.targetP50 > 0 || sc.targetP99 > 0) {
			var parts []string
			if sc.targetP50 > 0 {
				parts = append(parts, fmt.Sprintf("p50<=%s wall %s cpu %s", sc.targetP50, verdict(p50 <= sc.targetP50), verdict(c50 <= sc.targetP50)))
			}
			if sc.targetP99 > 0 {
				parts = append(parts, fmt.Sprintf("p99<=%s wall %s cpu %s", sc.targetP99, verdict(p99 <= sc.targetP99), verdict(c99 <= sc.targetP99)))
			}
			target = strings.Join(parts, "; ")
		}
		fmt.Printf("%-16s %-18s %9s %9s %9s %9s %9s %7.0f %8.1f %10.0f  %s\n", sc.name, row.call, figures.Duration(p50), figures.Duration(p99),
			figures.Duration(c50), figures.Duration(c99), figures.Duration(m.cpuPerRound), m.allocs, m.bytes/1024, tput, target)
	}
	return nil
}

// loopback repeats the 500-name filter+prioritize round over real HTTP on 127.0.0.1 with a
// keep-alive client, as kube-scheduler calls the extender, to show what the network stack adds.
func loopback(h http.Handler, nodes []*corev1.Node, clusterSize, iters int) error {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(lis) }()
	defer srv.Close()
	pod := batchPod()
	var names []string
	for i := 0; i < 500; i++ {
		names = append(names, nodes[(i*7919)%clusterSize].Name)
	}
	filterBody := requestBody(pod, names, nil, false)
	passed, err := call(h, extender.FilterPath, filterBody)
	if err != nil {
		return err
	}
	prioritizeBody, err := prioritizeRequest(pod, passed, nil, false)
	if err != nil {
		return err
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8}}
	url := "http://" + lis.Addr().String()
	post := func(path, body string) error {
		resp, err := client.Post(url+path, "application/json", strings.NewReader(body))
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: status %d", path, resp.StatusCode)
		}
		return nil
	}
	lat := make([]time.Duration, iters)
	cpu0 := cpuTime()
	for i := range lat {
		t0 := time.Now()
		if err := post(extender.FilterPath, filterBody); err != nil {
			return err
		}
		if err := post(extender.PrioritizePath, prioritizeBody); err != nil {
			return err
		}
		lat[i] = time.Since(t0)
	}
	cpu := (cpuTime() - cpu0) / time.Duration(iters)
	slices.Sort(lat)
	fmt.Printf("%-16s %-18s %9s %9s %9s %9s %9s  (client and server both in this process)\n",
		"500 names, HTTP", "filter+prioritize", figures.Duration(figures.Nearest(lat, 0.50)), figures.Duration(figures.Nearest(lat, 0.99)), "-", "-", figures.Duration(cpu))
	return nil
}

func passedShare(filterResponse []byte, asked int) (float64, error) {
	var res extenderv1.ExtenderFilterResult
	if err := json.Unmarshal(filterResponse, &res); err != nil {
		return 0, err
	}
	n := 0
	if res.NodeNames != nil {
		n = len(*res.NodeNames)
	} else if res.Nodes != nil {
		n = len(res.Nodes.Items)
	}
	return float64(n) * 100 / float64(asked), nil
}

func verdict(ok bool) string {
	if ok {
		return "PASS"
	}
	return "FAIL"
}

// measure runs the calls of one pod iters times on one goroutine and returns the latency of each
// round and the allocations per round.
// measured is one row: latencies sorted, wall clock and on-CPU.
type measured struct {
	wall, onCPU   []time.Duration
	cpuPerRound   time.Duration // process CPU, GC included, per round
	allocs, bytes float64
}

// measure runs the calls of one pod iters times on one goroutine locked to its thread. Besides
// wall-clock time it takes each round's thread CPU time: the latency the round would have on a
// core of its own, which is what a shared, busy benchmark machine cannot show in wall time.
func measure(h http.Handler, bodies [][2]string, iters int) (*measured, error) {
	for i := 0; i < 20; i++ { // warm the buffer pool and caches
		for _, b := range bodies {
			if _, err := call(h, b[0], b[1]); err != nil {
				return nil, err
			}
		}
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	runtime.GC()
	m := &measured{wall: make([]time.Duration, iters), onCPU: make([]time.Duration, iters)}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	cpu0 := cpuTime()
	for i := range m.wall {
		t0, c0 := time.Now(), threadCPU()
		for _, b := range bodies {
			serve(h, b[0], b[1])
		}
		m.onCPU[i] = threadCPU() - c0
		m.wall[i] = time.Since(t0)
	}
	m.cpuPerRound = (cpuTime() - cpu0) / time.Duration(iters)
	runtime.ReadMemStats(&after)
	slices.Sort(m.wall)
	slices.Sort(m.onCPU)
	n := float64(iters)
	m.allocs, m.bytes = float64(after.Mallocs-before.Mallocs)/n, float64(after.TotalAlloc-before.TotalAlloc)/n
	return m, nil
}

// threadCPU is the CPU time of the calling OS thread.
func threadCPU() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

// cpuTime is the CPU the process used, user and system, garbage collection included. On a busy
// machine wall-clock latency includes waiting for a core; CPU per request does not.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// throughput is rounds per second with workers calling at once.
func throughput(h http.Handler, bodies [][2]string, workers int, d time.Duration) (float64, error) {
	var done atomic.Int64
	var wg sync.WaitGroup
	stop := time.Now().Add(d)
	start := time.Now()
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) {
				for _, b := range bodies {
					serve(h, b[0], b[1])
				}
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	return float64(done.Load()) / time.Since(start).Seconds(), nil
}

// sink is a ResponseWriter that keeps only the status and body size: the benchmark measures the
// extender, not a recorder's buffer.
type sink struct {
	header http.Header
	code   int
	n      int
	body   []byte
	keep   bool
}

func (s *sink) Header() http.Header  { return s.header }
func (s *sink) WriteHeader(code int) { s.code = code }
func (s *sink) Write(b []byte) (int, error) {
	if s.keep {
		s.body = append(s.body, b...)
	}
	s.n += len(b)
	return len(b), nil
}

func serve(h http.Handler, path, body string) {
	r, _ := http.NewRequest(http.MethodPost, path, strings.NewReader(body))
	h.ServeHTTP(&sink{header: http.Header{}, code: http.StatusOK}, r)
}

func call(h http.Handler, path, body string) ([]byte, error) {
	r, err := http.NewRequest(http.MethodPost, path, strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	s := &sink{header: http.Header{}, code: http.StatusOK, keep: true}
	h.ServeHTTP(s, r)
	if s.code != http.StatusOK {
		return nil, fmt.Errorf("%s: status %d: %s", path, s.code, s.body)
	}
	return s.body, nil
}

func requestBody(pod *corev1.Pod, names []string, nodes []*corev1.Node, full bool) string {
	args := extenderv1.ExtenderArgs{Pod: pod}
	if full {
		args.Nodes = &corev1.NodeList{}
		for _, n := range nodes {
			args.Nodes.Items = append(args.Nodes.Items, *n)
		}
	} else {
		args.NodeNames = &names
	}
	b, err := json.Marshal(args)
	if err != nil {
		panic(err) // fixed, valid input
	}
	return string(b)
}

func prioritizeRequest(pod *corev1.Pod, filterResponse []byte, nodes []*corev1.Node, full bool) (string, error) {
	var res extenderv1.ExtenderFilterResult
	if err := json.Unmarshal(filterResponse, &res); err != nil {
		return "", err
	}
	if !full {
		return requestBody(pod, *res.NodeNames, nil, false), nil
	}
	keep := map[string]bool{}
	for _, n := range res.Nodes.Items {
		keep[n.Name] = true
	}
	var passed []*corev1.Node
	for _, n := range nodes {
		if keep[n.Name] {
			passed = append(passed, n)
		}
	}
	return requestBody(pod, nil, passed, true), nil
}

// buildCluster returns a fake clientset holding nodes shaped like real ones (conditions, images,
// addresses: what makes a full Node request heavy) and their assigned pods.
func buildCluster(size, podsPerNode int) (*fake.Clientset, []*corev1.Node) {
	now := time.Now()
	objs := make([]kruntime.Object, 0, size*(podsPerNode+1))
	nodes := make([]*corev1.Node, 0, size)
	for i := 0; i < size; i++ {
		name := fmt.Sprintf("node-%05d", i)
		usage := int64(2000 + i%7*300) // 25%..47% of 8 CPUs
		age := 20 * time.Second
		switch {
		case i%10 < 2:
			usage = 6000 // 75%: above the 65% threshold
		case i%10 == 2:
			age = 10 * time.Minute // stale
		}
		metric, _ := nodemetric.Marshal(&nodemetric.NodeMetric{
			UpdateTime: now.Add(-age), ReportIntervalSeconds: 60,
			NodeUsage:   nodemetric.Resources{CPUMilli: usage, MemoryBytes: 12 << 30},
			HPUsage:     nodemetric.Resources{CPUMilli: usage - 500, MemoryBytes: 10 << 30},
			Reclaimable: nodemetric.Resources{CPUMilli: 8000*60/100 - (usage - 500), MemoryBytes: 8 << 30},
		})
		n := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{
				Name: name, UID: types.UID(fmt.Sprintf("00000000-0000-0000-0000-%012d", i)), ResourceVersion: fmt.Sprint(1000 + i),
				Labels: map[string]string{
					"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
					"topology.kubernetes.io/zone": fmt.Sprintf("zone-%d", i%3), "node.kubernetes.io/instance-type": "c6.2xlarge",
				},
				Annotations: map[string]string{
					nodemetric.AnnotationKey:       metric,
					"node.alpha.kubernetes.io/ttl": "0", "volumes.kubernetes.io/controller-managed-attach-detach": "true",
				},
			},
			Spec: corev1.NodeSpec{PodCIDR: fmt.Sprintf("10.%d.%d.0/24", i/256, i%256), ProviderID: "cloud://" + name},
			Status: corev1.NodeStatus{
				Capacity: corev1.ResourceList{
					corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("32Gi"), corev1.ResourcePods: resource.MustParse("110"),
				},
				Allocatable: corev1.ResourceList{
					corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("32Gi"), corev1.ResourcePods: resource.MustParse("110"),
					nodemetric.ResourceBatchCPU:    *resource.NewQuantity(8000*60/100-(usage-500), resource.DecimalSI),
					nodemetric.ResourceBatchMemory: resource.MustParse("8Gi"),
				},
				Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("192.168.%d.%d", i/256, i%256)}, {Type: corev1.NodeHostName, Address: name}},
				NodeInfo: corev1.NodeSystemInfo{
					KernelVersion: "6.1.0-26-amd64", OSImage: "Debian GNU/Linux 12 (bookworm)", ContainerRuntimeVersion: "containerd://1.7.22",
					KubeletVersion: "v1.36.0", OperatingSystem: "linux", Architecture: "amd64", MachineID: name, SystemUUID: name, BootID: name,
				},
			},
		}
		for _, c := range []corev1.NodeConditionType{corev1.NodeReady, corev1.NodeMemoryPressure, corev1.NodeDiskPressure, corev1.NodePIDPressure} {
			status := corev1.ConditionFalse
			if c == corev1.NodeReady {
				status = corev1.ConditionTrue
			}
			n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{
				Type: c, Status: status, Reason: "Kubelet" + string(c), Message: "kubelet reports " + string(c),
				LastHeartbeatTime: metav1.NewTime(now), LastTransitionTime: metav1.NewTime(now.Add(-time.Hour)),
			})
		}
		for j := 0; j < 15; j++ {
			n.Status.Images = append(n.Status.Images, corev1.ContainerImage{
				Names:     []string{fmt.Sprintf("registry.example.com/team/app-%d@sha256:%064d", j, j), fmt.Sprintf("registry.example.com/team/app-%d:v1.%d", j, j)},
				SizeBytes: int64(50+j) << 20,
			})
		}
		objs = append(objs, n)
		nodes = append(nodes, n)
		for j := 0; j < podsPerNode; j++ {
			p := batchPod()
			small := corev1.ResourceList{nodemetric.ResourceBatchCPU: resource.MustParse("100"), nodemetric.ResourceBatchMemory: resource.MustParse("512Mi")}
			p.Spec.Containers[0].Resources = corev1.ResourceRequirements{Requests: small, Limits: small}
			if j%2 == 0 {
				p = servicePod()
			}
			p.Name = fmt.Sprintf("%s-%s-%d", p.Name, name, j)
			p.UID = types.UID(p.Name)
			p.Spec.NodeName = name
			p.Status.Phase = corev1.PodRunning
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", State: corev1.ContainerState{
				Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(now.Add(-time.Duration(j) * time.Minute))},
			}}}
			objs = append(objs, p)
		}
	}
	return fake.NewClientset(objs...), nodes
}

func batchPod() *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: "spark-exec", Namespace: "batch", UID: "7f0e7b1c-4c1e-4a8e-9b8e-2f2d3c4b5a69",
			Labels:          map[string]string{qos.LabelKoordinator: string(qos.BE), "spark-role": "executor", "spark-app-selector": "spark-4f1c2b"},
			Annotations:     map[string]string{"sidecar.istio.io/inject": "false"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: "spark-driver", UID: "d1"}},
		},
		Spec: corev1.PodSpec{
			SchedulerName: "default-scheduler", PriorityClassName: "koord-batch", RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{
				Name: "main", Image: "registry.example.com/spark:3.5.4",
				Args: []string{"executor", "--cores", "1", "--memory", "2g"},
				Env: []corev1.EnvVar{
					{Name: "SPARK_EXECUTOR_ID", Value: "7"}, {Name: "SPARK_APPLICATION_ID", Value: "spark-4f1c2b"},
					{Name: "SPARK_DRIVER_URL", Value: "spark://CoarseGrainedScheduler@spark-driver-svc.batch.svc:7078"},
				},
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{nodemetric.ResourceBatchCPU: resource.MustParse("1000"), nodemetric.ResourceBatchMemory: resource.MustParse("2Gi")},
					Limits:   corev1.ResourceList{nodemetric.ResourceBatchCPU: resource.MustParse("1000"), nodemetric.ResourceBatchMemory: resource.MustParse("2Gi")},
				},
				VolumeMounts: []corev1.VolumeMount{{Name: "spark-local-dir-1", MountPath: "/var/data/spark"}},
			}},
			Volumes:     []corev1.Volume{{Name: "spark-local-dir-1", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
			Tolerations: []corev1.Toleration{{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodPending},
	}
}

func servicePod() *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop", Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "main", Image: "registry.example.com/web:2",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("1Gi")}},
		}}},
	}
}
