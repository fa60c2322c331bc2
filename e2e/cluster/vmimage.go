package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"k8s.io/klog/v2"

	"github.com/tandemkit/tandem/e2e/framework"
)

// The VM node's disk: Debian 13 as debootstrap installs it, with the packages a kubeadm node of
// Debian has (systemd, containerd, runc, the CNI plugins, the kernel) and kubelet and kubeadm laid
// out as the Kubernetes packages lay them out (/usr/bin, kubelet.service and kubeadm's drop-in).
// Nothing of Tandem is on it: the tests install Tandem on the running node as docs/install.md says.
const (
	// vmSuite is Debian 13: kernel 6.12 (cgroup v2, EEVDF with slice requests), systemd 257 (cgroup
	// v2 only), containerd 1.7, what a kubeadm node installed this year runs. The host nodes are Debian
	// 12's containerd 1.6 and cgroup v1.
	vmSuite  = "trixie"
	vmMirror = "http://deb.debian.org/debian"
	// vmDiskSize is the disk's apparent size; the file is sparse and each run writes to an overlay.
	vmDiskSize = "8G"
	// vmDiskLabel is the root file system's label, as the kernel command line names it.
	vmDiskLabel = "tandem-vm"
)

// vmPackages are the Debian packages of the VM node beside debootstrap's minimal base.
func vmPackages() []string {
	return []string{
		// init, and what systemd-managed services and runc's systemd cgroup driver talk over
		"systemd", "systemd-sysv", "dbus", "udev", "kmod",
		// a kernel with its modules, and the initramfs that finds the virtio disk
		"linux-image-amd64", "initramfs-tools",
		// the container runtime as a Debian kubeadm node has it
		"containerd", "runc", "containernetworking-plugins",
		"iproute2", "iptables", "conntrack", "ethtool", "socat", "ca-certificates", "procps", "e2fsprogs",
		// what an operator reaches for on a node: curl for the agent's /metrics, openssl for certificates
		"curl", "openssl",
		// how the tests reach the node, as an operator does
		"openssh-server",
	}
}

// VMImage is a built, cached VM node disk with its kernel and the key that logs in as root.
type VMImage struct {
	Dir    string
	Disk   string // raw ext4 image of the root file system
	Kernel string
	Initrd string
	Key    string // private ssh key, authorized for root
}

func vmImageIn(dir string) VMImage {
	return VMImage{
		Dir:    dir,
		Disk:   filepath.Join(dir, "disk.img"),
		Kernel: filepath.Join(dir, "vmlinuz"),
		Initrd: filepath.Join(dir, "initrd.img"),
		Key:    filepath.Join(dir, "id_ed25519"),
	}
}

func (im VMImage) complete() bool {
	for _, f := range []string{im.Disk, im.Kernel, im.Initrd, im.Key} {
		if _, err := os.Stat(f); err != nil {
			return false
		}
	}
	return true
}

// vmRecipeID names a disk by everything that goes into it, so that a change to the package list,
// the files or the Kubernetes version builds a new one instead of reusing a stale cache.
func vmRecipeID() string {
	h := sha256.New()
	fmt.Fprintln(h, vmSuite, vmMirror, KubernetesVersion, strings.Join(vmPackages(), ","))
	files := vmFiles()
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		fmt.Fprintf(h, "%s %o\n%s\n", p, files[p].mode, files[p].data)
	}
	fmt.Fprintln(h, strings.Join(vmSetupCommands(), "\n"))
	return "debian13-" + KubernetesVersion + "-" + hex.EncodeToString(h.Sum(nil))[:12]
}

// VMImageDir is where the VM node's disk of this recipe is cached.
func VMImageDir() string { return filepath.Join(framework.CacheDir(), "vm-"+vmRecipeID()) }

