package cgroup

import (
	"path"
	"strings"
)

// ContainerPaths lists where containerd may have put a container's cgroup, relative to the hierarchy,
// most likely first: with the systemd driver (a .slice parent) <parent slice path>/cri-containerd-<id>.scope,
// with the cgroupfs driver <parent>/<id>; without a parent, /k8s.io/<id> (cgroupfs) or
// /system.slice/cri-containerd-<id>.scope (systemd). Readers try each; a writer that knows the parent
// takes the first.
func ContainerPaths(parent, id string) []string {
	scope := "cri-containerd-" + id + ".scope"
	if parent == "" {
		return []string{path.Join("/k8s.io", id), path.Join("/system.slice", scope)}
	}
	base := Path(parent)
	plain, unit := path.Join(base, id), path.Join(base, scope)
	if strings.HasSuffix(parent, ".slice") {
		return []string{unit, plain}
	}
	return []string{plain, unit}
}
