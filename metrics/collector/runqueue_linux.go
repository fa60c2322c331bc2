//go:build linux

package collector

import (
	"encoding/binary"
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/tandemkit/tandem/metrics/collector/bpf"
)

// Map sizes bound the kernel memory the probe can pin: runnable threads waiting to run, and threads
// that ran between two drains. The start map is LRU, so a thread that exits while runnable cannot
// leak its entry for good; the histogram map is drained every interval, and while it is full new
// threads are not counted until the next drain.
const (
	rqStartEntries = 16384
	rqHistEntries  = 8192
)

// rqValueSize is one thread's histogram in the map: rqSlots counts, then the nanoseconds waited.
const rqValueSize = (rqSlots + 1) * 8

type bpfRunQueue struct {
	start, hist *bpf.Map
	progs       []*bpf.Program
	links       []*bpf.Link
}

// liftMemlock removes the memlock limit, which kernels before 5.11 charge BPF maps against (later
// ones charge the memory cgroup and ignore it). It happens only when the source is turned on.
func liftMemlock() error {
	var cur unix.Rlimit
	if err := unix.Prlimit(0, unix.RLIMIT_MEMLOCK, nil, &cur); err != nil {
		return err
	}
	if cur.Cur == unix.RLIM_INFINITY {
		return nil
	}
	return unix.Prlimit(0, unix.RLIMIT_MEMLOCK, &unix.Rlimit{Cur: unix.RLIM_INFINITY, Max: unix.RLIM_INFINITY}, nil)
}

// loadRunQueueProbe builds the two tracepoint programs with the bpf package's assembler (no C toolchain
// needed to build Tandem) and attaches them. Any failure (no CAP_BPF, a kernel without LRU maps or
// tracepoint programs) comes back as an error, so the source stays off.
func loadRunQueueProbe(tracefs string, off schedOffsets) (_ rqProbe, retErr error) {
	// A container without CAP_SYS_RESOURCE cannot lift the limit; kernels since 5.11 do not need it,
	// so the maps are tried anyway, and an older kernel's refusal says what to do.
	memlockErr := liftMemlock()
	p := &bpfRunQueue{}
	defer func() {
		if retErr != nil {
			p.close()
		}
	}()
	var err error
	p.start, err = bpf.NewMap(bpf.MapSpec{Name: "tandem_rq_start", Type: bpf.LRUHash, KeySize: 4, ValueSize: 8, MaxEntries: rqStartEntries})
	if err != nil {
		if memlockErr != nil && errors.Is(err, unix.EPERM) {
			return nil, fmt.Errorf("create run-queue start map (the memlock limit could not be lifted: %w; give CAP_SYS_RESOURCE or raise LimitMEMLOCK): %w", memlockErr, err)
		}
		return nil, fmt.Errorf("create run-queue start map: %w", err)
	}
	p.hist, err = bpf.NewMap(bpf.MapSpec{Name: "tandem_rq_hist", Type: bpf.Hash, KeySize: 4, ValueSize: rqValueSize, MaxEntries: rqHistEntries})
	if err != nil {
		return nil, fmt.Errorf("create run-queue histogram map: %w", err)
	}
	for _, tp := range []struct {
		event string
		insns bpf.Instructions
	}{
		{"sched_wakeup", wakeupProgram(p.start, off.wakeupPID)},
		{"sched_wakeup_new", wakeupProgram(p.start, off.wakeupPID)},
		{"sched_switch", switchProgram(p.start, p.hist, off)},
	} {
		prog, err := bpf.NewTracepointProgram("tandem_rq", "GPL", tp.insns)
		if err != nil {
			return nil, fmt.Errorf("load %s program: %w", tp.event, err)
		}
		p.progs = append(p.progs, prog)
		l, err := bpf.AttachTracepoint(tracefs, "sched", tp.event, prog)
		if err != nil {
			return nil, fmt.Errorf("attach to sched:%s: %w", tp.event, err)
		}
		p.links = append(p.links, l)
	}
	return p, nil
}

// recordStart stores start[pid] = now. It expects the thread id in R1 and clobbers R0–R5.
func recordStart(start *bpf.Map, label string) bpf.Instructions {
	return bpf.Instructions{
		bpf.JEq.Imm(bpf.R1, 0, label), // the idle task never waits in a run queue
		bpf.StoreMem(bpf.RFP, -4, bpf.R1, bpf.Word),
		bpf.Call(bpf.FnKtimeGetNs),
		bpf.StoreMem(bpf.RFP, -16, bpf.R0, bpf.DWord),
		bpf.LoadMapFD(bpf.R1, start.FD()),
		bpf.Mov.Reg(bpf.R2, bpf.RFP),
		bpf.Add.Imm(bpf.R2, -4),
		bpf.Mov.Reg(bpf.R3, bpf.RFP),
		bpf.Add.Imm(bpf.R3, -16),
		bpf.Mov.Imm(bpf.R4, 0), // BPF_ANY
		bpf.Call(bpf.FnMapUpdateElem),
	}
}

