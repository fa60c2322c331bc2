package cpuset

import (
	"testing"

	"k8s.io/klog/v2/ktesting"

	"github.com/tandemkit/tandem/hooks"
	"github.com/tandemkit/tandem/hooks/policy/qos"
)

// TestKubeletStaticCPUsKept: under kubelet's static CPU manager, the CPUs kubelet gives a Guaranteed
// container are never replaced, are left out of the LS pool, and are not handed to LSE pods; they return
// when the container goes.
func TestKubeletStaticCPUsKept(t *testing.T) {
	t.Parallel()
	_, ctx := ktesting.NewTestContext(t)
	a := machine16(t)
	d, err := hooks.NewDispatcher(ctx, []hooks.Registration{
		{Name: qos.Name, Order: 100, New: func() (hooks.Hook, error) { return qos.New(qos.Config{StaticCPUManager: true}) }},
		{Name: Name, Order: 200, New: func() (hooks.Hook, error) { return New(a, nil) }},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Kubelet's static policy gave the Guaranteed container CPUs 0 and 8 (one core's two threads).
	gpod := &hooks.PodInfo{ID: "sb-g", UID: "uid-g", Name: "g", Namespace: "default", CgroupParent: "/kubepods/podg"}
	gres := kubelet(2000, 2000)
	gres.CpusetCpus = "0,8"
	adj, err := d.Run(ctx, hooks.PreCreateContainer, gpod, &hooks.ContainerInfo{Name: "app", Resources: gres})
	if err != nil {
		t.Fatal(err)
	}
	if adj.Resources != nil && adj.Resources.CpusetCpus != nil {
		t.Fatalf("kubelet's cpuset replaced by %q", *adj.Resources.CpusetCpus)
	}
	if got := adj.Annotations[qos.AnnotationClass]; got != "LSR" {
		t.Fatalf("class = %q, want LSR", got)
	}
	if ls := a.Pools().LS.String(); ls != "1-7,9-15" {
		t.Errorf("LS pool = %s, want 1-7,9-15 (kubelet's CPUs left out)", ls)
	}
	// An LSE pod after it does not get kubelet's CPUs.
	lse, lseCtr := podOf(seedPod{"lse", "LSE", 2000, nil})
	adj, err = d.Run(ctx, hooks.PreCreateContainer, lse, lseCtr)
	if err != nil {
		t.Fatal(err)
	}
	if got := *adj.Resources.CpusetCpus; got == "0,8" || got == "0" || got == "8" {
		t.Errorf("LSE pod got kubelet's CPUs: %s", got)
	}
	// Kubelet's reconcile loop re-sends the cpuset: kept as it is.
	gctr := &hooks.ContainerInfo{ID: "ctr-g", Name: "app", Resources: gres, Annotations: map[string]string{qos.AnnotationClass: "LSR", qos.AnnotationCPUsFrom: qos.CPUsFromKubelet}}
	adj, err = d.Run(ctx, hooks.PreUpdateContainerResources, gpod, gctr)
	if err != nil {
		t.Fatal(err)
	}
	if adj != nil && adj.Resources != nil && adj.Resources.CpusetCpus != nil {
		t.Errorf("update replaced kubelet's cpuset with %q", *adj.Resources.CpusetCpus)
	}
	if _, err := d.Run(ctx, hooks.PreStartContainer, gpod, gctr); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Run(ctx, hooks.PostRemoveContainer, gpod, gctr); err != nil {
		t.Fatal(err)
	}
	if _, ok := a.Get(Owner("uid-g", "app")); ok {
		t.Error("kubelet's CPUs still recorded after the container was removed")
	}
}
