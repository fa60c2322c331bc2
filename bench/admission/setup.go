package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/tandemkit/tandem/admission"
	"github.com/tandemkit/tandem/bench/internal/controlplane"
	"github.com/tandemkit/tandem/bench/internal/runctx"
	"github.com/tandemkit/tandem/resource/batch"
)

// The namespaces of the three kinds of request, and the label that sends a namespace's pods
// through a webhook (the webhook configurations' namespaceSelector: value "webhook" for
// tandem-webhook, "floor" for the floor webhook).
const (
	nsPlain           = "bench-plain"
	nsWebhook         = "bench-webhook"
	nsFloor           = "bench-floor"
	labelWebhook      = "tandem.io/bench-admission"
	webhookConfigName = "tandem-webhook"
	floorConfigName   = "bench-floor"
)

// The pods the benchmark creates, in turn, in every namespace: a web replica (LS) and a Spark
// executor that profiles turn BE. Both are shaped as controllers make them: generateName, an owner,
// two containers with resources.
const (
	variantWeb   = 0
	variantBatch = 1
	variants     = 2
)

var variantNames = [variants]string{"web", "batch"}

func benchPods() [variants]*corev1.Pod {
	rl := func(cpu, mem string) corev1.ResourceList {
		return corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)}
	}
	owner := func(kind, name, uid string) []metav1.OwnerReference {
		return []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: kind, Name: name, UID: types.UID("0b7c6d2e-8f41-4c3a-9d5e-" + uid),
			Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}
	}
	web := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: "shop-web-7d9f8c6b5-",
			Labels:       map[string]string{"app": "shop-web", "tier": "frontend", "team": "payments", "pod-template-hash": "7d9f8c6b5"},
			Annotations: map[string]string{"prometheus.io/scrape": "true", "prometheus.io/port": "9090",
				"kubectl.kubernetes.io/restartedAt": "2025-11-20T09:12:44Z"},
			OwnerReferences: owner("ReplicaSet", "shop-web-7d9f8c6b5", "1a2b3c4d5e6f"),
		},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name: "app", Image: "registry.example.com/shop/web:1.42.0",
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}, {Name: "metrics", ContainerPort: 9090}},
				Env: []corev1.EnvVar{
					{Name: "SHOP_DB_HOST", Value: "shop-db.payments.svc"}, {Name: "SHOP_CACHE_SIZE", Value: "256Mi"},
					{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
					{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
				},
				Resources:      corev1.ResourceRequirements{Requests: rl("500m", "512Mi"), Limits: rl("1", "1Gi")},
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ready", Port: intstr.FromString("http")}}, PeriodSeconds: 5},
				LivenessProbe:  &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromString("http")}}, InitialDelaySeconds: 10},
				VolumeMounts:   []corev1.VolumeMount{{Name: "config", MountPath: "/etc/shop"}, {Name: "logs", MountPath: "/var/log/shop"}},
			}, {
				Name: "log-shipper", Image: "registry.example.com/fluent-bit:3.1.9",
				Args:         []string{"--config=/fluent-bit/etc/fluent-bit.conf"},
				Resources:    corev1.ResourceRequirements{Requests: rl("50m", "64Mi"), Limits: rl("100m", "128Mi")},
				VolumeMounts: []corev1.VolumeMount{{Name: "logs", MountPath: "/var/log/shop", ReadOnly: true}},
			}},
			Volumes: []corev1.Volume{
				{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "shop-web"}}}},
				{Name: "logs", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			},
			TerminationGracePeriodSeconds: ptr.To[int64](30),
			Affinity: &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{
				Weight: 100, PodAffinityTerm: corev1.PodAffinityTerm{TopologyKey: "kubernetes.io/hostname",
					LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "shop-web"}}},
			}}}},
		},
	}
	exec := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: "spark-etl-exec-",
			Labels: map[string]string{"app": "spark-etl", "spark-role": "executor", "team": "data",
				"spark-app-selector": "spark-4f1c2b7a9e", "spark-exec-id": "7"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: "spark-etl-driver", UID: "d1f0c2aa-5b7e-4d8f-a1c3-9e8d7c6b5a41"}},
		},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{
				Name: "executor", Image: "registry.example.com/spark:3.5.4",
				Args: []string{"executor", "--cores", "2", "--memory", "3g"},
				Env: []corev1.EnvVar{
					{Name: "SPARK_EXECUTOR_ID", Value: "7"}, {Name: "SPARK_APPLICATION_ID", Value: "spark-4f1c2b7a9e"},
					{Name: "SPARK_DRIVER_URL", Value: "spark://CoarseGrainedScheduler@spark-etl-driver-svc.data.svc:7078"},
				},
				Resources:    corev1.ResourceRequirements{Requests: rl("1", "3Gi"), Limits: rl("2", "4Gi")},
				VolumeMounts: []corev1.VolumeMount{{Name: "spark-local-dir-1", MountPath: "/var/data/spark"}},
			}, {
				Name: "metrics", Image: "registry.example.com/jmx-exporter:1.0.1",
				Resources: corev1.ResourceRequirements{Requests: rl("50m", "64Mi"), Limits: rl("100m", "128Mi")},
			}},
			Volumes: []corev1.Volume{{Name: "spark-local-dir-1", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
		},
	}
	return [variants]*corev1.Pod{web, exec}
}

