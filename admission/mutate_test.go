package admission

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/tandemkit/tandem/resource/batch"
)

// fakeCluster answers lookups from maps; the tier-2 tests use the real API server.
type fakeCluster struct {
	namespaces map[string]map[string]string
	classes    map[string]*schedulingv1.PriorityClass
}

func (f fakeCluster) NamespaceLabels(_ context.Context, name string) (map[string]string, error) {
	l, ok := f.namespaces[name]
	if !ok {
		return nil, fmt.Errorf("namespace %s not found", name)
	}
	return l, nil
}

func (f fakeCluster) PriorityClass(_ context.Context, name string) (*schedulingv1.PriorityClass, error) {
	pc, ok := f.classes[name]
	if !ok {
		return nil, fmt.Errorf("priorityclass %q not found", name)
	}
	return pc, nil
}

func newFakeCluster() fakeCluster {
	never := corev1.PreemptLowerPriority
	return fakeCluster{
		namespaces: map[string]map[string]string{
			"colocation": {"koordinator.sh/enable-colocation": "true"},
			"plain":      {},
		},
		classes: map[string]*schedulingv1.PriorityClass{
			"koord-batch": {ObjectMeta: metav1.ObjectMeta{Name: "koord-batch"}, Value: 5000, PreemptionPolicy: &never},
			"koord-prod":  {ObjectMeta: metav1.ObjectMeta{Name: "koord-prod"}, Value: 9000},
		},
	}
}

func readYAML(t *testing.T, path string, into any) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	j, err := yaml.YAMLToJSON(b)
	if err != nil {
		t.Fatal(err)
	}
	if into != nil {
		if err := json.Unmarshal(j, into); err != nil {
			t.Fatal(err)
		}
	}
	return j
}