// EnsureVMImage returns the VM node's disk, building it the first time (debootstrap from Debian's
// mirror, two to four minutes) with the Kubernetes binaries it carries, which it builds meanwhile
// if they are not cached yet: debootstrap waits on the mirror and dpkg, the build on the CPUs. A
// second caller waits.
func EnsureVMImage(ctx context.Context) (VMImage, error) {
	im := vmImageIn(VMImageDir())
	if im.complete() {
		return im, nil
	}
	if err := os.MkdirAll(filepath.Dir(im.Dir), 0o755); err != nil {
		return VMImage{}, fmt.Errorf("create cache dir: %w", err)
	}
	lock, err := os.OpenFile(im.Dir+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return VMImage{}, fmt.Errorf("open VM image lock: %w", err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return VMImage{}, fmt.Errorf("lock %s: %w", lock.Name(), err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) //nolint:errcheck // closing the file unlocks too
	if im.complete() {
		return im, nil
	}
	klog.FromContext(ctx).Info("Building the VM node's disk once (debootstrap of Debian 13); this takes a few minutes", "dir", im.Dir)
	tmp := im.Dir + ".tmp"
	if err := os.RemoveAll(tmp); err != nil {
		return VMImage{}, fmt.Errorf("clear %s: %w", tmp, err)
	}
	if err := buildVMImage(ctx, vmImageIn(tmp), EnsureKubernetes); err != nil {
		_ = os.RemoveAll(tmp)
		return VMImage{}, err
	}
	if err := os.RemoveAll(im.Dir); err != nil {
		return VMImage{}, fmt.Errorf("clear %s: %w", im.Dir, err)
	}
	if err := os.Rename(tmp, im.Dir); err != nil {
		return VMImage{}, fmt.Errorf("install VM image: %w", err)
	}
	return im, nil
}

func buildVMImage(ctx context.Context, im VMImage, kubernetes func(context.Context) (string, error)) error {
	for _, tool := range []string{"debootstrap", "mkfs.ext4", "ssh-keygen"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s is missing: install the packages of hack/install-deps.sh (debootstrap, e2fsprogs, openssh-client): %w", tool, err)
		}
	}
	root := filepath.Join(im.Dir, "root")
	if err := os.MkdirAll(root, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", root, err)
	}
	defer func() { _ = os.RemoveAll(root) }()
	type built struct {
		dir string
		err error
	}
	k8s := make(chan built, 1)
	go func() {
		dir, err := kubernetes(ctx)
		k8s <- built{dir, err}
	}()
	bootstrapErr := run(ctx, "", "debootstrap", "--variant=minbase", "--include="+strings.Join(vmPackages(), ","), vmSuite, root, vmMirror)
	b := <-k8s
	if bootstrapErr != nil {
		return fmt.Errorf("debootstrap Debian %s from %s: %w", vmSuite, vmMirror, bootstrapErr)
	}
	if b.err != nil {
		return b.err
	}
	k8sBins := b.dir
	for path, f := range vmFiles() {
		p := filepath.Join(root, path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return fmt.Errorf("create %s: %w", filepath.Dir(p), err)
		}
		if err := os.WriteFile(p, []byte(f.data), f.mode); err != nil {
			return fmt.Errorf("write %s: %w", p, err)
		}
	}
	for _, b := range []string{Kubelet, Kubeadm} {
		if err := copyFile(filepath.Join(k8sBins, b), filepath.Join(root, "usr/bin", b), 0o755); err != nil {
			return err
		}
	}
	if err := run(ctx, "", "ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "tandem-e2e", "-f", im.Key); err != nil {
		return fmt.Errorf("generate the VM's ssh key: %w", err)
	}
	pub, err := os.ReadFile(im.Key + ".pub")
	if err != nil {
		return fmt.Errorf("read the VM's ssh key: %w", err)
	}
	if err := os.MkdirAll(filepath.Join(root, "root/.ssh"), 0o700); err != nil {
		return fmt.Errorf("create root's .ssh: %w", err)
	}
	if err := os.WriteFile(filepath.Join(root, "root/.ssh/authorized_keys"), pub, 0o600); err != nil {
		return fmt.Errorf("authorize the VM's ssh key: %w", err)
	}
	for _, c := range vmSetupCommands() {
		if err := run(ctx, "", "chroot", root, "/bin/sh", "-c", c); err != nil {
			return fmt.Errorf("set up the VM's root file system (%s): %w", c, err)
		}
	}
	kernels, _ := filepath.Glob(filepath.Join(root, "boot", "vmlinuz-*"))
	initrds, _ := filepath.Glob(filepath.Join(root, "boot", "initrd.img-*"))
	if len(kernels) != 1 || len(initrds) != 1 {
		return fmt.Errorf("want one kernel and one initramfs in the VM's /boot, found %v and %v", kernels, initrds)
	}
	if err := copyFile(kernels[0], im.Kernel, 0o644); err != nil {
		return err
	}
	if err := copyFile(initrds[0], im.Initrd, 0o644); err != nil {
		return err
	}
	if err := run(ctx, "", "mkfs.ext4", "-q", "-F", "-L", vmDiskLabel, "-d", root, im.Disk, vmDiskSize); err != nil {
		return fmt.Errorf("make the VM's disk: %w", err)
	}
	return nil
}

// vmSetupCommands run in the VM's root file system (chroot) after its files are written.
func vmSetupCommands() []string {
	return []string{
		"systemctl enable systemd-networkd.service ssh.service kubelet.service containerd.service",
		// Timers that wake a slow, emulated machine for nothing a test needs.
		"systemctl mask apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer fstrim.timer 2>/dev/null || true",
		"passwd -d root",
		// A machine id per boot of a new overlay: systemd makes one when the file is empty.
		": > /etc/machine-id",
		"update-initramfs -u -k all",
	}
}

type vmFile struct {
	mode os.FileMode
	data string
}

// vmFiles are the files written into the VM's root file system, by path.
func vmFiles() map[string]vmFile {
	f := func(data string) vmFile { return vmFile{0o644, data} }
	return map[string]vmFile{
		"etc/hostname": f(NodeVM + "\n"),
		"etc/hosts":    f("127.0.0.1 localhost\n127.0.1.1 " + NodeVM + "\n"),
		"etc/fstab": f("LABEL=" + vmDiskLabel + " / ext4 rw,relatime 0 1\n" +
			// The host's directory of this run: Tandem's binaries and images as an operator copies them over.
			vmShareTag + " " + vmShareMount + " 9p trans=virtio,version=9p2000.L,ro,nofail 0 0\n"),
		"etc/systemd/network/10-eth.network": f("[Match]\nName=en* eth*\n\n[Network]\nAddress=" + vmAddr + "/24\nGateway=" + vmHostAddr + "\n"),
		// kubeadm's prerequisites for a node (kubernetes.io's "Installing kubeadm" and containerd pages).
		"etc/modules-load.d/k8s.conf": f("overlay\nbr_netfilter\n"),
		"etc/sysctl.d/k8s.conf":       f("net.ipv4.ip_forward = 1\nnet.bridge.bridge-nf-call-iptables = 1\n"),
		"etc/containerd/config.toml":  f(vmContainerdConfig),
		"etc/cni/net.d/10-bridge.conflist": f(`{
  "cniVersion": "1.0.0",
  "name": "tandem-vm",
  "plugins": [
    {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": true,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "` + vmPodSubnet + `"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
`),
		// As the Kubernetes packages (pkgs.k8s.io) install kubelet.
		"usr/lib/systemd/system/kubelet.service":                   f(kubeletUnit),
		"usr/lib/systemd/system/kubelet.service.d/10-kubeadm.conf": f(kubeadmDropIn),
		// The packages install it with KUBELET_EXTRA_ARGS empty; this node's operator has set a flag
		// there, which installing Tandem must keep.
		"etc/default/kubelet":                      f("KUBELET_EXTRA_ARGS=--max-pods=60\n"),
		"etc/ssh/sshd_config.d/10-tandem-e2e.conf": f("UseDNS no\nPermitRootLogin prohibit-password\n"),
		// The serial console logs in as root: what went wrong can be read from the console log.
		"etc/systemd/system/serial-getty@ttyS0.service.d/autologin.conf": f("[Service]\nExecStart=\nExecStart=-/sbin/agetty --autologin root --keep-baud 115200 %I $TERM\n"),
		"etc/systemd/journald.conf.d/10-tandem-e2e.conf":                 f("[Journal]\nStorage=volatile\nRuntimeMaxUse=64M\n"),
		"etc/initramfs-tools/conf.d/tandem-e2e":                          f("MODULES=list\n"),
		"etc/initramfs-tools/modules":                                    f("virtio_pci\nvirtio_blk\next4\n"),
	}
}

// vmContainerdConfig is containerd 1.7's configuration (version 2) as kubeadm's documentation asks for it: the
// systemd cgroup driver, the sandbox image this registry-less machine imports, the CNI plugins
// where Debian puts them. NRI stays off, containerd 1.7's default.
const vmContainerdConfig = `version = 2

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "` + framework.SandboxImage + `"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
      SystemdCgroup = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "/etc/cni/net.d"
`

// kubeletUnit and kubeadmDropIn are the files the Kubernetes packages install.
const kubeletUnit = `[Unit]
Description=kubelet: The Kubernetes Node Agent
Documentation=https://kubernetes.io/docs/
Wants=network-online.target
After=network-online.target

[Service]
ExecStart=/usr/bin/kubelet
Restart=always
StartLimitInterval=0
RestartSec=10

[Install]
WantedBy=multi-user.target
`

const kubeadmDropIn = `# Note: This dropin only works with kubeadm and kubelet v1.11+
[Service]
Environment="KUBELET_KUBECONFIG_ARGS=--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf --kubeconfig=/etc/kubernetes/kubelet.conf"
Environment="KUBELET_CONFIG_ARGS=--config=/var/lib/kubelet/config.yaml"
# This is a file that "kubeadm init" and "kubeadm join" generates at runtime, populating the KUBELET_KUBEADM_ARGS variable dynamically
EnvironmentFile=-/var/lib/kubelet/kubeadm-flags.env
# This is a file that the user can use for overrides of the kubelet args as a last resort. Preferably, the user should use
# the .NodeRegistration.KubeletExtraArgs object in the configuration files instead. KUBELET_EXTRA_ARGS should be sourced from this file.
EnvironmentFile=-/etc/default/kubelet
ExecStart=
ExecStart=/usr/bin/kubelet $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS
`

// run runs a command, returning its output's end in the error.
func run(ctx context.Context, dir, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive", "LC_ALL=C")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, tail(out, 3000))
	}
	return nil
}

func copyFile(src, dst string, mode os.FileMode) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("read %s: %w", src, err)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return fmt.Errorf("create %s: %w", filepath.Dir(dst), err)
	}
	if err := os.WriteFile(dst, b, mode); err != nil {
		return fmt.Errorf("write %s: %w", dst, err)
	}
	return nil
}
