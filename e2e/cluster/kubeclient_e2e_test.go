//go:build e2e

package cluster_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/tandemkit/tandem/actuate/evict"
	"github.com/tandemkit/tandem/e2e/cluster"
	"github.com/tandemkit/tandem/kubeclient"
)

// TestKubeclientOnRealAPIServer runs what tandem-proxy asks of the API server through its own client
// (kubeclient), against the cluster's kube-apiserver: an informer on the node's pods, a GET, and an
// eviction with its Event through the evict loop's APIEvictor, first with a stale UID (refused), then
// with the pod's own, then for a pod that is gone.
func TestKubeclientOnRealAPIServer(t *testing.T) {
	ctx := testContext(t, 5*time.Minute)
	cs := client(t)
	restCfg, err := clientcmd.BuildConfigFromFlags("", suite.c.Kubeconfig)
	if err != nil {
		t.Fatalf("load kubeconfig %s: %v", suite.c.Kubeconfig, err)
	}
	kc, err := kubeclient.New(restCfg, "tandem-e2e")
	if err != nil {
		t.Fatal(err)
	}

	infCtx, stopInformer := context.WithCancel(ctx)
	inf := cache.NewSharedIndexInformer(kc.PodListWatch(fields.OneTermEqualSelector("spec.nodeName", cluster.NodeName).String()),
		&corev1.Pod{}, 0, cache.Indexers{})
	stopped := make(chan struct{})
	go func() { defer close(stopped); inf.RunWithContext(infCtx) }()
	defer func() { stopInformer(); <-stopped }()
	syncCtx, cancelSync := context.WithTimeout(ctx, time.Minute)
	synced := cache.WaitForCacheSync(syncCtx.Done(), inf.HasSynced)
	cancelSync()
	if !synced {
		t.Fatal("the pod informer did not sync within a minute")
	}

	const name = "tandem-kubeclient-e2e"
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceDefault},
		Spec: corev1.PodSpec{
			NodeName:                      cluster.NodeName,
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			Containers: []corev1.Container{{
				Name: "sleep", Image: "docker.io/library/tandem-e2e:1", ImagePullPolicy: corev1.PullNever,
				Command: []string{"/bin/sh", "-c", "exec sleep 3600"},
			}},
		},
	}
	created, err := cs.CoreV1().Pods(metav1.NamespaceDefault).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod: %v", err)
	}
	t.Cleanup(func() { deletePod(context.WithoutCancel(ctx), t, cs, name) })

	key := metav1.NamespaceDefault + "/" + name
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		_, ok, err := inf.GetStore().GetByKey(key)
		return ok, err
	}); err != nil {
		t.Fatalf("the informer never saw pod %s: %v", key, err)
	}
	got, err := kc.GetPod(ctx, metav1.NamespaceDefault, name)
	if err != nil || got.UID != created.UID {
		t.Fatalf("GetPod = %v, %v; want UID %s", got, err, created.UID)
	}

	evictor := evict.NewAPIEvictor(kc, cluster.NodeName)
	target := evict.Pod{Namespace: metav1.NamespaceDefault, Name: name, UID: "stale-" + string(created.UID)}
	if err := evictor.Evict(ctx, target, evict.ReasonMemory, "tandem e2e, stale UID"); err == nil {
		t.Fatal("an eviction with a stale UID was accepted; it must only evict the pod the snapshot saw")
	}
	if _, err := kc.GetPod(ctx, metav1.NamespaceDefault, name); err != nil {
		t.Fatalf("the pod is gone after an eviction with a stale UID: %v", err)
	}
	target.UID = string(created.UID)
	if err := evictor.Evict(ctx, target, evict.ReasonMemory, "tandem e2e"); err != nil {
		t.Fatalf("evict: %v", err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := kc.GetPod(ctx, metav1.NamespaceDefault, name)
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		t.Fatalf("pod %s not gone 2 minutes after its eviction: %v", key, err)
	}
	events, err := cs.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{
		FieldSelector: fields.Set{"involvedObject.name": name, "reason": evict.EventReason}.String()})
	if err != nil || len(events.Items) != 1 || events.Items[0].InvolvedObject.UID != created.UID {
		t.Fatalf("eviction events for %s: %+v, %v; want one, on the evicted pod", key, events, err)
	}
	t.Cleanup(func() {
		_ = cs.CoreV1().Events(metav1.NamespaceDefault).Delete(context.WithoutCancel(ctx), events.Items[0].Name, metav1.DeleteOptions{})
	})
	if err := evictor.Evict(ctx, target, evict.ReasonMemory, "tandem e2e, again"); err != nil {
		t.Fatalf("evicting a pod that is gone: %v; it counts as evicted", err)
	}
}