func compile(t *testing.T, p *ClusterColocationProfile) *Profile {
	t.Helper()
	c, err := Compile(p)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// mutate runs the mutator on raw and applies its patch, as the API server does.
func mutate(t *testing.T, m *Mutator, namespace string, raw []byte) (*corev1.Pod, Mutation) {
	t.Helper()
	res, err := m.Mutate(context.Background(), namespace, raw)
	if err != nil {
		t.Fatalf("Mutate: %v", err)
	}
	ops, err := json.Marshal(res.Patch)
	if err != nil {
		t.Fatal(err)
	}
	patch, err := jsonpatch.DecodePatch(ops)
	if err != nil {
		t.Fatalf("decode the patch %s: %v", ops, err)
	}
	out, err := patch.Apply(raw)
	if err != nil {
		t.Fatalf("apply the patch %s: %v", ops, err)
	}
	var pod corev1.Pod
	if err := json.Unmarshal(out, &pod); err != nil {
		t.Fatal(err)
	}
	return &pod, res
}

func fixed(ps ...*Profile) func() []*Profile {
	ordered := Ordered(ps)
	return func() []*Profile { return ordered }
}

// TestSeed001 applies Koordinator's colocation-profile-example to the pod users create with it and checks
// every field Koordinator's webhook gives that pod: a cluster moving to Tandem's webhook must get the same
// pods.
func TestSeed001(t *testing.T) {
	var prof ClusterColocationProfile
	readYAML(t, "testdata/seed-001-profile.yaml", &prof)
	raw := readYAML(t, "testdata/seed-001-pod.yaml", nil)
	m := NewMutator(newFakeCluster(), fixed(compile(t, &prof)), func(int) int { t.Fatal("no probability to draw"); return 0 })
	pod, res := mutate(t, m, "colocation", raw)

	wantLabels := map[string]string{
		"koordinator.sh/enable-colocation": "true",
		"koordinator.sh/qosClass":          "BE",
		"koordinator.sh/priority":          "1000",
		"koordinator.sh/mutated":           "true",
	}
	if !reflect.DeepEqual(pod.Labels, wantLabels) {
		t.Errorf("labels %v, want %v", pod.Labels, wantLabels)
	}
	if got := pod.Annotations["koordinator.sh/intercepted"]; got != "true" {
		t.Errorf("annotation koordinator.sh/intercepted %q, want true", got)
	}
	if got := pod.Annotations[AnnotationProfiles]; got != "colocation-profile-example" {
		t.Errorf("annotation %s %q, want the profile's name", AnnotationProfiles, got)
	}
	if g := pod.Spec.TerminationGracePeriodSeconds; g == nil || *g != 30 {
		t.Errorf("terminationGracePeriodSeconds %v, want 30", g)
	}
	if p := pod.Spec.Priority; p == nil || *p != 5000 {
		t.Errorf("priority %v, want 5000", p)
	}
	if pod.Spec.PriorityClassName != "koord-batch" || pod.Spec.SchedulerName != "koord-scheduler" {
		t.Errorf("priorityClassName %q schedulerName %q, want koord-batch, koord-scheduler", pod.Spec.PriorityClassName, pod.Spec.SchedulerName)
	}
	if pp := pod.Spec.PreemptionPolicy; pp == nil || *pp != corev1.PreemptLowerPriority {
		t.Errorf("preemptionPolicy %v, want the class's PreemptLowerPriority", pp)
	}
	want := corev1.ResourceList{batch.CPU: resource.MustParse("1000"), batch.Memory: resource.MustParse("3456Mi")}
	r := pod.Spec.Containers[0].Resources
	for name, list := range map[string]corev1.ResourceList{"limits": r.Limits, "requests": r.Requests} {
		if len(list) != 2 || !list[batch.CPU].Equal(want[batch.CPU]) || !list[batch.Memory].Equal(want[batch.Memory]) {
			t.Errorf("%s %v, want exactly %v", name, list, want)
		}
	}
	if !res.Batch || !reflect.DeepEqual(res.Applied, []string{"colocation-profile-example"}) {
		t.Errorf("mutation %+v, want batch and the profile applied", res)
	}
	spec, err := batch.ParseSpec(pod.Annotations[batch.AnnotationExtendedResourceSpec])
	if err != nil {
		t.Fatalf("extended-resource-spec: %v", err)
	}
	if got, want := spec["app"], (batch.Container{CPURequestMilli: 1000, CPULimitMilli: 1000, MemoryRequest: 3456 << 20, MemoryLimit: 3456 << 20}); got != want {
		t.Errorf("extended-resource-spec of app %+v, want %+v", got, want)
	}

	// Outside the namespace the selector names, nothing changes.
	if res, err := m.Mutate(context.Background(), "plain", raw); err != nil || len(res.Patch) != 0 || len(res.Matched) != 0 {
		t.Errorf("pod in an unlabelled namespace: %+v, %v; want no patch", res, err)
	}
}

func TestProfilesApplyInNameOrder(t *testing.T) {
	a := compile(t, &ClusterColocationProfile{ObjectMeta: metav1.ObjectMeta{Name: "a-first"}, Spec: ClusterColocationProfileSpec{
		Labels: map[string]string{"team": "a", "only-a": "x"}, SchedulerName: "sched-a", QoSClass: "LS",
		LabelKeysMapping: map[string]string{"team": "team-copy"},
	}})
	b := compile(t, &ClusterColocationProfile{ObjectMeta: metav1.ObjectMeta{Name: "b-second"}, Spec: ClusterColocationProfileSpec{
		Labels: map[string]string{"team": "b"}, SchedulerName: "sched-b", LabelSuffixes: map[string]string{"team": "-suffix"},
		Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
	}})
	c := compile(t, &ClusterColocationProfile{ObjectMeta: metav1.ObjectMeta{Name: "c-never"}, Spec: ClusterColocationProfileSpec{
		Labels: map[string]string{"never": "x"}, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}},
	}})
	raw := []byte(`{"metadata":{"name":"p","labels":{"app":"web"}},"spec":{"containers":[{"name":"c","image":"i"}]}}`)
	// Listed out of order: the mutator's input is Ordered.
	m := NewMutator(newFakeCluster(), fixed(c, b, a), func(int) int { return 0 })
	pod, res := mutate(t, m, "plain", raw)
	want := map[string]string{"app": "web", "team": "b-suffix", "only-a": "x", "team-copy": "a", LabelQoSClass: "LS"}
	if !reflect.DeepEqual(pod.Labels, want) {
		t.Errorf("labels %v, want %v", pod.Labels, want)
	}
	if pod.Spec.SchedulerName != "sched-b" {
		t.Errorf("schedulerName %q, want the later profile's", pod.Spec.SchedulerName)
	}
	if got := pod.Annotations[AnnotationProfiles]; got != "a-first,b-second" {
		t.Errorf("%s = %q, want a-first,b-second", AnnotationProfiles, got)
	}
	if res.Batch {
		t.Error("an LS pod's resources were converted")
	}
}

