package memoryqos

import (
	"errors"
	"strings"
	"testing"

	"k8s.io/klog/v2/ktesting"

	"github.com/tandemkit/tandem/config/knob"
	"github.com/tandemkit/tandem/hooks"
	"github.com/tandemkit/tandem/resource/cgroup"
)

// Kernel shapes with the files beyond min/low/high, as fake trees: this host's kernel (mainline, cgroup v1)
// has none of them, and cgroup files cannot be created outside /sys/fs/cgroup. TestThisHostKnobs runs on
// the real hierarchy.
var (
	// anolisV1Full is Anolis OS on cgroup v1: min/low/high, the watermarks, OOM priority and oom.group.
	anolisV1Full = kernel{1, []string{FileMin, FileLow, FileHigh, FileWmarkRatio, FileWmarkScaleFactor, FileWmarkMinAdj,
		FilePriority, FileUsePriorityOOM, FileOOMGroup}}
	// v2Mainline is a mainline cgroup v2 kernel: min/low/high and oom.group, none of Anolis' files.
	v2Mainline = kernel{2, []string{FileMin, FileLow, FileHigh, FileOOMGroup}}
)

// anolisLS is lsClass with every key an operator's Anolis configuration writes, switched on.
var anolisLS = ClassConfig{Enable: true, MinLimitPercent: 100, ThrottlingPercent: 80, WmarkRatio: 95, WmarkScalePermill: 20,
	WmarkMinAdj: -25, PriorityEnable: 1, Priority: 12, OomKillGroup: 1}

// anolisOnlyFiles are the files anolisLS sets that only Anolis OS has.
var anolisOnlyFiles = []string{FileWmarkRatio, FileWmarkScaleFactor, FileWmarkMinAdj, FilePriority, FileUsePriorityOOM}

