package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/tandemkit/tandem/bench/internal/runctx"
	"github.com/tandemkit/tandem/metrics/nodemetric"
)

func nodeName(i int) string { return fmt.Sprintf("kwok-node-%05d", i) }

// classLabel says whether a simulated node is cold (room for the full phase's large batch pods)
// or warm; the checks read it, no scheduler does.
const classLabel = "scale.tandem.io/class"

func newNode(i, n int) *corev1.Node {
	class := "warm"
	if isCold(i, n) {
		class = "cold"
	}
	rl := corev1.ResourceList{
		corev1.ResourceCPU:    *resource.NewMilliQuantity(nodeCPUMilli, resource.DecimalSI),
		corev1.ResourceMemory: *resource.NewQuantity(nodeMemory, resource.BinarySI),
		corev1.ResourcePods:   *resource.NewQuantity(nodeMaxPods, resource.DecimalSI),
	}
	name := nodeName(i)
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: name,
			Labels: map[string]string{
				corev1.LabelHostname: name, corev1.LabelOSStable: "linux", corev1.LabelArchStable: "amd64",
				corev1.LabelTopologyZone: fmt.Sprintf("zone-%d", i%3), classLabel: class,
			},
			Annotations: map[string]string{kwokNodeAnnotation: "fake"},
		},
		Status: corev1.NodeStatus{Capacity: rl, Allocatable: rl.DeepCopy()},
	}
}

// createNodes creates n simulated Nodes with workers in parallel, then waits until kwok has made
// each Ready.
func createNodes(ctx context.Context, cs kubernetes.Interface, n, workers int) ([]string, error) {
	names := make([]string, n)
	for i := range names {
		names[i] = nodeName(i)
	}
	if err := parallel(ctx, n, workers, func(i int) error {
		if _, err := cs.CoreV1().Nodes().Create(ctx, newNode(i, n), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create node %s: %w", names[i], err)
		}
		return nil
	}); err != nil {
		return nil, err
	}
	if err := waitNodes(ctx, cs, n, 5*time.Minute, "Ready (kwok)", func(nd *corev1.Node) bool {
		for _, c := range nd.Status.Conditions {
			if c.Type == corev1.NodeReady {
				return c.Status == corev1.ConditionTrue
			}
		}
		return false
	}); err != nil {
		return nil, err
	}
	return names, untaint(ctx, cs, names, workers)
}

// untaint does what kube-controller-manager's node lifecycle controller does for a Node that turned
// Ready: it removes the node.kubernetes.io/not-ready taint the API server put on at creation
// (TaintNodesByCondition). That controller does not run here: with no heartbeats it would soon
// mark every simulated node unreachable.
func untaint(ctx context.Context, cs kubernetes.Interface, names []string, workers int) error {
	return parallel(ctx, len(names), workers, func(i int) error {
		if _, err := cs.CoreV1().Nodes().Patch(ctx, names[i], types.MergePatchType, []byte(`{"spec":{"taints":null}}`), metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("remove the not-ready taint of %s: %w", names[i], err)
		}
		return nil
	})
}

// parallel calls do(0..n-1) from workers goroutines and returns the first error; a worker stops at
// its first error or when ctx ends.
func parallel(ctx context.Context, n, workers int, do func(i int) error) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if ctx.Err() != nil {
					errs <- ctx.Err()
					return
				}
				if err := do(i); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// hasBatch reports whether a Node carries published batch capacity.
func hasBatch(nd *corev1.Node) bool {
	_, ok := nd.Status.Allocatable[nodemetric.ResourceBatchCPU]
	_, metric := nd.Annotations[nodemetric.AnnotationKey]
	return ok && metric
}

// waitNodes waits until want Nodes satisfy ok.
func waitNodes(ctx context.Context, cs kubernetes.Interface, want int, timeout time.Duration, what string, ok func(*corev1.Node) bool) error {
	deadline := time.Now().Add(timeout)
	last := -1
	for {
		list, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		if err == nil {
			got := 0
			for i := range list.Items {
				if ok(&list.Items[i]) {
					got++
				}
			}
			if got >= want {
				return nil
			}
			if got != last {
				progress("  %d of %d nodes %s", got, want, what)
				last = got
			}
		}
		if time.Now().After(deadline) {
			if err != nil {
				return fmt.Errorf("only %d of %d nodes %s after %s (the last list failed: %w)", last, want, what, timeout, err)
			}
			return fmt.Errorf("only %d of %d nodes %s after %s", last, want, what, timeout)
		}
		if err := runctx.Sleep(ctx, 3*time.Second); err != nil {
			return err
		}
	}
}
