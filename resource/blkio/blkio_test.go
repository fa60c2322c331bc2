package blkio

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// sysTree builds a fake sysfs: disks vda (254:0, partition vda1) and vdb (254:16), and LVM's dm-0
// (data--vg-lv1 on vdb) and dm-1 (data--vg-lv2, on dm-2 on vda1).
func sysTree(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	disk := func(name, dev string) {
		dir := filepath.Join(root, "devices", "virtual", "block", name)
		must(t, os.MkdirAll(dir, 0o755))
		must(t, os.WriteFile(filepath.Join(dir, "dev"), []byte(dev+"\n"), 0o644))
		must(t, os.MkdirAll(filepath.Join(root, "class", "block"), 0o755))
		must(t, os.Symlink(dir, filepath.Join(root, "class", "block", name)))
		must(t, os.MkdirAll(filepath.Join(root, "block"), 0o755))
		must(t, os.Symlink(dir, filepath.Join(root, "block", name)))
	}
	disk("vda", "254:0")
	disk("vdb", "254:16")
	part := filepath.Join(root, "devices", "virtual", "block", "vda", "vda1")
	must(t, os.MkdirAll(part, 0o755))
	must(t, os.WriteFile(filepath.Join(part, "dev"), []byte("254:1\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(part, "partition"), []byte("1\n"), 0o644))
	must(t, os.Symlink(part, filepath.Join(root, "class", "block", "vda1")))
	dm := func(name, dmName string, slaves ...string) {
		disk(name, "252:"+strings.TrimPrefix(name, "dm-"))
		dir := filepath.Join(root, "block", name)
		must(t, os.MkdirAll(filepath.Join(dir, "dm"), 0o755))
		must(t, os.WriteFile(filepath.Join(dir, "dm", "name"), []byte(dmName+"\n"), 0o644))
		must(t, os.MkdirAll(filepath.Join(dir, "slaves"), 0o755))
		for _, s := range slaves {
			must(t, os.WriteFile(filepath.Join(dir, "slaves", s), nil, 0o644))
		}
	}
	dm("dm-0", "data--vg-lv1", "vdb")
	dm("dm-2", "crypt", "vda1")
	dm("dm-1", "data--vg-lv2", "dm-2")
	dm("dm-3", "data-other", "vda")
	return root
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestResolve(t *testing.T) {
	sys := sysTree(t)
	for _, tc := range []struct {
		name    string
		block   Block
		want    []string
		wantErr string
	}{
		{name: "a disk by path", block: Block{Name: "/dev/vdb", Type: TypeDevice}, want: []string{"254:16"}},
		{name: "a disk by name", block: Block{Name: "vda", Type: TypeDevice}, want: []string{"254:0"}},
		{name: "a partition is its disk", block: Block{Name: "/dev/vda1", Type: TypeDevice}, want: []string{"254:0"}},
		{name: "a device-mapper name", block: Block{Name: "/dev/mapper/crypt", Type: TypeDevice}, want: []string{"252:2"}},
		{name: "a volume group is the disks under its volumes", block: Block{Name: "data-vg", Type: TypeVolumeGroup}, want: []string{"254:0", "254:16"}},
		{name: "a volume group whose name another's prefixes", block: Block{Name: "data", Type: TypeVolumeGroup}, want: []string{"254:0"}},
		{name: "no such device", block: Block{Name: "/dev/sdz", Type: TypeDevice}, wantErr: "no block device sdz on this node"},
		{name: "no such volume group", block: Block{Name: "vg0", Type: TypeVolumeGroup}, wantErr: "volume group vg0: no logical volume"},
		{name: "a pod volume is not the class's", block: Block{Name: "data", Type: TypePodVolume}, wantErr: "apply to pods"},
		{name: "a path outside /dev", block: Block{Name: "/var/lib/x", Type: TypeDevice}, wantErr: "name a block device"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Resolve(sys, tc.block)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Resolve(%+v) = %v, %v; want an error saying %q", tc.block, got, err, tc.wantErr)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("Resolve(%+v) = %v, %v; want %v", tc.block, got, err, tc.want)
			}
		})
	}
}

// kernel stands in for the kernel's parsing of the per-device rule files, which a file of a temporary
// tree cannot do: one rule per write, merged by device into the file's lines. It is how cgroup v2 is
// tested on this cgroup v1 host; TestRealThrottle runs v1's files on the real kernel.
func kernel(path, s string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	dev, v, ok := strings.Cut(s, " ")
	if !ok {
		return fmt.Errorf("write %q to %s: invalid argument", s, path)
	}
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if l != "" && !strings.HasPrefix(l, dev+" ") {
			lines = append(lines, l)
		}
	}
	switch filepath.Base(path) {
	case v2Max:
		if v != v2NoMax {
			lines = append(lines, s)
		}
	case v2Weight:
		if dev == "254:0" {
			// As this machine's VM kernel answers for a disk without blk-iocost.
			return fmt.Errorf("write %q to %s: %w", s, path, syscall.EOPNOTSUPP)
		}
		if v != "default" {
			lines = append(lines, s)
		}
	default:
		if v != "0" {
			lines = append(lines, s)
		}
	}
	slices.Sort(lines)
	return os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644)
}

