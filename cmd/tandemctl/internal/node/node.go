// Package node installs and uninstalls the node side of Tandem: the tandem-proxy binary, its
// systemd unit with ExecStart's flags set from Options, kubelet's systemd drop-in and the
// KubeletConfiguration drop-in that points kubelet at the proxy's socket, and, when kubelet
// does not read a --config-dir yet, that flag in KUBELET_EXTRA_ARGS of kubelet's environment
// file. The files come from deploy/ (embedded in the binary), so what a node gets is what the
// repository ships.
//
// Everything is written below a prefix ("/" on a node; a directory in tests), each file
// atomically (a temporary file renamed over the old one, so a running tandem-proxy's binary is
// replaced, never rewritten in place) and only when its content or mode differs, so running an
// install twice changes nothing the second time. Nothing is written when a kubelet flag would
// take kubelet past the proxy: a command-line flag beats every configuration file.
package node

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/tandemkit/tandem/deploy"
)

// Where the files go, below Options.Prefix. The kubelet configuration drop-in goes into
// Options.KubeletConfigDir instead.
const (
	BinaryPath = "usr/local/bin/tandem-proxy"
	// PreviousBinaryPath is the binary an install replaced, for tandemctl node rollback.
	PreviousBinaryPath      = BinaryPath + ".previous"
	UnitPath                = "etc/systemd/system/tandem-proxy.service"
	KubeletUnitDropIn       = "etc/systemd/system/kubelet.service.d/10-tandem-proxy.conf"
	kubeletConfigFile       = "50-tandem-runtime.conf"
	DefaultKubeletConf      = "/etc/kubernetes/kubelet.conf"
	DefaultKubeletConfigDir = "/etc/kubernetes/kubelet.conf.d"
)

// Options are the install's settings. The proxy flags are written into the unit's ExecStart as
// --flag=value; paths there are the node's paths, taken as given (not below Prefix).
type Options struct {
	// Prefix is the directory the files are written below; "/" on a node.
	Prefix string
	// Binary is the tandem-proxy executable to install.
	Binary string
	// KubeletConfigDir is kubelet's --config-dir, below Prefix. Empty: the one kubelet's
	// flags already give it, else DefaultKubeletConfigDir.
	KubeletConfigDir string
	// KubeletEnvFile is the environment file (a node path, read below Prefix) whose
	// KUBELET_EXTRA_ARGS gets --config-dir when kubelet has none. Empty: the one of
	// /etc/default/kubelet and /etc/sysconfig/kubelet that kubelet.service reads.
	KubeletEnvFile string
	// ProcRoot is where running kubelets are looked for ("/proc"); empty skips them, as for an
	// install into a prefix, whose kubelet is not this machine's.
	ProcRoot string

	Kubeconfig        string // --kubeconfig: the node's kubelet credentials
	RuntimeEndpoint   string // --runtime-endpoint: containerd
	Listen            string // --listen: the socket kubelet is pointed at
	KubeletCgroupRoot string // --kubelet-cgroup-root: kubelet's cgroupRoot
	NodeName          string // --node-name; empty leaves the flag out (the proxy's default)
	StateDir          string // --state-dir
	MetricsAddr       string // --metrics-addr
	HooksDir          string // --hooks-dir
	// ProxyArgs are more --flag=value arguments; one naming a flag the unit already has
	// replaces it.
	ProxyArgs []string
}

// DefaultOptions are a kubeadm node's: the values deploy/systemd/tandem-proxy.service ships.
func DefaultOptions() Options {
	return Options{
		Prefix:            "/",
		ProcRoot:          "/proc",
		Kubeconfig:        DefaultKubeletConf,
		RuntimeEndpoint:   "unix:///run/containerd/containerd.sock",
		Listen:            strings.TrimPrefix(deploy.NodeRuntimeEndpoint, "unix://"),
		KubeletCgroupRoot: "/",
		StateDir:          "/var/lib/tandem",
		MetricsAddr:       "127.0.0.1:9316",
		HooksDir:          "/etc/tandem/hooks.d",
	}
}

