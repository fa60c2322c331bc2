package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"runtime"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"
	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/tandemkit/tandem/admission"
	"github.com/tandemkit/tandem/bench/internal/figures"
)

// staticCluster answers the mutator's lookups as tandem-webhook's informers do once synced.
type staticCluster struct{}

func (staticCluster) NamespaceLabels(_ context.Context, name string) (map[string]string, error) {
	switch name {
	case nsWebhook:
		return map[string]string{"env": "bench", "team-owner": "platform", labelWebhook: "webhook", corev1.LabelMetadataName: nsWebhook}, nil
	case nsPlain:
		return map[string]string{"env": "bench", "team-owner": "platform", corev1.LabelMetadataName: nsPlain}, nil
	case nsFloor:
		return map[string]string{"env": "bench", "team-owner": "platform", labelWebhook: "floor", corev1.LabelMetadataName: nsFloor}, nil
	}
	return nil, fmt.Errorf("namespace %s not found", name)
}

func (staticCluster) PriorityClass(_ context.Context, name string) (*schedulingv1.PriorityClass, error) {
	if name != "koord-batch" {
		return nil, fmt.Errorf("PriorityClass %s not found", name)
	}
	return &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: 5000}, nil
}

// compiledProfiles compiles the benchmark's profiles as tandem-webhook does, in the order they apply.
func compiledProfiles(ps []benchProfile) ([]*admission.Profile, error) {
	out := make([]*admission.Profile, 0, len(ps))
	for i, p := range ps {
		c, err := admission.Compile(&admission.ClusterColocationProfile{ObjectMeta: metav1.ObjectMeta{Name: profileName(i)}, Spec: p.spec})
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return admission.Ordered(out), nil
}

// inProcessHandler is tandem-webhook's review handler with the benchmark's profiles, in this process.
func inProcessHandler(ps []benchProfile) (http.Handler, error) {
	compiled, err := compiledProfiles(ps)
	if err != nil {
		return nil, err
	}
	return admission.NewHandler(admission.NewMutator(staticCluster{}, func() []*admission.Profile { return compiled }, rand.IntN), prometheus.NewRegistry()), nil
}

// reviewBody is the AdmissionReview the API server sends for a dry-run create of pod in ns.
func reviewBody(pod *corev1.Pod, ns string) (string, error) {
	raw, err := json.Marshal(pod)
	if err != nil {
		return "", err
	}
	gvk := metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}
	gvr := metav1.GroupVersionResource{Version: "v1", Resource: "pods"}
	b, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID: types.UID("5d0c8f4e-3a4b-4c2d-9e1f-0a1b2c3d4e5f"), Kind: gvk, Resource: gvr, RequestKind: &gvk, RequestResource: &gvr,
			Namespace: ns, Operation: admissionv1.Create, DryRun: ptr.To(true),
			UserInfo: authenticationv1.UserInfo{Username: "system:serviceaccount:kube-system:replicaset-controller",
				UID: "9a8b7c6d-1e2f-4a3b-8c9d-0e1f2a3b4c5d", Groups: []string{"system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"}},
			Object:  kruntime.RawExtension{Raw: raw},
			Options: kruntime.RawExtension{Raw: []byte(`{"kind":"CreateOptions","apiVersion":"meta.k8s.io/v1","dryRun":["All"]}`)},
		},
	})
	return string(b), err
}

// cost is the handler's own cost for one kind of review, in this process: no network, no TLS.
type cost struct {
	name                 string
	cpuP50, cpuP99, wall time.Duration
	bytes                int
}

// measureHandler serves body on path iters times on one goroutine locked to its thread and
// returns the thread CPU time per review (what the review costs on a core of its own, whatever
// else the machine does) and the mean wall time.
func measureHandler(h http.Handler, name, path, body string, iters int) (cost, error) {
	c := cost{name: name, bytes: len(body)}
	for range 50 { // warm up pools and caches
		if err := serveCheck(h, path, body); err != nil {
			return c, fmt.Errorf("%s: %w", name, err)
		}
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cpu := make([]time.Duration, iters)
	start := time.Now()
	for i := range cpu {
		c0 := threadCPU()
		if err := serveCheck(h, path, body); err != nil {
			return c, fmt.Errorf("%s: %w", name, err)
		}
		cpu[i] = threadCPU() - c0
	}
	c.wall = time.Since(start) / time.Duration(iters)
	c.cpuP50, c.cpuP99 = figures.Nearest(cpu, 0.50), figures.Nearest(cpu, 0.99)
	return c, nil
}

func threadCPU() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

// sink is a ResponseWriter that keeps the status and the body.
type sink struct {
	header http.Header
	code   int
	body   []byte
}

func (s *sink) Header() http.Header         { return s.header }
func (s *sink) WriteHeader(code int)        { s.code = code }
func (s *sink) Write(b []byte) (int, error) { s.body = append(s.body, b...); return len(b), nil }

// serveCheck serves one review and checks that it was allowed.
func serveCheck(h http.Handler, path, body string) error {
	r, err := http.NewRequest(http.MethodPost, path, strings.NewReader(body))
	if err != nil {
		return err
	}
	s := &sink{header: http.Header{}, code: http.StatusOK}
	h.ServeHTTP(s, r)
	if s.code != http.StatusOK {
		return fmt.Errorf("status %d: %s", s.code, s.body)
	}
	var out admissionv1.AdmissionReview
	if err := json.Unmarshal(s.body, &out); err != nil {
		return err
	}
	if out.Response == nil || !out.Response.Allowed {
		return fmt.Errorf("review not allowed: %s", s.body)
	}
	if path == admission.MutatePodPath && len(out.Response.Patch) == 0 {
		return fmt.Errorf("no patch: %s", s.body)
	}
	return nil
}

// handlerCosts measures h's mutate and validate reviews of each variant. submitted are the pods as
// the API server sends them to the mutating webhook (defaulted, in-tree admission done: the
// bench-plain dry-run answers), admitted as it sends them to the validating one (the
// bench-webhook answers).
func handlerCosts(h http.Handler, submitted, admitted [variants]*corev1.Pod, iters int) ([]cost, error) {
	var out []cost
	for v := range variants {
		for _, c := range []struct {
			path string
			pod  *corev1.Pod
		}{{admission.MutatePodPath, submitted[v]}, {admission.ValidatePodPath, admitted[v]}} {
			body, err := reviewBody(c.pod, nsWebhook)
			if err != nil {
				return nil, err
			}
			m, err := measureHandler(h, variantNames[v]+" "+c.path, c.path, body, iters)
			if err != nil {
				return nil, err
			}
			out = append(out, m)
		}
	}
	return out, nil
}

// perPod adds up the p50 CPU of a mutate and a validate review, averaged over the variants.
func perPod(cs []cost) time.Duration {
	var sum time.Duration
	for _, c := range cs {
		sum += c.cpuP50
	}
	return sum / time.Duration(max(1, len(cs)/2))
}
