package evict_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"

	"github.com/tandemkit/tandem/actuate/evict"
	"github.com/tandemkit/tandem/kubeclient/kubeclienttest"
	"github.com/tandemkit/tandem/metrics/collector"
	"github.com/tandemkit/tandem/resource/qos"
)

// TestAPIEvictor runs the loop with the Eviction API evictor on a fake clientset (unit tests have no
// apiserver): the apiserver answers 429 for a pod whose PodDisruptionBudget allows no disruption, as
// the real one does, and the loop then evicts the next pod. Each eviction leaves a Warning Event.
func TestAPIEvictor(t *testing.T) {
	t.Parallel()
	_, ctx := ktesting.NewTestContext(t)
	client := fake.NewClientset()
	var asked []string
	client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		ca, ok := a.(k8stesting.CreateAction)
		if !ok || ca.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		ev := ca.GetObject().(*policyv1.Eviction)
		asked = append(asked, ev.Name)
		if ev.DeleteOptions == nil || ev.DeleteOptions.Preconditions == nil || string(*ev.DeleteOptions.Preconditions.UID) != "uid-"+ev.Name {
			t.Errorf("eviction of %s without the pod's UID as precondition", ev.Name)
		}
		switch ev.Name {
		case "be-a":
			return true, nil, apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 10)
		case "be-gone":
			return true, nil, apierrors.NewNotFound(corev1.Resource("pods"), ev.Name)
		}
		return true, nil, nil
	})
	clk := &clock{t: time.Unix(1000, 0)}
	l, err := evict.New(memConfig(), evict.Deps{
		Latest: func() *collector.Snapshot { return nil }, Evictor: evict.NewAPIEvictor(kubeclienttest.Clientset{Interface: client}, "node-1"), Now: clk.now,
	})
	if err != nil {
		t.Fatal(err)
	}
	// 10 GiB to free: be-a (refused), be-gone (already gone: counts), be-c.
	ev := l.Step(ctx, snapshot(clk.t, 16, 100, 75, ctr{"be-a", qos.BE, 8, 0}, ctr{"be-gone", qos.BE, 6, 0}, ctr{"be-c", qos.BE, 5, 0}, ctr{"be-d", qos.BE, 1, 0}))
	if want := []string{"be-a", "be-gone", "be-c"}; !slices.Equal(asked, want) {
		t.Errorf("eviction requests for %v, want %v", asked, want)
	}
	var got []string
	for _, p := range ev.Pods {
		got = append(got, p.Name)
	}
	if want := []string{"be-gone", "be-c"}; !slices.Equal(got, want) {
		t.Errorf("evicted %v, want %v", got, want)
	}
	events, err := client.CoreV1().Events("ns").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// be-gone was gone already: no event for it.
	if len(events.Items) != 1 {
		t.Fatalf("%d events, want 1 (for be-c)", len(events.Items))
	}
	e := events.Items[0]
	if e.InvolvedObject.Name != "be-c" || e.Reason != evict.EventReason || e.Type != corev1.EventTypeWarning ||
		!strings.Contains(e.Message, "memory") || e.Source.Host != "node-1" {
		t.Errorf("event = %+v, want a Warning Evicted event on be-c naming the memory reason", e)
	}
}

func TestAPIEvictorRefusal(t *testing.T) {
	t.Parallel()
	_, ctx := ktesting.NewTestContext(t)
	client := fake.NewClientset()
	client.PrependReactor("create", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewTooManyRequests("pdb", 10)
	})
	err := evict.NewAPIEvictor(kubeclienttest.Clientset{Interface: client}, "n").Evict(ctx, evict.Pod{Namespace: "ns", Name: "p"}, evict.ReasonMemory, "m")
	if !errors.Is(err, evict.ErrRefused) {
		t.Errorf("429 gave %v, want ErrRefused", err)
	}
	client2 := fake.NewClientset()
	client2.PrependReactor("create", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(corev1.Resource("pods"), "p", errors.New("rbac"))
	})
	err = evict.NewAPIEvictor(kubeclienttest.Clientset{Interface: client2}, "n").Evict(ctx, evict.Pod{Namespace: "ns", Name: "p"}, evict.ReasonMemory, "m")
	if err == nil || errors.Is(err, evict.ErrRefused) || !apierrors.IsForbidden(err) {
		t.Errorf("403 gave %v, want a forbidden error that is not a refusal", err)
	}
}

type stopper struct{ stopped []string }

func (s *stopper) StopPodSandbox(_ context.Context, id string) error {
	s.stopped = append(s.stopped, id)
	return nil
}

// TestCRIEvictor checks the standalone path with a recording runtime; e2e runs it on real containerd.
func TestCRIEvictor(t *testing.T) {
	t.Parallel()
	_, ctx := ktesting.NewTestContext(t)
	s := &stopper{}
	e := evict.NewCRIEvictor(s)
	if err := e.Evict(ctx, evict.Pod{Namespace: "ns", Name: "p", SandboxID: "sb1"}, evict.ReasonMemory, ""); err != nil {
		t.Fatal(err)
	}
	if err := e.Evict(ctx, evict.Pod{Namespace: "ns", Name: "q"}, evict.ReasonMemory, ""); err == nil {
		t.Error("a pod without sandbox id was evicted")
	}
	if !slices.Equal(s.stopped, []string{"sb1"}) {
		t.Errorf("stopped %v, want [sb1]", s.stopped)
	}
}
