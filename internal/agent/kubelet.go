package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"sigs.k8s.io/yaml"
)

// defaultKubeletConfig is where kubeadm writes kubelet's configuration.
const defaultKubeletConfig = "/var/lib/kubelet/config.yaml"

// The kubelet settings Tandem follows, spelled as in KubeletConfiguration.
const (
	cgroupDriverCgroupfs = "cgroupfs"
	cgroupDriverSystemd  = "systemd"
	cpuManagerNone       = "none"
	cpuManagerStatic     = "static"
)

// kubeletSettings is the part of kubelet's KubeletConfiguration Tandem reads.
type kubeletSettings struct {
	CgroupDriver     string `json:"cgroupDriver"`
	CPUManagerPolicy string `json:"cpuManagerPolicy"`
}

// kubeletQuery is what the agent's own configuration says about kubelet.
type kubeletQuery struct {
	// procRoot is procfs (/proc on a node), where a running kubelet is looked for.
	procRoot string
	// file is --kubelet-config. fileSet says the operator gave it (flag, variable or config key): it
	// then names kubelet's file and no kubelet is looked for.
	file    string
	fileSet bool
	// cgroupDriver and cpuManagerPolicy are --cgroup-driver and --cpu-manager-policy; they win.
	cgroupDriver, cpuManagerPolicy string
}

// kubeletFound is kubelet's cgroup driver and CPU manager policy as resolved at start, each with where
// it came from, and how kubelet was looked for: the start-up log line says all of it, since a wrong
// guess (BE cgroups of the wrong driver, CPUs taken from a Guaranteed pod) shows nowhere else.
type kubeletFound struct {
	cgroupDriver, cgroupDriverFrom         string
	cpuManagerPolicy, cpuManagerPolicyFrom string
	lookup                                 string
}

// merge takes ks's fields over k's, each with from as its source. An empty field does not override:
// it is a file that does not set the key.
func (k *kubeletFound) merge(ks kubeletSettings, from string) {
	if ks.CgroupDriver != "" {
		k.cgroupDriver, k.cgroupDriverFrom = ks.CgroupDriver, from
	}
	if ks.CPUManagerPolicy != "" {
		k.cpuManagerPolicy, k.cpuManagerPolicyFrom = ks.CPUManagerPolicy, from
	}
}

// resolveKubelet returns kubelet's cgroup driver and CPU manager policy. The agent's flags win; what
// they leave unset comes from --kubelet-config when the operator named it, else from the one kubelet
// running in q.procRoot (its files and flags, merged as kubelet merges them), else from
// --kubelet-config's default file; what is still unset is kubelet's default (cgroupfs, none). A file
// that exists but cannot be read or does not parse is an error: guessing the CPU manager policy wrong
// would take CPUs kubelet gave a Guaranteed pod.
func resolveKubelet(q kubeletQuery) (kubeletFound, error) {
	var k kubeletFound
	var err error
	switch {
	case q.cgroupDriver != "" && q.cpuManagerPolicy != "":
		k.lookup = "none: --cgroup-driver and --cpu-manager-policy set"
	case q.fileSet:
		k.lookup = "none: --kubelet-config set"
		err = k.readAgentFile(q.file)
	default:
		err = k.lookForKubelet(q)
	}
	if err != nil {
		return kubeletFound{}, err
	}
	k.merge(kubeletSettings{CgroupDriver: q.cgroupDriver}, "flag --cgroup-driver")
	k.merge(kubeletSettings{CPUManagerPolicy: q.cpuManagerPolicy}, "flag --cpu-manager-policy")
	if k.cgroupDriver == "" {
		k.cgroupDriver, k.cgroupDriverFrom = cgroupDriverCgroupfs, "kubelet's default"
	}
	switch k.cgroupDriver {
	case cgroupDriverCgroupfs, cgroupDriverSystemd:
	default:
		return kubeletFound{}, fmt.Errorf("cgroup driver %q from %s: want cgroupfs or systemd, as kubelet's cgroupDriver", k.cgroupDriver, k.cgroupDriverFrom)
	}
	if k.cpuManagerPolicy == "" {
		k.cpuManagerPolicy, k.cpuManagerPolicyFrom = cpuManagerNone, "kubelet's default"
	}
	switch k.cpuManagerPolicy {
	case cpuManagerNone, cpuManagerStatic:
	default:
		return kubeletFound{}, fmt.Errorf("CPU manager policy %q from %s: want none or static, as kubelet's cpuManagerPolicy", k.cpuManagerPolicy, k.cpuManagerPolicyFrom)
	}
	return k, nil
}

