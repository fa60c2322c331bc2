package resctrl_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/tandemkit/tandem/resource/resctrl"
	"github.com/tandemkit/tandem/resource/resctrl/resctrltest"
)

// TestCgroupMover moves the tasks of a real cgroup on this host into a group of a fake resctrl tree (this
// host has no RDT): a process started in a cgroup must end up in the group's tasks, and a cgroup that is
// gone is an error naming it.
func TestCgroupMover(t *testing.T) {
	const root = "/sys/fs/cgroup"
	if os.Geteuid() != 0 {
		t.Skip("needs root to create a cgroup")
	}
	version, base := 1, filepath.Join(root, "cpu")
	if _, err := os.Stat(filepath.Join(root, "cgroup.controllers")); err == nil {
		version, base = 2, root
	}
	rel := "tandem-resctrl-test-" + strconv.Itoa(os.Getpid()) + "/c1"
	dir := filepath.Join(base, rel)
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
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0); err != nil {
		t.Fatal(err)
	}
	fs, err := resctrl.Open(resctrltest.Write(t, resctrltest.XeonTwoSocket))
	if err != nil {
		t.Fatal(err)
	}
	if err := fs.EnsureGroup("BE", resctrl.Schemata{}); err != nil {
		t.Fatal(err)
	}
	m := resctrl.CgroupMover{FS: fs, CgroupRoot: root, CgroupVersion: version}
	if err := m.Assign(context.Background(), "BE", rel); err != nil {
		t.Fatal(err)
	}
	got, err := fs.Tasks("BE")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, []int{cmd.Process.Pid}) {
		t.Fatalf("BE tasks = %v, want [%d]", got, cmd.Process.Pid)
	}
	if err := m.Assign(context.Background(), "BE", "tandem-no-such-cgroup/c2"); err == nil || !strings.Contains(err.Error(), "tandem-no-such-cgroup") {
		t.Fatalf("Assign of a cgroup that is gone = %v, want an error naming it", err)
	}
}
