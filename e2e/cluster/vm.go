package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

	"github.com/tandemkit/tandem/e2e/framework"
)

// The VM node: a Debian 13 virtual machine with its own kernel (qemu, software emulation: KVM does
// not run guests on these machines), cgroup v2 only, systemd as init, containerd with the systemd
// cgroup driver, joined to the cluster by `kubeadm join` with TLS bootstrap, as the nodes Tandem's
// users run are. Why qemu and not user-mode-linux, which runs CPU-bound work about 20 times
// faster here: UML has one CPU and no cpuset controller, and cpusets are what Koordinator's
// documented QoS example, which users check a colocation system against, is about.
const (
	// NodeVM is the VM node's name (its hostname too).
	NodeVM = "node-vm"
	// The link between this machine and the VM: a bridge here, a tap device qemu attaches to it.
	vmBridge   = "tdmvm0"
	vmTap      = "tdmvmtap0"
	vmHostAddr = "10.198.0.1"
	vmAddr     = "10.198.0.2"
	// vmPodSubnet is the VM node's pod network, routed here through vmAddr; the host nodes' CNI
	// subnets are in 10.200.0.0/16 to 10.254.255.0/24.
	vmPodSubnet = "10.199.0.0/24"
	// The host directory of a run, shared read-only into the VM at vmShareMount.
	vmShareTag   = "tandem"
	vmShareMount = "/mnt/tandem"
	// VMTaint keeps pods off the VM node unless they tolerate it: the host nodes' tests stay on
	// the host, and the VM's tests place what they mean to place there. DaemonSets that tolerate
	// every taint (tandem-nri) run there as on any node.
	VMTaint = "tandem.io/vm-node"
	// vmCPUs is the VM's CPU count: Koordinator's QoS example on one node needs LSE's and LSR's
	// CPUs and a shared pool beside them.
	vmCPUs      = 4
	vmMemoryMiB = 4096
	// qemuBinary is Debian's qemu-system-x86.
	qemuBinary = "/usr/bin/qemu-system-x86_64"
	// vmHostCgroup is the cgroup qemu runs in on this machine, and vmHostCPUs the CPU time it may
	// take there, in thousandths of a CPU: a VM host gives a VM a share of its CPUs, and this
	// machine's two are shared with the control plane and the host node, which measures the VM's
	// work as its own system usage. One TCG thread runs the vCPUs; the cap holds qemu's other
	// threads (disk, network, 9p) to the same CPU, so that a CPU hog in the VM leaves the host node
	// one CPU and the two nodes' usage tells them apart.
	vmHostCgroup = "tandem-vm"
	vmHostCPUs   = 1000
	// QEMU is the name of the VM's qemu process among the cluster's daemons.
	QEMU = "qemu@" + NodeVM
	// VMContainerdDebian, as Options.VM, runs the containerd Debian 13 ships (1.7) on the VM node;
	// framework.Flavor2 replaces it with containerd 2 as an operator upgrades it.
	VMContainerdDebian = "debian"
)

// VMNode is the cluster's VM node: how to reach it and what runs on it.
type VMNode struct {
	Name string `json:"name"`
	Dir  string `json:"dir"`
	// Addr is the VM's address on the link to this machine, its kubelet's --node-ip.
	Addr string `json:"addr"`
	// Key logs in as root over ssh.
	Key string `json:"key"`
	// Share is this machine's directory the VM sees read-only at ShareMount.
	Share      string `json:"share"`
	ShareMount string `json:"shareMount"`
	// Console is the VM's serial console, written by qemu.
	Console string `json:"console"`
	// Disk is the VM's disk, an overlay of BaseDisk, the cached image.
	Disk     string `json:"disk"`
	BaseDisk string `json:"baseDisk"`
	// Flavor is the VM's containerd: VMContainerdDebian or framework.Flavor2.
	Flavor string `json:"flavor"`
	CPUs   int    `json:"cpus"`
}

// hostNetState is what the VM's link changed on this machine, so that Down puts it back.
type hostNetState struct {
	// IPForward is net.ipv4.ip_forward as it was before the cluster came up.
	IPForward string `json:"ipForward"`
}

