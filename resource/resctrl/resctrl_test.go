package resctrl

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/containerd/errdefs"

	"github.com/tandemkit/tandem/resource/resctrl/resctrltest"
)

// The tests run on fake resctrl trees (resctrltest): the build and test machines have no RDT hardware and
// no /sys/fs/resctrl. What they cannot check is the kernel's own validation of schemata writes.

func TestOpen(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		root    func(t *testing.T) string
		wantErr error
		check   func(t *testing.T, f *FS)
	}{
		{name: "no resctrl at all", root: func(t *testing.T) string { return filepath.Join(t.TempDir(), "resctrl") }, wantErr: errdefs.ErrNotFound},
		{name: "not mounted", root: func(t *testing.T) string { return t.TempDir() }, wantErr: errdefs.ErrNotFound},
		{name: "neither CAT nor MBA", root: func(t *testing.T) string { return resctrltest.Write(t, resctrltest.Hardware{CacheIDs: []int{0}}) }, wantErr: errdefs.ErrNotImplemented},
		{name: "two-socket Xeon", root: func(t *testing.T) string { return resctrltest.Write(t, resctrltest.XeonTwoSocket) },
			check: func(t *testing.T, f *FS) {
				if f.L3 == nil || f.L3.CBMMask != 0x7ff || f.L3.CDP || !slices.Equal(f.L3.IDs, []int{0, 1}) {
					t.Fatalf("L3 = %+v", f.L3)
				}
				if f.MB == nil || f.MB.BandwidthGran != 10 || !slices.Equal(f.MB.IDs, []int{0, 1}) {
					t.Fatalf("MB = %+v", f.MB)
				}
				if f.NumClosids() != 8 {
					t.Fatalf("NumClosids = %d, want 8 (MBA's)", f.NumClosids())
				}
			}},
		{name: "CDP", root: func(t *testing.T) string {
			return resctrltest.Write(t, resctrltest.Hardware{CacheIDs: []int{0}, CBMMask: "fffff", MinCBMBits: 2, L3Closids: 8, CDP: true})
		}, check: func(t *testing.T, f *FS) {
			if f.L3 == nil || !f.L3.CDP || f.MB != nil || f.L3.MinCBMBits != 2 {
				t.Fatalf("L3 = %+v, MB = %+v", f.L3, f.MB)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f, err := Open(tt.root(t))
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("Open = %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, f)
		})
	}
}

func TestL3Mask(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		cbm        uint64
		minBits    int
		start, end int64
		want       uint64
		wantErr    bool
	}{
		{name: "shipped LS: everything", cbm: 0x7ff, minBits: 1, start: 0, end: 100, want: 0x7ff},
		{name: "shipped BE: first 30%", cbm: 0x7ff, minBits: 1, start: 0, end: 30, want: 0xf},
		{name: "upper half", cbm: 0xfffff, minBits: 1, start: 50, end: 100, want: 0xffc00},
		{name: "narrow range widens to min bits", cbm: 0xf, minBits: 2, start: 10, end: 20, want: 0x6},
		{name: "top sliver widens downwards", cbm: 0x7ff, minBits: 2, start: 99, end: 100, want: 0x600},
		{name: "mask not starting at way 0", cbm: 0xff0, minBits: 1, start: 0, end: 50, want: 0xf0},
		{name: "empty range", cbm: 0x7ff, minBits: 1, start: 30, end: 30, wantErr: true},
		{name: "beyond 100", cbm: 0x7ff, minBits: 1, start: 0, end: 120, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := L3Mask(tt.cbm, tt.minBits, tt.start, tt.end)
			if tt.wantErr {
				if !errors.Is(err, errdefs.ErrInvalidArgument) {
					t.Fatalf("L3Mask = %x, %v, want InvalidArgument", got, err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("L3Mask = %x, %v, want %x", got, err, tt.want)
			}
		})
	}
}

func TestMBValue(t *testing.T) {
	t.Parallel()
	intel := MBInfo{MinBandwidth: 10, BandwidthGran: 10}
	tests := []struct {
		name    string
		info    MBInfo
		percent int64
		want    int
		wantErr bool
	}{
		{name: "shipped: 100%", info: intel, percent: 100, want: 100},
		{name: "rounds up to the granularity", info: intel, percent: 35, want: 40},
		{name: "at least the minimum", info: intel, percent: 5, want: 10},
		{name: "fine granularity", info: MBInfo{MinBandwidth: 1, BandwidthGran: 1}, percent: 37, want: 37},
		{name: "zero", info: intel, percent: 0, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := MBValue(tt.info, tt.percent)
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Fatalf("MBValue = %d, %v, want %d (error %v)", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestEnsureGroupAndTasks(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		hw   resctrltest.Hardware
		s    Schemata
		want string
	}{
		{name: "L3 and MB on two sockets", hw: resctrltest.XeonTwoSocket, s: Schemata{L3Mask: 0xf, MB: 40}, want: "L3:0=f;1=f\nMB:0=40;1=40"},
		{name: "CDP sets code and data alike", hw: resctrltest.Hardware{CacheIDs: []int{0}, CBMMask: "fff", MinCBMBits: 1, L3Closids: 8, CDP: true},
			s: Schemata{L3Mask: 0x3f}, want: "L3CODE:0=3f\nL3DATA:0=3f"},
		{name: "MB only", hw: resctrltest.Hardware{CacheIDs: []int{0}, MinBandwidth: 10, BandwidthGran: 10, MBClosids: 8},
			s: Schemata{L3Mask: 0xf, MB: 50}, want: "MB:0=50"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			root := resctrltest.Write(t, tt.hw)
			f, err := Open(root)
			if err != nil {
				t.Fatal(err)
			}
			for range 2 { // idempotent
				if err := f.EnsureGroup("BE", tt.s); err != nil {
					t.Fatal(err)
				}
			}
			if got := resctrltest.Read(t, root, "BE/schemata"); got != tt.want {
				t.Fatalf("schemata = %q, want %q", got, tt.want)
			}
			if err := f.AddTasks("BE", []int{42, 7}); err != nil {
				t.Fatal(err)
			}
			if err := f.AddTasks("BE", []int{43}); err != nil {
				t.Fatal(err)
			}
			got, err := f.Tasks("BE")
			if err != nil || !slices.Equal(got, []int{7, 42, 43}) {
				t.Fatalf("tasks = %v, %v, want [7 42 43]", got, err)
			}
		})
	}
}

func TestGroupNames(t *testing.T) {
	t.Parallel()
	f, err := Open(resctrltest.Write(t, resctrltest.XeonTwoSocket))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"", "info", "../x", "a/b", "mon_groups", "."} {
		if err := f.EnsureGroup(name, Schemata{MB: 50}); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("EnsureGroup(%q) = %v, want InvalidArgument", name, err)
		}
	}
	if _, err := os.Stat(filepath.Join(f.Root(), "..", "x")); err == nil {
		t.Fatal("a group escaped the resctrl root")
	}
}

func FuzzIDsByResource(f *testing.F) {
	f.Add("    L3:0=7ff;1=7ff\n    MB:0=100;1=100\n")
	f.Add("L3CODE:0=fff\nL3DATA:0=fff")
	f.Fuzz(func(t *testing.T, s string) {
		for name, ids := range idsByResource(s) {
			if name == "" && len(ids) > 0 {
				t.Fatalf("ids %v under an empty resource name", ids)
			}
		}
	})
}
