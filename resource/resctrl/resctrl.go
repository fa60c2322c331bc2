// Package resctrl drives Linux resctrl (Intel RDT, AMD PQoS): it reads what the hardware offers from
// the info directory, creates control groups with a schemata (L3 cache ways, memory bandwidth) and moves
// tasks into them.
//
// Tandem does not use github.com/intel/goresctrl for this. Its rdt package keeps the resctrl state in
// package variables behind Initialize, finds the mount only through /proc/mounts (so it cannot run on a
// fake tree in a test), and brings OpenTelemetry exporters into the build; Tandem needs four files.
//
// The root is a constructor argument so tests run against a fake tree; production passes /sys/fs/resctrl.
package resctrl

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"math/bits"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/containerd/errdefs"
)

// DefaultRoot is where resctrl is mounted (mount -t resctrl resctrl /sys/fs/resctrl).
const DefaultRoot = "/sys/fs/resctrl"

// CacheInfo is what info/L3 (or info/L3CODE and info/L3DATA under code/data prioritisation) says.
type CacheInfo struct {
	// CBMMask is the mask of every cache way (info/L3/cbm_mask).
	CBMMask uint64
	// MinCBMBits is the fewest ways a group may have.
	MinCBMBits int
	NumClosids int
	// CDP is true when code and data masks are set apart (L3CODE and L3DATA lines).
	CDP bool
	// IDs are the cache instances (one per socket, usually), from the root schemata.
	IDs []int
}

// MBInfo is what info/MB says.
type MBInfo struct {
	MinBandwidth  int
	BandwidthGran int
	NumClosids    int
	IDs           []int
}

// FS is a mounted resctrl filesystem.
type FS struct {
	root string
	L3   *CacheInfo // nil without L3 CAT
	MB   *MBInfo    // nil without MBA
}

// Open reads the resctrl filesystem at root. It fails with errdefs.ErrNotFound when root is not there
// (the kernel lacks resctrl or the CPU lacks RDT) or not mounted, and with ErrNotImplemented when it
// offers neither L3 CAT nor MBA; the message says which.
func Open(root string) (*FS, error) {
	if _, err := os.Stat(root); err != nil {
		return nil, fmt.Errorf("no %s: the kernel or CPU offers no resctrl (RDT): %w", root, errdefs.ErrNotFound)
	}
	if _, err := os.Stat(filepath.Join(root, "info")); err != nil {
		return nil, fmt.Errorf("resctrl is not mounted at %s; mount it with: mount -t resctrl resctrl %s: %w", root, root, errdefs.ErrNotFound)
	}
	f := &FS{root: root}
	schemata, err := os.ReadFile(filepath.Join(root, "schemata"))
	if err != nil {
		return nil, fmt.Errorf("read the root schemata: %w", err)
	}
	ids := idsByResource(string(schemata))
	for _, dir := range []string{"L3", "L3CODE"} {
		if _, err := os.Stat(filepath.Join(root, "info", dir)); err != nil {
			continue
		}
		if f.L3, err = readCacheInfo(filepath.Join(root, "info", dir)); err != nil {
			return nil, err
		}
		f.L3.CDP = dir == "L3CODE"
		f.L3.IDs = ids[dir]
		break
	}
	if _, err := os.Stat(filepath.Join(root, "info", "MB")); err == nil {
		if f.MB, err = readMBInfo(filepath.Join(root, "info", "MB")); err != nil {
			return nil, err
		}
		f.MB.IDs = ids["MB"]
	}
	if f.L3 == nil && f.MB == nil {
		return nil, fmt.Errorf("resctrl at %s offers neither L3 cache allocation nor memory bandwidth allocation: %w", root, errdefs.ErrNotImplemented)
	}
	return f, nil
}

// Root returns the filesystem's root.
func (f *FS) Root() string { return f.root }

// NumClosids is how many groups the hardware supports, the root group included.
func (f *FS) NumClosids() int {
	n := math.MaxInt
	if f.L3 != nil {
		n = min(n, f.L3.NumClosids)
	}
	if f.MB != nil {
		n = min(n, f.MB.NumClosids)
	}
	return n
}

