package framework

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ContainerdOptions configure a private containerd.
type ContainerdOptions struct {
	Flavor string // Flavor16 or Flavor2
	// Dir holds root, state, socket, config and logs. Keep it short: unix
	// socket paths must stay under 108 bytes.
	Dir string
	CNI bool // write a bridge conflist and enable pod networking (needs containernetworking-plugins)
	// NRISocket, when set, enables containerd's NRI with its socket at this path (keep it under 108
	// bytes; NRISocketPath gives one inside Dir), so that an NRI plugin such as tandem-nri
	// can connect. Only Flavor2: containerd 1.6 has NRI 0.1, which runs binaries and has no socket.
	NRISocket string
}

// Containerd is a private containerd daemon with its CRI plugin.
type Containerd struct {
	Flavor   string
	Dir      string
	Socket   string // absolute path of the CRI/grpc socket
	Endpoint string // "unix://" + Socket
	LogPath  string // the daemon's log
	// NRISocket is where containerd serves NRI to plugins; empty when NRI is off.
	NRISocket string

	bins       containerdBinaries
	configPath string
	bridge     string // CNI bridge, deleted on Stop; empty without CNI
	proc       *process
	// served is set once the daemon has answered CRI: only then is it worth
	// starting again in Stop to remove pods.
	served bool
}

// Paths under Dir. The names are short because Dir may be long already.
const (
	ctrdSocketName = "containerd.sock"
	ctrdPIDName    = "containerd.pid"
	nriSocketName  = "nri.sock"
)

// NRIRequestTimeout is how long containerd waits for an NRI plugin's answer (its
// plugin_request_timeout) in the config StartContainerd writes: containerd's default, so that a
// plugin is tested against the deadline it meets on a node.
const NRIRequestTimeout = 2 * time.Second

// NRISocketPath returns a path for containerd's NRI socket inside a containerd Dir.
func NRISocketPath(dir string) string { return filepath.Join(dir, nriSocketName) }

// StartContainerd writes a config under opts.Dir (restrict_oom_score_adj,
// SandboxImage, cgroupfs, private runc root and CNI dirs), starts the daemon,
// waits until CRI Version answers, and imports TestImage.
func StartContainerd(ctx context.Context, opts ContainerdOptions) (*Containerd, error) {
	if opts.Dir == "" || !filepath.IsAbs(opts.Dir) {
		return nil, fmt.Errorf("containerd dir %q must be an absolute path", opts.Dir)
	}
	sock := filepath.Join(opts.Dir, ctrdSocketName)
	if len(sock)+len(".ttrpc") >= 108 {
		return nil, fmt.Errorf("containerd dir %s is too long for a unix socket path: use a shorter one", opts.Dir)
	}
	if err := checkNRISocket(opts.Flavor, opts.NRISocket); err != nil {
		return nil, err
	}
	bins, err := ensureContainerd(ctx, opts.Flavor)
	if err != nil {
		return nil, err
	}
	c := &Containerd{
		Flavor:     opts.Flavor,
		Dir:        opts.Dir,
		Socket:     sock,
		Endpoint:   "unix://" + sock,
		LogPath:    filepath.Join(opts.Dir, "containerd.log"),
		NRISocket:  opts.NRISocket,
		bins:       bins,
		configPath: filepath.Join(opts.Dir, "config.toml"),
	}
	for _, d := range []string{"root", "state", "runc", "opt", "tmp", "s", "cni/net.d", "cni/ipam", "nri/plugins", "nri/conf.d"} {
		if err := os.MkdirAll(filepath.Join(opts.Dir, d), 0o711); err != nil {
			return nil, fmt.Errorf("create containerd dirs: %w", err)
		}
	}
	if opts.CNI {
		if err := c.writeCNIConfig(); err != nil {
			return nil, err
		}
	}
	if err := os.WriteFile(c.configPath, []byte(c.config()), 0o644); err != nil {
		return nil, fmt.Errorf("write containerd config: %w", err)
	}
	if err := c.StartDaemon(ctx); err != nil {
		return nil, errors.Join(err, c.Stop(context.WithoutCancel(ctx)))
	}
	if err := c.importTestImage(ctx); err != nil {
		return nil, errors.Join(err, c.Stop(context.WithoutCancel(ctx)))
	}
	return c, nil
}

