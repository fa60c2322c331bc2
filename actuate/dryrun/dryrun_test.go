package dryrun_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"

	"github.com/tandemkit/tandem/actuate/dryrun"
)

// sink is an EventSink that keeps what it was given, and fails when err is set.
type sink struct {
	mu     sync.Mutex
	events []*corev1.Event
	err    error
}

func (s *sink) CreateEvent(_ context.Context, ev *corev1.Event) (*corev1.Event, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events = append(s.events, ev)
	return ev, s.err
}

func TestWould(t *testing.T) {
	t.Parallel()
	pod := dryrun.Object{Namespace: "batch", Name: "job-1", UID: "uid-1"}
	tests := []struct {
		name       string
		action     dryrun.Action
		obj        dryrun.Object
		noSink     bool
		sinkErr    error
		wantReason string
		// wantInvolved is the Event's object; nil: no Event.
		wantInvolved *corev1.ObjectReference
		wantNS       string
	}{
		{
			name: "evict a pod", action: dryrun.Evict, obj: pod, wantReason: "WouldEvict", wantNS: "batch",
			wantInvolved: &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: "batch", Name: "job-1", UID: "uid-1"},
		},
		{
			name: "window eviction of a pod", action: dryrun.WindowEvict, obj: pod, wantReason: "WouldEvict", wantNS: "batch",
			wantInvolved: &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: "batch", Name: "job-1", UID: "uid-1"},
		},
		{
			name: "quota burst of a pod", action: dryrun.CFSQuotaBurst, obj: pod, wantReason: "WouldBurstQuota", wantNS: "batch",
			wantInvolved: &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: "batch", Name: "job-1", UID: "uid-1"},
		},
		{
			name: "suppression is about the node", action: dryrun.Suppress, wantReason: "WouldSuppress", wantNS: "default",
			wantInvolved: &corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: "node-a", UID: types.UID("node-a")},
		},
		{name: "no sink yet: counted, no Event", action: dryrun.Evict, obj: pod, noSink: true},
		{
			name: "a failed Event is counted all the same", action: dryrun.Suppress, sinkErr: errors.New("forbidden"),
			wantReason: "WouldSuppress", wantNS: "default",
			wantInvolved: &corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: "node-a", UID: types.UID("node-a")},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, ctx := ktesting.NewTestContext(t)
			reg := prometheus.NewRegistry()
			r, err := dryrun.New("node-a", reg)
			if err != nil {
				t.Fatal(err)
			}
			s := &sink{err: tt.sinkErr}
			if !tt.noSink {
				r.SetSink(s)
			}
			r.Would(ctx, tt.action, tt.obj, "do it: because")
			r.Would(ctx, tt.action, tt.obj, "do it again: because")
			// Every action's series exists from the start; only this one's moved.
			var want strings.Builder
			want.WriteString("# HELP tandem_dry_run_actions_total Actions on running pods that dry-run-config held back, by action: what would have been done.\n# TYPE tandem_dry_run_actions_total counter\n")
			for _, a := range dryrun.Actions() {
				n := 0
				if a == tt.action {
					n = 2
				}
				fmt.Fprintf(&want, "tandem_dry_run_actions_total{action=%q} %d\n", a, n)
			}
			if err := testutil.GatherAndCompare(reg, strings.NewReader(want.String()), "tandem_dry_run_actions_total"); err != nil {
				t.Error(err)
			}
			if tt.wantInvolved == nil {
				if len(s.events) != 0 {
					t.Fatalf("%d Events without a sink", len(s.events))
				}
				return
			}
			if len(s.events) != 2 {
				t.Fatalf("%d Events, want 2", len(s.events))
			}
			ev := s.events[0]
			if ev.InvolvedObject != *tt.wantInvolved {
				t.Errorf("involved object %+v, want %+v", ev.InvolvedObject, *tt.wantInvolved)
			}
			if ev.Namespace != tt.wantNS || ev.Reason != tt.wantReason || ev.Reason != tt.action.Reason() {
				t.Errorf("namespace %q reason %q, want %q %q", ev.Namespace, ev.Reason, tt.wantNS, tt.wantReason)
			}
			if !strings.Contains(ev.Message, "would do it: because") || !strings.Contains(ev.Message, string(tt.action)) {
				t.Errorf("message %q says neither the action nor what it would do", ev.Message)
			}
			if ev.Type != corev1.EventTypeNormal || ev.Source.Host != "node-a" || ev.Count != 1 {
				t.Errorf("event type %q host %q count %d", ev.Type, ev.Source.Host, ev.Count)
			}
		})
	}
}

func TestNilRecorder(t *testing.T) {
	t.Parallel()
	_, ctx := ktesting.NewTestContext(t)
	var r *dryrun.Recorder
	// Must not panic: a loop built without a recorder calls it all the same.
	r.Would(ctx, dryrun.Evict, dryrun.Object{Namespace: "ns", Name: "p"}, "evict the pod")
}
