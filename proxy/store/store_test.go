package store

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/tandemkit/tandem/hooks"
)

func TestReconcileRespectsChangesDuringListing(t *testing.T) {
	t.Parallel()
	s := New()
	s.PutPod(&Pod{ID: "p1"})
	s.PutContainer(&Container{ID: "old", PodSandboxID: "p1", Resources: &hooks.Resources{CpusetCpus: "0-1"}})
	s.PutContainer(&Container{ID: "dead", PodSandboxID: "p1"})
	s.PutContainer(&Container{ID: "removed-during-list", PodSandboxID: "p1"})

	since := s.Generation()
	// While the runtime is being listed, kubelet creates one container and removes another.
	s.PutContainer(&Container{ID: "new", PodSandboxID: "p1"})
	s.RemoveContainer("removed-during-list")

	res := s.Reconcile(since, &Snapshot{
		Pods: []*Pod{{ID: "p1", State: "SANDBOX_READY"}},
		Containers: []*Container{
			{ID: "old", PodSandboxID: "p1", State: "CONTAINER_RUNNING"},
			{ID: "removed-during-list", PodSandboxID: "p1"},
			{ID: "adopted", PodSandboxID: "p1", Resources: &hooks.Resources{CPUShares: 2}},
		},
	})

	tests := []struct {
		id   string
		want bool
	}{
		{"old", true}, {"new", true}, {"adopted", true}, {"dead", false}, {"removed-during-list", false},
	}
	for _, tt := range tests {
		if _, ok := s.Container(tt.id); ok != tt.want {
			t.Errorf("container %q stored = %v, want %v", tt.id, ok, tt.want)
		}
	}
	if c, _ := s.Container("old"); c.State != "CONTAINER_RUNNING" || c.Resources.CpusetCpus != "0-1" {
		t.Errorf("old = %+v, want runtime state with the stored resources kept", c)
	}
	if len(res.ReleasedContainers) != 1 || res.ReleasedContainers[0].ID != "dead" || res.AdoptedContainers != 1 {
		t.Errorf("result = %+v, want dead released and one adopted", res)
	}
	// The next reconcile, listing after the removal, does not see the tombstone any more.
	res = s.Reconcile(s.Generation(), &Snapshot{Pods: []*Pod{{ID: "p1"}}})
	if len(res.ReleasedContainers) != 3 {
		t.Errorf("second reconcile released %d, want old, new and adopted", len(res.ReleasedContainers))
	}
}

func TestRemovePodRemovesItsContainers(t *testing.T) {
	t.Parallel()
	s := New()
	s.PutPod(&Pod{ID: "a"})
	s.PutPod(&Pod{ID: "b"})
	s.PutContainer(&Container{ID: "a1", PodSandboxID: "a"})
	s.PutContainer(&Container{ID: "a2", PodSandboxID: "a"})
	s.PutContainer(&Container{ID: "b1", PodSandboxID: "b"})
	p, removed := s.RemovePod("a")
	if p == nil || len(removed) != 2 {
		t.Fatalf("RemovePod = %v, %d containers; want pod a and 2", p, len(removed))
	}
	snap := s.Snapshot()
	if len(snap.Pods) != 1 || len(snap.Containers) != 1 || snap.Containers[0].ID != "b1" {
		t.Fatalf("left = %+v", snap)
	}
}

func TestStoreReturnsCopies(t *testing.T) {
	t.Parallel()
	s := New()
	s.PutContainer(&Container{ID: "c", Labels: map[string]string{"k": "v"}, Resources: &hooks.Resources{Unified: map[string]string{"cpu.idle": "1"}}})
	c, _ := s.Container("c")
	c.Labels["k"] = "changed"
	c.Resources.Unified["cpu.idle"] = "0"
	again, _ := s.Container("c")
	if again.Labels["k"] != "v" || again.Resources.Unified["cpu.idle"] != "1" {
		t.Fatalf("caller's change leaked into the store: %+v", again)
	}
}

func TestCheckpointRoundTripAndConcurrentSaves(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "state")
	cp, err := NewCheckpoint(dir)
	if err != nil {
		t.Fatal(err)
	}
	s := New()
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.PutContainer(&Container{ID: string(rune('a' + i)), Resources: &hooks.Resources{CPUShares: int64(i + 2)}})
			if err := cp.Save(s.Snapshot); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	got, err := cp.Load()
	if err != nil {
		t.Fatal(err)
	}
	// Every writer snapshots under the writer lock, so the last file holds all 20.
	if len(got.Containers) != 20 {
		t.Fatalf("checkpoint holds %d containers, want 20", len(got.Containers))
	}
	left, _ := filepath.Glob(filepath.Join(dir, "*.tmp-*"))
	if len(left) != 0 {
		t.Fatalf("temporary files left behind: %v", left)
	}
}

func TestCheckpointLoad(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		content     *string
		wantCorrupt bool
	}{
		{name: "missing file is an empty store"},
		{name: "empty file", content: ptr(""), wantCorrupt: true},
		{name: "garbage", content: ptr("\x00\x01"), wantCorrupt: true},
		{name: "checksum mismatch", content: ptr(`{"version":1,"checksum":"ab","data":{}}`), wantCorrupt: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			cp, _ := NewCheckpoint(dir)
			if tt.content != nil {
				if err := os.WriteFile(cp.Path(), []byte(*tt.content), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			snap, err := cp.Load()
			if tt.wantCorrupt {
				if err == nil || !isCorrupt(err) {
					t.Fatalf("Load = %v, want ErrCorrupt", err)
				}
				aside, err := cp.SetAside(time.Now())
				if err != nil {
					t.Fatal(err)
				}
				if _, err := os.Stat(aside); err != nil {
					t.Fatalf("set-aside file missing: %v", err)
				}
				return
			}
			if err != nil || len(snap.Pods)+len(snap.Containers) != 0 {
				t.Fatalf("Load = %+v, %v; want empty", snap, err)
			}
		})
	}
}

func ptr(s string) *string { return &s }

func FuzzCheckpointLoad(f *testing.F) {
	f.Add([]byte(`{"version":1,"checksum":"","data":{}}`))
	f.Add([]byte("{}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		cp, _ := NewCheckpoint(dir)
		if err := os.WriteFile(cp.Path(), data, 0o600); err != nil {
			t.Fatal(err)
		}
		// Any content either loads or is reported corrupt; it never panics.
		if _, err := cp.Load(); err != nil && !isCorrupt(err) {
			t.Fatalf("unexpected error class: %v", err)
		}
	})
}

func isCorrupt(err error) bool { return errors.Is(err, ErrCorrupt) }
