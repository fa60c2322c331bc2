//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2/ktesting"

	"github.com/tandemkit/tandem/config/knob"
)

// TestBlkIOOnTheNode: tandem-proxy, started with a resource-qos-config whose beClass.blkioQOS caps the
// disk this machine runs on, writes the caps into the real blkio.throttle files of the BE pods' parent
// (kubelet's kubepods/besteffort under a cgroup root of the test's own), where an operator had put a
// write cap of their own; /debug/config says the block applied on the disk's number; the operator's line
// comes back when the section goes, and again when tandem-proxy stops. resource/blkio's
// TestRealThrottle shows the kernel enforcing such a cap.
func TestBlkIOOnTheNode(t *testing.T) {
	requireRoot(t)
	hier := "/sys/fs/cgroup/blkio"
	if _, err := os.Stat(filepath.Join(hier, "blkio.throttle.read_bps_device")); err != nil {
		t.Skipf("SKIPPED: no cgroup v1 blkio hierarchy with throttling here (%v); the VM node tests io.max on cgroup v2", err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(os.TempDir(), &st); err != nil {
		t.Fatal(err)
	}
	dev := fmt.Sprintf("%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev))
	real, err := filepath.EvalSymlinks(filepath.Join("/sys/dev/block", dev))
	if err != nil {
		t.Skipf("SKIPPED: %s is on %s, which is not a block device: %v", os.TempDir(), dev, err)
	}
	if _, err := os.Stat(filepath.Join(real, "partition")); err == nil {
		real = filepath.Dir(real)
	}
	disk := filepath.Base(real)
	b, err := os.ReadFile(filepath.Join(real, "dev"))
	if err != nil {
		t.Fatal(err)
	}
	dev = strings.TrimSpace(string(b))

	root := fmt.Sprintf("/tdm-blkio-%d", os.Getpid())
	be := filepath.Join(hier, root, "kubepods", "besteffort")
	if err := os.MkdirAll(be, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeCgroupTree(t, root) })
	readBPS, writeBPS := filepath.Join(be, "blkio.throttle.read_bps_device"), filepath.Join(be, "blkio.throttle.write_bps_device")
	// An operator's own cap, which Tandem's replaces while configured and must give back.
	if err := os.WriteFile(writeBPS, []byte(dev+" 52428800"), 0o644); err != nil {
		t.Fatal(err)
	}
	operators := map[string]string{readBPS: "", writeBPS: dev + " 52428800"}
	tandems := map[string]string{readBPS: dev + " 1048576", writeBPS: dev + " 2097152"}

	section := fmt.Sprintf(`resource-qos-config: |
  {"clusterStrategy": {"beClass": {"blkioQOS": {"enable": true, "blocks": [{"name": "/dev/%s", "type": "device", "ioCfg": {"readBPS": 1048576, "writeBPS": 2097152}}]}}}}
`, disk)
	cfgFile := filepath.Join(t.TempDir(), "slo-config.yaml")
	writeConfig := func(text string) {
		t.Helper()
		if err := os.WriteFile(cfgFile+".new", []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(cfgFile+".new", cfgFile); err != nil {
			t.Fatal(err)
		}
	}
	writeConfig(section)
	_, ctx := ktesting.NewTestContext(t)
	e := newEnv(t, ctx, flavors()[0], envOptions{proxyArgs: []string{"--slo-config", cfgFile, "--kubelet-cgroup-root", root}})

	waitSysctls(t, "started with beClass.blkioQOS", tandems)
	k := blkioKnob(t, ctx, e)
	if k.State != knob.Applied || !strings.Contains(k.Detail, "on "+dev) {
		t.Errorf("/debug/config beClass.blkioQOS.blocks = %+v; want applied, on %s", k, dev)
	}
	writeConfig(otherSection)
	waitSysctls(t, "section removed", operators)
	writeConfig(section)
	waitSysctls(t, "section back", tandems)
	stopProxy(t, ctx, e)
	checkSysctls(t, "after SIGTERM", operators)
	if _, err := os.Stat(filepath.Join(e.proxy.StateDir, "blkio-originals.json")); !os.IsNotExist(err) {
		t.Errorf("the record of the BE parent's lines outlived the restore: %v", err)
	}
}

// blkioKnob reads /debug/config's beClass.blkioQOS.blocks once the loop has reported it.
func blkioKnob(t *testing.T, ctx context.Context, e *env) knob.Status {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		k, ok := debugKnob(t, ctx, e, "resource-qos-config", "beClass.blkioQOS.blocks")
		if ok && k.State != knob.Ignored || time.Now().After(deadline) {
			return k
		}
	}
}