func TestProbability(t *testing.T) {
	for _, tc := range []struct {
		probability string
		draw        int
		applied     bool
	}{
		{"50%", 49, true},
		{"50%", 50, false},
		{"0%", 0, false},
		{"100%", 99, true},
		{"30", 29, true},
		{"30", 30, false},
	} {
		t.Run(fmt.Sprintf("%s draw %d", tc.probability, tc.draw), func(t *testing.T) {
			var spec ClusterColocationProfileSpec
			if err := json.Unmarshal([]byte(fmt.Sprintf(`{"probability":%s,"labels":{"x":"y"}}`, quoteUnlessInt(tc.probability))), &spec); err != nil {
				t.Fatal(err)
			}
			p := compile(t, &ClusterColocationProfile{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: spec})
			m := NewMutator(newFakeCluster(), fixed(p), func(n int) int {
				if n != 100 {
					t.Fatalf("draw in [0,%d), want [0,100)", n)
				}
				return tc.draw
			})
			pod, res := mutate(t, m, "plain", []byte(`{"metadata":{"name":"p"},"spec":{"containers":[{"name":"c"}]}}`))
			if got := pod.Labels["x"] == "y"; got != tc.applied {
				t.Errorf("applied %v, want %v", got, tc.applied)
			}
			if _, ok := pod.Annotations[AnnotationProfiles]; !ok || len(res.Matched) != 1 {
				t.Errorf("a matched pod must carry %s whether or not the draw applied the profile", AnnotationProfiles)
			}
		})
	}
}

func quoteUnlessInt(s string) string {
	if strings.HasSuffix(s, "%") {
		return `"` + s + `"`
	}
	return s
}

func TestMissingPriorityClassRefuses(t *testing.T) {
	p := compile(t, &ClusterColocationProfile{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: ClusterColocationProfileSpec{PriorityClassName: "koord-mid"}})
	m := NewMutator(newFakeCluster(), fixed(p), nil)
	_, err := m.Mutate(context.Background(), "plain", []byte(`{"metadata":{"name":"web"},"spec":{"containers":[{"name":"c"}]}}`))
	if err == nil || !strings.Contains(err.Error(), "plain/web") || !strings.Contains(err.Error(), "koord-mid") || !strings.Contains(err.Error(), "ClusterColocationProfile p") {
		t.Errorf("error %v, want one naming the pod, the profile and the missing class", err)
	}
}

// TestUnknownFieldsSurvive: a field newer than this build's k8s.io/api must come through
// admission untouched, and numbers past 2^53 exact.
func TestUnknownFieldsSurvive(t *testing.T) {
	p := compile(t, &ClusterColocationProfile{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: ClusterColocationProfileSpec{QoSClass: "BE"}})
	m := NewMutator(newFakeCluster(), fixed(p), nil)
	raw := []byte(`{"metadata":{"name":"p"},"spec":{"futureField":{"a":[1,2]},"activeDeadlineSeconds":9007199254740993,` +
		`"containers":[{"name":"c","futureContainerField":true,"resources":{"requests":{"cpu":"500m"}}}]}}`)
	res, err := m.Mutate(context.Background(), "plain", raw)
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range res.Patch {
		if strings.Contains(op.Path, "future") || strings.Contains(op.Path, "activeDeadlineSeconds") {
			t.Errorf("patch touches %s: %+v", op.Path, op)
		}
	}
}

