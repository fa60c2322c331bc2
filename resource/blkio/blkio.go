// Package blkio puts the block I/O limits of Koordinator's resource-qos-config beClass.blkioQOS on the
// BE pods' parent cgroup, as koordlet's blkio reconcile does: per device, read and write bandwidth and
// IOPS caps (0: none) and an I/O weight. On cgroup v1 the caps are blkio.throttle.*_device (no weight:
// the kernels of today have no CFQ, and BFQ's blkio.bfq.weight_device has no per-cgroup default that a
// percentage could mean); on cgroup v2 they are io.max and io.weight, whose weight takes effect where
// blk-iocost runs on the device (io.cost.qos) or BFQ schedules it.
//
// Like resource/sysconfig, the package owns the whole life of a change, because nothing undoes it: the
// BE parent outlives every pod and Tandem itself. Before its first write to a device's line it records
// what the line held, in a JSON file in the agent's state directory synced before the write; a device
// the configuration drops, and every device when the agent stops, gets its line back. A SIGKILLed agent
// started again restores the true originals from the record, not what it wrote itself.
//
// It knows nothing of the slo-config types: the agent maps blkioQOS to Want.
package blkio

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"k8s.io/klog/v2"
)

// The block types of blkioQOS.blocks[].type.
const (
	TypeDevice      = "device"
	TypeVolumeGroup = "volumegroup"
	TypePodVolume   = "podvolume"
)

// Limits are one block's limits; a cap of 0 is no cap, a WeightPercent of 0 leaves the weight alone.
type Limits struct {
	ReadBPS, WriteBPS, ReadIOPS, WriteIOPS int64
	// WeightPercent is ioWeightPercent (1-100): io.weight takes it as the weight, whose default is 100.
	WeightPercent int64
}

// Block is one entry of blkioQOS.blocks.
type Block struct {
	// Name is a device (/dev/vdb, vdb, /dev/mapper/NAME) or an LVM volume group, by Type.
	Name, Type string
	Limits     Limits
}

// Want is what the BE class is to have: with Enable false, no limits (every recorded line goes back).
type Want struct {
	Enable bool
	Blocks []Block
}

// Config says where the keeper works.
type Config struct {
	// Dir is the BE parent cgroup's directory: <root>/blkio/<parent> on cgroup v1, <root>/<parent> on v2.
	Dir string
	// Version is the cgroup version, 1 or 2.
	Version int
	// SysRoot is sysfs (/sys), where devices and volume groups are looked up.
	SysRoot string
	// Record is the file of original lines, in the agent's state directory.
	Record string
}

// BlockResult is what Apply did with one block.
type BlockResult struct {
	Block Block
	// Devices are the device numbers (MAJ:MIN) the block resolved to and was applied on.
	Devices []string
	// Err says why the block was not applied; nil when it was.
	Err error
	// Dropped names limits this cgroup version cannot express (the weight on v1), applied without them.
	Dropped string
}

// Keeper applies Want to the BE parent and restores what it changed.
type Keeper struct {
	cfg Config
	rec record
	// writeLine writes one rule; tests of cgroup v2 on this cgroup v1 host put the kernel's merging of
	// rules by device in its place.
	writeLine func(path, s string) error
}

// New checks cfg, reads a record a previous run left, and returns a keeper that has written nothing.
func New(cfg Config) (*Keeper, error) {
	if cfg.Version != 1 && cfg.Version != 2 {
		return nil, fmt.Errorf("block I/O QoS: cgroup version %d: want 1 or 2", cfg.Version)
	}
	if cfg.Dir == "" || cfg.Record == "" {
		return nil, errors.New("block I/O QoS needs the BE parent's directory and a record file in the state directory (--state-dir)")
	}
	if cfg.SysRoot == "" {
		cfg.SysRoot = "/sys"
	}
	r, err := loadRecord(cfg.Record)
	if err != nil {
		return nil, err
	}
	return &Keeper{cfg: cfg, rec: r, writeLine: writeLine}, nil
}

// files lists the cgroup files the keeper writes on its cgroup version.
func (k *Keeper) files() []string {
	if k.cfg.Version == 1 {
		return []string{v1ReadBPS, v1WriteBPS, v1ReadIOPS, v1WriteIOPS}
	}
	return []string{v2Max, v2Weight}
}

