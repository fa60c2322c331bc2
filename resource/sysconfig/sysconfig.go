// Package sysconfig writes the node-wide settings of Koordinator's system-config (minFreeKbytesFactor,
// watermarkScaleFactor, and on Anolis OS memcgReapBackGround and schedGroupIdentityEnabled) to the kernel,
// and puts back what the kernel had before.
//
// It is a package of its own, and not a policy hook, because these settings are not a container's: they
// belong to the whole node, every process on it depends on them, and nothing resets them when Tandem goes
// away (a container's cgroup disappears with the container; /proc/sys/vm does not). So the package owns
// the whole life of a change, which a hook's Adjustment cannot express:
//
//   - Before Tandem's first write to a file it records the value the file held, in a JSON file in the
//     agent's state directory, synced to disk before the write. An agent that is SIGKILLed and started
//     again reads the record and restores the true originals, not the values it wrote itself.
//   - It restores the original when the operator unsets a key, removes the section, or the agent stops,
//     and forgets the record of that file once restored.
//   - It refuses values that would leave the kernel too little free memory or reserve an absurd amount
//     (see the bounds below), writes nothing for them, and says why.
//
// Someone else may change a file Tandem wrote (an operator's sysctl -w, another agent). Tandem restores a
// file only while it holds a value Tandem wrote: a foreign value is left as it is, with a log line,
// because overwriting it would undo a newer decision than the one Tandem recorded. When Tandem writes a
// file again (the configuration changed) and finds a foreign value there, that value becomes the one to
// restore: it is what the node had before this write.
//
// The package only reads and writes files under the roots it is given (/proc and /sys on a node, a
// temporary tree in tests); it knows nothing of the slo-config types, which the agent maps to Want.
package sysconfig

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"k8s.io/klog/v2"
)

// The keys of system-config this package acts on, spelled as in the ConfigMap.
const (
	KeyMinFreeKbytesFactor  = "minFreeKbytesFactor"
	KeyWatermarkScaleFactor = "watermarkScaleFactor"
	KeyMemcgReapBackGround  = "memcgReapBackGround"
	KeySchedGroupIdentity   = "schedGroupIdentityEnabled"
)

// Keys lists the keys Apply reports, in its order.
func Keys() []string {
	return []string{KeyMinFreeKbytesFactor, KeyWatermarkScaleFactor, KeyMemcgReapBackGround, KeySchedGroupIdentity}
}

// The files, relative to the proc and sys roots. reap_background is Anolis OS's switch of the background
// reaper of zombie memory cgroups (Documentation/vm/memcg_zombie_reaper.rst in its kernel), and
// sched_group_identity_enabled its switch of group identity, which makes the cpu.bvt_warp_ns the cpuidle
// policy sets take effect; koordlet writes the same files, and mainline kernels have neither.
const (
	minFreeKbytesFile        = "sys/vm/min_free_kbytes"
	watermarkScaleFactorFile = "sys/vm/watermark_scale_factor"
	reapBackgroundFile       = "kernel/mm/memcg_reaper/reap_background"
	groupIdentityFile        = "sys/kernel/sched_group_identity_enabled"
)

