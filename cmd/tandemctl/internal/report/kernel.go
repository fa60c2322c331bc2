package report

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/tandemkit/tandem/resource/cgroup"
)

// Kernel reads the cgroup files of pods and containers under a cgroup root (/sys/fs/cgroup).
type Kernel struct {
	root    string
	version int   // 1 or 2; 0 when no hierarchy was found
	err     error // why no hierarchy was found
}

// NewKernel detects the hierarchy under root as tandem-proxy does: cgroup v2 when root has
// cgroup.controllers, else v1 with one directory per controller. With neither, every read fails with
// the reason, so the report still shows what the proxy applied.
func NewKernel(root string) *Kernel {
	k := &Kernel{root: root}
	w, err := cgroup.New(root)
	if err != nil {
		k.err = fmt.Errorf("no cgroup hierarchy under %s (set --cgroup-root)", root)
		return k
	}
	k.version = w.Version()
	return k
}

// Version is 1 or 2, or 0 when no hierarchy was found.
func (k *Kernel) Version() int { return k.version }

// cgroupDir is a container's or a pod's cgroup as found in one hierarchy.
type cgroupDir struct {
	dir string // absolute; "" when not found
	err error
}

// find returns the first candidate that exists in the hierarchy dir holds (the root on v2, the
// controller's directory on v1).
func find(hierarchy string, candidates []string) cgroupDir {
	for _, c := range candidates {
		d := filepath.Join(hierarchy, c)
		if fi, err := os.Stat(d); err == nil && fi.IsDir() {
			return cgroupDir{dir: d}
		}
	}
	return cgroupDir{err: fmt.Errorf("no cgroup %s under %s", strings.Join(candidates, " or "), hierarchy)}
}

// controllerDir returns the hierarchy of a v1 controller, or the unified root on v2.
func (k *Kernel) controllerDir(ctrl string) string {
	if k.version == 2 {
		return k.root
	}
	return filepath.Join(k.root, ctrl)
}

// readFile reads one cgroup file of a found cgroup.
func readFile(d cgroupDir, name string) (string, error) {
	if d.err != nil {
		return "", d.err
	}
	b, err := os.ReadFile(filepath.Join(d.dir, name))
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("the kernel offers no %s in %s", name, d.dir)
	}
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

// containerFiles reads the files of a container's cgroup: one cgroup per controller on v1, one on v2.
type containerFiles struct {
	k    *Kernel
	dirs map[string]cgroupDir // by controller: cpu, cpuset, memory
}

func (k *Kernel) container(parent, id string, exited bool) containerFiles {
	cf := containerFiles{k: k, dirs: map[string]cgroupDir{}}
	for _, ctrl := range []string{"cpu", "cpuset", "memory"} {
		switch {
		case k.err != nil:
			cf.dirs[ctrl] = cgroupDir{err: k.err}
		default:
			cf.dirs[ctrl] = find(k.controllerDir(ctrl), cgroup.ContainerPaths(parent, id))
			if cf.dirs[ctrl].err != nil && exited {
				// Expected, and the paths would only bury the reason.
				cf.dirs[ctrl] = cgroupDir{err: errors.New("the container exited and the runtime removed its cgroup")}
			}
		}
	}
	return cf
}

func (cf containerFiles) read(ctrl, name string) (string, error) {
	return readFile(cf.dirs[ctrl], name)
}

// path is the container's cgroup as kubelet and the runtime name it (its cpu controller's on v1), for the
// wide view.
func (cf containerFiles) path() string {
	d := cf.dirs["cpu"]
	if d.err != nil {
		return ""
	}
	if rel, err := filepath.Rel(cf.k.controllerDir("cpu"), d.dir); err == nil {
		return "/" + rel
	}
	return d.dir
}

// podFile reads one file of a pod's cgroup (kubelet's cgroup parent); ctrl names the v1 controller.
func (k *Kernel) podFile(parent, ctrl, name string) (string, error) {
	if k.err != nil {
		return "", k.err
	}
	if parent == "" {
		return "", errors.New("the pod has no cgroup parent, so no cgroup of its own")
	}
	return readFile(find(k.controllerDir(ctrl), []string{cgroup.Path(parent)}), name)
}
