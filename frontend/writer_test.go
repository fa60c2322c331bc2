package frontend

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tandemkit/tandem/hooks"
	"github.com/tandemkit/tandem/resource/cgroup"
	"github.com/tandemkit/tandem/store"
)

// fakeCgroups records what is written, as "dir: file=value" lines, and fails the directories in fail.
type fakeCgroups struct {
	version int
	fail    map[string]bool
	writes  []string
}

func (f *fakeCgroups) Version() int         { return f.version }
func (f *fakeCgroups) Supports(string) bool { return true }
func (f *fakeCgroups) Write(dir string, s cgroup.Settings) error {
	if f.fail[dir] {
		return errors.New("write refused")
	}
	if s.CPUQuota != nil {
		f.writes = append(f.writes, fmt.Sprintf("%s: quota=%d", dir, *s.CPUQuota))
	}
	for _, k := range slices.Sorted(maps.Keys(s.Files)) {
		f.writes = append(f.writes, fmt.Sprintf("%s: %s=%s", dir, k, s.Files[k]))
	}
	return nil
}

// fakeRDT records the moves asked for, as "group: cgroup".
type fakeRDT struct{ moves []string }

func (f *fakeRDT) Assign(_ context.Context, group, ctrCgroup string) error {
	f.moves = append(f.moves, group+": "+ctrCgroup)
	return nil
}

func TestWriterContainerResources(t *testing.T) {
	const parent = "/kubepods/podu1"
	dir := ContainerCgroup(parent, "c1")
	burst := map[string]string{"cpu.cfs_burst_us": "50000"}
	tests := []struct {
		name       string
		version    int
		noRDT      bool
		parent     string
		fail       bool
		r          *hooks.Resources
		wantWrites []string
		wantMoves  []string
		wantErrors float64
	}{
		{name: "v1 files and class", version: 1, parent: parent, r: &hooks.Resources{Unified: burst, RDTClass: "BE"},
			wantWrites: []string{dir + ": cpu.cfs_burst_us=50000"}, wantMoves: []string{"BE: " + dir}},
		{name: "v2: the runtime took the files", version: 2, parent: parent, r: &hooks.Resources{Unified: burst, RDTClass: "BE"},
			wantMoves: []string{"BE: " + dir}},
		{name: "nil resources", version: 1, parent: parent},
		{name: "no cgroup parent", version: 1, r: &hooks.Resources{Unified: burst, RDTClass: "BE"}},
		{name: "no resctrl", version: 1, parent: parent, noRDT: true, r: &hooks.Resources{RDTClass: "BE"}},
		{name: "write fails", version: 1, parent: parent, fail: true, r: &hooks.Resources{Unified: burst}, wantErrors: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cg := &fakeCgroups{version: tt.version, fail: map[string]bool{dir: tt.fail}}
			rdt := &fakeRDT{}
			errs := prometheus.NewCounter(prometheus.CounterOpts{Name: "errors"})
			w := &Writer{Cgroups: cg, RDT: rdt, Store: store.New(), PodErrors: errs, ContainerErrors: errs}
			if tt.noRDT {
				w.RDT = nil
			}
			w.ContainerResources(context.Background(), &store.Pod{ID: "p1", CgroupParent: tt.parent}, "c1", tt.r)
			if !slices.Equal(cg.writes, tt.wantWrites) {
				t.Errorf("writes = %q, want %q", cg.writes, tt.wantWrites)
			}
			if !slices.Equal(rdt.moves, tt.wantMoves) {
				t.Errorf("RDT moves = %q, want %q", rdt.moves, tt.wantMoves)
			}
			if got := testutil.ToFloat64(errs); got != tt.wantErrors {
				t.Errorf("errors counted = %v, want %v", got, tt.wantErrors)
			}
		})
	}
}

func TestWriterPodResources(t *testing.T) {
	quota := int64(200000)
	adj := &hooks.Adjustment{PodResources: &hooks.ResourceAdjustment{CPUQuota: &quota}}
	tests := []struct {
		name       string
		cgroups    bool
		parent     string
		fail       bool
		adj        *hooks.Adjustment
		wantWrites []string
		wantQuota  int64
		wantErrors float64
	}{
		{name: "written and recorded", cgroups: true, parent: "/kubepods/podu1", adj: adj,
			wantWrites: []string{"/kubepods/podu1: quota=200000"}, wantQuota: quota},
		{name: "no pod-level settings", cgroups: true, parent: "/kubepods/podu1", adj: &hooks.Adjustment{}},
		{name: "no cgroup hierarchy", parent: "/kubepods/podu1", adj: adj},
		{name: "no cgroup parent", cgroups: true, adj: adj},
		{name: "write fails, nothing recorded", cgroups: true, parent: "/kubepods/podu1", fail: true, adj: adj, wantErrors: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cg := &fakeCgroups{version: 2, fail: map[string]bool{tt.parent: tt.fail}}
			errs := prometheus.NewCounter(prometheus.CounterOpts{Name: "errors"})
			st := store.New()
			pod := &store.Pod{ID: "p1", CgroupParent: tt.parent}
			st.PutPod(pod)
			w := &Writer{Store: st, PodErrors: errs, ContainerErrors: errs}
			if tt.cgroups {
				w.Cgroups = cg
			}
			w.PodResources(context.Background(), pod, tt.adj)
			if !slices.Equal(cg.writes, tt.wantWrites) {
				t.Errorf("writes = %q, want %q", cg.writes, tt.wantWrites)
			}
			stored, _ := st.Pod("p1")
			var got int64
			if stored.Resources != nil {
				got = stored.Resources.CPUQuota
			}
			if got != tt.wantQuota {
				t.Errorf("stored pod quota = %d, want %d", got, tt.wantQuota)
			}
			if n := testutil.ToFloat64(errs); n != tt.wantErrors {
				t.Errorf("errors counted = %v, want %v", n, tt.wantErrors)
			}
		})
	}
}
