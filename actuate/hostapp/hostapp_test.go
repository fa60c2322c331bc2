package hostapp

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"
	kcpuset "k8s.io/utils/cpuset"

	"github.com/tandemkit/tandem/config/knob"
	"github.com/tandemkit/tandem/config/slo"
	"github.com/tandemkit/tandem/resource/cgroup"
	alloc "github.com/tandemkit/tandem/resource/cpuset"
	"github.com/tandemkit/tandem/resource/qos"
)

func TestCgroupPath(t *testing.T) {
	t.Parallel()
	app := func(base slo.CgroupBase, parent, rel string) slo.HostApplication {
		return slo.HostApplication{Name: "a", QoS: qos.LS, CgroupPath: &slo.HostCgroupPath{Base: base, ParentDir: parent, RelativePath: rel}}
	}
	tests := []struct {
		name, driver, kubeletRoot string
		app                       slo.HostApplication
		want                      string
		wantErr                   string
	}{
		{name: "the operator's nginx", driver: DriverCgroupfs, kubeletRoot: "/", app: app(slo.CgroupBaseRoot, "host-latency-sensitive/", "nginx/"),
			want: "/host-latency-sensitive/nginx"},
		{name: "no cgroupPath, BE", driver: DriverCgroupfs, kubeletRoot: "/", app: slo.HostApplication{Name: "log", QoS: qos.BE},
			want: "/host-best-effort/log"},
		{name: "CgroupRoot ignores kubelet's root", driver: DriverCgroupfs, kubeletRoot: "/node-a", app: app("", "p", "x"), want: "/p/x"},
		{name: "cgroupfs Kubepods", driver: DriverCgroupfs, kubeletRoot: "/", app: app(slo.CgroupBaseKubepods, "", "x"), want: "/kubepods/x"},
		{name: "cgroupfs burstable under kubelet's root", driver: DriverCgroupfs, kubeletRoot: "/node-a",
			app: app(slo.CgroupBaseKubepodsBurstable, "p", "x"), want: "/node-a/kubepods/burstable/p/x"},
		{name: "cgroupfs besteffort", driver: DriverCgroupfs, kubeletRoot: "/", app: app(slo.CgroupBaseKubepodsBesteffort, "", "x"),
			want: "/kubepods/besteffort/x"},
		{name: "systemd root", driver: DriverSystemd, kubeletRoot: "/", app: app(slo.CgroupBaseRoot, "host-latency-sensitive", "x"),
			want: "/host-latency-sensitive/x"},
		{name: "systemd Kubepods", driver: DriverSystemd, kubeletRoot: "/", app: app(slo.CgroupBaseKubepods, "", "x"), want: "/kubepods.slice/x"},
		{name: "systemd burstable", driver: DriverSystemd, kubeletRoot: "/", app: app(slo.CgroupBaseKubepodsBurstable, "", "x"),
			want: "/kubepods.slice/kubepods-burstable.slice/x"},
		{name: "systemd besteffort", driver: DriverSystemd, kubeletRoot: "", app: app(slo.CgroupBaseKubepodsBesteffort, "p", "x"),
			want: "/kubepods.slice/kubepods-besteffort.slice/p/x"},
		{name: "systemd with another kubelet root", driver: DriverSystemd, kubeletRoot: "/custom.slice",
			app: app(slo.CgroupBaseKubepods, "", "x"), wantErr: "not supported"},
		{name: "escape", driver: DriverCgroupfs, kubeletRoot: "/", app: app(slo.CgroupBaseKubepods, "", "../../x"), wantErr: "climbs out"},
		{name: "the base itself", driver: DriverCgroupfs, kubeletRoot: "/", app: app(slo.CgroupBaseKubepods, "", "/"), wantErr: "relativePath"},
		{name: "unknown base", driver: DriverCgroupfs, kubeletRoot: "/", app: app("Elsewhere", "", "x"), wantErr: "unknown cgroup base"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := DefaultConfig()
			cfg.CgroupDriver, cfg.KubeletCgroupRoot = tt.driver, tt.kubeletRoot
			got, err := CgroupPath(cfg, tt.app)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("CgroupPath = %q, %v; want an error with %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("CgroupPath = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

// fakePools is the allocator's Pools, set by the test.
type fakePools struct {
	mu sync.Mutex
	p  alloc.Pools
}

func (f *fakePools) Pools() alloc.Pools { f.mu.Lock(); defer f.mu.Unlock(); return f.p }

func (f *fakePools) set(ls, be string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	l, err1 := kcpuset.Parse(ls)
	b, err2 := kcpuset.Parse(be)
	if err1 != nil || err2 != nil {
		panic("bad cpu list in a test")
	}
	f.p = alloc.Pools{LS: l, BE: b}
}

// The fake trees stand for what the kernel offers: this machine's real v1 hierarchy is exercised by
// e2e/hostapp_test.go; cgroup v2 (not on the project's machines) only here.
type tree struct {
	t    *testing.T
	root string
	v2   bool
}

func (tr tree) dir(ctrl, rel string) string {
	if tr.v2 {
		return filepath.Join(tr.root, rel)
	}
	return filepath.Join(tr.root, ctrl, rel)
}

// cgroup makes a cgroup with the given files (name → value); the controller is the name's prefix.
func (tr tree) cgroup(rel string, files map[string]string) {
	tr.t.Helper()
	for name, v := range files {
		ctrl, _, _ := strings.Cut(name, ".")
		d := tr.dir(ctrl, rel)
		if err := os.MkdirAll(d, 0o755); err != nil {
			tr.t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, name), []byte(v+"\n"), 0o644); err != nil {
			tr.t.Fatal(err)
		}
	}
}

func (tr tree) read(ctrl, rel, file string) string {
	tr.t.Helper()
	b, err := os.ReadFile(filepath.Join(tr.dir(ctrl, rel), file))
	if err != nil {
		tr.t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func newTree(t *testing.T, v2 bool) tree {
	tr := tree{t: t, root: t.TempDir(), v2: v2}
	if v2 {
		tr.cgroup("/", map[string]string{"cgroup.controllers": "cpuset cpu memory", "cpuset.cpus.effective": "0-7", "cpuset.mems.effective": "0"})
	} else {
		tr.cgroup("/", map[string]string{"cpu.shares": "1024", "cpuset.effective_cpus": "0-7", "cpuset.effective_mems": "0"})
	}
	return tr
}

// appFiles are what a host application's cgroup holds before the loop sees it.
func appFiles(v2 bool, cpus, mems string) map[string]string {
	if v2 {
		return map[string]string{"cpuset.cpus": cpus, "cpuset.mems": mems, "cpuset.cpus.effective": cpus, "cpu.idle": "0", "cpu.max": "max 100000"}
	}
	return map[string]string{"cpuset.cpus": cpus, "cpuset.mems": mems, "cpuset.effective_cpus": cpus,
		"cpu.idle": "0", "cpu.cfs_quota_us": "-1", "cpu.cfs_period_us": "100000"}
}

func quota(tr tree, rel string) string {
	if tr.v2 {
		return tr.read("cpu", rel, "cpu.max")
	}
	return tr.read("cpu", rel, "cpu.cfs_quota_us") + " " + tr.read("cpu", rel, "cpu.cfs_period_us")
}

func knobOf(t *testing.T, l *Loop, name string) knob.Status {
	t.Helper()
	for _, s := range l.Knobs() {
		if s.Key == "applications["+name+"]" {
			return s
		}
	}
	t.Fatalf("no knob for %s in %+v", name, l.Knobs())
	return knob.Status{}
}

func TestLoopTreatsAndRestores(t *testing.T) {
	t.Parallel()
	for _, v2 := range []bool{false, true} {
		name := "v1"
		if v2 {
			name = "v2"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, ctx := ktesting.NewTestContext(t)
			tr := newTree(t, v2)
			unlimited := "-1 100000"
			if v2 {
				unlimited = "max 100000"
			}
			// The operator's parents, copied from the root as Koordinator's manual says; mems left
			// empty in the LS application, as a forgetful operator would.
			tr.cgroup("/host-latency-sensitive", map[string]string{"cpuset.cpus": "0-7", "cpuset.effective_cpus": "0-7", "cpuset.cpus.effective": "0-7",
				"cpuset.effective_mems": "0", "cpuset.mems.effective": "0"})
			tr.cgroup("/host-best-effort", map[string]string{"cpuset.cpus": "0-7", "cpuset.effective_cpus": "0-7", "cpuset.cpus.effective": "0-7"})
			tr.cgroup("/host-latency-sensitive/nginx", appFiles(v2, "0-7", ""))
			tr.cgroup("/host-best-effort/logtail", appFiles(v2, "0-7", "0"))
			w, err := cgroup.New(tr.root)
			if err != nil {
				t.Fatal(err)
			}
			pools := &fakePools{}
			pools.set("2-7", "0-1,4-7") // an LSE pod holds 0-1... and an LSR one 2-3
			var mu sync.Mutex
			var ceiling *cgroup.CPUMax
			l, err := New(DefaultConfig(), Deps{Cgroups: w, CPUs: pools, BEQuotaCeiling: func() (cgroup.CPUMax, bool) {
				mu.Lock()
				defer mu.Unlock()
				if ceiling == nil {
					return cgroup.CPUMax{}, false
				}
				return *ceiling, true
			}})
			if err != nil {
				t.Fatal(err)
			}
			l.Set([]slo.HostApplication{
				{Name: "nginx", QoS: qos.LS, CgroupPath: &slo.HostCgroupPath{Base: slo.CgroupBaseRoot, ParentDir: "host-latency-sensitive/", RelativePath: "nginx/"}},
				{Name: "logtail", QoS: qos.BE},
				{Name: "late", QoS: qos.LS},
			})
			l.pass(ctx)

			steps := []struct {
				name  string
				check func()
			}{
				{"LS gets the LS pool and the parent's mems", func() {
					if got := tr.read("cpuset", "/host-latency-sensitive/nginx", "cpuset.cpus"); got != "2-7" {
						t.Errorf("nginx cpuset.cpus = %q, want the LS pool 2-7", got)
					}
					if got := tr.read("cpuset", "/host-latency-sensitive/nginx", "cpuset.mems"); got != "0" {
						t.Errorf("nginx cpuset.mems = %q, want the parent's 0", got)
					}
					if got := tr.read("cpu", "/host-latency-sensitive/nginx", "cpu.idle"); got != "0" {
						t.Errorf("nginx cpu.idle = %q; LS must be left alone", got)
					}
					if s := knobOf(t, l, "nginx"); s.State != knob.Applied || !strings.Contains(s.Detail, "cpuset.cpus 2-7 (the LS pool)") {
						t.Errorf("nginx knob = %+v", s)
					}
				}},
				{"BE gets the BE pool and cpu.idle", func() {
					if got := tr.read("cpuset", "/host-best-effort/logtail", "cpuset.cpus"); got != "0-1,4-7" {
						t.Errorf("logtail cpuset.cpus = %q, want the BE pool", got)
					}
					if got := tr.read("cpu", "/host-best-effort/logtail", "cpu.idle"); got != "1" {
						t.Errorf("logtail cpu.idle = %q, want 1", got)
					}
					if got := quota(tr, "/host-best-effort/logtail"); got != unlimited {
						t.Errorf("logtail quota = %q, want untouched while BE is not suppressed", got)
					}
				}},
				{"a missing cgroup is ignored and retried", func() {
					if s := knobOf(t, l, "late"); s.State != knob.Ignored || !strings.Contains(s.Detail, "does not exist") {
						t.Errorf("late knob = %+v, want ignored", s)
					}
				}},
				{"pools change and suppression clamps BE", func() {
					pools.set("4-7", "6-7")
					mu.Lock()
					ceiling = &cgroup.CPUMax{Quota: 150000, Period: 100000}
					mu.Unlock()
					tr.cgroup("/host-latency-sensitive/late", appFiles(v2, "0-7", "0"))
					l.pass(ctx)
					if got := tr.read("cpuset", "/host-latency-sensitive/nginx", "cpuset.cpus"); got != "4-7" {
						t.Errorf("nginx cpuset.cpus = %q, want the new LS pool", got)
					}
					if got := tr.read("cpuset", "/host-best-effort/logtail", "cpuset.cpus"); got != "6-7" {
						t.Errorf("logtail cpuset.cpus = %q, want the shrunk BE pool", got)
					}
					want := "150000 100000"
					if v2 {
						want = "150000 100000"
					}
					if got := quota(tr, "/host-best-effort/logtail"); got != want {
						t.Errorf("logtail quota = %q, want the BE ceiling %q", got, want)
					}
					if got := tr.read("cpuset", "/host-latency-sensitive/late", "cpuset.cpus"); got != "4-7" {
						t.Errorf("late cpuset.cpus = %q: a cgroup that appears must be treated", got)
					}
					if s := knobOf(t, l, "late"); s.State != knob.Applied {
						t.Errorf("late knob = %+v, want applied", s)
					}
				}},
				{"suppression lifted gives the quota found back", func() {
					mu.Lock()
					ceiling = nil
					mu.Unlock()
					l.pass(ctx)
					if got := quota(tr, "/host-best-effort/logtail"); got != unlimited {
						t.Errorf("logtail quota = %q, want %q again", got, unlimited)
					}
				}},
				{"leaving the list restores", func() {
					l.Set([]slo.HostApplication{{Name: "late", QoS: qos.LS}})
					l.pass(ctx)
					if got := tr.read("cpuset", "/host-latency-sensitive/nginx", "cpuset.cpus"); got != "0-7" {
						t.Errorf("nginx cpuset.cpus = %q, want 0-7 back", got)
					}
					if got := tr.read("cpuset", "/host-best-effort/logtail", "cpuset.cpus"); got != "0-7" {
						t.Errorf("logtail cpuset.cpus = %q, want 0-7 back", got)
					}
					if got := tr.read("cpu", "/host-best-effort/logtail", "cpu.idle"); got != "0" {
						t.Errorf("logtail cpu.idle = %q, want 0 back", got)
					}
					if got := len(l.Targets()); got != 1 {
						t.Errorf("collector targets = %d, want 1", got)
					}
				}},
				{"stopping restores", func() {
					ctx, cancel := context.WithCancel(ctx)
					done := make(chan error)
					go func() { done <- l.Run(ctx) }()
					cancel()
					select {
					case err := <-done:
						if err != nil {
							t.Fatal(err)
						}
					case <-time.After(30 * time.Second):
						t.Fatal("Run did not return")
					}
					if got := tr.read("cpuset", "/host-latency-sensitive/late", "cpuset.cpus"); got == "0-7" {
						t.Errorf("late cpuset.cpus = %q once Run returned: the loop restores only on Restore", got)
					}
					if err := l.Restore(context.Background()); err != nil {
						t.Fatal(err)
					}
					if got := tr.read("cpuset", "/host-latency-sensitive/late", "cpuset.cpus"); got != "0-7" {
						t.Errorf("late cpuset.cpus = %q, want 0-7 back", got)
					}
				}},
			}
			for _, s := range steps {
				s.check()
				if t.Failed() {
					t.Fatalf("step %q failed", s.name)
				}
			}
		})
	}
}

func TestLoopRefuses(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		parentCPUs string
		apps       []slo.HostApplication
		key        string
		wantState  knob.State
		wantDetail string
		wantCPUs   string
	}{
		{name: "parent narrower: the pool's CPUs the parent has", parentCPUs: "0-3", apps: []slo.HostApplication{{Name: "a", QoS: qos.LS}},
			key: "a", wantState: knob.Applied, wantDetail: "within the parent's CPUs", wantCPUs: "2-3"},
		{name: "parent disjoint from the pool", parentCPUs: "0-1", apps: []slo.HostApplication{{Name: "a", QoS: qos.LS}},
			key: "a", wantState: knob.Refused, wantDetail: "share none", wantCPUs: "0-1"},
		{name: "two applications, one cgroup", parentCPUs: "0-7", apps: []slo.HostApplication{{Name: "a", QoS: qos.LS},
			{Name: "b", QoS: qos.LS, CgroupPath: &slo.HostCgroupPath{ParentDir: "host-latency-sensitive", RelativePath: "a"}}},
			key: "b", wantState: knob.Refused, wantDetail: `is also application "a"'s`, wantCPUs: "2-7"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, ctx := ktesting.NewTestContext(t)
			tr := newTree(t, false)
			tr.cgroup("/host-latency-sensitive", map[string]string{"cpuset.cpus": tt.parentCPUs, "cpuset.effective_cpus": tt.parentCPUs, "cpuset.effective_mems": "0"})
			tr.cgroup("/host-latency-sensitive/a", appFiles(false, tt.parentCPUs, "0"))
			w, err := cgroup.New(tr.root)
			if err != nil {
				t.Fatal(err)
			}
			pools := &fakePools{}
			pools.set("2-7", "0-7")
			l, err := New(DefaultConfig(), Deps{Cgroups: w, CPUs: pools})
			if err != nil {
				t.Fatal(err)
			}
			l.Set(tt.apps)
			l.pass(ctx)
			if s := knobOf(t, l, tt.key); s.State != tt.wantState || !strings.Contains(s.Detail, tt.wantDetail) {
				t.Errorf("knob = %+v, want %s with %q", s, tt.wantState, tt.wantDetail)
			}
			if got := tr.read("cpuset", "/host-latency-sensitive/a", "cpuset.cpus"); got != tt.wantCPUs {
				t.Errorf("cpuset.cpus = %q, want %q", got, tt.wantCPUs)
			}
		})
	}
}

func TestLoopNoApplications(t *testing.T) {
	t.Parallel()
	_, ctx := ktesting.NewTestContext(t)
	w, err := cgroup.New(newTree(t, false).root)
	if err != nil {
		t.Fatal(err)
	}
	l, err := New(DefaultConfig(), Deps{Cgroups: w})
	if err != nil {
		t.Fatal(err)
	}
	l.Set(nil)
	l.pass(ctx)
	if k := l.Knobs(); len(k) != 1 || k[0].State != knob.Off || k[0].Key != "applications" {
		t.Errorf("knobs = %+v, want applications off", k)
	}
}

// Without CPU topology there are no pools: an LS application has nothing to get and says so, while a BE
// one still gets cpu.idle.
func TestLoopWithoutTopology(t *testing.T) {
	t.Parallel()
	_, ctx := ktesting.NewTestContext(t)
	tr := newTree(t, false)
	tr.cgroup("/host-latency-sensitive/a", appFiles(false, "0-7", "0"))
	tr.cgroup("/host-best-effort/b", appFiles(false, "0-7", "0"))
	w, err := cgroup.New(tr.root)
	if err != nil {
		t.Fatal(err)
	}
	l, err := New(DefaultConfig(), Deps{Cgroups: w})
	if err != nil {
		t.Fatal(err)
	}
	l.Set([]slo.HostApplication{{Name: "a", QoS: qos.LS}, {Name: "b", QoS: qos.BE}})
	l.pass(ctx)
	if s := knobOf(t, l, "a"); s.State != knob.Ignored || !strings.Contains(s.Detail, "no CPU topology") {
		t.Errorf("LS knob = %+v, want ignored for lack of topology", s)
	}
	if s := knobOf(t, l, "b"); s.State != knob.Applied || !strings.Contains(s.Detail, "cpu.idle 1") {
		t.Errorf("BE knob = %+v, want applied with cpu.idle", s)
	}
	if got := tr.read("cpuset", "/host-best-effort/b", "cpuset.cpus"); got != "0-7" {
		t.Errorf("BE cpuset.cpus = %q, want untouched without pools", got)
	}
}