// flags returns the unit flags Options set, in the order they are added when the template
// lacks them. An empty value means "leave the flag out".
func (o Options) flags() [][2]string {
	return [][2]string{
		{"--listen", o.Listen},
		{"--runtime-endpoint", o.RuntimeEndpoint},
		{"--kubeconfig", o.Kubeconfig},
		{"--kubelet-cgroup-root", o.KubeletCgroupRoot},
		{"--node-name", o.NodeName},
		{"--state-dir", o.StateDir},
		{"--metrics-addr", o.MetricsAddr},
		{"--hooks-dir", o.HooksDir},
	}
}

// Change is one file the install or uninstall looked at.
type Change struct {
	Path   string
	Action Action
}

// Action says what happened to a file.
type Action string

// The actions: a file written, already as wanted, removed, or already gone.
const (
	Wrote     Action = "wrote"
	Unchanged Action = "unchanged"
	Removed   Action = "removed"
	Absent    Action = "absent"
)

// file is one file to install.
type file struct {
	path string
	mode fs.FileMode
	data []byte
	// kubelet: a change needs kubelet restarted; else tandem-proxy.
	kubelet bool
	// keep: report the file, leave it as it is.
	keep bool
}

// Paths returns where Install writes, in order: binary, unit, kubelet unit drop-in, kubelet
// configuration drop-in (in DefaultKubeletConfigDir when o.KubeletConfigDir is empty).
func (o Options) Paths() []string {
	dir := o.KubeletConfigDir
	if dir == "" {
		dir = DefaultKubeletConfigDir
	}
	return []string{
		filepath.Join(o.Prefix, BinaryPath),
		filepath.Join(o.Prefix, UnitPath),
		filepath.Join(o.Prefix, KubeletUnitDropIn),
		filepath.Join(o.Prefix, dir, kubeletConfigFile),
	}
}

func (o Options) validate() error {
	if o.Prefix == "" || !filepath.IsAbs(o.Prefix) {
		return fmt.Errorf("prefix %q: give an absolute directory (/ on a node)", o.Prefix)
	}
	if o.KubeletConfigDir != "" {
		if err := checkConfigDir(o.KubeletConfigDir, "--kubelet-config-dir"); err != nil {
			return err
		}
	}
	if o.KubeletEnvFile != "" && !filepath.IsAbs(o.KubeletEnvFile) {
		return fmt.Errorf("kubelet env file %q: give the file as an absolute path", o.KubeletEnvFile)
	}
	if !filepath.IsAbs(o.Listen) {
		return fmt.Errorf("listen %q: give the proxy's socket as an absolute path", o.Listen)
	}
	return nil
}

// checkConfigDir refuses a --config-dir that cannot be kubelet's: it must be absolute, and one
// word in KUBELET_EXTRA_ARGS, which systemd splits at blanks without unquoting.
func checkConfigDir(dir, what string) error {
	if !filepath.IsAbs(dir) {
		return fmt.Errorf("kubelet config dir %q (%s): give kubelet's --config-dir as an absolute path", dir, what)
	}
	if err := checkWord("kubelet config dir", dir); err != nil {
		return fmt.Errorf("%w (%s)", err, what)
	}
	return nil
}

// files returns what Install writes; o.KubeletConfigDir is resolved by then.
func (o Options) files() ([]file, error) {
	bin, err := os.ReadFile(o.Binary)
	if err != nil {
		return nil, fmt.Errorf("read the tandem-proxy binary (build it with make build, or pass --binary): %w", err)
	}
	tmpl, err := fs.ReadFile(deploy.NodeFiles(), deploy.ProxyUnit)
	if err != nil {
		return nil, fmt.Errorf("embedded unit: %w", err)
	}
	paths := o.Paths()
	unit, err := Unit(tmpl, paths[0], o)
	if err != nil {
		return nil, err
	}
	dropIn, err := fs.ReadFile(deploy.NodeFiles(), deploy.KubeletUnitDropIn)
	if err != nil {
		return nil, fmt.Errorf("embedded kubelet drop-in: %w", err)
	}
	kc, err := fs.ReadFile(deploy.NodeFiles(), deploy.KubeletConfigDropIn)
	if err != nil {
		return nil, fmt.Errorf("embedded kubelet configuration: %w", err)
	}
	if !bytes.Contains(kc, []byte(deploy.NodeRuntimeEndpoint)) {
		return nil, fmt.Errorf("%s does not name %s: the two deploy/ files disagree", deploy.KubeletConfigDropIn, deploy.NodeRuntimeEndpoint)
	}
	kc = bytes.ReplaceAll(kc, []byte(deploy.NodeRuntimeEndpoint), []byte("unix://"+o.Listen))
	return []file{
		{path: paths[0], mode: 0o755, data: bin},
		{path: paths[1], mode: 0o644, data: unit},
		{path: paths[2], mode: 0o644, data: dropIn, kubelet: true},
		{path: paths[3], mode: 0o644, data: kc, kubelet: true},
	}, nil
}