// beParent makes a BE parent with the version's files, the io.weight default line, and an operator's
// own limit on vda (254:0).
func beParent(t *testing.T, version int) (string, map[string]string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "kubepods", "besteffort")
	must(t, os.MkdirAll(dir, 0o755))
	files := map[string]string{v2Max: "254:0 rbps=max wbps=1000 riops=max wiops=max\n", v2Weight: "default 100\n"}
	if version == 1 {
		files = map[string]string{v1ReadBPS: "", v1WriteBPS: "254:0 1000\n", v1ReadIOPS: "", v1WriteIOPS: ""}
	}
	for f, c := range files {
		must(t, os.WriteFile(filepath.Join(dir, f), []byte(c), 0o644))
	}
	return dir, files
}

func newKeeper(t *testing.T, dir string, version int, sys, record string) *Keeper {
	t.Helper()
	k, err := New(Config{Dir: dir, Version: version, SysRoot: sys, Record: record})
	if err != nil {
		t.Fatal(err)
	}
	k.writeLine = kernel
	return k
}

func files(t *testing.T, dir string, names map[string]string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for f := range names {
		b, err := os.ReadFile(filepath.Join(dir, f))
		must(t, err)
		out[f] = string(b)
	}
	return out
}

func TestKeeper(t *testing.T) {
	mib := int64(1 << 20)
	vdbOnly := Want{Enable: true, Blocks: []Block{{Name: "/dev/vdb", Type: TypeDevice, Limits: Limits{ReadBPS: 10 * mib, WriteIOPS: 200, WeightPercent: 50}}}}
	both := Want{Enable: true, Blocks: []Block{
		{Name: "/dev/vdb", Type: TypeDevice, Limits: Limits{ReadBPS: 10 * mib, WriteIOPS: 200, WeightPercent: 50}},
		{Name: "vda", Type: TypeDevice, Limits: Limits{WriteBPS: mib}},
		{Name: "/dev/sdz", Type: TypeDevice, Limits: Limits{WriteBPS: mib}},
	}}
	for _, tc := range []struct {
		name    string
		version int
		steps   []Want
		// want is the files after the last step.
		want        map[string]string
		wantDropped string
	}{
		{
			name: "v2: caps and weight on the device", version: 2, steps: []Want{vdbOnly},
			want: map[string]string{
				v2Max:    "254:0 rbps=max wbps=1000 riops=max wiops=max\n254:16 rbps=10485760 wbps=max riops=max wiops=200\n",
				v2Weight: "254:16 50\ndefault 100\n",
			},
		},
		{
			name: "v2: the operator's own line is Tandem's while configured", version: 2, steps: []Want{both},
			want: map[string]string{
				v2Max:    "254:0 rbps=max wbps=1048576 riops=max wiops=max\n254:16 rbps=10485760 wbps=max riops=max wiops=200\n",
				v2Weight: "254:16 50\ndefault 100\n",
			},
		},
		{
			name: "v2: a device dropped gets its own line back", version: 2, steps: []Want{both, vdbOnly},
			want: map[string]string{
				v2Max:    "254:0 rbps=max wbps=1000 riops=max wiops=max\n254:16 rbps=10485760 wbps=max riops=max wiops=200\n",
				v2Weight: "254:16 50\ndefault 100\n",
			},
		},
		{
			name: "v2: disabled puts everything back", version: 2, steps: []Want{both, {Enable: false, Blocks: both.Blocks}},
			want: map[string]string{v2Max: "254:0 rbps=max wbps=1000 riops=max wiops=max\n", v2Weight: "default 100\n"},
		},
		{
			name: "v2: a weight the kernel refuses is dropped, the caps stay", version: 2,
			steps:       []Want{{Enable: true, Blocks: []Block{{Name: "vda", Type: TypeDevice, Limits: Limits{ReadBPS: mib, WeightPercent: 50}}}}},
			want:        map[string]string{v2Max: "254:0 rbps=1048576 wbps=max riops=max wiops=max\n", v2Weight: "default 100\n"},
			wantDropped: "EOPNOTSUPP",
		},
		{
			name: "v1: the caps; no weight", version: 1, steps: []Want{both}, wantDropped: "cgroup v1 has no I/O weight",
			want: map[string]string{
				v1ReadBPS: "254:16 10485760\n", v1WriteBPS: "254:0 1048576\n", v1ReadIOPS: "\n", v1WriteIOPS: "254:16 200\n",
			},
		},
		{
			name: "v1: a device dropped gets its own line back", version: 1, steps: []Want{both, vdbOnly},
			want: map[string]string{
				v1ReadBPS: "254:16 10485760\n", v1WriteBPS: "254:0 1000\n", v1ReadIOPS: "\n", v1WriteIOPS: "254:16 200\n",
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sys := sysTree(t)
			dir, orig := beParent(t, tc.version)
			record := filepath.Join(t.TempDir(), "blkio-originals.json")
			k := newKeeper(t, dir, tc.version, sys, record)
			var res []BlockResult
			for _, w := range tc.steps {
				var err error
				if res, err = k.Apply(context.Background(), w); err != nil {
					t.Fatal(err)
				}
			}
			if got := files(t, dir, orig); !mapsEqual(got, tc.want) {
				t.Errorf("after %d steps the BE parent holds %q; want %q", len(tc.steps), got, tc.want)
			}
			for _, r := range res {
				switch {
				case r.Block.Name == "/dev/sdz":
					if r.Err == nil {
						t.Errorf("%s applied on %v; want an error naming the missing device", r.Block.Name, r.Devices)
					}
				case r.Err != nil:
					t.Errorf("%s: %v", r.Block.Name, r.Err)
				case r.Block.Limits.WeightPercent > 0 && !strings.Contains(r.Dropped, tc.wantDropped):
					t.Errorf("%s dropped %q; want it to say %q", r.Block.Name, r.Dropped, tc.wantDropped)
				}
			}
			// A SIGKILLed agent leaves its limits; the next one puts the originals back from the record.
			again := newKeeper(t, dir, tc.version, sys, record)
			must(t, again.Restore(context.Background()))
			if got := files(t, dir, orig); !mapsEqual(got, normalised(orig)) {
				t.Errorf("after Restore the BE parent holds %q; want what it had, %q", got, orig)
			}
			if _, err := os.Stat(record); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the record outlived the restore: %v", err)
			}
		})
	}
}

