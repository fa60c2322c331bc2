package agent

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/tandemkit/tandem/config/knob"
	"github.com/tandemkit/tandem/config/slo"
	"github.com/tandemkit/tandem/resource/blkio"
	"github.com/tandemkit/tandem/resource/cgroup"
)

// blkioRecord is the file in the state directory that holds the BE parent's block I/O lines from before
// Tandem wrote its own (resource/blkio).
const blkioRecord = "blkio-originals.json"

// blkioReconcile is how often the limits are checked against the BE parent between configuration
// changes: kubelet recreates the parent when it restarts on a converted node, and an operator may
// write it by hand.
const blkioReconcile = time.Minute

// blkIO applies resource-qos-config's beClass.blkioQOS to the BE pods' parent cgroup and follows every
// change; when the agent stops, it puts back the lines the parent had.
func (n *nodeParts) blkIO(ctx context.Context, first <-chan struct{}) component {
	if n.cgroups == nil {
		return switchedOff("blkio", nil) // the knob rule says the keys are ignored without a cgroup hierarchy
	}
	dir := filepath.Join(n.st.cgroupRoot, cgroup.Path(n.st.beParent))
	if n.cgroups.Version() == 1 {
		dir = filepath.Join(n.st.cgroupRoot, "blkio", cgroup.Path(n.st.beParent))
	}
	k, err := blkio.New(blkio.Config{Dir: dir, Version: n.cgroups.Version(), SysRoot: n.st.sysfsRoot, Record: filepath.Join(n.st.proxy.StateDir, blkioRecord)})
	if err != nil {
		klog.FromContext(ctx).Error(err, "beClass.blkioQOS not applied")
		return switchedOff("blkio", func(slo.Resolved) []knob.Status {
			return []knob.Status{{Section: slo.ResourceQOSConfigKey, Key: "beClass.blkioQOS.enable", State: knob.Refused, Detail: err.Error()}}
		})
	}
	b := &blockIO{keeper: k, kick: make(chan struct{}, 1)}
	return &loop{name: "blkio", knobs: b,
		configure: func(ctx context.Context, r slo.Resolved) error { b.set(ctx, r); return nil },
		run:       func(ctx context.Context) error { return b.run(ctx, first, blkioReconcile) },
		restore: func(ctx context.Context) error {
			if err := b.keeper.Restore(ctx); err != nil {
				return fmt.Errorf("BE block I/O limits not all put back; the record keeps them for the next start: %w", err)
			}
			return nil
		}}
}

// blockIO is the loop that hands beClass.blkioQOS to the keeper, and its knob reporter.
type blockIO struct {
	keeper *blkio.Keeper
	kick   chan struct{}

	mu      sync.Mutex
	want    slo.BlkIOQOSSettings
	results []blkio.BlockResult
	err     error
	applied bool
}

// set is the follower: it stores the configuration and wakes the loop; it never blocks.
func (b *blockIO) set(_ context.Context, r slo.Resolved) {
	b.mu.Lock()
	b.want = r.ResourceQOS.BE.BlkIOQOS
	b.mu.Unlock()
	select {
	case b.kick <- struct{}{}:
	default:
	}
}

// run applies the configuration after first is closed (nil: at once), at each change and every
// interval, until ctx ends.
func (b *blockIO) run(ctx context.Context, first <-chan struct{}, interval time.Duration) error {
	logger := klog.FromContext(ctx)
	if first != nil {
		select {
		case <-first:
		case <-ctx.Done():
			return nil
		}
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var last string
	for {
		b.mu.Lock()
		want := blkioWant(b.want)
		b.mu.Unlock()
		res, err := b.keeper.Apply(ctx, want)
		if s := describe(res, err); s != last {
			// One line per change of outcome, not per reconcile.
			if err != nil {
				logger.Error(err, "beClass.blkioQOS not applied")
			} else {
				logger.Info("beClass.blkioQOS applied to the BE parent", "enable", want.Enable, "blocks", s)
			}
			last = s
		}
		b.mu.Lock()
		b.results, b.err, b.applied = res, err, true
		b.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil
		case <-b.kick:
		case <-tick.C:
		}
	}
}

// blkioWant maps blkioQOS to the keeper's terms.
func blkioWant(s slo.BlkIOQOSSettings) blkio.Want {
	w := blkio.Want{Enable: s.Enable}
	val := func(p *int64) int64 {
		if p == nil {
			return 0
		}
		return *p
	}
	for _, blk := range s.Blocks {
		w.Blocks = append(w.Blocks, blkio.Block{Name: blk.Name, Type: blk.BlockType, Limits: blkio.Limits{
			ReadBPS: val(blk.IOCfg.ReadBPS), WriteBPS: val(blk.IOCfg.WriteBPS), ReadIOPS: val(blk.IOCfg.ReadIOPS), WriteIOPS: val(blk.IOCfg.WriteIOPS),
			WeightPercent: val(blk.IOCfg.IOWeightPercent),
		}})
	}
	return w
}

// describe says what each block came to, for the log and tandemctl config.
func describe(res []blkio.BlockResult, err error) string {
	if err != nil {
		return err.Error()
	}
	var parts []string
	for _, r := range res {
		s := fmt.Sprintf("%s %s on %s", r.Block.Type, r.Block.Name, strings.Join(r.Devices, ","))
		switch {
		case r.Err != nil:
			s = fmt.Sprintf("%s %s not applied: %v", r.Block.Type, r.Block.Name, r.Err)
		case r.Dropped != "":
			s += " (" + r.Dropped + ")"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}

// Knobs reports beClass.blkioQOS as the last Apply left it.
func (b *blockIO) Knobs() []knob.Status {
	b.mu.Lock()
	defer b.mu.Unlock()
	st := knob.Status{Section: slo.ResourceQOSConfigKey, Key: "beClass.blkioQOS.blocks", State: knob.Applied}
	failed := 0
	for _, r := range b.results {
		if r.Err != nil || r.Dropped != "" {
			failed++
		}
	}
	switch {
	case !b.applied:
		st.State, st.Detail = knob.Off, "not applied yet: waiting for the first slo-config"
	case !b.want.Enable:
		st.State, st.Detail = knob.Off, "beClass.blkioQOS.enable is false"
	case b.err != nil:
		st.State, st.Detail = knob.Refused, b.err.Error()
	case failed > 0 && failed == len(b.results):
		st.State, st.Detail = knob.Refused, describe(b.results, nil)
	case len(b.results) == 0:
		st.State, st.Detail = knob.Off, "no blocks"
	default:
		st.Detail = describe(b.results, nil)
	}
	enable := st
	enable.Key = "beClass.blkioQOS.enable"
	return []knob.Status{enable, st}
}