// Result is what Install or Rollback did.
type Result struct {
	Changes []Change
	// ProxyChanged and KubeletChanged say whether tandem-proxy or kubelet must restart: a file
	// its start reads was written, or (kubelet) it runs without the --config-dir its files
	// now give it.
	ProxyChanged, KubeletChanged bool
	// Warnings say what install could not do that kubelet needs to use the proxy.
	Warnings []string
}

// Install writes the node files below o.Prefix. It is idempotent: a file that already holds
// the content and mode is left alone and reported Unchanged. It first reads kubelet's flags,
// and writes nothing when one would take kubelet past the proxy (an error wrapping
// ErrKubeletFlagBypass).
func Install(o Options) (Result, error) {
	if err := o.validate(); err != nil {
		return Result{}, err
	}
	plan, err := planKubelet(o)
	if err != nil {
		return Result{}, err
	}
	o.KubeletConfigDir = plan.configDir
	files, err := o.files()
	if err != nil {
		return Result{}, err
	}
	// Last, after the drop-in has created the directory: kubelet does not start with a
	// --config-dir that does not exist.
	if plan.env != nil {
		files = append(files, *plan.env)
	}
	res := Result{KubeletChanged: plan.restart, Warnings: plan.warnings}
	// Kept for tandemctl node rollback, before the binary it holds is replaced.
	if old, err := os.ReadFile(files[0].path); err == nil && !bytes.Equal(old, files[0].data) {
		files = slices.Insert(files, 0, file{path: filepath.Join(o.Prefix, PreviousBinaryPath), mode: 0o755, data: old})
	}
	for _, f := range files {
		if f.keep {
			res.Changes = append(res.Changes, Change{Path: f.path, Action: Unchanged})
			continue
		}
		changed, err := writeFile(f.path, f.data, f.mode)
		if err != nil {
			return res, err
		}
		a := Unchanged
		if changed {
			a = Wrote
			switch {
			case f.kubelet:
				res.KubeletChanged = true
			case f.path != filepath.Join(o.Prefix, PreviousBinaryPath):
				res.ProxyChanged = true
			}
		}
		res.Changes = append(res.Changes, Change{Path: f.path, Action: a})
	}
	return res, nil
}

// Uninstall removes what Install wrote, and the --config-dir it added to kubelet's
// environment file (and nothing else of that file). Files already gone are reported Absent.
// The proxy's --state-dir is left: it is state, not installation. Nothing kubelet's flags say
// stops it: an uninstall must always be possible.
func Uninstall(o Options) ([]Change, error) {
	if o.Prefix == "" || !filepath.IsAbs(o.Prefix) {
		return nil, fmt.Errorf("prefix %q: give an absolute directory (/ on a node)", o.Prefix)
	}
	// What cannot be read only narrows where the drop-in and the added flag are looked for.
	v, _ := readKubelet(o, o.KubeletEnvFile, nil)
	if o.KubeletConfigDir == "" {
		o.KubeletConfigDir, _ = discoverConfigDir(v)
	}
	var changes []Change
	remove := func(p string) error {
		err := os.Remove(p)
		switch {
		case err == nil:
			changes = append(changes, Change{Path: p, Action: Removed})
		case errors.Is(err, fs.ErrNotExist):
			changes = append(changes, Change{Path: p, Action: Absent})
		default:
			return fmt.Errorf("remove %s: %w", p, err)
		}
		return nil
	}
	// The kubelet files first: should the rest fail, kubelet is pointed back at containerd.
	paths := o.Paths()
	if err := remove(paths[3]); err != nil {
		return changes, err
	}
	envFiles := []string{o.KubeletEnvFile}
	if o.KubeletEnvFile == "" {
		envFiles = append([]string{debianEnvFile, rpmEnvFile}, v.envFiles...)
	}
	seen := map[string]bool{}
	for _, f := range envFiles {
		p := filepath.Join(o.Prefix, f)
		if seen[p] {
			continue
		}
		seen[p] = true
		data, err := os.ReadFile(p)
		if err != nil || !bytes.Contains(data, []byte(markerHead)) {
			continue // not a file install changed
		}
		out, changed, gone := removeEnvArg(data)
		switch {
		case gone:
			if err := remove(p); err != nil {
				return changes, err
			}
		case changed:
			mode := fs.FileMode(0o644)
			if st, err := os.Stat(p); err == nil {
				mode = st.Mode().Perm()
			}
			if _, err := writeFile(p, out, mode); err != nil {
				return changes, err
			}
			changes = append(changes, Change{Path: p, Action: Wrote})
		}
	}
	for _, p := range []string{paths[2], paths[1], paths[0], filepath.Join(o.Prefix, PreviousBinaryPath)} {
		if err := remove(p); err != nil {
			return changes, err
		}
	}
	return changes, nil
}

