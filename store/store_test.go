package store

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
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
	// A checkpoint as earlier versions wrote it, every annotation kept, and one at the metadata bound.
	for _, blob := range []int{64, 64 << 10} {
		data, _ := json.Marshal(fatPods(1, blob))
		sum := sha256.Sum256(data)
		old, _ := json.Marshal(map[string]any{"version": 1, "checksum": hex.EncodeToString(sum[:]), "data": json.RawMessage(data)})
		f.Add(old)
	}
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

const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

func TestStoreNeverKeepsLastAppliedConfiguration(t *testing.T) {
	t.Parallel()
	// kubectl apply records the whole object, Secrets' data included when a pod carries them in env.
	ann := func() map[string]string {
		return map[string]string{lastApplied: `{"spec":{"containers":[{"env":[{"name":"PASSWORD","value":"hunter2"}]}]}}`, "tandem.io/qos-class": "LS"}
	}
	s := New()
	s.PutPod(&Pod{ID: "put", Annotations: ann()})
	s.PutContainer(&Container{ID: "put-c", PodSandboxID: "put", Annotations: ann()})
	s.Reconcile(s.Generation(), &Snapshot{
		Pods:       []*Pod{{ID: "put", Annotations: ann()}, {ID: "adopted", Annotations: ann()}},
		Containers: []*Container{{ID: "put-c", PodSandboxID: "put", Annotations: ann()}, {ID: "adopted-c", PodSandboxID: "adopted", Annotations: ann()}},
	})
	loaded := New()
	loaded.Load(&Snapshot{Pods: []*Pod{{ID: "loaded", Annotations: ann()}}, Containers: []*Container{{ID: "loaded-c", Annotations: ann()}}})
	for _, st := range []*Store{s, loaded} {
		snap := st.Snapshot()
		for _, p := range snap.Pods {
			if _, ok := p.Annotations[lastApplied]; ok || p.Annotations["tandem.io/qos-class"] != "LS" {
				t.Errorf("pod %s annotations = %v, want the QoS class and no last-applied-configuration", p.ID, p.Annotations)
			}
		}
		for _, c := range snap.Containers {
			if _, ok := c.Annotations[lastApplied]; ok || c.Annotations["tandem.io/qos-class"] != "LS" {
				t.Errorf("container %s annotations = %v, want the QoS class and no last-applied-configuration", c.ID, c.Annotations)
			}
		}
	}
}

// fatPods are n pods, each with a container, whose labels and annotations are at the proxy's bound, with
// the keys Tandem's policies read among them.
func fatPods(n int, blob int) *Snapshot {
	snap := &Snapshot{}
	for i := range n {
		id := fmt.Sprintf("pod-%03d", i)
		snap.Pods = append(snap.Pods, &Pod{
			ID: id, Name: "web", Namespace: "default", UID: id + "-uid", State: "SANDBOX_READY", CgroupParent: "/kubepods/pod" + id,
			Labels: map[string]string{"app": "web", "koordinator.sh/qosClass": "LSR", "io.kubernetes.pod.name": "web"},
			Annotations: map[string]string{
				"example.com/blob": strings.Repeat("x", blob),
				lastApplied:        `{"kind":"Pod"}`,
				"scheduling.koordinator.sh/resource-spec": `{"preferredCPUBindPolicy":"FullPCPUs"}`,
				"kubernetes.io/config.hash":               "abc",
				"openfuyao.com/QoS-level":                 "HLS",
			},
			Resources: &hooks.Resources{CPUShares: 1024},
		})
		snap.Containers = append(snap.Containers, &Container{
			ID: fmt.Sprintf("ctr-%03d", i), PodSandboxID: id, Name: "app", State: "CONTAINER_RUNNING",
			Annotations: map[string]string{"tandem.io/qos-class": "LSR", "example.com/blob": strings.Repeat("y", blob)},
			Resources:   &hooks.Resources{CpusetCpus: "2-3", CPUShares: 2048},
		})
	}
	return snap
}