// checkNRISocket refuses an NRI socket that this flavor or a unix socket cannot have.
func checkNRISocket(flavor, sock string) error {
	if sock == "" {
		return nil
	}
	if flavor != Flavor2 {
		return fmt.Errorf("NRI plugins need containerd 1.7 or later; containerd %s has NRI 0.1 only (binaries run from /opt/nri/bin, no plugin socket): use flavor %q", flavor, Flavor2)
	}
	if !filepath.IsAbs(sock) || len(sock) >= 108 {
		return fmt.Errorf("NRI socket %q must be an absolute path shorter than 108 bytes (a unix socket path)", sock)
	}
	return nil
}

// AttachContainerd returns the containerd that an earlier StartContainerd left
// running in dir (for example a demo run with --keep), so that Stop can tear
// it down.
func AttachContainerd(ctx context.Context, flavor, dir string) (*Containerd, error) {
	bins, err := ensureContainerd(ctx, flavor)
	if err != nil {
		return nil, err
	}
	sock := filepath.Join(dir, ctrdSocketName)
	c := &Containerd{
		Flavor: flavor, Dir: dir, Socket: sock, Endpoint: "unix://" + sock,
		LogPath: filepath.Join(dir, "containerd.log"), bins: bins, configPath: filepath.Join(dir, "config.toml"),
	}
	if b, err := os.ReadFile(filepath.Join(dir, "cni", "bridge")); err == nil {
		c.bridge = strings.TrimSpace(string(b))
	}
	c.served = true // it ran: Stop may start it again to remove its pods
	if b, err := os.ReadFile(filepath.Join(dir, ctrdPIDName)); err == nil {
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			c.proc, _ = findProcess(pid) // a dead daemon is fine: Stop restarts it to remove pods
		}
	}
	return c, nil
}

// PID returns the daemon's process id, or 0 when it is not running.
func (c *Containerd) PID() int {
	if !c.proc.running() {
		return 0
	}
	return c.proc.pid
}