func TestConversion(t *testing.T) {
	for _, tc := range []struct {
		name      string
		resources string // the container's resources, JSON
		init      bool   // an init container with the same resources too
		overhead  string
		want      string // the container's resources after, JSON; "" for an error
		wantErr   string
	}{
		{name: "requests and limits", resources: `{"requests":{"cpu":"1","memory":"3456Mi"},"limits":{"cpu":"2","memory":"4Gi"}}`,
			want: `{"requests":{"kubernetes.io/batch-cpu":"1000","kubernetes.io/batch-memory":"3456Mi"},"limits":{"kubernetes.io/batch-cpu":"2000","kubernetes.io/batch-memory":"4Gi"}}`},
		{name: "limits absent: they become the requests", resources: `{"requests":{"cpu":"250m","memory":"1Gi"}}`,
			want: `{"requests":{"kubernetes.io/batch-cpu":"250","kubernetes.io/batch-memory":"1Gi"},"limits":{"kubernetes.io/batch-cpu":"250","kubernetes.io/batch-memory":"1Gi"}}`},
		{name: "requests absent: they become the limits", resources: `{"limits":{"cpu":"1500m"}}`,
			want: `{"requests":{"kubernetes.io/batch-cpu":"1500"},"limits":{"kubernetes.io/batch-cpu":"1500"}}`},
		{name: "no resources", resources: `{}`, want: `{}`},
		{name: "other resources kept", resources: `{"requests":{"cpu":"1","ephemeral-storage":"1Gi","nvidia.com/gpu":"1"},"limits":{"nvidia.com/gpu":"1"}}`,
			want: `{"requests":{"kubernetes.io/batch-cpu":"1000","ephemeral-storage":"1Gi","nvidia.com/gpu":"1"},"limits":{"kubernetes.io/batch-cpu":"1000","nvidia.com/gpu":"1"}}`},
		{name: "fractional milli-CPU rounds up", resources: `{"requests":{"cpu":"0.0005"}}`,
			want: `{"requests":{"kubernetes.io/batch-cpu":"1"},"limits":{"kubernetes.io/batch-cpu":"1"}}`},
		{name: "fractional bytes round up", resources: `{"requests":{"memory":"1500m"}}`,
			want: `{"requests":{"kubernetes.io/batch-memory":"2"},"limits":{"kubernetes.io/batch-memory":"2"}}`},
		{name: "decimal memory", resources: `{"requests":{"memory":"1.5Gi"}}`,
			want: `{"requests":{"kubernetes.io/batch-memory":"1.5Gi"},"limits":{"kubernetes.io/batch-memory":"1.5Gi"}}`},
		{name: "huge but representable", resources: `{"requests":{"cpu":"9000000000000","memory":"7Ei"}}`,
			want: `{"requests":{"kubernetes.io/batch-cpu":"9000000000000000","kubernetes.io/batch-memory":"7Ei"},"limits":{"kubernetes.io/batch-cpu":"9000000000000000","kubernetes.io/batch-memory":"7Ei"}}`},
		{name: "CPU overflow", resources: `{"requests":{"cpu":"10000000000000000"}}`, wantErr: "cannot be written as batch-cpu"},
		{name: "memory overflow", resources: `{"limits":{"memory":"9Ei"}}`, wantErr: "cannot be written as batch-memory"},
		{name: "garbage quantity", resources: `{"limits":{"cpu":"lots"}}`, wantErr: `cpu: "lots"`},
		{name: "init containers too", resources: `{"requests":{"cpu":"1"}}`, init: true,
			want: `{"requests":{"kubernetes.io/batch-cpu":"1000"},"limits":{"kubernetes.io/batch-cpu":"1000"}}`},
		{name: "overhead", resources: `{}`, overhead: `{"cpu":"100m","memory":"64Mi"}`, want: `{}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := compile(t, &ClusterColocationProfile{ObjectMeta: metav1.ObjectMeta{Name: "be"}, Spec: ClusterColocationProfileSpec{QoSClass: "BE"}})
			m := NewMutator(newFakeCluster(), fixed(p), nil)
			spec := fmt.Sprintf(`"containers":[{"name":"main","resources":%s}]`, tc.resources)
			if tc.init {
				spec += fmt.Sprintf(`,"initContainers":[{"name":"setup","resources":%s}]`, tc.resources)
			}
			if tc.overhead != "" {
				spec += `,"overhead":` + tc.overhead
			}
			raw := []byte(`{"metadata":{"name":"p"},"spec":{` + spec + `}}`)
			if tc.wantErr != "" {
				_, err := m.Mutate(context.Background(), "plain", raw)
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "container main") {
					t.Errorf("error %v, want one naming container main and containing %q", err, tc.wantErr)
				}
				return
			}
			pod, _ := mutate(t, m, "plain", raw)
			var want corev1.ResourceRequirements
			if err := json.Unmarshal([]byte(tc.want), &want); err != nil {
				t.Fatal(err)
			}
			containers := pod.Spec.Containers
			if tc.init {
				containers = append(containers, pod.Spec.InitContainers...)
			}
			for _, c := range containers {
				if !equalResources(c.Resources, want) {
					t.Errorf("container %s: %v, want %v", c.Name, c.Resources, want)
				}
			}
			if tc.overhead != "" {
				o := pod.Spec.Overhead
				if _, ok := o[corev1.ResourceCPU]; ok || !o[batch.CPU].Equal(resource.MustParse("100")) || !o[batch.Memory].Equal(resource.MustParse("64Mi")) {
					t.Errorf("overhead %v, want batch-cpu 100 and batch-memory 64Mi", o)
				}
			}
			if tc.init && !strings.Contains(pod.Annotations[batch.AnnotationExtendedResourceSpec], `"setup"`) {
				t.Errorf("extended-resource-spec %s leaves out the init container", pod.Annotations[batch.AnnotationExtendedResourceSpec])
			}
		})
	}
}

func equalResources(a, b corev1.ResourceRequirements) bool {
	eq := func(x, y corev1.ResourceList) bool {
		if len(x) != len(y) {
			return false
		}
		for k, v := range x {
			w, ok := y[k]
			if !ok || !v.Equal(w) {
				return false
			}
		}
		return true
	}
	return eq(a.Requests, b.Requests) && eq(a.Limits, b.Limits)
}

func TestBatchBy(t *testing.T) {
	for _, tc := range []struct {
		name    string
		profile ClusterColocationProfileSpec
		labels  string
		batch   bool
	}{
		{name: "profile says BE", profile: ClusterColocationProfileSpec{QoSClass: "BE"}, batch: true},
		{name: "pod's own label says BE", profile: ClusterColocationProfileSpec{SchedulerName: "koord-scheduler"}, labels: `{"koordinator.sh/qosClass":"BE"}`, batch: true},
		// Koordinator converts by band; a koord-batch pod that is not BE would then be refused for
		// asking batch resources (rule batch-resources-need-be), so Tandem converts BE pods only.
		{name: "batch priority without BE", profile: ClusterColocationProfileSpec{PriorityClassName: "koord-batch"}, batch: false},
		{name: "batch priority and BE", profile: ClusterColocationProfileSpec{PriorityClassName: "koord-batch", QoSClass: "BE"}, batch: true},
		{name: "LS", profile: ClusterColocationProfileSpec{QoSClass: "LS"}, labels: `{"koordinator.sh/qosClass":"BE"}`, batch: false},
		{name: "prod priority", profile: ClusterColocationProfileSpec{PriorityClassName: "koord-prod"}, batch: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := compile(t, &ClusterColocationProfile{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: tc.profile})
			m := NewMutator(newFakeCluster(), fixed(p), nil)
			labels := tc.labels
			if labels == "" {
				labels = "{}"
			}
			_, res := mutate(t, m, "plain", []byte(`{"metadata":{"name":"p","labels":`+labels+`},"spec":{"containers":[{"name":"c","resources":{"requests":{"cpu":"1"}}}]}}`))
			if res.Batch != tc.batch {
				t.Errorf("batch %v, want %v", res.Batch, tc.batch)
			}
		})
	}
	// A BE pod no profile matched keeps what it asked for, as with Koordinator; if it asks for
	// batch resources itself, the node gets the annotation.
	m := NewMutator(newFakeCluster(), fixed(), nil)
	pod, res := mutate(t, m, "plain", []byte(`{"metadata":{"name":"p","labels":{"koordinator.sh/qosClass":"BE"}},"spec":{"containers":[`+
		`{"name":"a","resources":{"requests":{"cpu":"1"}}},{"name":"b","resources":{"limits":{"kubernetes.io/batch-cpu":"500"}}}]}}`))
	if res.Batch || pod.Spec.Containers[0].Resources.Requests.Cpu().MilliValue() != 1000 {
		t.Errorf("a BE pod no profile matched was converted: %v", pod.Spec.Containers[0].Resources)
	}
	if _, ok := pod.Annotations[AnnotationProfiles]; ok {
		t.Errorf("%s on a pod no profile matched", AnnotationProfiles)
	}
	if got := pod.Annotations[batch.AnnotationExtendedResourceSpec]; got != `{"containers":{"b":{"limits":{"kubernetes.io/batch-cpu":"500"}}}}` {
		t.Errorf("extended-resource-spec %s", got)
	}
}

func TestCompile(t *testing.T) {
	for _, tc := range []struct {
		name, spec, wantErr string
	}{
		{name: "colocation-profile-example", spec: `{"qosClass":"BE","priorityClassName":"koord-batch","patch":{"spec":{"terminationGracePeriodSeconds":30}}}`},
		{name: "empty", spec: `{}`},
		{name: "unknown class", spec: `{"qosClass":"GOLD"}`, wantErr: "spec.qosClass"},
		{name: "lower-case class", spec: `{"qosClass":"be"}`, wantErr: `write it as "BE"`},
		{name: "bad selector operator", spec: `{"selector":{"matchExpressions":[{"key":"a","operator":"Near","values":["x"]}]}}`, wantErr: "spec.selector"},
		{name: "bad namespace selector", spec: `{"namespaceSelector":{"matchLabels":{"a b":"x"}}}`, wantErr: "spec.namespaceSelector"},
		{name: "probability over 100", spec: `{"probability":"150%"}`, wantErr: "spec.probability"},
		{name: "bad label value", spec: `{"labels":{"team":"a b"}}`, wantErr: "spec.labels"},
		{name: "bad mapping target", spec: `{"labelKeysMapping":{"team":"-bad-"}}`, wantErr: "spec.labelKeysMapping"},
		{name: "patch not an object", spec: `{"patch":[1,2]}`, wantErr: "spec.patch"},
		{name: "patch not a pod patch", spec: `{"patch":{"spec":{"containers":"many"}}}`, wantErr: "spec.patch"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var p ClusterColocationProfile
			p.Name = "prof"
			if err := json.Unmarshal([]byte(tc.spec), &p.Spec); err != nil {
				t.Fatal(err)
			}
			_, err := Compile(&p)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("Compile: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "ClusterColocationProfile prof")):
				t.Errorf("Compile: %v, want an error naming the profile and %q", err, tc.wantErr)
			}
		})
	}
}

func TestMalformedPod(t *testing.T) {
	m := NewMutator(newFakeCluster(), fixed(), nil)
	for _, raw := range []string{``, `[]`, `null`, `{"metadata":`} {
		if _, err := m.Mutate(context.Background(), "plain", []byte(raw)); err == nil {
			t.Errorf("Mutate(%q) succeeded", raw)
		}
	}
	if _, err := m.Mutate(context.Background(), "plain", []byte(`{"metadata":{"name":"p"},"spec":{"containers":"x"}}`)); err != nil {
		t.Errorf("a pod with odd containers: %v (the API server validates the spec; the webhook must not trip on it)", err)
	}
}