// lookForKubelet reads the settings of the one kubelet running in q.procRoot, or --kubelet-config when
// there is none or several.
func (k *kubeletFound) lookForKubelet(q kubeletQuery) error {
	procs, err := kubeletProcs(q.procRoot)
	switch {
	case err != nil:
		k.lookup = fmt.Sprintf("no process list (%v): --kubelet-config read at start", err)
	case len(procs) == 0:
		// tandem-proxy starts before kubelet at boot. Nothing looks again: the file stands in.
		k.lookup = "no kubelet running: --kubelet-config read at start; a kubelet started later is not looked at until the agent restarts"
	case len(procs) > 1:
		pids := make([]string, len(procs))
		for i, p := range procs {
			pids[i] = strconv.Itoa(p.pid)
		}
		k.lookup = fmt.Sprintf("%d kubelets running (pids %s), not guessing which is this node's: --kubelet-config read at start; "+
			"set --kubelet-config, or --cgroup-driver and --cpu-manager-policy", len(procs), strings.Join(pids, ", "))
	default:
		k.lookup = fmt.Sprintf("kubelet pid %d, read at start", procs[0].pid)
		return k.readKubelet(q.procRoot, procs[0])
	}
	return k.readAgentFile(q.file)
}

// readAgentFile reads --kubelet-config. A missing file means kubelet's defaults, as before kubelet is
// configured; the lookup line says it was missing.
func (k *kubeletFound) readAgentFile(file string) error {
	if file == "" {
		return nil
	}
	b, err := os.ReadFile(file)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		k.lookup += fmt.Sprintf("; --kubelet-config %s absent", file)
		return nil
	case err != nil:
		return fmt.Errorf("read --kubelet-config %s (or set --cgroup-driver and --cpu-manager-policy): %w", file, err)
	}
	var ks kubeletSettings
	if err := yaml.Unmarshal(b, &ks); err != nil {
		return fmt.Errorf("--kubelet-config %s is not a KubeletConfiguration (or set --cgroup-driver and --cpu-manager-policy): %w", file, err)
	}
	k.merge(ks, "--kubelet-config "+file)
	return nil
}

// kubeletProc is a running kubelet: its pid and command line.
type kubeletProc struct {
	pid  int
	args []string
}

// kubeletProcs returns the processes of procRoot named kubelet, lowest pid first.
func kubeletProcs(procRoot string) ([]kubeletProc, error) {
	entries, err := os.ReadDir(procRoot)
	if err != nil {
		return nil, err
	}
	var procs []kubeletProc
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 {
			continue
		}
		// A process that ended meanwhile is skipped, as is a zombie (its command line is empty): a
		// kubelet being restarted is not a second kubelet.
		comm, err := os.ReadFile(filepath.Join(procRoot, e.Name(), "comm"))
		if err != nil || strings.TrimSuffix(string(comm), "\n") != "kubelet" {
			continue
		}
		raw, err := os.ReadFile(filepath.Join(procRoot, e.Name(), "cmdline"))
		if err != nil || len(raw) == 0 {
			continue
		}
		procs = append(procs, kubeletProc{pid: pid, args: strings.Split(strings.TrimSuffix(string(raw), "\x00"), "\x00")})
	}
	slices.SortFunc(procs, func(a, b kubeletProc) int { return a.pid - b.pid })
	return procs, nil
}

// readKubelet merges kubelet's settings as kubelet does at start: its --config file, then every *.conf
// below its --config-dir in lexical order, then its own flags. Its files are read through
// <procRoot>/<pid>/root, which is kubelet's root directory whether the agent runs on the host or in a
// privileged pod with hostPID, where the host's /var/lib/kubelet is not mounted.
func (k *kubeletFound) readKubelet(procRoot string, p kubeletProc) error {
	dir := filepath.Join(procRoot, strconv.Itoa(p.pid))
	root := filepath.Join(dir, "root")
	flags := kubeletFlags(p.args)
	// Kubelet reads a relative path from its working directory, which the cwd link names in
	// kubelet's root.
	abs := func(flag string) (string, error) {
		v := flags[flag]
		if path.IsAbs(v) {
			return v, nil
		}
		cwd, err := os.Readlink(filepath.Join(dir, "cwd"))
		if err == nil && !path.IsAbs(cwd) {
			err = fmt.Errorf("%s links to %q, not an absolute path", filepath.Join(dir, "cwd"), cwd)
		}
		if err != nil {
			return "", fmt.Errorf("kubelet pid %d's --%s %s is relative to its working directory (or set --cgroup-driver and --cpu-manager-policy): %w", p.pid, flag, v, err)
		}
		joined := path.Join(cwd, v)
		// WalkDir follows a link to the drop-in directory only when the path ends in "/".
		if strings.HasSuffix(v, "/") {
			joined += "/"
		}
		return joined, nil
	}
	if flags["config"] != "" {
		file, err := abs("config")
		if err != nil {
			return err
		}
		ks, err := readKubeletFile(root, file)
		if err != nil {
			return fmt.Errorf("kubelet pid %d's --config %s (or set --cgroup-driver and --cpu-manager-policy): %w", p.pid, file, err)
		}
		k.merge(ks, fmt.Sprintf("kubelet pid %d's --config %s", p.pid, file))
	}
	if flags["config-dir"] != "" {
		dropInDir, err := abs("config-dir")
		if err != nil {
			return err
		}
		files, err := kubeletDropIns(root, dropInDir)
		if err != nil {
			return fmt.Errorf("kubelet pid %d's --config-dir %s (or set --cgroup-driver and --cpu-manager-policy): %w", p.pid, dropInDir, err)
		}
		for _, file := range files {
			ks, err := readKubeletFile(root, file)
			if err != nil {
				return fmt.Errorf("kubelet pid %d's drop-in %s (or set --cgroup-driver and --cpu-manager-policy): %w", p.pid, file, err)
			}
			k.merge(ks, fmt.Sprintf("kubelet pid %d's drop-in %s", p.pid, file))
		}
	}
	// Kubelet parses its command line again over the merged files: its flags win.
	k.merge(kubeletSettings{CgroupDriver: flags["cgroup-driver"], CPUManagerPolicy: flags["cpu-manager-policy"]},
		fmt.Sprintf("kubelet pid %d's command line", p.pid))
	return nil
}

