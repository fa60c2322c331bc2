package main

import (
	"context"
	"fmt"
	"time"

	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	schedulinglisters "k8s.io/client-go/listers/scheduling/v1"
)

// clusterLookup answers the mutator from the informers' caches, and from one GET when a cache does
// not hold the object yet: a namespace created a moment before its first pod must not get that pod
// refused because the watch is behind.
type clusterLookup struct {
	client     kubernetes.Interface
	namespaces corelisters.NamespaceLister
	classes    schedulinglisters.PriorityClassLister
	timeout    time.Duration
}

func (c *clusterLookup) NamespaceLabels(ctx context.Context, name string) (map[string]string, error) {
	ns, err := c.namespaces.Get(name)
	if apierrors.IsNotFound(err) {
		ctx, cancel := context.WithTimeout(ctx, c.timeout)
		defer cancel()
		ns, err = c.client.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
	}
	if err != nil {
		return nil, fmt.Errorf("namespace %s: %w", name, err)
	}
	return ns.Labels, nil
}

func (c *clusterLookup) PriorityClass(ctx context.Context, name string) (*schedulingv1.PriorityClass, error) {
	pc, err := c.classes.Get(name)
	if apierrors.IsNotFound(err) {
		ctx, cancel := context.WithTimeout(ctx, c.timeout)
		defer cancel()
		pc, err = c.client.SchedulingV1().PriorityClasses().Get(ctx, name, metav1.GetOptions{})
	}
	return pc, err
}