// Bounds of what Tandem writes. Each is at least as strict as koordlet's own check before it writes
// (pkg/koordlet/util/system: min_free_kbytes 10 MiB..10 GiB, watermark_scale_factor 10..400,
// reap_background 0..1); the admission webhook only checks factor > 0 and watermarkScaleFactor 1..400,
// which config/slo validates.
const (
	// minFreeKbytesLeast is koordlet's floor, 10 MiB. Below the kernel's own default (kernelMinFreeKbytes)
	// Tandem refuses too: min_free_kbytes is the reserve that atomic allocations (network receive, interrupt
	// handlers) and the reclaim path itself draw from, and the kernel sizes it for the node at boot; less
	// than that makes allocation failures and stalls under pressure more likely, which is the opposite of
	// what an operator setting this for latency-sensitive pods wants.
	minFreeKbytesLeast = 10 << 10
	// minFreeKbytesMost is koordlet's ceiling, 10 GiB; minFreePercentMost, 5 % of memory (factor 500), is
	// Tandem's: the kernel keeps min_free_kbytes free at all times and reclaims (or OOM-kills) to hold it,
	// and kswapd keeps up to twice the watermark gap above it, so a larger reserve takes memory away from
	// every pod without making reclaim any gentler. Koordinator's default factor is 100 (1 %).
	minFreeKbytesMost  = 10 << 20
	minFreePercentMost = 5
	// The kernel accepts watermark_scale_factor 1..3000 (1..1000 before mid-2022). Tandem writes what
	// koordlet does, 10..400: below 10, the kernel's default, the gap between the watermarks shrinks below
	// what the kernel chose and more allocations fall into direct reclaim; above 400 (4 % of memory
	// between each watermark) kswapd keeps up to 8 % of memory free, far beyond what any burst needs.
	watermarkScaleLeast = 10
	watermarkScaleMost  = 400
)

// kernelMinFreeKbytes is the value the kernel gives min_free_kbytes at boot for memTotal kB of memory:
// sqrt(16 × lowmem kB), clamped to 128 kB..256 MiB (mm/page_alloc.c, calculate_min_free_kbytes). The
// kernel counts lowmem a little below MemTotal, so this errs on the high side, the strict one for a floor.
// khugepaged may raise the live value further for transparent huge pages (67584 kB on a 24 GiB node with
// THP in madvise mode); that is a reserve against fragmentation, not a safety floor, so an operator may
// set less than it.
func kernelMinFreeKbytes(memTotalKB int64) int64 {
	v := int64(math.Sqrt(float64(memTotalKB) * 16))
	return min(max(v, 128), 256<<10)
}

// Want is the configuration to apply: system-config's strategy for this node. A nil value leaves the
// kernel's setting alone (and puts back a value Tandem wrote earlier).
type Want struct {
	MinFreeKbytesFactor  *int64
	WatermarkScaleFactor *int64
	MemcgReapBackGround  *int64
	// SchedGroupIdentityEnabled is Anolis's group identity switch.
	SchedGroupIdentityEnabled *int64
}

// State is what a key does on the node.
type State string

// The states, the same words as the agent's knob states.
const (
	Applied State = "applied" // the file holds the value the key asks for
	Off     State = "off"     // unset: the kernel's value stands
	Ignored State = "ignored" // the node lacks the file, or it cannot be read or written; Detail names it
	Refused State = "refused" // outside the bounds, or refused by the kernel; nothing written
)

// Result is one key's outcome.
type Result struct {
	Key  string
	File string
	// Want is the configured value; nil when unset.
	Want  *int64
	State State
	// Value is what the file holds for an Applied key: the computed min_free_kbytes, or the value itself.
	Value  int64
	Detail string
}

// Config says where the files are.
type Config struct {
	// ProcRoot is procfs: /proc on a node.
	ProcRoot string
	// SysRoot is sysfs: /sys on a node.
	SysRoot string
	// Record is the JSON file of the original values, in the agent's state directory.
	Record string
}

// Keeper applies Want and restores the originals. Its methods are safe for concurrent use.
type Keeper struct {
	cfg Config

	mu      sync.Mutex
	rec     record
	results []Result
	// said is the last message logged per key, so that a state that stays is logged once.
	said map[string]string
}

// New returns a keeper that restores what an earlier run recorded in cfg.Record. An unreadable record is
// an error: without it Tandem cannot tell the node's values from its own, and must not write.
func New(cfg Config) (*Keeper, error) {
	if cfg.ProcRoot == "" || cfg.SysRoot == "" || cfg.Record == "" {
		return nil, errors.New("sysconfig: ProcRoot, SysRoot and Record must be set")
	}
	rec, err := loadRecord(cfg.Record)
	if err != nil {
		return nil, err
	}
	return &Keeper{cfg: cfg, rec: rec, said: map[string]string{}}, nil
}