// kubeletFlags returns the flags the agent follows from kubelet's command line (args[0] is the
// program), read as kubelet's pflag set reads them: --name=value or --name value, "_" as "-" in a name,
// the last one winning, nothing after "--".
func kubeletFlags(args []string) map[string]string {
	followed := map[string]bool{"config": true, "config-dir": true, "cgroup-driver": true, "cpu-manager-policy": true}
	flags := map[string]string{}
	for i := 1; i < len(args); i++ {
		if args[i] == "--" {
			break
		}
		nameValue, ok := strings.CutPrefix(args[i], "--")
		if !ok {
			continue
		}
		name, value, hasValue := strings.Cut(nameValue, "=")
		name = strings.ReplaceAll(name, "_", "-")
		if !followed[name] {
			continue
		}
		if !hasValue {
			if i+1 == len(args) {
				continue
			}
			i++
			value = args[i]
		}
		flags[name] = value
	}
	return flags
}

// kubeletDropIns returns the drop-in files kubelet reads from dir, named as kubelet names them, in the
// order kubelet merges them: every *.conf below dir, walked as filepath.WalkDir walks it (lexical order,
// into subdirectories, not into linked ones), as kubelet does.
func kubeletDropIns(root, dir string) ([]string, error) {
	// WalkDir, like lstat(2), follows a link named by the walked path only when the path ends in "/".
	start, err := inRoot(root, dir, strings.HasSuffix(dir, "/"))
	if err != nil {
		return nil, err
	}
	var files []string
	err = filepath.WalkDir(start, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && filepath.Ext(d.Name()) == ".conf" {
			rel, err := filepath.Rel(start, p)
			if err != nil {
				return err
			}
			files = append(files, path.Join(dir, filepath.ToSlash(rel)))
		}
		return nil
	})
	return files, err
}

// readKubeletFile reads the KubeletConfiguration file that kubelet, whose root directory is root,
// names file.
func readKubeletFile(root, file string) (kubeletSettings, error) {
	var ks kubeletSettings
	p, err := inRoot(root, file, true)
	if err != nil {
		return ks, err
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return ks, err
	}
	if err := yaml.Unmarshal(b, &ks); err != nil {
		return ks, fmt.Errorf("not a KubeletConfiguration: %w", err)
	}
	return ks, nil
}

// maxLinks is how many symbolic links inRoot follows in one path, as Linux's path lookup.
const maxLinks = 40

// inRoot returns where, on this machine, a process whose root directory is root finds the absolute
// path p. Symbolic links are followed as that process follows them: an absolute target from root again.
// The kernel would take it from the agent's own root, which in a pod is the image. The last component
// is followed only when followLast, as lstat(2) does not follow it.
func inRoot(root, p string, followLast bool) (string, error) {
	done := "/"
	todo := strings.Split(p, "/")
	links := 0
	for len(todo) > 0 {
		c := todo[0]
		todo = todo[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			done = path.Dir(done)
			continue
		}
		next := path.Join(done, c)
		last := !slices.ContainsFunc(todo, func(c string) bool { return c != "" && c != "." })
		if last && !followLast {
			done = next
			continue
		}
		fi, err := os.Lstat(filepath.Join(root, next))
		if err != nil {
			// The path asked for, not the component that failed: that is the name the operator knows.
			var pe *fs.PathError
			if errors.As(err, &pe) {
				err = pe.Err
			}
			return "", &fs.PathError{Op: "open", Path: filepath.Join(root, p), Err: err}
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			done = next
			continue
		}
		if links++; links > maxLinks {
			return "", &fs.PathError{Op: "open", Path: filepath.Join(root, p), Err: syscall.ELOOP}
		}
		target, err := os.Readlink(filepath.Join(root, next))
		if err != nil {
			return "", err
		}
		if path.IsAbs(target) {
			done = "/"
		}
		todo = append(strings.Split(target, "/"), todo...)
	}
	return filepath.Join(root, done), nil
}
