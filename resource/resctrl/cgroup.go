package resctrl

import (
	"context"
	"path/filepath"

	"github.com/tandemkit/tandem/resource/cgroup"
)

// CgroupMover moves the tasks of a cgroup into a group: how a container, whose tasks the runtime keeps in
// its cgroup, joins its RDT class. It lists threads, not processes, since resctrl assigns threads.
type CgroupMover struct {
	FS *FS
	// CgroupRoot is the cgroup mount (/sys/fs/cgroup); CgroupVersion 1 reads the cpu controller's
	// hierarchy, 2 the unified one.
	CgroupRoot    string
	CgroupVersion int
}

// Assign moves the tasks of the cgroup at path (relative to the hierarchy) into group. Tasks that exit
// meanwhile are skipped.
func (m CgroupMover) Assign(_ context.Context, group, path string) error {
	dir := filepath.Join(m.CgroupRoot, path)
	if m.CgroupVersion == 1 {
		dir = filepath.Join(m.CgroupRoot, "cpu", path)
	}
	tids, err := cgroup.Threads(dir)
	if err != nil {
		return err
	}
	return m.FS.AddTasks(group, tids)
}
