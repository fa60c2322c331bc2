//go:build linux

package collector

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
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

// rqValue is the map value as user space reads it.
type rqValue [rqSlots + 1]uint64

type bpfRunQueue struct {
	start, hist *ebpf.Map
	progs       []*ebpf.Program
	links       []link.Link
}

// liftMemlock removes the memlock limit, which kernels before 5.11 charge BPF maps against (later
// ones charge the memory cgroup and ignore it). cilium/ebpf's rlimit package does the same, but its
// package init runs in every process that links it: it creates a BPF map to probe the kernel and keeps
// the parsed /proc/self/mountinfo, 160 KiB of tandem-proxy's 2 MiB live heap with 100 containers
// (a heap profile), although the run-queue source is off by default. Here it happens only when the
// source is turned on.
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

// loadRunQueueProbe builds the two tracepoint programs with the asm package (no C toolchain needed to
// build Tandem) and attaches them. Any failure (no CAP_BPF, a kernel without LRU maps or tracepoint
// programs) comes back as an error, so the source stays off.
func loadRunQueueProbe(off schedOffsets) (_ rqProbe, retErr error) {
	if err := liftMemlock(); err != nil {
		return nil, fmt.Errorf("lift the memlock limit for BPF maps: %w", err)
	}
	p := &bpfRunQueue{}
	defer func() {
		if retErr != nil {
			p.close()
		}
	}()
	var err error
	p.start, err = ebpf.NewMap(&ebpf.MapSpec{Name: "tandem_rq_start", Type: ebpf.LRUHash, KeySize: 4, ValueSize: 8, MaxEntries: rqStartEntries})
	if err != nil {
		return nil, fmt.Errorf("create run-queue start map: %w", err)
	}
	p.hist, err = ebpf.NewMap(&ebpf.MapSpec{Name: "tandem_rq_hist", Type: ebpf.Hash, KeySize: 4, ValueSize: rqValueSize, MaxEntries: rqHistEntries})
	if err != nil {
		return nil, fmt.Errorf("create run-queue histogram map: %w", err)
	}
	for _, tp := range []struct {
		event string
		insns asm.Instructions
	}{
		{"sched_wakeup", wakeupProgram(p.start, off.wakeupPID)},
		{"sched_wakeup_new", wakeupProgram(p.start, off.wakeupPID)},
		{"sched_switch", switchProgram(p.start, p.hist, off)},
	} {
		prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Name: "tandem_rq", Type: ebpf.TracePoint, License: "GPL", Instructions: tp.insns})
		if err != nil {
			return nil, fmt.Errorf("load %s program: %w", tp.event, err)
		}
		p.progs = append(p.progs, prog)
		l, err := link.Tracepoint("sched", tp.event, prog, nil)
		if err != nil {
			return nil, fmt.Errorf("attach to sched:%s: %w", tp.event, err)
		}
		p.links = append(p.links, l)
	}
	return p, nil
}

// recordStart stores start[pid] = now. It expects the thread id in R1 and clobbers R0–R5.
func recordStart(start *ebpf.Map, label string) asm.Instructions {
	return asm.Instructions{
		asm.JEq.Imm(asm.R1, 0, label), // the idle task never waits in a run queue
		asm.StoreMem(asm.RFP, -4, asm.R1, asm.Word),
		asm.FnKtimeGetNs.Call(),
		asm.StoreMem(asm.RFP, -16, asm.R0, asm.DWord),
		asm.LoadMapPtr(asm.R1, start.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -4),
		asm.Mov.Reg(asm.R3, asm.RFP),
		asm.Add.Imm(asm.R3, -16),
		asm.Mov.Imm(asm.R4, 0), // BPF_ANY
		asm.FnMapUpdateElem.Call(),
	}
}

// wakeupProgram runs on sched_wakeup(_new): the woken thread is now runnable.
func wakeupProgram(start *ebpf.Map, pidOff int16) asm.Instructions {
	insns := asm.Instructions{asm.LoadMem(asm.R1, asm.R1, pidOff, asm.Word)}
	insns = append(insns, recordStart(start, "out")...)
	return append(insns, asm.Mov.Imm(asm.R0, 0).WithSymbol("out"), asm.Return())
}

