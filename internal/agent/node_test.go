package agent

import (
	"testing"

	"github.com/tandemkit/tandem/hooks"
	"github.com/tandemkit/tandem/hooks/policy/qos"
	resqos "github.com/tandemkit/tandem/resource/qos"
	"github.com/tandemkit/tandem/store"
)

func TestPodMeta(t *testing.T) {
	t.Parallel()
	st := store.New()
	st.PutPod(&store.Pod{ID: "sb1", UID: "u1"})
	st.PutContainer(&store.Container{ID: "c1", PodSandboxID: "sb1", Resources: &hooks.Resources{CPUShares: 1024}})
	st.PutContainer(&store.Container{ID: "c2", PodSandboxID: "sb1", Resources: &hooks.Resources{CPUShares: 512}})
	meta := podMeta(st)
	m, ok := meta("u1")
	if !ok || m.SandboxID != "sb1" || m.CPURequestMilli != 1500 {
		t.Fatalf("podMeta(u1) = %+v, %v; want sandbox sb1 and 1500m", m, ok)
	}
	// A change to the store is seen by the next question.
	st.RemoveContainer("c2")
	if m, _ := meta("u1"); m.CPURequestMilli != 1000 {
		t.Fatalf("after removing c2: %dm, want 1000m", m.CPURequestMilli)
	}
	if _, ok := meta("unknown"); ok {
		t.Fatal("an unknown pod was found")
	}
}

// TestClassOfStored: the node loops see a pod's class as the qos policy recorded it, and the class of a
// pod that ran before the agent was installed (adopted, with no record) as the policy would have
// resolved it; under kubelet's static CPU manager a Guaranteed one is LSR.
func TestClassOfStored(t *testing.T) {
	t.Parallel()
	label := func(v string) map[string]string { return map[string]string{"koordinator.sh/qosClass": v} }
	for _, tt := range []struct {
		name   string
		pod    store.Pod
		ctr    *store.Container
		static bool
		want   resqos.Class
	}{
		{name: "recorded on the container", pod: store.Pod{Labels: label("LS")}, ctr: &store.Container{Annotations: map[string]string{qos.AnnotationClass: "BE"}}, want: resqos.BE},
		{name: "recorded on the pod", pod: store.Pod{Annotations: map[string]string{qos.AnnotationClass: "LSR"}}, ctr: &store.Container{}, want: resqos.LSR},
		{name: "adopted BE by its label", pod: store.Pod{Labels: label("BE"), CgroupParent: "/kubepods/besteffort/pod1"}, ctr: &store.Container{}, want: resqos.BE},
		{name: "adopted BestEffort without a label", pod: store.Pod{CgroupParent: "kubepods-besteffort-pod1.slice"}, ctr: &store.Container{}, want: resqos.BE},
		{name: "adopted pod alone", pod: store.Pod{Labels: label("BE")}, want: resqos.BE},
		{name: "adopted Guaranteed", pod: store.Pod{CgroupParent: "/kubepods/pod1"}, ctr: &store.Container{}, want: resqos.LS},
		{name: "adopted Guaranteed, static CPU manager", pod: store.Pod{CgroupParent: "/kubepods/pod1"}, ctr: &store.Container{}, static: true, want: resqos.LSR},
		{name: "adopted with an invalid label", pod: store.Pod{Labels: label("XX")}, ctr: &store.Container{}, want: ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := classOfStored(&tt.pod, tt.ctr, tt.static); got != tt.want {
				t.Errorf("class = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestCollectorTargetsAdopted: a BE container the store adopted from the runtime (no class recorded)
// is a BE target, so that eviction and suppression count it as BE.
func TestCollectorTargetsAdopted(t *testing.T) {
	t.Parallel()
	st := store.New()
	st.PutPod(&store.Pod{ID: "p1", Name: "batch", Namespace: "ns", UID: "u1", Labels: map[string]string{"koordinator.sh/qosClass": "BE"}})
	st.PutContainer(&store.Container{ID: "c1", PodSandboxID: "p1", Name: "main"})
	got := collectorTargets(st, false)()
	if len(got) != 1 || got[0].QoS != resqos.BE {
		t.Fatalf("targets = %+v, want one BE target", got)
	}
	reqs := podRequests(st, false)()
	if len(reqs) != 1 || reqs[0].QoS != resqos.BE {
		t.Fatalf("pod requests = %+v, want one BE pod", reqs)
	}
}
