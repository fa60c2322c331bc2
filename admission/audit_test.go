package admission

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apitypes "k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

func TestAudit(t *testing.T) {
	created := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	prof := compile(t, &ClusterColocationProfile{
		ObjectMeta: metav1.ObjectMeta{Name: "batch", CreationTimestamp: metav1.NewTime(created)},
		Spec: ClusterColocationProfileSpec{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"koordinator.sh/enable-colocation": "true"}},
			Selector:          &metav1.LabelSelector{MatchLabels: map[string]string{"app": "spark"}},
			QoSClass:          "BE",
		},
	})
	pod := func(name, ns string, at time.Time, labels, annotations map[string]string, cpu string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: apitypes.UID("uid-" + name), Labels: labels, Annotations: annotations, CreationTimestamp: metav1.NewTime(at)}}
		c := corev1.Container{Name: "app"}
		if cpu != "" {
			c.Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: mustQ(cpu)}
			c.Resources.Limits = corev1.ResourceList{corev1.ResourceCPU: mustQ(cpu)}
		}
		p.Spec.Containers = []corev1.Container{c}
		return p
	}
	spark := map[string]string{"app": "spark"}
	later := created.Add(time.Hour)
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, p := range []*corev1.Pod{
		pod("bypassed", "colocation", later, spark, nil, ""),
		pod("admitted", "colocation", later, spark, map[string]string{AnnotationProfiles: "batch"}, ""),
		pod("older-than-profile", "colocation", created.Add(-time.Hour), spark, nil, ""),
		pod("other-namespace", "plain", later, spark, nil, ""),
		pod("lse-fractional", "plain", later, map[string]string{"koordinator.sh/qosClass": "LSE"}, nil, "1500m"),
		pod("excluded", "kube-system", later, map[string]string{"koordinator.sh/qosClass": "LSE"}, nil, "1500m"),
	} {
		if err := idx.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	cluster := newFakeCluster()
	cluster.namespaces["kube-system"] = map[string]string{}
	reg := prometheus.NewRegistry()
	a := NewAudit(corelisters.NewPodLister(idx), cluster, fixed(prof), []string{"kube-system"}, reg)
	got := a.Scan(context.Background())
	if got[checkProfiles] != 1 || got[checkRules] != 1 {
		t.Errorf("counts %v, want 1 bypassed profile (bypassed) and 1 broken rule (lse-fractional)", got)
	}
	if v := testutil.ToFloat64(a.gauge.WithLabelValues(checkProfiles)); v != 1 {
		t.Errorf("gauge %v, want 1", v)
	}
	if !a.logged["uid-bypassed"] || !a.logged["uid-lse-fractional"] || len(a.logged) != 2 {
		t.Errorf("logged %v, want the two pods", a.logged)
	}
	// Once the pods are gone, the gauge follows and nothing stays remembered.
	_ = idx.Delete(pod("bypassed", "colocation", later, spark, nil, ""))
	_ = idx.Delete(pod("lse-fractional", "plain", later, nil, nil, ""))
	got = a.Scan(context.Background())
	if got[checkProfiles] != 0 || got[checkRules] != 0 || len(a.logged) != 0 {
		t.Errorf("after deletion: counts %v, logged %v", got, a.logged)
	}
}

func mustQ(s string) resource.Quantity { return resource.MustParse(s) }