// switchProgram runs on sched_switch. A preempted prev is runnable again from now; next stops waiting,
// so its wait lands in its log2 bucket and in the sum, with one map lookup. Stack: FP-4 thread id
// (both maps' key), FP-16 timestamp, FP-232…FP-9 a zeroed histogram for a new thread.
func switchProgram(start, hist *ebpf.Map, off schedOffsets) asm.Instructions {
	insns := asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1),
		// prev_state 0 (or only the preempt flag 0x100 above the state bits) means prev stays runnable.
		asm.LoadMem(asm.R1, asm.R6, off.switchPrevState, asm.DWord),
		asm.And.Imm(asm.R1, 0xff),
		asm.JNE.Imm(asm.R1, 0, "next"),
		asm.LoadMem(asm.R1, asm.R6, off.switchPrevPID, asm.Word),
	}
	insns = append(insns, recordStart(start, "next")...)
	insns = append(insns,
		asm.LoadMem(asm.R9, asm.R6, off.switchNextPID, asm.Word).WithSymbol("next"),
		asm.JEq.Imm(asm.R9, 0, "out"),
		asm.StoreMem(asm.RFP, -4, asm.R9, asm.Word),
		asm.LoadMapPtr(asm.R1, start.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -4),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "out"),
		asm.LoadMem(asm.R8, asm.R0, 0, asm.DWord),
		asm.FnKtimeGetNs.Call(),
		asm.Sub.Reg(asm.R0, asm.R8),
		asm.Mov.Reg(asm.R8, asm.R0), // R8 = wait in ns
		asm.LoadMapPtr(asm.R1, start.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -4),
		asm.FnMapDeleteElem.Call(),
		// slot = bit length of wait/1000, capped (rqSlot in runqueue.go).
		asm.Mov.Reg(asm.R1, asm.R8),
		asm.Div.Imm(asm.R1, 1000),
		asm.Mov.Imm(asm.R2, 0),
	)
	for _, shift := range []int32{16, 8, 4, 2, 1} {
		skip := fmt.Sprintf("lt%d", shift)
		insns = append(insns,
			asm.JLT.Imm(asm.R1, int32(1)<<shift, skip),
			asm.RSh.Imm(asm.R1, shift),
			asm.Add.Imm(asm.R2, shift),
			asm.Mov.Imm(asm.R0, 0).WithSymbol(skip),
		)
	}
	insns = append(insns,
		asm.Add.Reg(asm.R2, asm.R1), // R1 is 0 or 1 now
		asm.JLE.Imm(asm.R2, rqSlots-1, "capped"),
		asm.Mov.Imm(asm.R2, rqSlots-1),
		asm.Mov.Reg(asm.R7, asm.R2).WithSymbol("capped"), // R7 = slot, known ≤ rqSlots-1
		asm.LoadMapPtr(asm.R1, hist.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -4),
		asm.FnMapLookupElem.Call(),
		asm.JNE.Imm(asm.R0, 0, "have"),
	)
	// First wait of this thread since the last drain: insert a zeroed histogram, then look it up.
	insns = append(insns, asm.Mov.Imm(asm.R1, 0))
	for off := int16(-8 - rqValueSize); off < -8; off += 8 {
		insns = append(insns, asm.StoreMem(asm.RFP, off, asm.R1, asm.DWord))
	}
	insns = append(insns,
		asm.LoadMapPtr(asm.R1, hist.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -4),
		asm.Mov.Reg(asm.R3, asm.RFP),
		asm.Add.Imm(asm.R3, -8-rqValueSize),
		asm.Mov.Imm(asm.R4, 1), // BPF_NOEXIST: another CPU may have inserted it meanwhile
		asm.FnMapUpdateElem.Call(),
		asm.LoadMapPtr(asm.R1, hist.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -4),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "out"), // map full until the next drain
		asm.Mov.Reg(asm.R6, asm.R0).WithSymbol("have"),
		asm.Mov.Reg(asm.R1, asm.R7),
		asm.LSh.Imm(asm.R1, 3),
		asm.Add.Reg(asm.R0, asm.R1),
		asm.Mov.Imm(asm.R1, 1),
		asm.AddAtomic.Mem(asm.R0, asm.R1, asm.DWord, 0),
		asm.AddAtomic.Mem(asm.R6, asm.R8, asm.DWord, rqSlots*8),
	)
	return append(insns, asm.Mov.Imm(asm.R0, 0).WithSymbol("out"), asm.Return())
}

// drain takes every thread's histogram out of the map. With batch operations (Linux 5.6+) one
// system call moves a thousand threads; older kernels fall back to iterating and deleting key by
// key, where a wait recorded between the read and the delete of its key is lost.
func (p *bpfRunQueue) drain() (map[rqKey]uint64, error) {
	out := map[rqKey]uint64{}
	add := func(tid uint32, v *rqValue) {
		for slot, n := range v {
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
	keys := make([]uint32, 256)
	vals := make([]rqValue, 256)
	var cursor ebpf.MapBatchCursor
	for {
		n, err := p.hist.BatchLookupAndDelete(&cursor, keys, vals, nil)
		for i := range n {
			add(keys[i], &vals[i])
		}
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return out, nil
		}
		if errors.Is(err, ebpf.ErrNotSupported) {
			return p.drainByKey(out, add)
		}
		if err != nil {
			return nil, fmt.Errorf("read run-queue histogram: %w", err)
		}
	}
}

func (p *bpfRunQueue) drainByKey(out map[rqKey]uint64, add func(uint32, *rqValue)) (map[rqKey]uint64, error) {
	var (
		k    uint32
		v    rqValue
		keys []uint32
		iter = p.hist.Iterate()
	)
	for iter.Next(&k, &v) {
		add(k, &v)
		keys = append(keys, k)
	}
	if err := iter.Err(); err != nil {
		return nil, fmt.Errorf("read run-queue histogram: %w", err)
	}
	for _, k := range keys {
		if err := p.hist.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
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