// startVM makes the link, an overlay of the cached disk and starts qemu. It does not wait for the
// VM to boot: joinVM does, while the host nodes start meanwhile.
func (c *Cluster) startVM(ctx context.Context, im VMImage, flavor string) error {
	v := &VMNode{
		Name:       NodeVM,
		Dir:        filepath.Join(c.Dir, NodeVM),
		Addr:       vmAddr,
		Key:        im.Key,
		Share:      filepath.Join(c.Dir, NodeVM, "share"),
		ShareMount: vmShareMount,
		Console:    filepath.Join(c.Dir, "logs", NodeVM+"-console.log"),
		Flavor:     flavor,
		CPUs:       vmCPUs,
	}
	c.VM = v
	if err := os.MkdirAll(v.Share, 0o755); err != nil {
		return fmt.Errorf("create the VM's directories: %w", err)
	}
	if err := c.save(); err != nil {
		return err
	}
	if err := c.linkVM(ctx); err != nil {
		return err
	}
	v.Disk, v.BaseDisk = filepath.Join(v.Dir, "disk.qcow2"), im.Disk
	if err := v.newOverlay(ctx); err != nil {
		return err
	}
	disk := v.Disk
	c.add(QEMU, qemuBinary,
		"-name", NodeVM,
		// One host thread runs every vCPU in turn. Multi-threaded TCG let a vCPU run code another
		// vCPU was patching (the kernel's int3-based text patching at boot): a kernel panic in
		// hrtimer_start_range_ns in one boot of several here. With qemu held to one CPU of this
		// machine anyway (vmHostCPUs), one thread costs no speed.
		"-accel", "tcg,thread=single",
		"-cpu", "max",
		"-smp", fmt.Sprint(vmCPUs),
		"-m", fmt.Sprint(vmMemoryMiB),
		"-kernel", im.Kernel,
		"-initrd", im.Initrd,
		// mitigations=off: the emulated CPU pays for every speculation barrier in software.
		"-append", "root=LABEL="+vmDiskLabel+" rw console=ttyS0 quiet mitigations=off",
		// cache=unsafe: the overlay is thrown away with the run, so flushes need not reach the disk.
		"-drive", "file="+disk+",if=virtio,format=qcow2,cache=unsafe",
		"-netdev", "tap,id=n0,ifname="+vmTap+",script=no,downscript=no",
		"-device", "virtio-net-pci,netdev=n0,mac=52:54:00:7a:6e:01",
		"-virtfs", "local,path="+v.Share+",mount_tag="+vmShareTag+",security_model=none,readonly=on",
		"-serial", "file:"+v.Console,
		"-display", "none", "-monitor", "none", "-nodefaults",
	)
	if err := c.startDaemon(ctx, QEMU); err != nil {
		return err
	}
	return confineVM(c.PID(QEMU))
}

// confineVM moves qemu into vmHostCgroup, made in this machine's cpu hierarchy (v1) or its
// cgroup v2 tree, with a quota of vmHostCPUs.
func confineVM(pid int) error {
	mounts, err := cgroupMounts()
	if err != nil {
		return err
	}
	for _, m := range mounts {
		dir := filepath.Join(m, vmHostCgroup)
		var limits [][2]string
		switch {
		case fileExists(filepath.Join(m, "cpu.cfs_quota_us")):
			limits = [][2]string{{"cpu.cfs_period_us", "100000"}, {"cpu.cfs_quota_us", fmt.Sprint(vmHostCPUs * 100)}}
		case fileExists(filepath.Join(m, "cgroup.subtree_control")) && strings.Contains(readTrim(filepath.Join(m, "cgroup.subtree_control")), "cpu"):
			limits = [][2]string{{"cpu.max", fmt.Sprintf("%d 100000", vmHostCPUs*100)}}
		default:
			continue
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("create the VM's cgroup: %w", err)
		}
		for _, l := range limits {
			if err := os.WriteFile(filepath.Join(dir, l[0]), []byte(l[1]), 0o644); err != nil {
				return fmt.Errorf("cap the VM's CPU time: %w", err)
			}
		}
		// Every thread of qemu: its vCPU threads exist already.
		if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(fmt.Sprint(pid)), 0o644); err != nil {
			return fmt.Errorf("move qemu into %s: %w", dir, err)
		}
		return nil
	}
	return errors.New("no cgroup hierarchy with the cpu controller on this machine to cap the VM's CPU time in")
}

// unconfineVM removes vmHostCgroup once qemu is gone.
func unconfineVM() error {
	mounts, err := cgroupMounts()
	if err != nil {
		return err
	}
	var errs []error
	for _, m := range mounts {
		dir := filepath.Join(m, vmHostCgroup)
		var err error
		// A cgroup whose last task just exited stays busy for a moment.
		for range 50 {
			if err = syscall.Rmdir(dir); err == nil || !errors.Is(err, syscall.EBUSY) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("remove cgroup %s: %w", dir, err))
		}
	}
	return errors.Join(errs...)
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func readTrim(p string) string {
	b, _ := os.ReadFile(p)
	return strings.TrimSpace(string(b))
}

