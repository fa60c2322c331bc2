package headroom

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/tandemkit/tandem/config/slo"
)

// hypervisorVendors are /sys/class/dmi/id/sys_vendor values (and product_name prefixes) of virtual
// machines, for architectures whose CPUs have no hypervisor flag (arm64 cloud instances).
var hypervisorVendors = []string{"QEMU", "KVM", "Amazon EC2", "Google", "Microsoft Corporation", "VMware", "Xen",
	"innotek GmbH", "Alibaba Cloud", "OpenStack Foundation", "DigitalOcean", "Hetzner", "Parallels", "Bochs", "BHYVE"}

// DetectVM tells whether this node runs in a virtual machine, and from what: the hypervisor flag of
// /proc/cpuinfo (x86), /sys/hypervisor/type (Xen and others), the DMI vendor (arm64 clouds), or steal
// already counted in /proc/stat (only a paravirtualised guest counts any). procRoot and sysRoot are
// /proc and /sys in production.
func DetectVM(procRoot, sysRoot string) (bool, string) {
	if b, err := os.ReadFile(filepath.Join(procRoot, "cpuinfo")); err == nil {
		sc := bufio.NewScanner(bytes.NewReader(b))
		sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
		for sc.Scan() {
			key, val, ok := strings.Cut(sc.Text(), ":")
			if !ok || strings.TrimSpace(key) != "flags" {
				continue
			}
			for _, f := range strings.Fields(val) {
				if f == "hypervisor" {
					return true, "/proc/cpuinfo has the hypervisor flag"
				}
			}
			break // every CPU lists the same flags
		}
	}
	if b, err := os.ReadFile(filepath.Join(sysRoot, "hypervisor", "type")); err == nil && len(bytes.TrimSpace(b)) > 0 {
		return true, fmt.Sprintf("/sys/hypervisor/type is %q", strings.TrimSpace(string(b)))
	}
	for _, f := range []string{"sys_vendor", "product_name"} {
		b, err := os.ReadFile(filepath.Join(sysRoot, "class", "dmi", "id", f))
		if err != nil {
			continue
		}
		v := strings.TrimSpace(string(b))
		for _, h := range hypervisorVendors {
			if strings.HasPrefix(v, h) {
				return true, fmt.Sprintf("DMI %s is %q", f, v)
			}
		}
	}
	if b, err := os.ReadFile(filepath.Join(procRoot, "stat")); err == nil {
		if line, _, _ := strings.Cut(string(b), "\n"); strings.HasPrefix(line, "cpu ") {
			if f := strings.Fields(line); len(f) > 8 {
				if v, err := strconv.ParseUint(f[8], 10, 64); err == nil && v > 0 {
					return true, "/proc/stat counts steal"
				}
			}
		}
	}
	return false, "no hypervisor flag, hypervisor type, virtual DMI vendor or steal"
}

// Resolve turns resource-threshold-config's stealHeadroom and stealThresholdPercent into base's
// Enable and threshold, with the reason; vm and vmWhy are DetectVM's answer.
func Resolve(base Config, r slo.ResourceThresholdSettings, vm bool, vmWhy string) (Config, string) {
	out := base
	out.StealThresholdMilli = r.StealThresholdPercent * 10
	switch r.StealHeadroom {
	case slo.StealHeadroomOn:
		out.Enable = true
		return out, "stealHeadroom: on"
	case slo.StealHeadroomOff:
		out.Enable = false
		return out, "stealHeadroom: off"
	}
	out.Enable = vm
	if vm {
		return out, "stealHeadroom: auto, and the node is a virtual machine (" + vmWhy + ")"
	}
	return out, "stealHeadroom: auto, and the node is not a virtual machine (" + vmWhy + ")"
}