// wakeupProgram runs on sched_wakeup(_new): the woken thread is now runnable.
func wakeupProgram(start *bpf.Map, pidOff int16) bpf.Instructions {
	insns := bpf.Instructions{bpf.LoadMem(bpf.R1, bpf.R1, pidOff, bpf.Word)}
	insns = append(insns, recordStart(start, "out")...)
	return append(insns, bpf.Mov.Imm(bpf.R0, 0).Label("out"), bpf.Exit())
}

// switchProgram runs on sched_switch. A preempted prev is runnable again from now; next stops waiting,
// so its wait lands in its log2 bucket and in the sum, with one map lookup. Stack: FP-4 thread id
// (both maps' key), FP-16 timestamp, FP-232…FP-9 a zeroed histogram for a new thread.
func switchProgram(start, hist *bpf.Map, off schedOffsets) bpf.Instructions {
	insns := bpf.Instructions{
		bpf.Mov.Reg(bpf.R6, bpf.R1),
		// prev_state 0 (or only the preempt flag 0x100 above the state bits) means prev stays runnable.
		bpf.LoadMem(bpf.R1, bpf.R6, off.switchPrevState, bpf.DWord),
		bpf.And.Imm(bpf.R1, 0xff),
		bpf.JNE.Imm(bpf.R1, 0, "next"),
		bpf.LoadMem(bpf.R1, bpf.R6, off.switchPrevPID, bpf.Word),
	}
	insns = append(insns, recordStart(start, "next")...)
	insns = append(insns,
		bpf.LoadMem(bpf.R9, bpf.R6, off.switchNextPID, bpf.Word).Label("next"),
		bpf.JEq.Imm(bpf.R9, 0, "out"),
		bpf.StoreMem(bpf.RFP, -4, bpf.R9, bpf.Word),
		bpf.LoadMapFD(bpf.R1, start.FD()),
		bpf.Mov.Reg(bpf.R2, bpf.RFP),
		bpf.Add.Imm(bpf.R2, -4),
		bpf.Call(bpf.FnMapLookupElem),
		bpf.JEq.Imm(bpf.R0, 0, "out"),
		bpf.LoadMem(bpf.R8, bpf.R0, 0, bpf.DWord),
		bpf.Call(bpf.FnKtimeGetNs),
		bpf.Sub.Reg(bpf.R0, bpf.R8),
		bpf.Mov.Reg(bpf.R8, bpf.R0), // R8 = wait in ns
		bpf.LoadMapFD(bpf.R1, start.FD()),
		bpf.Mov.Reg(bpf.R2, bpf.RFP),
		bpf.Add.Imm(bpf.R2, -4),
		bpf.Call(bpf.FnMapDeleteElem),
		// slot = bit length of wait/1000, capped (rqSlot in runqueue.go).
		bpf.Mov.Reg(bpf.R1, bpf.R8),
		bpf.Div.Imm(bpf.R1, 1000),
		bpf.Mov.Imm(bpf.R2, 0),
	)
	for _, shift := range []int32{16, 8, 4, 2, 1} {
		skip := fmt.Sprintf("lt%d", shift)
		insns = append(insns,
			bpf.JLT.Imm(bpf.R1, int32(1)<<shift, skip),
			bpf.RSh.Imm(bpf.R1, shift),
			bpf.Add.Imm(bpf.R2, shift),
			bpf.Mov.Imm(bpf.R0, 0).Label(skip),
		)
	}
	insns = append(insns,
		bpf.Add.Reg(bpf.R2, bpf.R1), // R1 is 0 or 1 now
		bpf.JLE.Imm(bpf.R2, rqSlots-1, "capped"),
		bpf.Mov.Imm(bpf.R2, rqSlots-1),
		bpf.Mov.Reg(bpf.R7, bpf.R2).Label("capped"), // R7 = slot, known ≤ rqSlots-1
		bpf.LoadMapFD(bpf.R1, hist.FD()),
		bpf.Mov.Reg(bpf.R2, bpf.RFP),
		bpf.Add.Imm(bpf.R2, -4),
		bpf.Call(bpf.FnMapLookupElem),
		bpf.JNE.Imm(bpf.R0, 0, "have"),
	)
	// First wait of this thread since the last drain: insert a zeroed histogram, then look it up.
	insns = append(insns, bpf.Mov.Imm(bpf.R1, 0))
	for off := int16(-8 - rqValueSize); off < -8; off += 8 {
		insns = append(insns, bpf.StoreMem(bpf.RFP, off, bpf.R1, bpf.DWord))
	}
	insns = append(insns,
		bpf.LoadMapFD(bpf.R1, hist.FD()),
		bpf.Mov.Reg(bpf.R2, bpf.RFP),
		bpf.Add.Imm(bpf.R2, -4),
		bpf.Mov.Reg(bpf.R3, bpf.RFP),
		bpf.Add.Imm(bpf.R3, -8-rqValueSize),
		bpf.Mov.Imm(bpf.R4, 1), // BPF_NOEXIST: another CPU may have inserted it meanwhile
		bpf.Call(bpf.FnMapUpdateElem),
		bpf.LoadMapFD(bpf.R1, hist.FD()),
		bpf.Mov.Reg(bpf.R2, bpf.RFP),
		bpf.Add.Imm(bpf.R2, -4),
		bpf.Call(bpf.FnMapLookupElem),
		bpf.JEq.Imm(bpf.R0, 0, "out"), // map full until the next drain
		bpf.Mov.Reg(bpf.R6, bpf.R0).Label("have"),
		bpf.Mov.Reg(bpf.R1, bpf.R7),
		bpf.LSh.Imm(bpf.R1, 3),
		bpf.Add.Reg(bpf.R0, bpf.R1),
		bpf.Mov.Imm(bpf.R1, 1),
		bpf.AtomicAdd(bpf.R0, 0, bpf.R1, bpf.DWord),
		bpf.AtomicAdd(bpf.R6, rqSlots*8, bpf.R8, bpf.DWord),
	)
	return append(insns, bpf.Mov.Imm(bpf.R0, 0).Label("out"), bpf.Exit())
}