// newOverlay makes the VM's disk afresh: a qcow2 overlay of the cached disk, which stays as built.
func (v *VMNode) newOverlay(ctx context.Context) error {
	if err := os.Remove(v.Disk); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove the VM's disk overlay: %w", err)
	}
	if err := run(ctx, "", "qemu-img", "create", "-q", "-f", "qcow2", "-F", "raw", "-b", v.BaseDisk, v.Disk); err != nil {
		return fmt.Errorf("make the VM's disk overlay: %w", err)
	}
	return nil
}

// rebootVM powers the VM off and boots it again from a fresh overlay, keeping the first boot's
// console as <console>.1.
func (c *Cluster) rebootVM(ctx context.Context) error {
	if err := c.Daemons[QEMU].stop(ctx, syscall.SIGKILL, 10*time.Second); err != nil {
		return err
	}
	c.VM.closeSSH()
	if err := os.Rename(c.VM.Console, c.VM.Console+".1"); err != nil {
		return fmt.Errorf("keep the VM's first console: %w", err)
	}
	if err := c.VM.newOverlay(ctx); err != nil {
		return err
	}
	if err := c.startDaemon(ctx, QEMU); err != nil {
		return err
	}
	return confineVM(c.PID(QEMU))
}

// linkVM makes the bridge and tap device the VM's network card attaches to, routes the VM's pod
// network through it, and turns on forwarding, recording its old value for Down.
func (c *Cluster) linkVM(ctx context.Context) error {
	fwd, err := os.ReadFile("/proc/sys/net/ipv4/ip_forward")
	if err != nil {
		return fmt.Errorf("read net.ipv4.ip_forward: %w", err)
	}
	c.HostNet.IPForward = strings.TrimSpace(string(fwd))
	if err := c.save(); err != nil {
		return err
	}
	for _, args := range [][]string{
		{"link", "add", vmBridge, "type", "bridge"},
		{"addr", "add", vmHostAddr + "/24", "dev", vmBridge},
		{"link", "set", vmBridge, "up"},
		{"tuntap", "add", "dev", vmTap, "mode", "tap"},
		{"link", "set", vmTap, "master", vmBridge},
		{"link", "set", vmTap, "up"},
		{"route", "add", vmPodSubnet, "via", vmAddr},
	} {
		if err := run(ctx, "", "ip", args...); err != nil {
			return fmt.Errorf("link to the VM: %w", err)
		}
	}
	if err := os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0o644); err != nil {
		return fmt.Errorf("turn on net.ipv4.ip_forward for the VM's pods: %w", err)
	}
	return nil
}

// unlinkVM removes what linkVM made; devices already gone are fine.
func (c *Cluster) unlinkVM() error {
	var errs []error
	for _, dev := range []string{vmTap, vmBridge} {
		if _, err := os.Stat("/sys/class/net/" + dev); err != nil {
			continue
		}
		// The route goes with the bridge's address.
		if out, err := exec.Command("ip", "link", "del", dev).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("remove network device %s: %w: %s", dev, err, out))
		}
	}
	return errors.Join(errs...)
}

// restoreHostNet puts back the sysctls the cluster changed.
func (c *Cluster) restoreHostNet() error {
	if c.HostNet.IPForward == "" {
		return nil
	}
	if err := os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte(c.HostNet.IPForward), 0o644); err != nil {
		return fmt.Errorf("restore net.ipv4.ip_forward to %s: %w", c.HostNet.IPForward, err)
	}
	return nil
}

// sshArgs are the arguments of every ssh to the VM. One connection is kept open and shared
// (ControlMaster): a new ssh handshake costs the emulated CPU about a second.
func (v *VMNode) sshArgs() []string {
	return []string{
		"-i", v.Key,
		"-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
		"-o", "LogLevel=ERROR", "-o", "ConnectTimeout=10", "-o", "ServerAliveInterval=10",
		"-o", "ControlMaster=auto", "-o", "ControlPath=" + filepath.Join(v.Dir, "ssh.sock"), "-o", "ControlPersist=30m",
	}
}

