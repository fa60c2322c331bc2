package cluster

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/tandemkit/tandem/e2e/framework"
)

// cgroupMounts returns the mount points of every cgroup hierarchy (v1
// controllers, the hybrid unified tree, or the v2 root).
func cgroupMounts() ([]string, error) {
	mounts, err := readMounts()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, m := range mounts {
		if m.fstype == "cgroup" || m.fstype == "cgroup2" {
			out = append(out, m.point)
		}
	}
	return out, nil
}

// prepareCgroupRoot creates kubelet's cgroupRoot in every hierarchy: kubelet
// refuses a root that does not exist. A v1 cpuset child starts without cpus
// or mems, so they are copied from the parent.
func prepareCgroupRoot(root string) error {
	hier, err := cgroupMounts()
	if err != nil {
		return err
	}
	for _, h := range hier {
		dir := filepath.Join(h, root)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("create cgroup %s: %w", dir, err)
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			parent, err := os.ReadFile(filepath.Join(h, f))
			if err != nil {
				continue // not the cpuset hierarchy
			}
			if cur, _ := os.ReadFile(filepath.Join(dir, f)); strings.TrimSpace(string(cur)) != "" {
				continue
			}
			if err := os.WriteFile(filepath.Join(dir, f), parent, 0o644); err != nil {
				return fmt.Errorf("copy %s to %s: %w", f, dir, err)
			}
		}
	}
	return nil
}

// Down stops the cluster and removes what it made: both kubelets first (so
// that nothing restarts pods), then every pod through each node's containerd
// (runc removes their cgroups, CNI their veths), the containerds themselves
// (which delete the bridges), the proxies and the control plane; then
// mounts, the nodes' cgroup trees and the directory. It returns the first
// problems it met and any leftover it could not remove; it is safe to run
// again.
func (c *Cluster) Down(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	var errs []error
	for _, n := range c.Nodes {
		if d := c.Daemons[NodeDaemon(Kubelet, n.Name)]; d != nil {
			if err := d.stop(ctx, syscall.SIGTERM, 15*time.Second); err != nil {
				errs = append(errs, err)
			}
		}
	}
	for _, n := range c.Nodes {
		if _, err := os.Stat(filepath.Join(n.ContainerdDir, "config.toml")); err != nil {
			continue
		}
		ctrd, err := c.Containerd(ctx, n.Name)
		if err != nil {
			errs = append(errs, err)
		} else if err := ctrd.Stop(ctx); err != nil {
			errs = append(errs, fmt.Errorf("stop containerd of %s: %w", n.Name, err))
		}
	}
	// The VM goes first: its kubelet would otherwise report to an API server that is stopping.
	if err := c.stopVM(ctx); err != nil {
		errs = append(errs, err)
	}
	order := c.daemonOrder()
	for i := len(order) - 1; i >= 0; i-- {
		if err := c.Daemons[order[i]].stop(ctx, syscall.SIGTERM, 20*time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	if err := unmountUnder(c.Dir); err != nil {
		errs = append(errs, err)
	}
	for _, n := range c.Nodes {
		if err := removeCgroupTree(n.CgroupRoot); err != nil {
			errs = append(errs, err)
		}
	}
	removeContainerLogLinks(c.Dir)
	left, err := c.Leftovers()
	if err != nil {
		errs = append(errs, err)
	}
	if len(left) > 0 {
		errs = append(errs, fmt.Errorf("left behind after cluster down: %s", strings.Join(left, "; ")))
	}
	if len(errs) == 0 {
		if err := os.RemoveAll(c.Dir); err != nil {
			errs = append(errs, fmt.Errorf("remove %s: %w", c.Dir, err))
		}
	}
	if len(errs) == 0 {
		logger.Info("Cluster down", "dir", c.Dir)
	}
	return errors.Join(errs...)
}

// daemonOrder lists the cluster's daemons in start order: the control plane,
// then each node's tandem-proxy and kubelet.
func (c *Cluster) daemonOrder() []string {
	var out []string
	for _, name := range controlPlaneOrder() {
		if c.Daemons[name] != nil {
			out = append(out, name)
		}
	}
	for _, n := range c.Nodes {
		for _, name := range []string{NodeDaemon(TandemProxy, n.Name), NodeDaemon(Kubelet, n.Name)} {
			if c.Daemons[name] != nil {
				out = append(out, name)
			}
		}
	}
	if c.Daemons[QEMU] != nil {
		out = append(out, QEMU)
	}
	return out
}

// Leftovers lists what of the cluster still exists on the host: processes
// (the daemons, shims, containers), mounts below Dir, cgroups below each
// node's CgroupRoot, the CNI bridges and veths attached to them.
func (c *Cluster) Leftovers() ([]string, error) {
	var left []string
	for _, name := range c.daemonOrder() {
		if pid := c.Daemons[name].pid(); pid != 0 {
			left = append(left, fmt.Sprintf("process %s (pid %d)", name, pid))
		}
	}
	pids, err := processesUnder(c.Dir)
	if err != nil {
		return nil, err
	}
	for _, p := range pids {
		left = append(left, fmt.Sprintf("process %d (%s)", p.pid, p.what))
	}
	mounts, err := readMounts()
	if err != nil {
		return nil, err
	}
	for _, m := range mounts {
		if strings.HasPrefix(m.point, c.Dir+"/") || m.point == c.Dir {
			left = append(left, "mount "+m.point)
		}
	}
	hier, err := cgroupMounts()
	if err != nil {
		return nil, err
	}
	for _, n := range c.Nodes {
		for _, h := range hier {
			if _, err := os.Stat(filepath.Join(h, n.CgroupRoot)); err == nil {
				left = append(left, "cgroup "+filepath.Join(h, n.CgroupRoot))
			}
		}
		if br := n.Bridge(); br != "" {
			if _, err := os.Stat("/sys/class/net/" + br); err == nil {
				left = append(left, "network device "+br)
			}
			for _, v := range n.Veths() {
				left = append(left, "network device "+v+" (on "+br+")")
			}
		}
	}
	if c.VM != nil {
		for _, h := range hier {
			if fileExists(filepath.Join(h, vmHostCgroup)) {
				left = append(left, "cgroup "+filepath.Join(h, vmHostCgroup))
			}
		}
		for _, dev := range []string{vmTap, vmBridge} {
			if _, err := os.Stat("/sys/class/net/" + dev); err == nil {
				left = append(left, "network device "+dev)
			}
		}
	}
	return left, nil
}

// Bridge returns the name of the node's CNI bridge, or "".
func (n *Node) Bridge() string {
	b, err := os.ReadFile(filepath.Join(n.ContainerdDir, "cni", "bridge"))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// Veths lists the network devices attached to the node's bridge.
func (n *Node) Veths() []string {
	br := n.Bridge()
	if br == "" {
		return nil
	}
	var out []string
	links, _ := filepath.Glob("/sys/class/net/*/master")
	for _, l := range links {
		if target, err := os.Readlink(l); err == nil && filepath.Base(target) == br {
			out = append(out, filepath.Base(filepath.Dir(l)))
		}
	}
	sort.Strings(out)
	return out
}

type hostProcess struct {
	pid  int
	what string
}

// processesUnder finds processes whose binary, root or arguments lie below
// dir: shims, containers and anything else the cluster started.
func processesUnder(dir string) ([]hostProcess, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("scan processes: %w", err)
	}
	var out []hostProcess
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() || !alive(pid) {
			continue
		}
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
		if root, err := os.Readlink(fmt.Sprintf("/proc/%d/root", pid)); err == nil && strings.HasPrefix(root, dir+"/") {
			out = append(out, hostProcess{pid, "container process " + args[0]})
			continue
		}
		for _, a := range args {
			if strings.Contains(a, dir+"/") {
				out = append(out, hostProcess{pid, strings.Join(args, " ")})
				break
			}
		}
	}
	return out, nil
}

type mount struct {
	point, fstype string
}

func readMounts() ([]mount, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("read mounts: %w", err)
	}
	defer f.Close()
	var out []mount
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		// Optional fields end at "-"; the filesystem type follows it.
		sep := -1
		for i, fl := range fields {
			if fl == "-" {
				sep = i
				break
			}
		}
		if len(fields) < 5 || sep < 0 || sep+1 >= len(fields) {
			continue
		}
		out = append(out, mount{point: framework.UnescapeMount(fields[4]), fstype: fields[sep+1]})
	}
	return out, sc.Err()
}