func TestCheckpointSizeIndependentOfMetadata(t *testing.T) {
	t.Parallel()
	save := func(snap *Snapshot) (*Checkpoint, int64) {
		t.Helper()
		cp, err := NewCheckpoint(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		if err := cp.Save(func() *Snapshot { return snap }); err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(cp.Path())
		if err != nil {
			t.Fatal(err)
		}
		return cp, fi.Size()
	}
	// 110 pods: kubelet's default maxPods.
	_, typical := save(fatPods(110, 100))
	cp, atLimit := save(fatPods(110, hooks.DefaultMaxMetadataBytes-200))
	t.Logf("checkpoint of 110 pods: %d bytes with typical metadata, %d bytes with every pod at the metadata bound", typical, atLimit)
	if atLimit > typical+1<<10 {
		t.Fatalf("checkpoint grows from %d to %d bytes with the pods' metadata; want it independent of it", typical, atLimit)
	}
	got, err := cp.Load()
	if err != nil {
		t.Fatal(err)
	}
	p, c := got.Pods[0], got.Containers[0]
	for _, k := range []string{"scheduling.koordinator.sh/resource-spec", "kubernetes.io/config.hash", "openfuyao.com/QoS-level"} {
		if _, ok := p.Annotations[k]; !ok {
			t.Errorf("checkpointed pod lost %s, which Tandem reads: %v", k, p.Annotations)
		}
	}
	if p.Labels["koordinator.sh/qosClass"] != "LSR" || c.Annotations["tandem.io/qos-class"] != "LSR" {
		t.Errorf("checkpoint lost the QoS class: pod labels %v, container annotations %v", p.Labels, c.Annotations)
	}
	if _, ok := p.Annotations[lastApplied]; ok {
		t.Error("checkpoint holds last-applied-configuration")
	}
	if c.Resources.CpusetCpus != "2-3" || p.CgroupParent == "" {
		t.Errorf("checkpoint lost what the runtime cannot tell: %+v %+v", p, c.Resources)
	}
}

func TestCheckpointLoadsWhatEarlierVersionsWrote(t *testing.T) {
	t.Parallel()
	// A checkpoint as tandem-proxy wrote it before it kept only what Tandem reads: every label and
	// annotation, last-applied-configuration included.
	data, err := json.Marshal(fatPods(2, 1<<20))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	old, err := json.Marshal(map[string]any{"version": 1, "checksum": hex.EncodeToString(sum[:]), "data": json.RawMessage(data)})
	if err != nil {
		t.Fatal(err)
	}
	cp, _ := NewCheckpoint(t.TempDir())
	if err := os.WriteFile(cp.Path(), old, 0o600); err != nil {
		t.Fatal(err)
	}
	snap, err := cp.Load()
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Pods) != 2 || len(snap.Containers) != 2 || snap.Containers[1].Resources.CpusetCpus != "2-3" {
		t.Fatalf("loaded %+v", snap)
	}
	s := New()
	s.Load(snap)
	for _, p := range s.Snapshot().Pods {
		if _, ok := p.Annotations[lastApplied]; ok {
			t.Errorf("pod %s keeps last-applied-configuration from an old checkpoint", p.ID)
		}
		if p.Annotations["kubernetes.io/config.hash"] != "abc" {
			t.Errorf("pod %s lost kubernetes.io/config.hash from an old checkpoint", p.ID)
		}
	}
}

func TestNewCheckpointRemovesStaleTemporaryFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cp, _ := NewCheckpoint(dir)
	s := New()
	s.PutPod(&Pod{ID: "p1", Resources: &hooks.Resources{CpusetCpus: "4-5"}})
	if err := cp.Save(s.Snapshot); err != nil {
		t.Fatal(err)
	}
	// What a SIGKILL between CreateTemp and Rename leaves, and a file that is not the checkpoint's.
	stale := filepath.Join(dir, CheckpointFile+".tmp-1234567")
	other := filepath.Join(dir, "notes.txt")
	for _, f := range []string{stale, other} {
		if err := os.WriteFile(f, []byte("half a checkpoint"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cp, err := NewCheckpoint(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stale temporary file still there: %v", err)
	}
	if _, err := os.Stat(other); err != nil {
		t.Errorf("unrelated file removed: %v", err)
	}
	snap, err := cp.Load()
	if err != nil || len(snap.Pods) != 1 || snap.Pods[0].Resources.CpusetCpus != "4-5" {
		t.Fatalf("checkpoint after the clean-up = %+v, %v; want it intact", snap, err)
	}
}

// BenchmarkCheckpointSave is one save of 110 pods (kubelet's default maxPods) with one container each, in
// the test's temporary directory (a disk here, with its fsyncs).
func BenchmarkCheckpointSave(b *testing.B) {
	for _, bc := range []struct {
		name string
		blob int
	}{{"typical", 100}, {"at-limit", hooks.DefaultMaxMetadataBytes - 200}} {
		b.Run(bc.name, func(b *testing.B) {
			snap := fatPods(110, bc.blob)
			cp, err := NewCheckpoint(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if err := cp.Save(func() *Snapshot { return snap }); err != nil {
					b.Fatal(err)
				}
			}
			fi, err := os.Stat(cp.Path())
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(fi.Size()), "bytes")
		})
	}
}