func readCacheInfo(dir string) (*CacheInfo, error) {
	mask, err := readString(filepath.Join(dir, "cbm_mask"))
	if err != nil {
		return nil, err
	}
	c := &CacheInfo{}
	if c.CBMMask, err = strconv.ParseUint(mask, 16, 64); err != nil || c.CBMMask == 0 {
		return nil, fmt.Errorf("%s/cbm_mask %q: not a hex cache way mask", dir, mask)
	}
	if c.MinCBMBits, err = readInt(filepath.Join(dir, "min_cbm_bits")); err != nil {
		return nil, err
	}
	if c.NumClosids, err = readInt(filepath.Join(dir, "num_closids")); err != nil {
		return nil, err
	}
	return c, nil
}

func readMBInfo(dir string) (*MBInfo, error) {
	m := &MBInfo{}
	var err error
	if m.MinBandwidth, err = readInt(filepath.Join(dir, "min_bandwidth")); err != nil {
		return nil, err
	}
	if m.BandwidthGran, err = readInt(filepath.Join(dir, "bandwidth_gran")); err != nil {
		return nil, err
	}
	if m.NumClosids, err = readInt(filepath.Join(dir, "num_closids")); err != nil {
		return nil, err
	}
	return m, nil
}

func readString(p string) (string, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return "", fmt.Errorf("read resctrl info: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

func readInt(p string) (int, error) {
	s, err := readString(p)
	if err != nil {
		return 0, err
	}
	v, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("%s: %q is not a number", p, s)
	}
	return v, nil
}

// idsByResource reads the cache instance IDs of each resource from schemata lines like "L3:0=7ff;1=7ff".
func idsByResource(schemata string) map[string][]int {
	out := map[string][]int{}
	for line := range strings.Lines(schemata) {
		name, doms, ok := strings.Cut(strings.TrimSpace(line), ":")
		name = strings.TrimSpace(name)
		if !ok || name == "" {
			continue
		}
		for d := range strings.SplitSeq(doms, ";") {
			id, _, _ := strings.Cut(d, "=")
			if v, err := strconv.Atoi(strings.TrimSpace(id)); err == nil && v >= 0 {
				out[name] = append(out[name], v)
			}
		}
	}
	return out
}

// L3Mask returns the cache way mask for the range [startPercent, endPercent) of the ways in cbm, as
// Koordinator computes it: both ends rounded up to whole ways. The range widens to minBits ways
// where it is narrower, upwards if the ways exist, else downwards.
func L3Mask(cbm uint64, minBits int, startPercent, endPercent int64) (uint64, error) {
	if startPercent < 0 || endPercent > 100 || startPercent >= endPercent {
		return 0, fmt.Errorf("cache range %d%%..%d%%: want 0 <= start < end <= 100: %w", startPercent, endPercent, errdefs.ErrInvalidArgument)
	}
	ways := bits.OnesCount64(cbm)
	low := bits.TrailingZeros64(cbm) // the ways of cbm_mask are contiguous
	start := int(math.Ceil(float64(ways) * float64(startPercent) / 100))
	end := int(math.Ceil(float64(ways) * float64(endPercent) / 100))
	minBits = max(minBits, 1)
	if minBits > ways {
		return 0, fmt.Errorf("the cache has %d ways, fewer than the %d a group needs: %w", ways, minBits, errdefs.ErrInvalidArgument)
	}
	if end-start < minBits {
		end = min(start+minBits, ways)
		start = end - minBits
	}
	return (uint64(1)<<(end-start) - 1) << (start + low), nil
}

// MBValue returns the schemata value for a bandwidth percentage: rounded up to the granularity, at least
// the minimum the hardware allows, at most 100.
func MBValue(info MBInfo, percent int64) (int, error) {
	if percent <= 0 || percent > 100 {
		return 0, fmt.Errorf("memory bandwidth %d%%: want 1..100: %w", percent, errdefs.ErrInvalidArgument)
	}
	v := int(percent)
	if g := info.BandwidthGran; g > 1 {
		v = (v + g - 1) / g * g
	}
	return min(max(v, info.MinBandwidth), 100), nil
}

// Schemata is what a group gets: an L3 mask and a bandwidth percentage; zero values leave the resource
// at the kernel's default for a new group (everything).
type Schemata struct {
	L3Mask uint64
	MB     int
}

// String renders the schemata file's lines for every cache instance.
func (f *FS) String(s Schemata) string {
	var b strings.Builder
	line := func(name string, ids []int, val string) {
		b.WriteString(name + ":")
		for i, id := range ids {
			if i > 0 {
				b.WriteByte(';')
			}
			b.WriteString(strconv.Itoa(id) + "=" + val)
		}
		b.WriteByte('\n')
	}
	if s.L3Mask != 0 && f.L3 != nil {
		m := strconv.FormatUint(s.L3Mask, 16)
		if f.L3.CDP {
			line("L3CODE", f.L3.IDs, m)
			line("L3DATA", f.L3.IDs, m)
		} else {
			line("L3", f.L3.IDs, m)
		}
	}
	if s.MB != 0 && f.MB != nil {
		line("MB", f.MB.IDs, strconv.Itoa(s.MB))
	}
	return b.String()
}

// validName keeps group names to one directory level below the root, and off the root's own entries.
func validName(name string) error {
	if name == "" || name == "info" || name == "mon_groups" || name == "mon_data" || strings.ContainsAny(name, `/\.`) {
		return fmt.Errorf("resctrl group name %q: want a plain directory name: %w", name, errdefs.ErrInvalidArgument)
	}
	return nil
}

// EnsureGroup creates the control group name when it does not exist and writes its schemata. It is
// idempotent, so a restart or reload applies the configuration again.
func (f *FS) EnsureGroup(name string, s Schemata) error {
	if err := validName(name); err != nil {
		return err
	}
	dir := filepath.Join(f.root, name)
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		if errors.Is(err, syscall.ENOSPC) {
			return fmt.Errorf("create resctrl group %s: the hardware has no free CLOSID (%d in all): %w", name, f.NumClosids(), errdefs.ErrResourceExhausted)
		}
		return fmt.Errorf("create resctrl group %s: %w", name, err)
	}
	text := f.String(s)
	if text == "" {
		return nil
	}
	// One write carries every line; the kernel rejects the whole write when a line is invalid and then
	// explains why in info/last_cmd_status.
	if err := writeFile(filepath.Join(dir, "schemata"), text, os.O_TRUNC); err != nil {
		if st, rerr := readString(filepath.Join(f.root, "info", "last_cmd_status")); rerr == nil && st != "ok" {
			err = fmt.Errorf("%w (kernel: %s)", err, st)
		}
		return fmt.Errorf("write schemata of resctrl group %s: %w", name, err)
	}
	return nil
}