// unmountUnder detaches every mount at or below dir, deepest first; kubelet
// bind-mounts its root dir onto itself and mounts volumes below it.
func unmountUnder(dir string) error {
	mounts, err := readMounts()
	if err != nil {
		return err
	}
	var points []string
	for _, m := range mounts {
		if strings.HasPrefix(m.point, dir+"/") || m.point == dir {
			points = append(points, m.point)
		}
	}
	sort.Slice(points, func(i, j int) bool { return len(points[i]) > len(points[j]) })
	var errs []error
	for _, mp := range points {
		if err := syscall.Unmount(mp, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", mp, err))
		}
	}
	return errors.Join(errs...)
}

// removeCgroupTree removes /<root> in every hierarchy, children first. Only
// empty cgroups can go; by now every process in them is gone.
func removeCgroupTree(root string) error {
	if root == "" || root == "/" {
		return nil
	}
	hier, err := cgroupMounts()
	if err != nil {
		return err
	}
	var errs []error
	for _, h := range hier {
		top := filepath.Join(h, root)
		var dirs []string
		filepath.WalkDir(top, func(p string, d fs.DirEntry, err error) error { //nolint:errcheck // a missing tree is fine
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
		for _, d := range dirs {
			var err error
			// A cgroup whose last task just exited may be busy for a moment.
			for range 50 {
				if err = syscall.Rmdir(d); err == nil || errors.Is(err, syscall.ENOENT) || !errors.Is(err, syscall.EBUSY) {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if err != nil && !errors.Is(err, syscall.ENOENT) {
				errs = append(errs, fmt.Errorf("remove cgroup %s: %w", d, err))
			}
		}
	}
	return errors.Join(errs...)
}

// removeContainerLogLinks removes the links kubelet keeps in
// /var/log/containers (a path it does not let us move) that point into dir.
func removeContainerLogLinks(dir string) {
	links, _ := filepath.Glob("/var/log/containers/*.log")
	for _, l := range links {
		if target, err := os.Readlink(l); err == nil && strings.HasPrefix(target, dir+"/") {
			_ = os.Remove(l)
		}
	}
}