// benchProfile is one of the 20 ClusterColocationProfiles, with whether it should take each pod
// variant in namespace bench-webhook: the probe checks the webhook agrees.
type benchProfile struct {
	spec  admission.ClusterColocationProfileSpec
	takes [variants]bool
}

func sel(kv ...string) *metav1.LabelSelector {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return &metav1.LabelSelector{MatchLabels: m}
}

func expr(key string, op metav1.LabelSelectorOperator, values ...string) *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: key, Operator: op, Values: values}}}
}

// benchProfiles are named bench-00..bench-19 in this order: they apply in name order. Six take
// neither pod, ten the web pod, nine the executor.
func benchProfiles() []benchProfile {
	web, exe, both, none := [variants]bool{true, false}, [variants]bool{false, true}, [variants]bool{true, true}, [variants]bool{}
	type S = admission.ClusterColocationProfileSpec
	return []benchProfile{
		{S{NamespaceSelector: sel("env", "bench"), Annotations: map[string]string{"tandem.io/bench-env": "bench"}}, both},
		{S{NamespaceSelector: sel("env", "prod"), Labels: map[string]string{"prod": "true"}}, none},
		{S{Selector: sel("app", "shop-web"), QoSClass: "LS", Labels: map[string]string{"colocation.tandem.io/role": "online"}}, web},
		{S{Selector: sel("tier", "frontend"), Annotations: map[string]string{
			"colocation.tandem.io/owner": "payments", "colocation.tandem.io/slo": "p99<50ms", "colocation.tandem.io/contact": "payments-oncall@example.com"}}, web},
		{S{Selector: expr("team", metav1.LabelSelectorOpIn, "payments", "search"), Labels: map[string]string{"cost-center": "cc-1234"}}, web},
		{S{Selector: sel("tier", "backend"), Labels: map[string]string{"colocation.tandem.io/role": "backend"}}, none},
		{S{Selector: sel("spark-role", "executor"), QoSClass: "BE", PriorityClassName: "koord-batch",
			Labels: map[string]string{"colocation.tandem.io/role": "batch"}}, exe},
		{S{Selector: sel("app", "spark-etl"), Patch: json.RawMessage(`{"metadata":{"labels":{"colocation.tandem.io/patched":"true"}},` +
			`"spec":{"tolerations":[{"key":"tandem.io/colocation","operator":"Exists","effect":"NoSchedule"}]}}`)}, exe},
		{S{Selector: sel("app", "spark-etl"), SchedulerName: "koord-scheduler"}, exe},
		{S{Selector: expr("app", metav1.LabelSelectorOpExists), LabelKeysMapping: map[string]string{"app": "app.kubernetes.io/name"}}, both},
		{S{Selector: expr("team", metav1.LabelSelectorOpExists), AnnotationKeysMapping: map[string]string{"prometheus.io/port": "monitoring.example.com/port"}}, both},
		{S{Selector: sel("app", "shop-web"), LabelSuffixes: map[string]string{"tier": "-ls"}}, web},
		{S{Selector: sel("gpu", "true"), Labels: map[string]string{"colocation.tandem.io/gpu": "shared"}}, none},
		{S{NamespaceSelector: expr("env", metav1.LabelSelectorOpNotIn, "prod", "staging"), Annotations: map[string]string{"tandem.io/bench-not-prod": "true"}}, both},
		{S{Selector: sel("team", "ml"), QoSClass: "BE"}, none},
		{S{Selector: sel("app", "shop-web"), Patch: json.RawMessage(`{"spec":{"containers":[{"name":"app","env":[{"name":"TANDEM_COLOCATED","value":"true"}]}]}}`)}, web},
		{S{NamespaceSelector: sel(labelWebhook, "webhook"), Labels: map[string]string{"admitted-by": "tandem-webhook"}}, both},
		{S{NamespaceSelector: sel("team-owner", "data"), Labels: map[string]string{"colocation.tandem.io/data": "true"}}, none},
		{S{Selector: sel("spark-role", "executor"), KoordinatorPriority: ptr.To[int32](5500)}, exe},
		{S{Selector: expr("app", metav1.LabelSelectorOpIn, "node-exporter", "fluent-bit"), QoSClass: "SYSTEM"}, none},
	}
}