// Recorded reports whether a value Tandem wrote is still to be restored.
func (k *Keeper) Recorded() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.rec.Files) > 0
}

// Apply brings every key to w: writes the values set (recording the originals first), restores those
// unset. It returns one Result per key, in Keys order.
func (k *Keeper) Apply(ctx context.Context, w Want) []Result {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := []Result{
		k.applyMinFree(ctx, w.MinFreeKbytesFactor),
		k.apply(ctx, plan{key: KeyWatermarkScaleFactor, file: filepath.Join(k.cfg.ProcRoot, watermarkScaleFactorFile),
			want: w.WatermarkScaleFactor, value: deref(w.WatermarkScaleFactor),
			refuse: outside(w.WatermarkScaleFactor, watermarkScaleLeast, watermarkScaleMost,
				"it spaces the kernel's free-memory watermarks (kswapd's gap) in ten-thousandths of memory")}),
		k.apply(ctx, plan{key: KeyMemcgReapBackGround, file: filepath.Join(k.cfg.SysRoot, reapBackgroundFile),
			want: w.MemcgReapBackGround, value: deref(w.MemcgReapBackGround),
			refuse: outside(w.MemcgReapBackGround, 0, 1, "it is a switch")}),
		k.apply(ctx, plan{key: KeySchedGroupIdentity, file: filepath.Join(k.cfg.ProcRoot, groupIdentityFile),
			want: w.SchedGroupIdentityEnabled, value: deref(w.SchedGroupIdentityEnabled),
			refuse: outside(w.SchedGroupIdentityEnabled, 0, 1, "it is a switch")}),
	}
	k.results = out
	return slices.Clone(out)
}

// Results returns what the last Apply or Restore did. An Applied file that no longer holds Tandem's
// value (someone else wrote it since) says so in Detail.
func (k *Keeper) Results() []Result {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := slices.Clone(k.results)
	for i, r := range out {
		if r.State != Applied {
			continue
		}
		if cur, err := readValue(r.File); err == nil && cur != strconv.FormatInt(r.Value, 10) {
			out[i].Detail += fmt.Sprintf("; but %s now holds %s: changed by someone else since; Tandem writes it again when the system-config values change", r.File, cur)
		}
	}
	return out
}

// Restore puts back every original value recorded, as the agent stops. A file Tandem could not restore
// stays in the record, for the next run.
func (k *Keeper) Restore(ctx context.Context) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	var errs []error
	for _, file := range slices.Sorted(maps.Keys(k.rec.Files)) {
		if _, err := k.restore(ctx, file); err != nil {
			errs = append(errs, err)
		}
	}
	for i := range k.results {
		if k.results[i].State == Applied {
			k.results[i].State, k.results[i].Detail = Off, "restored: tandem-proxy stopped"
		}
	}
	return errors.Join(errs...)
}

// plan is what to do for one key.
type plan struct {
	key, file string
	want      *int64
	value     int64
	// how explains value when it was computed; refuse is why it is refused, empty when not.
	how, refuse string
	// missing, when set, makes the key Ignored with this detail before the file is looked at.
	missing string
}