// drain takes every thread's histogram out of the map. With batch operations (Linux 5.6+) one
// system call moves a few hundred threads; older kernels fall back to iterating and deleting key by
// key, where a wait recorded between the read and the delete of its key is lost.
func (p *bpfRunQueue) drain() (map[rqKey]uint64, error) {
	out := map[rqKey]uint64{}
	const batch = 256
	keys := make([]byte, batch*4)
	vals := make([]byte, batch*rqValueSize)
	var cursor bpf.BatchCursor
	for {
		n, err := p.hist.LookupAndDeleteBatch(&cursor, keys, vals)
		for i := range n {
			addHist(out, keys[i*4:], vals[i*rqValueSize:])
		}
		if errors.Is(err, bpf.ErrKeyNotExist) {
			return out, nil
		}
		if errors.Is(err, bpf.ErrBatchNotSupported) {
			return p.drainByKey(out)
		}
		if err != nil {
			return nil, fmt.Errorf("read run-queue histogram: %w", err)
		}
	}
}

// addHist adds one thread's histogram, as the map holds it (key, then value, in the machine's byte
// order), to out.
func addHist(out map[rqKey]uint64, key, value []byte) {
	tid := binary.NativeEndian.Uint32(key)
	for slot := range rqSlots + 1 {
		n := binary.NativeEndian.Uint64(value[slot*8:])
		if n == 0 {
			continue
		}
		k := rqKey{TID: tid, Slot: uint32(slot)}
		if slot == rqSlots {
			k.Slot = rqSumSlot
		}
		out[k] += n
	}
}

func (p *bpfRunQueue) drainByKey(out map[rqKey]uint64) (map[rqKey]uint64, error) {
	var keys [][]byte
	var key []byte // nil: the first key
	for {
		next := make([]byte, 4)
		err := p.hist.NextKey(key, next)
		if errors.Is(err, bpf.ErrKeyNotExist) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read run-queue histogram keys: %w", err)
		}
		keys = append(keys, next)
		key = next
	}
	value := make([]byte, rqValueSize)
	for _, k := range keys {
		err := p.hist.Lookup(k, value)
		if errors.Is(err, bpf.ErrKeyNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read run-queue histogram: %w", err)
		}
		addHist(out, k, value)
	}
	for _, k := range keys {
		if err := p.hist.Delete(k); err != nil && !errors.Is(err, bpf.ErrKeyNotExist) {
			return out, fmt.Errorf("clear run-queue histogram: %w", err)
		}
	}
	return out, nil
}

func (p *bpfRunQueue) close() {
	for _, l := range p.links {
		_ = l.Close()
	}
	for _, pr := range p.progs {
		_ = pr.Close()
	}
	if p.hist != nil {
		_ = p.hist.Close()
	}
	if p.start != nil {
		_ = p.start.Close()
	}
	p.links, p.progs, p.hist, p.start = nil, nil, nil, nil
}