func profileName(i int) string { return fmt.Sprintf("bench-%02d", i) }

// expectedAnnotations is the tandem.io/colocation-profiles annotation each variant must come back
// with from namespace bench-webhook: the profiles that take it, in name order.
func expectedAnnotations(ps []benchProfile) [variants]string {
	var names [variants][]string
	for i, p := range ps {
		for v := range variants {
			if p.takes[v] {
				names[v] = append(names[v], profileName(i))
			}
		}
	}
	var out [variants]string
	for v := range variants {
		out[v] = strings.Join(names[v], ",")
	}
	return out
}

// createBase creates the PriorityClass koord-batch, the three namespaces and their default
// ServiceAccounts (no kube-controller-manager runs to make them, and the ServiceAccount admission
// plugin refuses pods without one).
func createBase(ctx context.Context, cs kubernetes.Interface) error {
	if _, err := cs.SchedulingV1().PriorityClasses().Create(ctx, &schedulingv1.PriorityClass{
		ObjectMeta: metav1.ObjectMeta{Name: "koord-batch"}, Value: 5000,
		Description: "Koordinator's batch band (5000-5999), as in deploy/priorityclasses.yaml",
	}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create PriorityClass koord-batch: %w", err)
	}
	for _, ns := range []struct {
		name   string
		labels map[string]string
	}{
		{nsPlain, map[string]string{"env": "bench", "team-owner": "platform"}},
		{nsWebhook, map[string]string{"env": "bench", "team-owner": "platform", labelWebhook: "webhook"}},
		{nsFloor, map[string]string{"env": "bench", "team-owner": "platform", labelWebhook: "floor"}},
	} {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns.name, Labels: ns.labels}}, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create namespace %s: %w", ns.name, err)
		}
		if _, err := cs.CoreV1().ServiceAccounts(ns.name).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create ServiceAccount %s/default: %w", ns.name, err)
		}
	}
	return nil
}

func tandemWebhooks(port int) controlplane.WebhookSet {
	return controlplane.WebhookSet{Config: webhookConfigName, Domain: "tandem.io", App: "tandem-webhook",
		Namespaces: &metav1.LabelSelector{MatchLabels: map[string]string{labelWebhook: "webhook"}}, Port: port}
}

func floorWebhooks(port int) controlplane.WebhookSet {
	return controlplane.WebhookSet{Config: floorConfigName, Domain: "floor.bench.tandem.io", App: "bench-floor-webhook",
		Namespaces: &metav1.LabelSelector{MatchLabels: map[string]string{labelWebhook: "floor"}}, Port: port}
}