func (k *Keeper) applyMinFree(ctx context.Context, factor *int64) Result {
	p := plan{key: KeyMinFreeKbytesFactor, file: filepath.Join(k.cfg.ProcRoot, minFreeKbytesFile), want: factor}
	if factor == nil {
		return k.apply(ctx, p)
	}
	meminfo := filepath.Join(k.cfg.ProcRoot, "meminfo")
	total, err := memTotalKB(meminfo)
	if err != nil {
		p.missing = fmt.Sprintf("no memory size to compute min_free_kbytes from: %v", err)
		return k.apply(ctx, p)
	}
	if *factor > 10000 {
		// More than all of memory; refused before the product, which could overflow.
		p.refuse = fmt.Sprintf("min_free_kbytes %d × %d kB MemTotal / 10000 is more than the node's memory", *factor, total)
		return k.apply(ctx, p)
	}
	// As Koordinator: minFreeKbytesFactor × MemTotal(kB) / 10000.
	p.value = *factor * total / 10000
	p.how = fmt.Sprintf("min_free_kbytes %d = %d × %d kB MemTotal / 10000", p.value, *factor, total)
	lo := max(int64(minFreeKbytesLeast), kernelMinFreeKbytes(total))
	hi := min(int64(minFreeKbytesMost), total*minFreePercentMost/100)
	switch {
	case p.value < lo:
		p.refuse = fmt.Sprintf("%s is below the floor of %d kB (the larger of the kernel's own default for this memory, %d kB, and 10 MiB): "+
			"less would shrink the reserve atomic allocations and reclaim draw from", p.how, lo, kernelMinFreeKbytes(total))
	case p.value > hi:
		p.refuse = fmt.Sprintf("%s is above the ceiling of %d kB (%d %% of memory, at most 10 GiB): "+
			"the kernel would keep that much memory free and reclaim or OOM-kill to hold it", p.how, hi, minFreePercentMost)
	}
	return k.apply(ctx, p)
}

// outside returns why v is refused when it lies outside lo..hi.
func outside(v *int64, lo, hi int64, what string) string {
	if v == nil || (*v >= lo && *v <= hi) {
		return ""
	}
	return fmt.Sprintf("%d is outside %d..%d, the range Tandem writes (%s)", *v, lo, hi, what)
}

func (k *Keeper) apply(ctx context.Context, p plan) Result {
	logger := klog.FromContext(ctx).WithValues("key", p.key, "file", p.file)
	r := Result{Key: p.key, File: p.file, Want: p.want}
	if p.want == nil {
		r.State, r.Detail = Off, "unset: the kernel's value stands"
		if _, ok := k.rec.Files[p.file]; ok {
			detail, err := k.restore(ctx, p.file)
			if err != nil {
				// Ignored, not Off: the node still holds Tandem's value and the operator must hear it.
				r.State, r.Detail = Ignored, err.Error()
				return r
			}
			r.Detail = "unset: " + detail
		}
		k.say(logger, p.key, "")
		return r
	}
	if p.missing != "" {
		r.State, r.Detail = Ignored, p.missing
		k.say(logger, p.key, r.Detail)
		return r
	}
	cur, err := readValue(p.file)
	if errors.Is(err, fs.ErrNotExist) {
		r.State, r.Detail = Ignored, fmt.Sprintf("this kernel has no %s", p.file)
		k.say(logger, p.key, r.Detail)
		return r
	}
	if err != nil {
		r.State, r.Detail = Ignored, err.Error()
		k.say(logger, p.key, r.Detail)
		return r
	}
	if p.refuse != "" {
		r.State, r.Detail = Refused, fmt.Sprintf("%s; nothing written, %s keeps %s", p.refuse, p.file, cur)
		k.say(logger.WithValues("value", *p.want), p.key, r.Detail)
		return r
	}
	want := strconv.FormatInt(p.value, 10)
	r.Value, r.Detail = p.value, p.how
	if r.Detail == "" {
		r.Detail = fmt.Sprintf("%s = %s", p.file, want)
	}
	if cur == want {
		r.State = Applied
		k.say(logger, p.key, "")
		return r
	}
	if err := k.remember(logger, p.file, cur, want); err != nil {
		r.State, r.Detail = Ignored, fmt.Sprintf("nothing written: %v", err)
		k.say(logger, p.key, r.Detail)
		return r
	}
	if err := writeValue(p.file, want); err != nil {
		r.State = Ignored
		if errors.Is(err, syscall.EINVAL) {
			r.State = Refused
		}
		r.Detail = fmt.Sprintf("%v; %s keeps %s", err, p.file, cur)
		k.say(logger.WithValues("value", *p.want), p.key, r.Detail)
		return r
	}
	logger.Info("System setting written", "value", want, "was", cur, "original", k.rec.Files[p.file].Original)
	r.State = Applied
	k.say(logger, p.key, "")
	return r
}