// StartDaemon starts the daemon on the existing config and dirs and waits
// until CRI answers. It is a no-op when the daemon runs already.
func (c *Containerd) StartDaemon(ctx context.Context) error {
	if c.proc.running() {
		return nil
	}
	// The v2 daemon must find its own shim before Debian's 1.6 one.
	env := append(os.Environ(), "PATH="+c.bins.binDir+":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
	p, err := startProcess(c.bins.containerd, []string{"--config", c.configPath}, env, c.LogPath)
	if err != nil {
		return err
	}
	c.proc = p
	if err := os.WriteFile(filepath.Join(c.Dir, ctrdPIDName), []byte(strconv.Itoa(p.pid)), 0o644); err != nil {
		return fmt.Errorf("write containerd pid file: %w", err)
	}
	return c.waitReady(ctx, 60*time.Second)
}

// waitReady polls CRI Version until it answers, the daemon dies, or timeout.
func (c *Containerd) waitReady(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := grpc.NewClient(c.Endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("dial containerd: %w", err)
	}
	defer conn.Close()
	rs := runtimeapi.NewRuntimeServiceClient(conn)
	for {
		if !c.proc.running() {
			return fmt.Errorf("containerd exited during start: see %s: %s", c.LogPath, c.logTail())
		}
		callCtx, callCancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := rs.Version(callCtx, &runtimeapi.VersionRequest{})
		callCancel()
		if err == nil {
			c.served = true
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("containerd did not answer CRI Version (last error: %w): see %s: %w", err, c.LogPath, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (c *Containerd) logTail() string {
	b, _ := os.ReadFile(c.LogPath)
	return tail(b, 1500)
}

// StopDaemon stops the daemon only (SIGTERM, then SIGKILL after 10s); shims
// and containers keep running.
func (c *Containerd) StopDaemon(ctx context.Context) error {
	return c.proc.stop(ctx, syscall.SIGTERM, 10*time.Second)
}

// Restart stops the daemon only (pods and shims keep running), starts it
// again on the same dirs and waits until CRI answers.
func (c *Containerd) Restart(ctx context.Context) error {
	if err := c.StopDaemon(ctx); err != nil {
		return err
	}
	return c.StartDaemon(ctx)
}

// Kill SIGKILLs the daemon only; shims and containers keep running.
func (c *Containerd) Kill() error {
	return c.proc.kill(10 * time.Second)
}

// Ctr runs `ctr -a Socket -n k8s.io args...` with the flavor's own ctr.
func (c *Containerd) Ctr(ctx context.Context, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, c.bins.ctr, append([]string{"-a", c.Socket, "-n", "k8s.io"}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, tail(out, 2000))
	}
	return out, nil
}

// importTestImage loads TestImage.
func (c *Containerd) importTestImage(ctx context.Context) error {
	tarball, err := BuildTestImage(ctx, filepath.Join(c.Dir, "image"))
	if err != nil {
		return err
	}
	return c.ImportImage(ctx, tarball, TestImage)
}

// ImportImage loads the OCI image-layout tarball holding image and waits until the CRI plugin lists
// it; the CRI plugin learns of imported images from an event, not at once.
func (c *Containerd) ImportImage(ctx context.Context, tarball, image string) error {
	if _, err := c.Ctr(ctx, "images", "import", tarball); err != nil {
		return err
	}
	conn, err := grpc.NewClient(c.Endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("dial containerd: %w", err)
	}
	defer conn.Close()
	is := runtimeapi.NewImageServiceClient(conn)
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := is.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: image}})
		if err == nil && resp.GetImage() != nil {
			return nil
		}
		if err == nil {
			err = errors.New("ImageStatus answered no image")
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("imported image %s is not visible through CRI (last error: %w): see %s", image, err, c.LogPath)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Stop removes every pod and container (so that runc deletes their cgroups
// and mounts), stops the daemon, kills any shim or container process left
// behind, unmounts what remains under Dir and deletes the CNI bridge. It is
// safe to call more than once; Dir itself is left for the caller to remove.
func (c *Containerd) Stop(ctx context.Context) error {
	var errs []error
	// Pods can only be removed through a live daemon: bring it back if a
	// test killed it.
	if !c.proc.running() && c.served {
		if err := c.StartDaemon(ctx); err != nil {
			errs = append(errs, fmt.Errorf("restart containerd to remove pods: %w", err))
		}
	}
	ids, err := c.removeAll(ctx)
	if err != nil {
		errs = append(errs, err)
	}
	if err := c.StopDaemon(ctx); err != nil {
		errs = append(errs, fmt.Errorf("stop containerd: %w", err))
	}
	shimSockets := c.shimSockets()
	if err := c.killLeftovers(); err != nil {
		errs = append(errs, err)
	}
	for _, s := range shimSockets {
		_ = os.Remove(s) // a killed shim leaves its socket behind
	}
	if err := unmountUnder(c.Dir); err != nil {
		errs = append(errs, err)
	}
	removeCgroups(ids)
	if c.bridge != "" {
		if _, err := os.Stat("/sys/class/net/" + c.bridge); err == nil {
			if out, err := exec.CommandContext(ctx, "ip", "link", "delete", c.bridge).CombinedOutput(); err != nil {
				errs = append(errs, fmt.Errorf("delete bridge %s: %w: %s", c.bridge, err, out))
			}
		}
	}
	return errors.Join(errs...)
}

// removeAll stops and removes every sandbox and container and returns their ids.
func (c *Containerd) removeAll(ctx context.Context) ([]string, error) {
	if !c.proc.running() {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	conn, err := grpc.NewClient(c.Endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("dial containerd: %w", err)
	}
	defer conn.Close()
	rs := runtimeapi.NewRuntimeServiceClient(conn)
	var ids []string
	var errs []error
	ctrs, err := rs.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
	if err != nil {
		return nil, fmt.Errorf("list containers for clean-up: %w", err)
	}
	for _, ctr := range ctrs.GetContainers() {
		ids = append(ids, ctr.GetId())
		if _, err := rs.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: ctr.GetId()}); err != nil {
			errs = append(errs, fmt.Errorf("stop container %s: %w", ctr.GetId(), err))
		}
		if _, err := rs.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: ctr.GetId()}); err != nil {
			errs = append(errs, fmt.Errorf("remove container %s: %w", ctr.GetId(), err))
		}
	}
	pods, err := rs.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return ids, errors.Join(append(errs, fmt.Errorf("list pods for clean-up: %w", err))...)
	}
	for _, pod := range pods.GetItems() {
		ids = append(ids, pod.GetId())
		if _, err := rs.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: pod.GetId()}); err != nil {
			errs = append(errs, fmt.Errorf("stop pod %s: %w", pod.GetId(), err))
		}
		if _, err := rs.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: pod.GetId()}); err != nil {
			errs = append(errs, fmt.Errorf("remove pod %s: %w", pod.GetId(), err))
			continue
		}
		if pod.GetMetadata() != nil {
			_ = os.RemoveAll(podLogDir(pod.GetMetadata())) // made by PodSandboxConfig
		}
	}
	return ids, errors.Join(errs...)
}

