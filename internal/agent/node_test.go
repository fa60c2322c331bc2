package agent

import (
	"testing"

	"github.com/tandemkit/tandem/hooks"
	"github.com/tandemkit/tandem/proxy/store"
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