// ErrNoPreviousBinary says there is nothing to roll back to.
var ErrNoPreviousBinary = errors.New("no previous tandem-proxy binary")

// Rollback swaps the installed tandem-proxy binary with the one the last install replaced,
// so that a second rollback rolls forward again. Only the binary changes: the unit stays
// as the newer install wrote it.
func Rollback(o Options) (Result, error) {
	if o.Prefix == "" || !filepath.IsAbs(o.Prefix) {
		return Result{}, fmt.Errorf("prefix %q: give an absolute directory (/ on a node)", o.Prefix)
	}
	bin, prev := filepath.Join(o.Prefix, BinaryPath), filepath.Join(o.Prefix, PreviousBinaryPath)
	old, err := os.ReadFile(prev)
	if errors.Is(err, fs.ErrNotExist) {
		return Result{}, fmt.Errorf("%w at %s: tandemctl node install keeps one there only when it replaces a different binary; to install an older one, run tandemctl node install --binary <older tandem-proxy>", ErrNoPreviousBinary, prev)
	}
	if err != nil {
		return Result{}, fmt.Errorf("read %s: %w", prev, err)
	}
	cur, err := os.ReadFile(bin)
	if err != nil {
		return Result{}, fmt.Errorf("read the installed tandem-proxy, %s (without one, run tandemctl node install): %w", bin, err)
	}
	if bytes.Equal(old, cur) {
		return Result{Changes: []Change{{Path: bin, Action: Unchanged}, {Path: prev, Action: Unchanged}}}, nil
	}
	if _, err := writeFile(bin, old, 0o755); err != nil {
		return Result{}, err
	}
	res := Result{Changes: []Change{{Path: bin, Action: Wrote}}, ProxyChanged: true}
	if _, err := writeFile(prev, cur, 0o755); err != nil {
		return res, fmt.Errorf("rolled back %s, but could not keep the binary it replaced: %w", bin, err)
	}
	res.Changes = append(res.Changes, Change{Path: prev, Action: Wrote})
	return res, nil
}

// writeFile writes data to path with mode unless it already holds exactly that, through a
// temporary file in the same directory renamed over path. It reports whether it wrote.
func writeFile(path string, data []byte, mode fs.FileMode) (bool, error) {
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data) {
		if st, err := os.Stat(path); err == nil && st.Mode().Perm() == mode {
			return false, nil
		}
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return false, fmt.Errorf("create %s: %w", dir, err)
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*")
	if err != nil {
		return false, fmt.Errorf("write %s: %w", path, err)
	}
	defer func() { _ = os.Remove(tmp.Name()) }() // after the rename, a no-op
	if _, err := tmp.Write(data); err != nil {
		_ = tmp.Close()
		return false, fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Chmod(mode); err != nil {
		_ = tmp.Close()
		return false, fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return false, fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return false, fmt.Errorf("write %s: %w", path, err)
	}
	return true, nil
}
