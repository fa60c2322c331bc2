package resctrl

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/klog/v2/ktesting"

	"github.com/tandemkit/tandem/hooks"
	"github.com/tandemkit/tandem/hooks/policy/qos"
	"github.com/tandemkit/tandem/resource/resctrl/resctrltest"
)

// The resctrl trees here are fake (resctrltest): this host has no RDT and no /sys/fs/resctrl. Moving a
// container's tasks is the front end's (resource/resctrl.CgroupMover, tested on this host's cgroups).

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
		wantSkip bool
		wantErr  string
		// want maps each group to its schemata.
		want map[string]string
	}{
		{name: "shipped default: disabled", cfg: DefaultConfig(), root: xeon, wantSkip: true},
		{name: "no resctrl on this kernel", cfg: enabled(), root: func(t *testing.T) string { return filepath.Join(t.TempDir(), "none") }, wantSkip: true},
		{name: "resctrl not mounted", cfg: enabled(), root: func(t *testing.T) string { return t.TempDir() }, wantSkip: true},
		{name: "too few CLOSIDs", cfg: enabled(), root: func(t *testing.T) string { return resctrltest.Write(t, fewClosids) }, wantSkip: true},
		{name: "bad range names the class", cfg: bad, root: xeon, wantErr: "beClass.resctrlQOS"},
		{name: "shipped values enabled", cfg: enabled(), root: xeon, want: map[string]string{
			GroupLSR: "L3:0=7ff;1=7ff\nMB:0=100;1=100",
			GroupLS:  "L3:0=7ff;1=7ff\nMB:0=100;1=100",
			GroupBE:  "L3:0=f;1=f\nMB:0=100;1=100",
		}},
		{name: "BE only, throttled bandwidth", cfg: Config{BEClass: ClassConfig{Enable: true, CatRangeStartPercent: 70, CatRangeEndPercent: 100, MBAPercent: 35}},
			root: xeon, want: map[string]string{GroupBE: "L3:0=700;1=700\nMB:0=40;1=40"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			root := tt.root(t)
			_, err := New(tt.cfg, Deps{Root: root})
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
		// want is the RDT class the container gets; "" leaves it in the root group.
		want string
	}{
		{name: "LSE goes to LSR", cfg: enabled(), class: "LSE", want: GroupLSR},
		{name: "LSR", cfg: enabled(), class: "LSR", want: GroupLSR},
		{name: "LS", cfg: enabled(), class: "LS", want: GroupLS},
		{name: "BE", cfg: enabled(), class: "BE", want: GroupBE},
		{name: "SYSTEM stays in the root group", cfg: enabled(), class: "SYSTEM"},
		{name: "disabled class stays in the root group", cfg: Config{BEClass: enabled().BEClass}, class: "LS"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, ctx := ktesting.NewTestContext(t)
			r, err := New(tt.cfg, Deps{Root: xeon(t)})
			if err != nil {
				t.Fatal(err)
			}
			pod := &hooks.PodInfo{Name: "p", Namespace: "ns", Annotations: map[string]string{qos.AnnotationClass: tt.class}}
			ctr := &hooks.ContainerInfo{ID: "c1", Name: "app"}
			for stage, call := range map[string]func() (*hooks.Adjustment, error){
				"create": func() (*hooks.Adjustment, error) { return r.PreCreateContainer(ctx, pod, ctr) },
				"update": func() (*hooks.Adjustment, error) { return r.PreUpdateContainerResources(ctx, pod, ctr) },
			} {
				adj, err := call()
				if err != nil {
					t.Fatal(err)
				}
				got := ""
				if adj != nil {
					got = *adj.Resources.RDTClass
				}
				if got != tt.want {
					t.Errorf("%s: RDT class %q, want %q", stage, got, tt.want)
				}
			}
		})
	}
}