const (
	v1ReadBPS   = "blkio.throttle.read_bps_device"
	v1WriteBPS  = "blkio.throttle.write_bps_device"
	v1ReadIOPS  = "blkio.throttle.read_iops_device"
	v1WriteIOPS = "blkio.throttle.write_iops_device"
	v2Max       = "io.max"
	v2Weight    = "io.weight"
	// v2NoMax is an io.max line's value without any cap.
	v2NoMax = "rbps=max wbps=max riops=max wiops=max"
)

// line is one device's line in one file.
type line struct{ file, dev string }

// Apply resolves the blocks, writes their limits and puts back the lines of devices no block names any
// more. A block that cannot be resolved or written is reported and skipped; the others still apply. The
// error is for what stops everything: the BE parent missing, the record unwritable.
func (k *Keeper) Apply(ctx context.Context, want Want) ([]BlockResult, error) {
	if !want.Enable && len(k.rec.Lines) == 0 {
		return nil, nil // off, and nothing of Tandem's to put back: the BE parent need not even exist
	}
	if _, err := os.Stat(k.cfg.Dir); err != nil {
		return nil, fmt.Errorf("the BE pods' parent cgroup %s: %w (kubelet creates it; is --cgroup-root right?)", k.cfg.Dir, err)
	}
	for _, f := range k.files() {
		if f == v2Weight {
			continue // optional: only kernels with blk-iocost or BFQ have it
		}
		if _, err := os.Stat(filepath.Join(k.cfg.Dir, f)); err != nil {
			return nil, fmt.Errorf("%s: %w: the block I/O controller is not enabled on the BE parent (cgroup v2: io in the parents' cgroup.subtree_control)", filepath.Join(k.cfg.Dir, f), err)
		}
	}
	if k.rec.Dir != "" && k.rec.Dir != k.cfg.Dir {
		// The BE parent moved (another cgroup driver): the old one's lines go back first.
		if err := k.Restore(ctx); err != nil {
			return nil, err
		}
	}
	desired := map[line]string{}
	var results []BlockResult
	_, err := os.Stat(filepath.Join(k.cfg.Dir, v2Weight))
	hasWeight := err == nil
	if want.Enable {
		for _, b := range want.Blocks {
			res := BlockResult{Block: b}
			res.Devices, res.Err = Resolve(k.cfg.SysRoot, b)
			if res.Err == nil {
				res.Dropped = k.add(desired, res.Devices, b.Limits, hasWeight)
			}
			results = append(results, res)
		}
	}
	failed, noWeight := map[string]error{}, map[string]bool{}
	for _, l := range sortedLines(desired) {
		err := k.write(l, desired[l])
		switch {
		case err == nil:
		case l.file == v2Weight && errors.Is(err, syscall.EOPNOTSUPP):
			// The kernel takes a device's weight only where blk-iocost runs on it (or BFQ schedules it).
			noWeight[l.dev] = true
		default:
			failed[l.dev] = errors.Join(failed[l.dev], err)
		}
	}
	for i := range results {
		for _, d := range results[i].Devices {
			if err := failed[d]; err != nil {
				results[i].Err = errors.Join(results[i].Err, err)
			}
			if noWeight[d] {
				results[i].Dropped = fmt.Sprintf("ioWeightPercent: the kernel refused a weight for %s (EOPNOTSUPP): blk-iocost is not enabled on it (io.cost.qos) and BFQ does not schedule it", d)
			}
		}
	}
	var errs []error
	for _, l := range sortedLines(k.recorded()) {
		if _, ok := desired[l]; ok {
			continue
		}
		if err := k.restore(ctx, l); err != nil {
			errs = append(errs, err)
		}
	}
	return results, errors.Join(errs...)
}

// add puts one block's lines into desired; a later block naming the same device wins, as the lines
// would in the file. It returns what the cgroup version cannot express.
func (k *Keeper) add(desired map[line]string, devs []string, l Limits, hasWeight bool) string {
	dropped := ""
	for _, d := range devs {
		if k.cfg.Version == 1 {
			desired[line{v1ReadBPS, d}] = strconv.FormatInt(l.ReadBPS, 10)
			desired[line{v1WriteBPS, d}] = strconv.FormatInt(l.WriteBPS, 10)
			desired[line{v1ReadIOPS, d}] = strconv.FormatInt(l.ReadIOPS, 10)
			desired[line{v1WriteIOPS, d}] = strconv.FormatInt(l.WriteIOPS, 10)
			if l.WeightPercent > 0 {
				dropped = "ioWeightPercent: cgroup v1 has no I/O weight on this kernel's schedulers"
			}
			continue
		}
		desired[line{v2Max, d}] = fmt.Sprintf("rbps=%s wbps=%s riops=%s wiops=%s", capOf(l.ReadBPS), capOf(l.WriteBPS), capOf(l.ReadIOPS), capOf(l.WriteIOPS))
		if l.WeightPercent > 0 {
			if !hasWeight {
				dropped = "ioWeightPercent: this kernel has no io.weight (neither blk-iocost nor BFQ)"
				continue
			}
			desired[line{v2Weight, d}] = strconv.FormatInt(l.WeightPercent, 10)
		}
	}
	return dropped
}