// Run runs a shell script on the VM as root (over ssh, as an operator would) and returns its
// standard output; a failure's error holds the end of both outputs.
func (v *VMNode) Run(ctx context.Context, script string) (string, error) {
	cmd := exec.CommandContext(ctx, "ssh", append(v.sshArgs(), "root@"+v.Addr, script)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// The shared connection's master outlives this command: do not wait for its copy of stderr.
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("on %s: %s: %w: %s%s", v.Name, firstLine(script), err, tail(stdout.Bytes(), 1500), tail(stderr.Bytes(), 1500))
	}
	return stdout.String(), nil
}

// closeSSH ends the shared ssh connection.
func (v *VMNode) closeSSH() {
	exec.Command("ssh", append(v.sshArgs(), "-O", "exit", "root@"+v.Addr)...).Run() //nolint:errcheck // none may be open
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i] + " ..."
	}
	return s
}

// errVMPanicked is a VM whose kernel panicked while it booted.
var errVMPanicked = errors.New("the VM's kernel panicked")

// waitSSH waits until the VM has booted far enough to take a login, or its console shows a kernel
// panic.
func (v *VMNode) waitSSH(ctx context.Context, timeout time.Duration) error {
	var last error
	err := wait.PollUntilContextTimeout(ctx, 2*time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		if b, _ := os.ReadFile(v.Console); bytes.Contains(b, []byte("Kernel panic")) {
			return false, fmt.Errorf("%w: see its console in %s", errVMPanicked, v.Console)
		}
		cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		_, last = v.Run(cctx, "systemctl is-system-running --wait >/dev/null; true")
		return last == nil, nil
	})
	if errors.Is(err, errVMPanicked) {
		return err
	}
	if err != nil {
		return fmt.Errorf("VM %s did not take an ssh login within %s (last: %w): see its console in %s", v.Name, timeout, last, v.Console)
	}
	return nil
}

// joinVM waits for the VM to boot, gives it its containerd and the test image, and joins it to
// the cluster with `kubeadm join`, as a node is joined to a kubeadm cluster: a bootstrap token,
// the CA's hash, TLS bootstrap of kubelet's client certificate. The node carries VMTaint. kubelet
// then talks to containerd directly: Tandem is installed on it by the tests, on the running node.
func (c *Cluster) joinVM(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	v := c.VM
	t := time.Now()
	err := v.waitSSH(ctx, 5*time.Minute)
	if errors.Is(err, errVMPanicked) {
		// An emulator's fault, not the node's: boot once more, from a fresh overlay.
		logger.Info("The VM's kernel panicked while booting; booting it again", "console", v.Console+".1")
		if err := c.rebootVM(ctx); err != nil {
			return err
		}
		err = v.waitSSH(ctx, 5*time.Minute)
	}
	if err != nil {
		return err
	}
	logger.Info("VM booted", "node", v.Name, "elapsed", time.Since(t).Round(time.Millisecond))
	if v.Flavor == framework.Flavor2 {
		if err := c.installContainerd2(ctx); err != nil {
			return err
		}
	}
	image, err := framework.BuildTestImage(ctx, filepath.Join(v.Share, "images"))
	if err != nil {
		return err
	}
	if _, err := v.Run(ctx, fmt.Sprintf("ctr -n k8s.io images import --no-unpack=false %s >/dev/null && ctr -n k8s.io images ls -q | grep -qx %s",
		filepath.Join(v.ShareMount, "images", filepath.Base(image)), framework.TestImage)); err != nil {
		return fmt.Errorf("import the test image into the VM's containerd: %w", err)
	}
	cs, err := c.Client()
	if err != nil {
		return err
	}
	tok, err := newBootstrapToken()
	if err != nil {
		return err
	}
	ca := filepath.Join(c.Dir, "pki", "ca.crt")
	hash, err := caCertHash(ca)
	if err != nil {
		return err
	}
	endpoint := c.apiServerFor(vmHostAddr)
	if err := kubeadmJoinPrerequisites(ctx, cs, tok, endpoint, ca, vmKubeletConfiguration("/etc/kubernetes/pki/ca.crt")); err != nil {
		return err
	}
	join := fmt.Sprintf(`apiVersion: kubeadm.k8s.io/v1beta4
kind: JoinConfiguration
discovery:
  bootstrapToken:
    apiServerEndpoint: %s
    token: %s
    caCertHashes: [%s]
nodeRegistration:
  name: %s
  criSocket: unix:///run/containerd/containerd.sock
  kubeletExtraArgs:
  - {name: node-ip, value: %s}
  taints:
  - {key: %s, value: "true", effect: NoSchedule}
`, endpointHostPort(endpoint), tok, hash, v.Name, v.Addr, VMTaint)
	if err := os.WriteFile(filepath.Join(v.Share, "join.yaml"), []byte(join), 0o644); err != nil {
		return fmt.Errorf("write the JoinConfiguration: %w", err)
	}
	t = time.Now()
	out, err := v.Run(ctx, "kubeadm join --config "+filepath.Join(v.ShareMount, "join.yaml")+" 2>&1")
	logger.V(1).Info("kubeadm join", "output", out)
	if err != nil {
		return fmt.Errorf("kubeadm join: %w", err)
	}
	if err := c.WaitNodeReady(ctx, v.Name, 5*time.Minute); err != nil {
		return err
	}
	logger.Info("VM joined", "node", v.Name, "elapsed", time.Since(t).Round(time.Millisecond))
	return nil
}