// say logs msg once for key while it stays the same; an empty msg clears it (the key is fine again).
func (k *Keeper) say(logger klog.Logger, key, msg string) {
	if k.said[key] == msg {
		return
	}
	k.said[key] = msg
	if msg != "" {
		logger.Info("System setting not applied", "reason", msg)
	}
}

// remember records cur as the value to restore before Tandem first writes want to file, and saves the
// record to disk before returning: the write comes after. A file that holds neither its recorded
// original nor a value Tandem wrote was changed by someone else: that value is the one to restore now.
func (k *Keeper) remember(logger klog.Logger, file, cur, want string) error {
	before := k.rec.clone()
	e, ok := k.rec.Files[file]
	switch {
	case !ok:
		e = &entry{Original: cur}
		k.rec.Files[file] = e
	case cur != e.Original && !slices.Contains(e.Wrote, cur):
		logger.Info("System setting changed by someone else since Tandem wrote it; that value is restored when Tandem lets go",
			"holds", cur, "tandemWrote", e.Wrote, "previousOriginal", e.Original)
		e.Original = cur
	}
	// The value written before this one stays listed: if the agent dies between the save and the write,
	// the file still holds it, and it is Tandem's.
	if n := len(e.Wrote); n > 0 {
		e.Wrote = e.Wrote[n-1:]
	}
	if !slices.Contains(e.Wrote, want) {
		e.Wrote = append(e.Wrote, want)
	}
	if err := saveRecord(k.cfg.Record, k.rec); err != nil {
		k.rec = before
		return err
	}
	return nil
}

// restore puts back the original of file when it holds a value Tandem wrote, and forgets the file. It
// returns what it did, in words for Detail. On an error the record is kept, for a later attempt.
func (k *Keeper) restore(ctx context.Context, file string) (string, error) {
	logger := klog.FromContext(ctx).WithValues("file", file)
	e := k.rec.Files[file]
	cur, err := readValue(file)
	var detail string
	switch {
	case errors.Is(err, fs.ErrNotExist):
		detail = fmt.Sprintf("%s is gone; nothing to restore", file)
	case err != nil:
		return "", fmt.Errorf("%s not restored to %s: %w; it still holds what Tandem wrote", file, e.Original, err)
	case cur == e.Original:
		detail = fmt.Sprintf("%s holds its original %s", file, cur)
	case slices.Contains(e.Wrote, cur):
		if err := writeValue(file, e.Original); err != nil {
			return "", fmt.Errorf("%s not restored to %s: %w; it still holds %s, which Tandem wrote", file, e.Original, err, cur)
		}
		logger.Info("System setting restored", "value", e.Original, "tandemWrote", cur)
		detail = fmt.Sprintf("%s restored to %s", file, e.Original)
	default:
		logger.Info("System setting changed by someone else since Tandem wrote it; left as it is",
			"holds", cur, "tandemWrote", e.Wrote, "original", e.Original)
		detail = fmt.Sprintf("%s left at %s, set by someone else since Tandem wrote it (the original was %s)", file, cur, e.Original)
	}
	before := k.rec.clone()
	delete(k.rec.Files, file)
	if err := saveRecord(k.cfg.Record, k.rec); err != nil {
		k.rec = before
		return "", fmt.Errorf("%s: %w", detail, err)
	}
	return detail, nil
}

// memTotalKB reads MemTotal from meminfo.
func memTotalKB(meminfo string) (int64, error) {
	b, err := os.ReadFile(meminfo)
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		rest, ok := strings.CutPrefix(line, "MemTotal:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			break
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil || n <= 0 {
			break
		}
		return n, nil
	}
	return 0, fmt.Errorf("%s has no MemTotal line in kB", meminfo)
}

// readValue returns a sysctl's value, trimmed.
func readValue(file string) (string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

// writeValue writes v to an existing file: a missing one is never created (a fake tree must not grow the
// file a kernel lacks).
func writeValue(file, v string) error {
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(v); err != nil {
		_ = f.Close() // the write error is the one to report
		return fmt.Errorf("write %s: %w", file, err)
	}
	return f.Close()
}

func deref(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}
