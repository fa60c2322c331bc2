// Package node installs and uninstalls the node side of Tandem: the tandem-proxy binary, its
// systemd unit with ExecStart's flags set from Options, kubelet's systemd drop-in and the
// KubeletConfiguration drop-in that points kubelet at the proxy's socket. The files come from
// deploy/ (embedded in the binary), so what a node gets is what the repository ships.
//
// Everything is written below a prefix ("/" on a node; a directory in tests), each file
// atomically (a temporary file renamed over the old one, so a running tandem-proxy's binary is
// replaced, never rewritten in place) and only when its content or mode differs, so running an
// install twice changes nothing the second time.
package node

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/tandemkit/tandem/deploy"
)

// Where the files go, below Options.Prefix. The kubelet configuration drop-in goes into
// Options.KubeletConfigDir instead.
const (
	BinaryPath         = "usr/local/bin/tandem-proxy"
	UnitPath           = "etc/systemd/system/tandem-proxy.service"
	KubeletUnitDropIn  = "etc/systemd/system/kubelet.service.d/10-tandem-proxy.conf"
	kubeletConfigFile  = "50-tandem-runtime.conf"
	DefaultKubeletConf = "/etc/kubernetes/kubelet.conf"
)

// Options are the install's settings. The proxy flags are written into the unit's ExecStart as
// --flag=value; paths there are the node's paths, taken as given (not below Prefix).
type Options struct {
	// Prefix is the directory the files are written below; "/" on a node.
	Prefix string
	// Binary is the tandem-proxy executable to install.
	Binary string
	// KubeletConfigDir is kubelet's --config-dir, below Prefix.
	KubeletConfigDir string

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
		KubeletConfigDir:  "/etc/kubernetes/kubelet.conf.d",
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
}

// Paths returns where Install writes, in order: binary, unit, kubelet unit drop-in, kubelet
// configuration drop-in.
func (o Options) Paths() []string {
	return []string{
		filepath.Join(o.Prefix, BinaryPath),
		filepath.Join(o.Prefix, UnitPath),
		filepath.Join(o.Prefix, KubeletUnitDropIn),
		filepath.Join(o.Prefix, o.KubeletConfigDir, kubeletConfigFile),
	}
}

func (o Options) files() ([]file, error) {
	if o.Prefix == "" || !filepath.IsAbs(o.Prefix) {
		return nil, fmt.Errorf("prefix %q: give an absolute directory (/ on a node)", o.Prefix)
	}
	if !filepath.IsAbs(o.KubeletConfigDir) {
		return nil, fmt.Errorf("kubelet config dir %q: give kubelet's --config-dir as an absolute path", o.KubeletConfigDir)
	}
	if !filepath.IsAbs(o.Listen) {
		return nil, fmt.Errorf("listen %q: give the proxy's socket as an absolute path", o.Listen)
	}
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

// Result is what Install did.
type Result struct {
	Changes []Change
	// ProxyChanged and KubeletChanged say whether a file the proxy's or kubelet's start reads
	// was written, so a restart is needed for it to apply.
	ProxyChanged, KubeletChanged bool
}

// Install writes the node files below o.Prefix. It is idempotent: a file that already holds
// the content and mode is left alone and reported Unchanged.
func Install(o Options) (Result, error) {
	files, err := o.files()
	if err != nil {
		return Result{}, err
	}
	var res Result
	for _, f := range files {
		changed, err := writeFile(f.path, f.data, f.mode)
		if err != nil {
			return res, err
		}
		a := Unchanged
		if changed {
			a = Wrote
			if f.kubelet {
				res.KubeletChanged = true
			} else {
				res.ProxyChanged = true
			}
		}
		res.Changes = append(res.Changes, Change{Path: f.path, Action: a})
	}
	return res, nil
}

// Uninstall removes what Install wrote. Files already gone are reported Absent. The proxy's
// --state-dir is left: it is state, not installation.
func Uninstall(o Options) ([]Change, error) {
	var changes []Change
	// The kubelet files first: should the rest fail, kubelet is pointed back at containerd.
	paths := o.Paths()
	for _, p := range []string{paths[3], paths[2], paths[1], paths[0]} {
		err := os.Remove(p)
		switch {
		case err == nil:
			changes = append(changes, Change{Path: p, Action: Removed})
		case errors.Is(err, fs.ErrNotExist):
			changes = append(changes, Change{Path: p, Action: Absent})
		default:
			return changes, fmt.Errorf("remove %s: %w", p, err)
		}
	}
	return changes, nil
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
	defer os.Remove(tmp.Name()) // after the rename, a no-op
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return false, fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
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
