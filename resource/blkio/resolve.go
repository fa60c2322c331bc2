package blkio

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Resolve returns the device numbers (MAJ:MIN) a block's limits go on, found in sysfs: a device's disk
// (a partition's limits would be refused by the kernel, which throttles whole disks), or the disks under
// an LVM volume group's logical volumes, as koordlet maps a volume group to its disk.
func Resolve(sysRoot string, b Block) ([]string, error) {
	switch b.Type {
	case TypeDevice:
		d, err := deviceDisk(sysRoot, b.Name)
		if err != nil {
			return nil, err
		}
		return []string{d}, nil
	case TypeVolumeGroup:
		return volumeGroupDisks(sysRoot, b.Name)
	case TypePodVolume:
		return nil, fmt.Errorf("block %q: podvolume blocks name a pod's volume and apply to pods (Koordinator's pod annotation), not to the BE class; use type device or volumegroup", b.Name)
	}
	return nil, fmt.Errorf("block %q: type %q: want device or volumegroup", b.Name, b.Type)
}

// deviceDisk resolves /dev/vdb, vdb, /dev/vdb1 or /dev/mapper/NAME to its disk's device number.
func deviceDisk(sysRoot, name string) (string, error) {
	base := strings.TrimPrefix(filepath.Clean(name), "/dev/")
	if mapped, ok := strings.CutPrefix(base, "mapper/"); ok {
		dm, err := dmByName(sysRoot, func(n string) bool { return n == mapped })
		if err != nil || len(dm) == 0 {
			return "", errors.Join(fmt.Errorf("device %s: no device-mapper device of that name in %s", name, filepath.Join(sysRoot, "block")), err)
		}
		base = dm[0]
	}
	if strings.Contains(base, "/") || base == "" {
		return "", fmt.Errorf("device %q: name a block device (/dev/vdb, vdb, /dev/mapper/NAME)", name)
	}
	dir := filepath.Join(sysRoot, "class", "block", base)
	if _, err := os.Stat(dir); err != nil {
		return "", fmt.Errorf("device %s: no block device %s on this node (%w); lsblk lists them", name, base, err)
	}
	return diskNumber(dir)
}

// diskNumber reads the device number of the disk dir (a /sys/class/block entry) is, or is a partition of.
func diskNumber(dir string) (string, error) {
	if _, err := os.Stat(filepath.Join(dir, "partition")); err == nil {
		real, err := filepath.EvalSymlinks(dir)
		if err != nil {
			return "", fmt.Errorf("the disk of partition %s: %w", filepath.Base(dir), err)
		}
		dir = filepath.Dir(real)
	}
	b, err := os.ReadFile(filepath.Join(dir, "dev"))
	if err != nil {
		return "", fmt.Errorf("the device number of %s: %w", filepath.Base(dir), err)
	}
	return strings.TrimSpace(string(b)), nil
}

// dmByName lists the device-mapper devices (dm-0, ...) whose name matches.
func dmByName(sysRoot string, match func(string) bool) ([]string, error) {
	names, err := filepath.Glob(filepath.Join(sysRoot, "block", "dm-*", "dm", "name"))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, n := range names {
		b, err := os.ReadFile(n)
		if err != nil {
			continue
		}
		if match(strings.TrimSpace(string(b))) {
			out = append(out, filepath.Base(filepath.Dir(filepath.Dir(n))))
		}
	}
	slices.Sort(out)
	return out, nil
}

// volumeGroupDisks returns the disks under the logical volumes of volume group vg. LVM names a logical
// volume's device-mapper device VG-LV with each "-" inside VG and LV doubled.
func volumeGroupDisks(sysRoot, vg string) ([]string, error) {
	prefix := strings.ReplaceAll(vg, "-", "--") + "-"
	lvs, err := dmByName(sysRoot, func(n string) bool {
		rest, ok := strings.CutPrefix(n, prefix)
		return ok && rest != "" && !strings.HasPrefix(rest, "-")
	})
	if err != nil {
		return nil, err
	}
	if len(lvs) == 0 {
		return nil, fmt.Errorf("volume group %s: no logical volume of it is active on this node (vgs and lvs list them)", vg)
	}
	var disks []string
	seen := map[string]bool{}
	var walk func(dev string, depth int) error
	walk = func(dev string, depth int) error {
		if depth > 8 {
			return fmt.Errorf("volume group %s: device-mapper stack deeper than 8 under %s", vg, dev)
		}
		slaves, _ := filepath.Glob(filepath.Join(sysRoot, "block", dev, "slaves", "*"))
		if !strings.HasPrefix(dev, "dm-") || len(slaves) == 0 {
			d, err := diskNumber(filepath.Join(sysRoot, "class", "block", dev))
			if err != nil {
				return err
			}
			if !seen[d] {
				seen[d] = true
				disks = append(disks, d)
			}
			return nil
		}
		for _, s := range slaves {
			if err := walk(filepath.Base(s), depth+1); err != nil {
				return err
			}
		}
		return nil
	}
	for _, lv := range lvs {
		if err := walk(lv, 0); err != nil {
			return nil, err
		}
	}
	slices.Sort(disks)
	return disks, nil
}
