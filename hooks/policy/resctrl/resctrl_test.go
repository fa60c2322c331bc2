package resctrl

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"k8s.io/klog/v2/ktesting"

	"github.com/tandemkit/tandem/hooks"
	"github.com/tandemkit/tandem/hooks/policy/cpuburst"
	"github.com/tandemkit/tandem/hooks/policy/qos"
	rdt "github.com/tandemkit/tandem/resource/resctrl"
	"github.com/tandemkit/tandem/resource/resctrl/resctrltest"
)

// The resctrl trees here are fake (resctrltest): this host has no RDT and no /sys/fs/resctrl. The task
// lister is a map standing in for the runtime; CgroupTasks, the real one, runs against this host's
// cgroups in TestCgroupTasks.

// runtimeTasks maps container IDs to their tasks.
type runtimeTasks map[string][]int

func (r runtimeTasks) PIDs(_ context.Context, _ *hooks.PodInfo, ctr *hooks.ContainerInfo) ([]int, error) {
	t, ok := r[ctr.ID]
	if !ok {
		return nil, errors.New("no such container")
	}
	return t, nil
}

func enabled() Config {
	c := DefaultConfig()
	c.LSRClass.Enable, c.LSClass.Enable, c.BEClass.Enable = true, true, true
	return c
}

func TestNew(t *testing.T) {
	t.Parallel()
	fewClosids := resctrltest.XeonTwoSocket
	fewClosids.L3Closids, fewClosids.MBClosids = 3, 0
	bad := enabled()
	bad.BEClass.CatRangeEndPercent = 0
	tests := []struct {
		name     string
		cfg      Config
		root     func(t *testing.T) string
		pids     PIDLister
		wantSkip bool
		wantErr  string
		// want maps each group to its schemata.
		want map[string]string
	}{
		{name: "seed 004: disabled", cfg: DefaultConfig(), root: xeon, pids: runtimeTasks{}, wantSkip: true},
		{name: "no resctrl on this kernel", cfg: enabled(), root: func(t *testing.T) string { return filepath.Join(t.TempDir(), "none") }, pids: runtimeTasks{}, wantSkip: true},
		{name: "resctrl not mounted", cfg: enabled(), root: func(t *testing.T) string { return t.TempDir() }, pids: runtimeTasks{}, wantSkip: true},
		{name: "no task lister", cfg: enabled(), root: xeon, wantSkip: true},
		{name: "too few CLOSIDs", cfg: enabled(), root: func(t *testing.T) string { return resctrltest.Write(t, fewClosids) }, pids: runtimeTasks{}, wantSkip: true},
		{name: "bad range names the class", cfg: bad, root: xeon, pids: runtimeTasks{}, wantErr: "beClass.resctrlQOS"},
		{name: "seed 004 values enabled", cfg: enabled(), root: xeon, pids: runtimeTasks{}, want: map[string]string{
			GroupLSR: "L3:0=7ff;1=7ff\nMB:0=100;1=100",
			GroupLS:  "L3:0=7ff;1=7ff\nMB:0=100;1=100",
			GroupBE:  "L3:0=f;1=f\nMB:0=100;1=100",
		}},
		{name: "BE only, throttled bandwidth", cfg: Config{BEClass: ClassConfig{Enable: true, CatRangeStartPercent: 70, CatRangeEndPercent: 100, MBAPercent: 35}},
			root: xeon, pids: runtimeTasks{}, want: map[string]string{GroupBE: "L3:0=700;1=700\nMB:0=40;1=40"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			root := tt.root(t)
			_, err := New(tt.cfg, Deps{Root: root, PIDs: tt.pids})
			switch {
			case tt.wantSkip:
				if !errors.Is(err, hooks.ErrSkip) {
					t.Fatalf("New = %v, want ErrSkip", err)
				}
				return
			case tt.wantErr != "":
				if err == nil || errors.Is(err, hooks.ErrSkip) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("New = %v, want an error naming %s", err, tt.wantErr)
				}
				return
			case err != nil:
				t.Fatal(err)
			}
			for _, g := range []string{GroupLSR, GroupLS, GroupBE} {
				want, ok := tt.want[g]
				if !ok {
					if _, err := os.Stat(filepath.Join(root, g)); err == nil {
						t.Errorf("group %s created for a disabled class", g)
					}
					continue
				}
				if got := resctrltest.Read(t, root, g+"/schemata"); got != want {
					t.Errorf("%s/schemata = %q, want %q", g, got, want)
				}
			}
		})
	}
}

func xeon(t *testing.T) string { return resctrltest.Write(t, resctrltest.XeonTwoSocket) }