// createProfiles creates the profiles, retrying while the API server does not serve the new
// resource yet.
func createProfiles(ctx context.Context, dyn dynamic.Interface, ps []benchProfile) error {
	for i, p := range ps {
		b, err := json.Marshal(admission.ClusterColocationProfile{
			TypeMeta:   metav1.TypeMeta{APIVersion: "config.koordinator.sh/v1alpha1", Kind: "ClusterColocationProfile"},
			ObjectMeta: metav1.ObjectMeta{Name: profileName(i)},
			Spec:       p.spec,
		})
		if err != nil {
			return err
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(b); err != nil {
			return err
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			_, err = dyn.Resource(admission.ProfileResource).Create(ctx, u, metav1.CreateOptions{})
			if err == nil || !apierrors.IsNotFound(err) || time.Now().After(deadline) {
				break
			}
			if err := runctx.Sleep(ctx, 200*time.Millisecond); err != nil {
				return err
			}
		}
		if err != nil {
			return fmt.Errorf("create ClusterColocationProfile %s: %w", u.GetName(), err)
		}
	}
	return nil
}

// waitAdmission waits until a dry-run create of each variant comes back from bench-webhook
// mutated as the profiles say (the API server's webhook configuration cache and the webhook's
// profile cache have caught up), and from bench-plain untouched. It returns the answers: from
// bench-plain what the API server sends the mutating webhook (defaulted, in-tree admission done),
// from bench-webhook what it sends the validating one.
func waitAdmission(ctx context.Context, cs kubernetes.Interface, pods [variants]*corev1.Pod, want [variants]string) (submitted, admitted [variants]*corev1.Pod, err error) {
	deadline := time.Now().Add(time.Minute)
	for v := range variants {
		for {
			got, err := cs.CoreV1().Pods(nsWebhook).Create(ctx, pods[v].DeepCopy(), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			var last string
			if err != nil {
				last = err.Error()
			} else if a, ok := got.Annotations[admission.AnnotationProfiles]; !ok {
				last = "not mutated yet"
			} else if a != want[v] {
				return submitted, admitted, fmt.Errorf("%s pod in %s: the webhook applied profiles %q, the benchmark expects %q", variantNames[v], nsWebhook, a, want[v])
			} else {
				if v == variantBatch {
					if _, ok := got.Spec.Containers[0].Resources.Requests[batch.CPU]; !ok || got.Spec.Priority == nil || *got.Spec.Priority != 5000 {
						return submitted, admitted, fmt.Errorf("batch pod in %s: not turned BE (requests %v, priority %v)", nsWebhook, got.Spec.Containers[0].Resources.Requests, got.Spec.Priority)
					}
				}
				admitted[v] = got
				break
			}
			if time.Now().After(deadline) {
				return submitted, admitted, fmt.Errorf("%s pod in %s not admitted as expected within a minute: %s", variantNames[v], nsWebhook, last)
			}
			if err := runctx.Sleep(ctx, 200*time.Millisecond); err != nil {
				return submitted, admitted, err
			}
		}
		got, err := cs.CoreV1().Pods(nsPlain).Create(ctx, pods[v].DeepCopy(), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return submitted, admitted, fmt.Errorf("%s pod in %s: %w", variantNames[v], nsPlain, err)
		}
		if a, ok := got.Annotations[admission.AnnotationProfiles]; ok {
			return submitted, admitted, fmt.Errorf("%s pod in %s went through the webhook (profiles %q): the namespaceSelector does not keep it out", variantNames[v], nsPlain, a)
		}
		got.Namespace = nsWebhook
		submitted[v] = got
	}
	return submitted, admitted, nil
}

// waitFloor waits until a dry-run create of each variant comes back from bench-floor mutated (the
// API server's webhook configuration cache has the floor's), and checks that the answer is the one
// tandem-webhook's patch gave in bench-webhook (admitted), but for what differs between any two
// creates: so the API server does the same work with the floor's answer as with tandem-webhook's.
func waitFloor(ctx context.Context, cs kubernetes.Interface, pods, admitted [variants]*corev1.Pod) error {
	deadline := time.Now().Add(time.Minute)
	for v := range variants {
		for {
			got, err := cs.CoreV1().Pods(nsFloor).Create(ctx, pods[v].DeepCopy(), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			var last string
			if err != nil {
				last = err.Error()
			} else if _, ok := got.Annotations[admission.AnnotationProfiles]; !ok {
				last = "not mutated yet"
			} else {
				if err := sameAnswer(admitted[v], got); err != nil {
					return fmt.Errorf("%s pod: the floor's answer in %s differs from tandem-webhook's in %s: %w", variantNames[v], nsFloor, nsWebhook, err)
				}
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s pod in %s not mutated by the floor webhook within a minute: %s", variantNames[v], nsFloor, last)
			}
			if err := runctx.Sleep(ctx, 200*time.Millisecond); err != nil {
				return err
			}
		}
	}
	return nil
}

// sameAnswer compares two dry-run answers but for the fields that differ between any two creates
// of the same pod: name (generated), namespace, uid, creation time, managed fields (their times),
// and the random name of the service-account token volume.
func sameAnswer(want, got *corev1.Pod) error {
	w, err := comparablePod(want)
	if err != nil {
		return err
	}
	g, err := comparablePod(got)
	if err != nil {
		return err
	}
	if bytes.Equal(w, g) {
		return nil
	}
	i := 0
	for i < len(w) && i < len(g) && w[i] == g[i] {
		i++
	}
	excerpt := func(b []byte) string { return string(b[max(0, i-80):min(len(b), i+80)]) }
	return fmt.Errorf("at byte %d: want …%s…, got …%s…", i, excerpt(w), excerpt(g))
}

func comparablePod(p *corev1.Pod) ([]byte, error) {
	q := p.DeepCopy()
	q.Name, q.Namespace, q.UID, q.ResourceVersion = "", "", "", ""
	q.CreationTimestamp = metav1.Time{}
	q.ManagedFields = nil
	rename := func(n *string) {
		if strings.HasPrefix(*n, tokenVolumePrefix) {
			*n = tokenVolumePrefix
		}
	}
	for i := range q.Spec.Volumes {
		rename(&q.Spec.Volumes[i].Name)
	}
	for _, cs := range [][]corev1.Container{q.Spec.InitContainers, q.Spec.Containers} {
		for i := range cs {
			for j := range cs[i].VolumeMounts {
				rename(&cs[i].VolumeMounts[j].Name)
			}
		}
	}
	return json.Marshal(q)
}