// AddTasks moves tasks (thread IDs) into group name, one write each as the kernel wants. Tasks that
// exited meanwhile are skipped; other failures are returned together.
func (f *FS) AddTasks(name string, tids []int) error {
	if err := validName(name); err != nil {
		return err
	}
	p := filepath.Join(f.root, name, "tasks")
	var errs []error
	for _, tid := range tids {
		err := writeFile(p, strconv.Itoa(tid)+"\n", os.O_APPEND)
		if err != nil && !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, fmt.Errorf("move task %d to resctrl group %s: %w", tid, name, err))
		}
	}
	return errors.Join(errs...)
}

// Tasks lists the tasks in group name.
func (f *FS) Tasks(name string) ([]int, error) {
	if err := validName(name); err != nil {
		return nil, err
	}
	b, err := os.ReadFile(filepath.Join(f.root, name, "tasks"))
	if err != nil {
		return nil, fmt.Errorf("read tasks of resctrl group %s: %w", name, err)
	}
	var out []int
	for _, s := range strings.Fields(string(b)) {
		if v, err := strconv.Atoi(s); err == nil {
			out = append(out, v)
		}
	}
	slices.Sort(out)
	return out, nil
}

// writeFile writes s in one write. O_CREATE is harmless on resctrl, where a group's files exist from its
// mkdir on and new ones cannot be made, and lets a fake tree stand in for the kernel.
func writeFile(p, s string, flag int) error {
	fh, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|flag, 0o644)
	if err != nil {
		return err
	}
	_, err = fh.WriteString(s)
	if cerr := fh.Close(); err == nil {
		err = cerr
	}
	return err
}
