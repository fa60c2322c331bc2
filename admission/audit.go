package admission

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/klog/v2"
)

// The checks tandem_webhook_unadmitted_pods counts by.
const (
	checkProfiles = "profiles"
	checkRules    = "rules"
)

// Audit finds the pods admitted without the webhook. With failurePolicy: Ignore the API server
// admits pods while no replica answers (it counts them in its own
// apiserver_admission_webhook_fail_open_count); Audit says which pods they are: a pod some
// profile matched, created after that profile, that carries no AnnotationProfiles, or a pod that
// breaks a rule of ValidatePod. Each is logged once and counted while it exists.
type Audit struct {
	pods     corelisters.PodLister
	cluster  Cluster
	profiles func() []*Profile
	excluded map[string]bool
	gauge    *prometheus.GaugeVec
	logged   map[types.UID]bool // only Run's goroutine touches it
}

// NewAudit returns an Audit of the pods outside the excluded namespaces (those the webhook
// configurations leave out); its gauge goes to reg.
func NewAudit(pods corelisters.PodLister, cluster Cluster, profiles func() []*Profile, excluded []string, reg prometheus.Registerer) *Audit {
	a := &Audit{
		pods: pods, cluster: cluster, profiles: profiles, excluded: map[string]bool{},
		gauge: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tandem_webhook_unadmitted_pods",
			Help: "Pods that exist without having gone through the webhook (admitted while it was down, failurePolicy Ignore): check=profiles, a profile matched and was not applied; check=rules, the pod breaks a validation rule. Each is logged once.",
		}, []string{"check"}),
		logged: map[types.UID]bool{},
	}
	for _, ns := range excluded {
		a.excluded[ns] = true
	}
	reg.MustRegister(a.gauge)
	return a
}

// Run scans every interval until ctx ends.
func (a *Audit) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		a.Scan(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Scan counts the unadmitted pods now and logs the new ones; it returns the counts by check.
func (a *Audit) Scan(ctx context.Context) map[string]int {
	logger := klog.FromContext(ctx)
	counts := map[string]int{checkProfiles: 0, checkRules: 0}
	pods, err := a.pods.List(labels.Everything())
	if err != nil {
		logger.Error(err, "List pods for the admission audit")
		return counts
	}
	seen := make(map[types.UID]bool, len(pods))
	profiles := a.profiles()
	for _, pod := range pods {
		if a.excluded[pod.Namespace] || pod.DeletionTimestamp != nil {
			continue
		}
		missed := a.missedProfiles(ctx, pod, profiles)
		ruleErr := ValidatePod(pod)
		if missed == "" && ruleErr == nil {
			continue
		}
		seen[pod.UID] = true
		if missed != "" {
			counts[checkProfiles]++
		}
		if ruleErr != nil {
			counts[checkRules]++
		}
		if a.logged[pod.UID] {
			continue
		}
		a.logged[pod.UID] = true
		if missed != "" {
			logger.Info("Pod admitted without tandem-webhook: a ClusterColocationProfile matches it and was not applied; recreate the pod (its controller does when it is deleted) to have it applied",
				"pod", klog.KObj(pod), "profile", missed, "created", pod.CreationTimestamp.Time)
		}
		if ruleErr != nil {
			logger.Info("Pod admitted without tandem-webhook breaks an admission rule; its node may refuse its containers", "pod", klog.KObj(pod), "err", ruleErr.Error())
		}
	}
	for uid := range a.logged {
		if !seen[uid] {
			delete(a.logged, uid)
		}
	}
	for check, n := range counts {
		a.gauge.WithLabelValues(check).Set(float64(n))
	}
	return counts
}

// missedProfiles returns the first profile that should have changed pod and did not, or "".
func (a *Audit) missedProfiles(ctx context.Context, pod *corev1.Pod, profiles []*Profile) string {
	if _, ok := pod.Annotations[AnnotationProfiles]; ok {
		return ""
	}
	var nsLabels map[string]string
	nsRead := false
	for _, p := range profiles {
		// A pod older than the profile was admitted before the profile existed.
		if pod.CreationTimestamp.Time.Before(p.Created) {
			continue
		}
		if p.NeedsNamespace() && !nsRead {
			l, err := a.cluster.NamespaceLabels(ctx, pod.Namespace)
			if err != nil {
				return ""
			}
			nsLabels, nsRead = l, true
		}
		if p.Matches(nsLabels, pod.Labels) {
			return p.Name
		}
	}
	return ""
}