// normalised is a file set as the kernel stand-in writes it back (an empty file is one newline).
func normalised(m map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		if v == "" {
			v = "\n"
		}
		out[k] = v
	}
	return out
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if strings.TrimSpace(b[k]) != strings.TrimSpace(v) {
			return false
		}
	}
	return true
}

func TestKeeperRefuses(t *testing.T) {
	sys := sysTree(t)
	record := filepath.Join(t.TempDir(), "r.json")
	if _, err := New(Config{Dir: "/x", Version: 3, Record: record}); err == nil {
		t.Error("cgroup version 3 accepted")
	}
	k := newKeeper(t, filepath.Join(t.TempDir(), "absent"), 2, sys, record)
	if _, err := k.Apply(context.Background(), Want{Enable: true}); err == nil || !strings.Contains(err.Error(), "kubelet creates it") {
		t.Errorf("Apply on a missing BE parent: %v; want an error that says kubelet creates it", err)
	}
	dir := t.TempDir()
	k = newKeeper(t, dir, 2, sys, record)
	if _, err := k.Apply(context.Background(), Want{Enable: true}); err == nil || !strings.Contains(err.Error(), "subtree_control") {
		t.Errorf("Apply without io.max: %v; want an error naming the controller", err)
	}
	must(t, os.WriteFile(record, []byte("{"), 0o600))
	if _, err := New(Config{Dir: dir, Version: 2, Record: record}); err == nil || !strings.Contains(err.Error(), "by hand") {
		t.Errorf("a corrupt record: %v; want an error saying how to restore by hand", err)
	}
}
