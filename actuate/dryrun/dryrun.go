// Package dryrun records what an action would have done to a running pod when dry-run-config holds it
// back: one log line, one Kubernetes Event whose message says "would", and a count in
// tandem_dry_run_actions_total{action}. The actions decide exactly as they do for real and call Would
// where they would have changed the pod, so what an operator reads is what turning the switch off does.
package dryrun

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
)

// Action names an action dry-run-config can hold back; it is the action label of the counter and the
// key of dry-run-config.
type Action string

// The actions.
const (
	Suppress      Action = "suppress"
	Evict         Action = "evict"
	WindowEvict   Action = "windowEvict"
	CFSQuotaBurst Action = "cfsQuotaBurst"
)

// Actions lists them, in the order docs and metrics give them.
func Actions() []Action { return []Action{Suppress, Evict, WindowEvict, CFSQuotaBurst} }

// Reason is the Event reason for an action held back: "WouldSuppress", "WouldEvict", ...
func (a Action) Reason() string {
	switch a {
	case Suppress:
		return "WouldSuppress"
	case Evict, WindowEvict:
		return "WouldEvict"
	case CFSQuotaBurst:
		return "WouldBurstQuota"
	}
	return "Would" + string(a)
}

// EventSink creates Events; *kubeclient.Client has it.
type EventSink interface {
	CreateEvent(ctx context.Context, event *corev1.Event) (*corev1.Event, error)
}

// Object is what an Event is about: a pod (Namespace, Name, UID) or, with Namespace empty, the Node.
type Object struct {
	Namespace, Name, UID string
}

// Recorder records held-back actions. It is safe for concurrent use.
type Recorder struct {
	node    string
	sink    atomic.Pointer[EventSink]
	actions *prometheus.CounterVec
	now     func() time.Time
}

// New returns a Recorder for node whose counter goes to reg (nil: unexported). Events wait for SetSink.
func New(node string, reg prometheus.Registerer) (*Recorder, error) {
	r := &Recorder{node: node, now: time.Now, actions: prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "tandem", Name: "dry_run_actions_total",
		Help: "Actions on running pods that dry-run-config held back, by action: what would have been done.",
	}, []string{"action"})}
	for _, a := range Actions() {
		r.actions.WithLabelValues(string(a))
	}
	if reg != nil {
		if err := reg.Register(r.actions); err != nil {
			return nil, fmt.Errorf("register dry-run metrics: %w", err)
		}
	}
	return r, nil
}

// SetSink starts recording Events through sink (once the API server answers); before it, Would logs and
// counts only.
func (r *Recorder) SetSink(sink EventSink) { r.sink.Store(&sink) }

// Would records that action would have been done to obj: message says what, in words that follow
// "would" ("evict the pod: node memory use 81% reached memoryEvictThresholdPercent 70%"). A nil Recorder
// records nothing, so that callers without one need no check.
func (r *Recorder) Would(ctx context.Context, action Action, obj Object, message string) {
	if r == nil {
		return
	}
	r.actions.WithLabelValues(string(action)).Inc()
	ref := klog.KRef(obj.Namespace, obj.Name)
	text := fmt.Sprintf("Dry run (dry-run-config %s): would %s", action, message)
	klog.FromContext(ctx).Info("Dry run: action held back", "action", action, "object", ref, "would", message)
	s := r.sink.Load()
	if s == nil {
		return
	}
	now := metav1.NewTime(r.now())
	involved := corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: obj.Namespace, Name: obj.Name, UID: types.UID(obj.UID)}
	ns := obj.Namespace
	if obj.Namespace == "" {
		// Node Events live in the default namespace, as kubelet's do.
		involved = corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: r.node, UID: types.UID(r.node)}
		ns = metav1.NamespaceDefault
	}
	ev := &corev1.Event{
		ObjectMeta:          metav1.ObjectMeta{GenerateName: involved.Name + ".", Namespace: ns},
		InvolvedObject:      involved,
		Reason:              action.Reason(),
		Message:             text,
		Type:                corev1.EventTypeNormal,
		Source:              corev1.EventSource{Component: "tandem-proxy", Host: r.node},
		ReportingController: "tandem.io/tandem-proxy",
		ReportingInstance:   "tandem-proxy-" + r.node,
		Action:              string(action),
		FirstTimestamp:      now,
		LastTimestamp:       now,
		Count:               1,
	}
	if _, err := (*s).CreateEvent(ctx, ev); err != nil {
		klog.FromContext(ctx).Error(err, "Dry-run event not recorded", "action", action, "object", ref)
	}
}