func TestAssign(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		cfg   Config
		class string
		// want maps groups to their tasks after the start; groups absent must be empty.
		want map[string][]int
	}{
		{name: "LSE goes to LSR", cfg: enabled(), class: "LSE", want: map[string][]int{GroupLSR: {100, 101}}},
		{name: "LSR", cfg: enabled(), class: "LSR", want: map[string][]int{GroupLSR: {100, 101}}},
		{name: "LS", cfg: enabled(), class: "LS", want: map[string][]int{GroupLS: {100, 101}}},
		{name: "BE", cfg: enabled(), class: "BE", want: map[string][]int{GroupBE: {100, 101}}},
		{name: "SYSTEM stays in the root group", cfg: enabled(), class: "SYSTEM"},
		{name: "disabled class stays in the root group", cfg: Config{BEClass: enabled().BEClass}, class: "LS"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, ctx := ktesting.NewTestContext(t)
			root := xeon(t)
			r, err := New(tt.cfg, Deps{Root: root, PIDs: runtimeTasks{"c1": {100, 101}}})
			if err != nil {
				t.Fatal(err)
			}
			pod := &hooks.PodInfo{Name: "p", Namespace: "ns", Annotations: map[string]string{qos.AnnotationClass: tt.class}}
			if err := r.PostStartContainer(ctx, pod, &hooks.ContainerInfo{ID: "c1", Name: "app"}); err != nil {
				t.Fatal(err)
			}
			fs, err := rdt.Open(root)
			if err != nil {
				t.Fatal(err)
			}
			for _, g := range []string{GroupLSR, GroupLS, GroupBE} {
				got, _ := fs.Tasks(g) // a group of a disabled class does not exist: no tasks
				if !slices.Equal(got, tt.want[g]) {
					t.Errorf("%s tasks = %v, want %v", g, got, tt.want[g])
				}
			}
		})
	}
}

func TestAssignErrors(t *testing.T) {
	t.Parallel()
	_, ctx := ktesting.NewTestContext(t)
	r, err := New(enabled(), Deps{Root: xeon(t), PIDs: runtimeTasks{}})
	if err != nil {
		t.Fatal(err)
	}
	pod := &hooks.PodInfo{Annotations: map[string]string{qos.AnnotationClass: "BE"}}
	ctr := &hooks.ContainerInfo{ID: "gone"}
	if err := r.PostStartContainer(ctx, pod, ctr); err == nil || !strings.Contains(err.Error(), "gone") {
		t.Fatalf("PostStartContainer = %v, want an error naming the container", err)
	}
	adj, err := r.PreUpdateContainerResources(ctx, pod, ctr)
	if err != nil || adj != nil {
		t.Fatalf("PreUpdateContainerResources = %v, %v; a failed move must not fail an update", adj, err)
	}
}

// TestCgroupTasks lists the tasks of a real cgroup on this host: a process is started in a cgroup
// named as containerd names a container's, and CgroupTasks must find it.
func TestCgroupTasks(t *testing.T) {
	const root = "/sys/fs/cgroup"
	if os.Geteuid() != 0 {
		t.Skip("needs root to create a cgroup")
	}
	version := 1
	if _, err := os.Stat(filepath.Join(root, "cgroup.controllers")); err == nil {
		version = 2
	}
	pod := &hooks.PodInfo{CgroupParent: "/tandem-resctrl-test-" + strconv.Itoa(os.Getpid())}
	ctr := &hooks.ContainerInfo{ID: "c1"}
	dir := filepath.Join(root, cpuburst.ContainerdCgroup(pod, ctr))
	procs := filepath.Join(dir, "cgroup.procs")
	if version == 1 {
		dir = filepath.Join(root, "cpu", cpuburst.ContainerdCgroup(pod, ctr))
		procs = filepath.Join(dir, "cgroup.procs")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Skipf("cannot create a cgroup here: %v", err)
	}
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		_ = os.Remove(dir)
		_ = os.Remove(filepath.Dir(dir))
	})
	if err := os.WriteFile(procs, []byte(strconv.Itoa(cmd.Process.Pid)), 0); err != nil {
		t.Fatal(err)
	}
	_, ctx := ktesting.NewTestContext(t)
	got, err := CgroupTasks{Root: root, Version: version, ContainerCgroup: cpuburst.ContainerdCgroup}.PIDs(ctx, pod, ctr)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, []int{cmd.Process.Pid}) {
		t.Fatalf("PIDs = %v, want [%d]", got, cmd.Process.Pid)
	}
}
