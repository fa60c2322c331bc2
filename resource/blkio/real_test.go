package blkio

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestRealThrottle runs the keeper on this host's cgroup v1 blkio hierarchy: a cgroup standing for the BE
// parent gets readBPS 1 MiB/s on the disk of the test's directory, and a direct read of a file there goes at that
// rate, where the same read without the limit ran at the disk's; Restore takes the limit away.
func TestRealThrottle(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("SKIPPED: needs root to make a blkio cgroup and read a disk directly")
	}
	const size = 3 << 20
	root := "/sys/fs/cgroup/blkio"
	if _, err := os.Stat(filepath.Join(root, v1ReadBPS)); err != nil {
		t.Skipf("SKIPPED: no cgroup v1 blkio hierarchy with throttling here (%v); cgroup v2's io.max is tested on the VM node", err)
	}
	// A file on a disk, read with O_DIRECT: this sandbox may refuse to open the disk itself.
	data := filepath.Join(t.TempDir(), "data")
	must(t, os.WriteFile(data, make([]byte, size), 0o600))
	f, err := os.Open(data)
	must(t, err)
	must(t, f.Sync())
	must(t, f.Close())
	var st syscall.Stat_t
	must(t, syscall.Stat(data, &st))
	dev := fmt.Sprintf("%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev))
	real, err := filepath.EvalSymlinks(filepath.Join("/sys/dev/block", dev))
	if err != nil {
		t.Skipf("SKIPPED: the test's directory is on %s, which is not a block device (%v)", dev, err)
	}
	disk := filepath.Base(real)
	if _, err := os.Stat(filepath.Join(real, "partition")); err == nil {
		disk = filepath.Base(filepath.Dir(real))
	}
	dir := filepath.Join(root, fmt.Sprintf("tandem-test-blkio-%d", os.Getpid()))
	must(t, os.Mkdir(dir, 0o755))
	t.Cleanup(func() {
		if err := os.Remove(dir); err != nil {
			t.Errorf("remove the test cgroup %s: %v", dir, err)
		}
	})
	k, err := New(Config{Dir: dir, Version: 1, SysRoot: "/sys", Record: filepath.Join(t.TempDir(), "blkio-originals.json")})
	must(t, err)
	t.Cleanup(func() { _ = k.Restore(context.Background()) })

	read := func() time.Duration {
		t.Helper()
		cmd := exec.Command("sh", "-c", fmt.Sprintf(`echo $$ > %s/cgroup.procs && exec dd if=%s of=/dev/null bs=256k iflag=direct status=none`, dir, data))
		start := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("dd in %s: %v: %s", dir, err, out)
		}
		return time.Since(start)
	}
	free := read()
	res, err := k.Apply(context.Background(), Want{Enable: true, Blocks: []Block{{Name: "/dev/" + disk, Type: TypeDevice, Limits: Limits{ReadBPS: 1 << 20}}}})
	must(t, err)
	if len(res) != 1 || res[0].Err != nil {
		t.Fatalf("Apply: %+v", res)
	}
	b, _ := os.ReadFile(filepath.Join(dir, v1ReadBPS))
	want := res[0].Devices[0] + " 1048576"
	if strings.TrimSpace(string(b)) != want {
		t.Fatalf("%s holds %q; want %q", v1ReadBPS, b, want)
	}
	limited := read()
	rate := func(d time.Duration) float64 { return size / d.Seconds() / (1 << 20) }
	t.Logf("3 MiB read directly from a file on /dev/%s: %v (%.1f MiB/s) without a limit, %v (%.2f MiB/s) with readBPS 1 MiB/s", disk, free, rate(free), limited, rate(limited))
	// The kernel lets a first slice through before it throttles: 3 MiB at 1 MiB/s takes 2 s at least.
	if limited < 2*time.Second {
		t.Errorf("the read under readBPS 1 MiB/s took %v (%.2f MiB/s); want 2 s at least", limited, rate(limited))
	}
	must(t, k.Restore(context.Background()))
	b, _ = os.ReadFile(filepath.Join(dir, v1ReadBPS))
	if strings.TrimSpace(string(b)) != "" {
		t.Errorf("after Restore %s holds %q; want nothing", v1ReadBPS, b)
	}
}