func TestFilesBeyondMinLowHigh(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		kernel    kernel
		wantPod   map[string]string
		wantCtr   map[string]string
		wantSkip  bool
		wantInErr []string // files the ErrSkip names
	}{
		{name: "Anolis v1: every file, on pod and container", kernel: anolisV1Full,
			wantPod: map[string]string{FileMin: "3221225472", FileHigh: "3435973836", FileWmarkRatio: "95", FileWmarkScaleFactor: "20",
				FileWmarkMinAdj: "-25", FileUsePriorityOOM: "1", FilePriority: "12", FileOOMGroup: "1"},
			wantCtr: map[string]string{FileMin: "1073741824", FileHigh: "1717986918", FileWmarkRatio: "95", FileWmarkScaleFactor: "20",
				FileWmarkMinAdj: "-25", FileUsePriorityOOM: "1", FilePriority: "12", FileOOMGroup: "1"}},
		{name: "mainline v2: min, high and oom.group only", kernel: v2Mainline,
			wantPod: map[string]string{FileMin: "3221225472", FileHigh: "3435973836", FileOOMGroup: "1"},
			wantCtr: map[string]string{FileMin: "1073741824", FileHigh: "1717986918", FileOOMGroup: "1"}},
		{name: "Anolis v1 without min/low/high: the others still apply", kernel: kernel{1, anolisOnlyFiles},
			wantPod: map[string]string{FileWmarkRatio: "95", FileWmarkScaleFactor: "20", FileWmarkMinAdj: "-25", FileUsePriorityOOM: "1", FilePriority: "12"},
			wantCtr: map[string]string{FileWmarkRatio: "95", FileWmarkScaleFactor: "20", FileWmarkMinAdj: "-25", FileUsePriorityOOM: "1", FilePriority: "12"}},
		{name: "mainline v1: the hook is off and says which files are missing", kernel: mainlineV1, wantSkip: true,
			wantInErr: append([]string{FileMin, FileHigh, FileOOMGroup}, anolisOnlyFiles...)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, ctx := ktesting.NewTestContext(t)
			_, w := tree(t, tt.kernel, "ctr")
			m, err := New(lsOnly(anolisLS), Deps{Cgroups: w, Requests: specRequests{"": 3 * gi, "app": gi}})
			if tt.wantSkip {
				if !errors.Is(err, hooks.ErrSkip) {
					t.Fatalf("New = %v, want ErrSkip", err)
				}
				for _, f := range tt.wantInErr {
					if !strings.Contains(err.Error(), f) {
						t.Errorf("New's error %q does not name the missing %s", err, f)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			p := pod("LS")
			adj, err := m.PreRunPodSandbox(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			if got := adj.PodResources.Unified; !equal(got, tt.wantPod) {
				t.Errorf("pod files = %v, want %v", got, tt.wantPod)
			}
			c := &hooks.ContainerInfo{ID: "c1", Name: "app", Resources: &hooks.Resources{MemoryLimitInBytes: 2 * gi}}
			adj, err = m.PreCreateContainer(ctx, p, c)
			if err != nil {
				t.Fatal(err)
			}
			if got := adj.Resources.Unified; !equal(got, tt.wantCtr) {
				t.Errorf("container files at creation = %v, want %v", got, tt.wantCtr)
			}
			c.Annotations = adj.Annotations
			adj, err = m.PreUpdateContainerResources(ctx, p, c)
			if err != nil {
				t.Fatal(err)
			}
			if got := adj.Resources.Unified; !equal(got, tt.wantCtr) {
				t.Errorf("container files at an update = %v, want %v", got, tt.wantCtr)
			}
		})
	}
}

// TestClassesBeyondLS: each class gets its own values; SYSTEM pods get systemClass, as in koordlet;
// cgroupRoot never applies.
func TestClassesBeyondLS(t *testing.T) {
	t.Parallel()
	cfg := Config{
		LSRClass:    ClassConfig{Enable: true, WmarkMinAdj: -25, Priority: 12},
		BEClass:     ClassConfig{Enable: true, WmarkMinAdj: 50, WmarkRatio: 90},
		SystemClass: ClassConfig{Enable: true, OomKillGroup: 1},
		CgroupRoot:  ClassConfig{Enable: true, OomKillGroup: 1, WmarkRatio: 80},
	}
	tests := []struct {
		class string
		want  map[string]string
	}{
		{"LSE", map[string]string{FileWmarkMinAdj: "-25", FilePriority: "12"}},
		{"LSR", map[string]string{FileWmarkMinAdj: "-25", FilePriority: "12"}},
		{"LS", nil},
		{"BE", map[string]string{FileWmarkMinAdj: "50", FileWmarkRatio: "90"}},
		{"SYSTEM", map[string]string{FileOOMGroup: "1"}},
	}
	_, w := tree(t, anolisV1Full)
	m, err := New(cfg, Deps{Cgroups: w})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.class, func(t *testing.T) {
			t.Parallel()
			_, ctx := ktesting.NewTestContext(t)
			adj, err := m.PreCreateContainer(ctx, pod(tt.class), &hooks.ContainerInfo{ID: "c1", Name: "app", Resources: &hooks.Resources{}})
			if err != nil {
				t.Fatal(err)
			}
			var got map[string]string
			if adj != nil {
				got = adj.Resources.Unified
			}
			if !equal(got, tt.want) {
				t.Fatalf("files = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestValidateBeyondMinLowHigh(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		cc      ClassConfig
		wantErr string
	}{
		{name: "an operator's Anolis LS values", cc: anolisLS},
		{name: "wmarkMinAdj at its floor", cc: ClassConfig{WmarkMinAdj: -25}},
		{name: "wmarkMinAdj below -25", cc: ClassConfig{WmarkMinAdj: -26}, wantErr: "systemClass.memoryQOS.wmarkMinAdj"},
		{name: "wmarkRatio above 100", cc: ClassConfig{WmarkRatio: 101}, wantErr: "systemClass.memoryQOS.wmarkRatio"},
		{name: "wmarkScalePermill above 1000", cc: ClassConfig{WmarkScalePermill: 1001}, wantErr: "systemClass.memoryQOS.wmarkScalePermill"},
		{name: "priority above 12", cc: ClassConfig{Priority: 13}, wantErr: "systemClass.memoryQOS.priority"},
		{name: "priorityEnable 2", cc: ClassConfig{PriorityEnable: 2}, wantErr: "systemClass.memoryQOS.priorityEnable"},
		{name: "oomKillGroup -1", cc: ClassConfig{OomKillGroup: -1}, wantErr: "systemClass.memoryQOS.oomKillGroup"},
		{name: "pageCacheLimitSize negative", cc: ClassConfig{PageCacheLimitSize: -1}, wantErr: "systemClass.memoryQOS.pageCacheLimitSize"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := Config{SystemClass: tt.cc}.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Validate = %v, want an error naming %s", err, tt.wantErr)
			}
		})
	}
}

// states indexes a report by key.
func states(t *testing.T, list []knob.Status) map[string]knob.Status {
	t.Helper()
	out := map[string]knob.Status{}
	for _, s := range list {
		if s.Section != Section {
			t.Fatalf("%s: section %q, want %q", s.Key, s.Section, Section)
		}
		if _, dup := out[s.Key]; dup {
			t.Fatalf("%s reported twice", s.Key)
		}
		out[s.Key] = s
	}
	return out
}

func TestKnobs(t *testing.T) {
	t.Parallel()
	cfg := Config{LSClass: anolisLS, BEClass: ClassConfig{WmarkRatio: 95, WmarkMinAdj: 50}, CgroupRoot: ClassConfig{WmarkScalePermill: 50}}
	type want struct {
		state  knob.State
		value  string
		detail string // a part of Detail
	}
	tests := []struct {
		name   string
		kernel *kernel // nil: no cgroup hierarchy
		want   map[string]want
	}{
		{name: "Anolis v1", kernel: &anolisV1Full, want: map[string]want{
			"lsClass.memoryQOS.enable":               {knob.Applied, "true", FileWmarkRatio},
			"lsClass.memoryQOS.minLimitPercent":      {knob.Applied, "100", "memory.min = 100% of the memory request"},
			"lsClass.memoryQOS.lowLimitPercent":      {knob.Off, "0", "0 leaves memory.low"},
			"lsClass.memoryQOS.throttlingPercent":    {knob.Applied, "80", "memory.high = 80% of the memory limit"},
			"lsClass.memoryQOS.wmarkRatio":           {knob.Applied, "95", "memory.wmark_ratio = 95"},
			"lsClass.memoryQOS.wmarkScalePermill":    {knob.Applied, "20", "memory.wmark_scale_factor = 20"},
			"lsClass.memoryQOS.wmarkMinAdj":          {knob.Applied, "-25", "memory.wmark_min_adj = -25"},
			"lsClass.memoryQOS.priorityEnable":       {knob.Applied, "1", "memory.use_priority_oom = 1"},
			"lsClass.memoryQOS.priority":             {knob.Applied, "12", "memory.priority = 12"},
			"lsClass.memoryQOS.oomKillGroup":         {knob.Applied, "1", "memory.oom.group = 1"},
			"lsClass.memoryQOS.pageCacheLimitEnable": {knob.Unsupported, "0", "page cache"},
			"lsClass.memoryQOS.pageCacheLimitSize":   {knob.Unsupported, "0", "page cache"},
			"beClass.memoryQOS.enable":               {knob.Off, "false", "kubelet"},
			"beClass.memoryQOS.wmarkRatio":           {knob.Off, "95", "beClass.memoryQOS.enable is false"},
			"systemClass.memoryQOS.oomKillGroup":     {knob.Off, "0", "systemClass.memoryQOS.enable is false"},
			"cgroupRoot.memoryQOS.enable":            {knob.Unsupported, "false", "block I/O only"},
			"cgroupRoot.memoryQOS.wmarkScalePermill": {knob.Unsupported, "50", "block I/O only"},
		}},
		{name: "mainline v2", kernel: &v2Mainline, want: map[string]want{
			"lsClass.memoryQOS.enable":            {knob.Applied, "true", "this kernel lacks memory.wmark_ratio"},
			"lsClass.memoryQOS.minLimitPercent":   {knob.Applied, "100", "memory.min"},
			"lsClass.memoryQOS.oomKillGroup":      {knob.Applied, "1", "memory.oom.group = 1"},
			"lsClass.memoryQOS.wmarkRatio":        {knob.Ignored, "95", "no memory.wmark_ratio in this kernel's cgroup v2 memory controller (Anolis OS kernels have it)"},
			"lsClass.memoryQOS.wmarkScalePermill": {knob.Ignored, "20", "no memory.wmark_scale_factor"},
			"lsClass.memoryQOS.wmarkMinAdj":       {knob.Ignored, "-25", "no memory.wmark_min_adj"},
			"lsClass.memoryQOS.priorityEnable":    {knob.Ignored, "1", "no memory.use_priority_oom"},
			"lsClass.memoryQOS.priority":          {knob.Ignored, "12", "no memory.priority"},
		}},
		{name: "mainline v1", kernel: &mainlineV1, want: map[string]want{
			"lsClass.memoryQOS.enable":            {knob.Ignored, "true", "has none of memory.min, memory.high"},
			"lsClass.memoryQOS.minLimitPercent":   {knob.Ignored, "100", "no memory.min in this kernel's cgroup v1 memory controller (cgroup v2 and Anolis OS kernels have it)"},
			"lsClass.memoryQOS.throttlingPercent": {knob.Ignored, "80", "no memory.high"},
			"lsClass.memoryQOS.oomKillGroup":      {knob.Ignored, "1", "no memory.oom.group in this kernel's cgroup v1"},
			"lsClass.memoryQOS.wmarkRatio":        {knob.Ignored, "95", "no memory.wmark_ratio"},
			"lsClass.memoryQOS.lowLimitPercent":   {knob.Off, "0", "0 leaves memory.low"},
			"beClass.memoryQOS.wmarkMinAdj":       {knob.Off, "50", "enable is false"},
			// Off, and says that enabling the class would not help here.
			"beClass.memoryQOS.wmarkRatio": {knob.Off, "95", "beClass.memoryQOS.enable is false; and no memory.wmark_ratio in this kernel's cgroup v1"},
		}},
		{name: "no cgroup hierarchy", want: map[string]want{
			"lsClass.memoryQOS.enable":     {knob.Ignored, "true", "no cgroup hierarchy"},
			"lsClass.memoryQOS.wmarkRatio": {knob.Ignored, "95", "no cgroup hierarchy"},
			"beClass.memoryQOS.wmarkRatio": {knob.Off, "95", "enable is false"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var p cgroup.Prober
			if tt.kernel != nil {
				_, p = tree(t, *tt.kernel)
			}
			got := states(t, Knobs(cfg, p))
			// 5 classes × (enable + 9 settings + 3 page cache keys).
			if len(got) != 5*13 {
				t.Errorf("%d keys reported, want %d", len(got), 5*13)
			}
			for key, w := range tt.want {
				s, ok := got[key]
				if !ok {
					t.Errorf("%s not reported", key)
					continue
				}
				if s.State != w.state || s.Value != w.value || !strings.Contains(s.Detail, w.detail) {
					t.Errorf("%s = %s %s (%s), want %s %s (detail with %q)", key, s.State, s.Value, s.Detail, w.state, w.value, w.detail)
				}
			}
		})
	}
}

// TestKnobsAgreeWithTheHook: a key the report calls Applied is a file the hook returns, and one it calls
// Ignored or Off is not, for the same configuration and kernel.
func TestKnobsAgreeWithTheHook(t *testing.T) {
	t.Parallel()
	for _, k := range []kernel{anolisV1Full, v2Mainline, {1, anolisOnlyFiles}, highOnlyV1} {
		_, ctx := ktesting.NewTestContext(t)
		_, w := tree(t, k)
		report := states(t, Knobs(lsOnly(anolisLS), w))
		m, err := New(lsOnly(anolisLS), Deps{Cgroups: w})
		if err != nil {
			t.Fatal(err)
		}
		adj, err := m.PreCreateContainer(ctx, pod("LS"), &hooks.ContainerInfo{ID: "c1", Name: "app",
			Resources: &hooks.Resources{MemoryLimitInBytes: 2 * gi, Unified: map[string]string{FileMin: "1073741824"}}})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range settings() {
			_, set := adj.Resources.Unified[s.file]
			if applied := report["lsClass.memoryQOS."+s.key].State == knob.Applied; applied != set {
				t.Errorf("v%d with %v: %s reported %s, but the hook sets %s: %v", k.version, k.files, s.key, report["lsClass.memoryQOS."+s.key].State, s.file, set)
			}
		}
	}
}

func TestMissing(t *testing.T) {
	t.Parallel()
	_, w := tree(t, v2Mainline)
	got := Missing(Config{LSClass: anolisLS, BEClass: ClassConfig{Enable: false, WmarkRatio: 95}}, w)
	want := []string{FilePriority, FileUsePriorityOOM, FileWmarkMinAdj, FileWmarkRatio, FileWmarkScaleFactor}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("Missing = %v, want %v", got, want)
	}
	if got := Missing(Config{BEClass: ClassConfig{WmarkRatio: 95}}, w); len(got) != 0 {
		t.Fatalf("Missing for a disabled class = %v, want none", got)
	}
}

// TestThisHostKnobs runs on this machine's real cgroup hierarchy. On a mainline cgroup v1 host (as here)
// none of the files exist: the report says Ignored for every key an operator's Anolis configuration
// sets, and the hook returns none of the files (it is off). On another kernel the report must agree with
// what the kernel offers.
func TestThisHostKnobs(t *testing.T) {
	t.Parallel()
	w, err := cgroup.New("/sys/fs/cgroup")
	if err != nil {
		t.Skipf("no cgroup hierarchy here: %v", err)
	}
	report := states(t, Knobs(lsOnly(anolisLS), w))
	for _, s := range settings() {
		st := report["lsClass.memoryQOS."+s.key]
		if !s.on(anolisLS) {
			if st.State != knob.Off {
				t.Errorf("%s = %s, want off (0)", s.key, st.State)
			}
			continue
		}
		want := knob.Applied
		if !w.Supports(s.file) {
			want = knob.Ignored
			if !strings.Contains(st.Detail, s.file) {
				t.Errorf("%s is ignored, but its detail %q does not name %s", s.key, st.Detail, s.file)
			}
		}
		if st.State != want {
			t.Errorf("%s = %s, want %s (kernel offers %s: %v)", s.key, st.State, want, s.file, w.Supports(s.file))
		}
	}
	if len(Missing(lsOnly(anolisLS), w)) < len(wanted(anolisLS)) {
		return // not a mainline cgroup v1 host: the hook is built, the other tests cover what it returns
	}
	// Mainline cgroup v1: nothing applies and the hook is off, naming the files.
	_, err = New(lsOnly(anolisLS), Deps{Cgroups: w})
	if !errors.Is(err, hooks.ErrSkip) {
		t.Fatalf("New on a kernel without any of the files = %v, want ErrSkip", err)
	}
	for _, f := range wanted(anolisLS) {
		if !strings.Contains(err.Error(), f) {
			t.Errorf("the off line %q does not name %s", err, f)
		}
	}
}