// apiServerFor is the API server's URL at addr, one of this machine's addresses it serves on.
func (c *Cluster) apiServerFor(addr string) string {
	_, port, _ := strings.Cut(strings.TrimPrefix(c.APIServer, "https://"), ":")
	return "https://" + addr + ":" + port
}

// WaitNodeReady waits until the named node is Ready.
func (c *Cluster) WaitNodeReady(ctx context.Context, name string, timeout time.Duration) error {
	cs, err := c.Client()
	if err != nil {
		return err
	}
	var last string
	err = wait.PollUntilContextTimeout(ctx, time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		node, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		for _, t := range node.Spec.Taints {
			if t.Key == corev1.TaintNodeNotReady {
				last = "still has taint " + t.Key
				return false, nil
			}
		}
		if !NodeReady(node) {
			last = "not Ready"
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("node %s not Ready within %s (%s): %w", name, timeout, last, err)
	}
	return nil
}

// installContainerd2 puts containerd v2 on the VM in place of Debian's 1.6, as an operator
// upgrades it: the binaries in /usr/local/bin, a unit drop-in that runs them, a version-3
// configuration with the systemd cgroup driver and NRI on (its default).
func (c *Cluster) installContainerd2(ctx context.Context) error {
	bin, err := framework.EnsureContainerd(ctx, framework.Flavor2)
	if err != nil {
		return err
	}
	dir := filepath.Dir(bin)
	dst := filepath.Join(c.VM.Share, "containerd2")
	for _, b := range []string{"containerd", "containerd-shim-runc-v2", "ctr"} {
		if err := copyFile(filepath.Join(dir, b), filepath.Join(dst, b), 0o755); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(dst, "config.toml"), []byte(vmContainerd2Config), 0o644); err != nil {
		return err
	}
	src := filepath.Join(c.VM.ShareMount, "containerd2")
	_, err = c.VM.Run(ctx, fmt.Sprintf(`set -e
install -m 0755 %[1]s/containerd %[1]s/containerd-shim-runc-v2 %[1]s/ctr /usr/local/bin/
install -m 0644 %[1]s/config.toml /etc/containerd/config.toml
mkdir -p /etc/systemd/system/containerd.service.d
printf '[Service]\nExecStart=\nExecStart=/usr/local/bin/containerd\n' > /etc/systemd/system/containerd.service.d/10-containerd2.conf
systemctl daemon-reload
systemctl restart containerd
for i in $(seq 60); do /usr/local/bin/ctr version >/dev/null 2>&1 && exit 0; sleep 1; done
echo containerd 2 did not answer; exit 1`, src))
	if err != nil {
		return fmt.Errorf("install containerd 2 on the VM: %w", err)
	}
	return nil
}

// vmContainerd2Config is containerd 2's configuration on the VM: the systemd cgroup driver, the
// imported sandbox image, Debian's CNI plugins, NRI at its default socket.
const vmContainerd2Config = `version = 3

[plugins.'io.containerd.cri.v1.images'.pinned_images]
  sandbox = '` + framework.SandboxImage + `'

[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
  SystemdCgroup = true

[plugins.'io.containerd.cri.v1.runtime'.cni]
  bin_dirs = ['/usr/lib/cni']
  conf_dir = '/etc/cni/net.d'

[plugins.'io.containerd.nri.v1.nri']
  disable = false
  socket_path = '/var/run/nri/nri.sock'
`

// stopVM powers the VM off (its disk is a throwaway overlay) and removes its link.
func (c *Cluster) stopVM(ctx context.Context) error {
	if c.VM == nil {
		return nil
	}
	c.VM.closeSSH()
	var errs []error
	if d := c.Daemons[QEMU]; d != nil {
		if err := d.stop(ctx, syscall.SIGTERM, 20*time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, unconfineVM(), c.unlinkVM(), c.restoreHostNet())
	return errors.Join(errs...)
}