func capOf(n int64) string {
	if n <= 0 {
		return "max"
	}
	return strconv.FormatInt(n, 10)
}

// write records the line's original (once) and writes value; the kernel's own form of a value is what
// the file then holds, so nothing is written when it already holds it.
func (k *Keeper) write(l line, value string) error {
	cur, err := k.read(l)
	if err != nil {
		return err
	}
	if cur == value {
		return nil
	}
	_, recorded := k.rec.Lines[l.key()]
	if !recorded {
		next := k.rec.clone()
		next.Dir = k.cfg.Dir
		next.Lines[l.key()] = cur
		if err := saveRecord(k.cfg.Record, next); err != nil {
			return err
		}
		k.rec = next
	}
	err = k.writeLine(filepath.Join(k.cfg.Dir, l.file), l.dev+" "+value)
	if err != nil && !recorded {
		// Nothing changed: the line needs no putting back (and would be refused the same way).
		next := k.rec.clone()
		delete(next.Lines, l.key())
		if serr := saveRecord(k.cfg.Record, next); serr == nil {
			k.rec = next
		}
	}
	return err
}

// restore puts a recorded line back and forgets it.
func (k *Keeper) restore(ctx context.Context, l line) error {
	orig, dir := k.rec.Lines[l.key()], cmp.Or(k.rec.Dir, k.cfg.Dir)
	// A BE parent that is gone (kubelet stopped, the node converted) has nothing to put back.
	if err := k.writeLine(filepath.Join(dir, l.file), l.dev+" "+orig); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("put %s's line of %s back to %q: %w", l.dev, filepath.Join(dir, l.file), orig, err)
	}
	next := k.rec.clone()
	delete(next.Lines, l.key())
	if err := saveRecord(k.cfg.Record, next); err != nil {
		return err
	}
	k.rec = next
	klog.FromContext(ctx).V(2).Info("Block I/O limit put back", "file", filepath.Join(dir, l.file), "device", l.dev, "value", orig)
	return nil
}

// Restore puts back every line the keeper changed, this run or a killed one before it.
func (k *Keeper) Restore(ctx context.Context) error {
	var errs []error
	for _, l := range sortedLines(k.recorded()) {
		if err := k.restore(ctx, l); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (k *Keeper) recorded() map[line]string {
	out := map[line]string{}
	for key, v := range k.rec.Lines {
		file, dev, ok := strings.Cut(key, " ")
		if ok {
			out[line{file, dev}] = v
		}
	}
	return out
}

func (l line) key() string { return l.file + " " + l.dev }

func sortedLines(m map[line]string) []line {
	out := make([]line, 0, len(m))
	for l := range m {
		out = append(out, l)
	}
	slices.SortFunc(out, func(a, b line) int { return strings.Compare(a.key(), b.key()) })
	return out
}

// read returns the value of dev's line in the file, or what the kernel means by its absence.
func (k *Keeper) read(l line) (string, error) {
	b, err := os.ReadFile(filepath.Join(k.cfg.Dir, l.file))
	if err != nil {
		return "", fmt.Errorf("read %s: %w", filepath.Join(k.cfg.Dir, l.file), err)
	}
	for _, s := range strings.Split(string(b), "\n") {
		if dev, v, ok := strings.Cut(strings.TrimSpace(s), " "); ok && dev == l.dev {
			return strings.TrimSpace(v), nil
		}
	}
	switch l.file {
	case v2Max:
		return v2NoMax, nil
	case v2Weight:
		return "default", nil
	}
	return "0", nil
}

// writeLine writes one line in one write(2), as the kernel parses one rule per write.
func writeLine(path, s string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, werr := f.WriteString(s)
	if err := f.Close(); werr == nil {
		werr = err
	}
	if werr != nil {
		return fmt.Errorf("write %q to %s: %w", s, path, werr)
	}
	return nil
}