// shimSockets lists the shim sockets (under /run/containerd/s, a path fixed
// in containerd) that this daemon's tasks use.
func (c *Containerd) shimSockets() []string {
	files, _ := filepath.Glob(filepath.Join(c.Dir, "state", "io.containerd.runtime.v2.task", "*", "*", "address"))
	var socks []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		addr := strings.TrimSpace(string(b))
		if s, ok := strings.CutPrefix(addr, "unix://"); ok && (strings.HasPrefix(s, "/run/containerd/s/") || strings.HasPrefix(s, c.Dir+"/")) {
			socks = append(socks, s)
		}
	}
	return socks
}

// killLeftovers SIGKILLs this daemon's shims (their command line names our
// socket) and every process whose root lies under Dir (containers whose shim
// is gone), then waits for them to exit.
func (c *Containerd) killLeftovers() error {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return fmt.Errorf("scan processes: %w", err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		args := strings.Split(string(cmdline), "\x00")
		isShim := len(args) > 0 && strings.Contains(filepath.Base(args[0]), "containerd-shim")
		if isShim && containsArg(args, c.Socket) {
			pids = append(pids, pid)
			continue
		}
		if root, err := os.Readlink(fmt.Sprintf("/proc/%d/root", pid)); err == nil && strings.HasPrefix(root, c.Dir+"/") {
			pids = append(pids, pid)
		}
	}
	for _, pid := range pids {
		syscall.Kill(pid, syscall.SIGKILL) //nolint:errcheck // it may have exited already
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, pid := range pids {
		for alive(pid) {
			if time.Now().After(deadline) {
				return fmt.Errorf("process %d under %s survived SIGKILL", pid, c.Dir)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return nil
}

func containsArg(args []string, s string) bool {
	for _, a := range args {
		if a == s || strings.HasSuffix(a, "://"+s) {
			return true
		}
	}
	return false
}

// unmountUnder detaches every mount below dir, deepest first.
func unmountUnder(dir string) error {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return fmt.Errorf("read mounts: %w", err)
	}
	defer f.Close()
	var points []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := UnescapeMount(fields[4])
		if strings.HasPrefix(mp, dir+"/") {
			points = append(points, mp)
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

// UnescapeMount decodes the octal escapes (\040 for space) of /proc/self/mountinfo.
func UnescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// removeCgroups removes cgroups that runc left for ids under the k8s.io parent
// (the parent containerd's CRI uses for pods without a CgroupParent), in
// every hierarchy.
func removeCgroups(ids []string) {
	hier, _ := filepath.Glob("/sys/fs/cgroup/*/k8s.io")
	if _, err := os.Stat("/sys/fs/cgroup/k8s.io"); err == nil {
		hier = append(hier, "/sys/fs/cgroup/k8s.io")
	}
	for _, h := range hier {
		for _, id := range ids {
			_ = os.Remove(filepath.Join(h, id)) // rmdir; fails harmlessly if it is gone or busy
		}
		// The parent too, which runc created for the test's pods: rmdir fails harmlessly while another
		// containerd still has pods there, and containerd creates it again when it needs it.
		_ = os.Remove(h)
	}
}

// config renders the daemon's config in the layout of its flavor.
func (c *Containerd) config() string {
	d := c.Dir
	if c.Flavor == Flavor2 {
		// Shim sockets default to /run/containerd/s; keep them under Dir
		// when the path (Dir/s/<sha256 hex>) fits a unix socket.
		shimDir := filepath.Join(d, "s")
		if len(shimDir)+1+64 >= 108 {
			shimDir = ""
		}
		return fmt.Sprintf(`version = 4
root = %[1]q
state = %[2]q
temp = %[9]q
imports = []
disabled_plugins = ['io.containerd.snapshotter.v1.btrfs', 'io.containerd.snapshotter.v1.zfs', 'io.containerd.snapshotter.v1.devmapper']

[plugins]
  [plugins.'io.containerd.server.v1.grpc']
    address = %[3]q

  [plugins.'io.containerd.server.v1.ttrpc']
    address = %[4]q

  [plugins.'io.containerd.shim.v1.manager']
    socket_dir = %[10]q

  [plugins.'io.containerd.internal.v1.opt']
    path = %[5]q

%[11]s
  [plugins.'io.containerd.cri.v1.images']
    snapshotter = 'overlayfs'
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = %[6]q

  [plugins.'io.containerd.cri.v1.runtime']
    # Without CAP_SYS_RESOURCE runc cannot lower oom_score_adj to -998.
    restrict_oom_score_adj = true
    disable_apparmor = true
    netns_mounts_under_state_dir = true
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = 'runc'
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = 'io.containerd.runc.v2'
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
          SystemdCgroup = false
          Root = %[7]q
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = ['/usr/lib/cni']
      conf_dir = %[8]q
      max_conf_num = 1
`, filepath.Join(d, "root"), filepath.Join(d, "state"), c.Socket, c.Socket+".ttrpc",
			filepath.Join(d, "opt"), SandboxImage, filepath.Join(d, "runc"), filepath.Join(d, "cni", "net.d"),
			filepath.Join(d, "tmp"), shimDir, c.nriConfig())
	}
	return fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]

[grpc]
  address = %[3]q

[ttrpc]
  address = %[4]q

[plugins]
  [plugins."io.containerd.internal.v1.opt"]
    path = %[5]q

  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = %[6]q
    # Without CAP_SYS_RESOURCE runc cannot lower oom_score_adj to -998.
    restrict_oom_score_adj = true
    disable_apparmor = true
    netns_mounts_under_state_dir = true
    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "overlayfs"
      default_runtime_name = "runc"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          SystemdCgroup = false
          Root = %[7]q
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "/usr/lib/cni"
      conf_dir = %[8]q
      max_conf_num = 1
`, filepath.Join(d, "root"), filepath.Join(d, "state"), c.Socket, c.Socket+".ttrpc",
		filepath.Join(d, "opt"), SandboxImage, filepath.Join(d, "runc"), filepath.Join(d, "cni", "net.d"))
}

// nriConfig is the NRI section of a Flavor2 config. Every path is under Dir: the defaults
// (/var/run/nri/nri.sock, /opt/nri/plugins, /etc/nri/conf.d) are the node's, and a test daemon must
// neither take the node's socket nor start the node's plugins.
func (c *Containerd) nriConfig() string {
	if c.NRISocket == "" {
		return `  # NRI's socket path is global (/var/run/nri); a private daemon must not take it.
  [plugins.'io.containerd.nri.v1.nri']
    disable = true
`
	}
	return fmt.Sprintf(`  [plugins.'io.containerd.nri.v1.nri']
    disable = false
    socket_path = %q
    plugin_path = %q
    plugin_config_path = %q
    plugin_registration_timeout = '5s'
    plugin_request_timeout = %q
    # External plugins (tandem-nri) connect to the socket.
    disable_connections = false
`, c.NRISocket, filepath.Join(c.Dir, "nri", "plugins"), filepath.Join(c.Dir, "nri", "conf.d"), NRIRequestTimeout.String())
}

// writeCNIConfig writes a bridge + host-local conflist whose bridge name,
// subnet and IPAM state are private to this daemon.
func (c *Containerd) writeCNIConfig() error {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		return fmt.Errorf("pick bridge name: %w", err)
	}
	c.bridge = "tdm" + hex.EncodeToString(b[:]) // 11 bytes; Linux allows 15
	// 10.200.0.0/16 to 10.254.255.0/24: away from the usual 10.0-10.96 ranges.
	n, err := rand.Int(rand.Reader, big.NewInt(55*256))
	if err != nil {
		return fmt.Errorf("pick subnet: %w", err)
	}
	subnet := fmt.Sprintf("10.%d.%d.0/24", 200+n.Int64()/256, n.Int64()%256)
	conf := fmt.Sprintf(`{
  "cniVersion": "0.4.0",
  "name": "tandem-e2e",
  "plugins": [
    {
      "type": "bridge",
      "bridge": %q,
      "isGateway": true,
      "ipMasq": false,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": %q}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": %q
      }
    }
  ]
}
`, c.bridge, subnet, filepath.Join(c.Dir, "cni", "ipam"))
	if err := os.WriteFile(filepath.Join(c.Dir, "cni", "net.d", "10-tandem-e2e.conflist"), []byte(conf), 0o644); err != nil {
		return fmt.Errorf("write CNI config: %w", err)
	}
	if err := os.WriteFile(filepath.Join(c.Dir, "cni", "bridge"), []byte(c.bridge+"\n"), 0o644); err != nil {
		return fmt.Errorf("write CNI bridge name: %w", err)
	}
	return nil
}
