package collector

import (
	"encoding/binary"
	"errors"
	"maps"
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tandemkit/tandem/metrics/collector/bpf"
)

// TestRunQueueDrainPaths: the batch drain (Linux 5.6+) and the key-by-key fallback read the same
// histograms out of a real map, more than one batch of them, and leave it empty.
func TestRunQueueDrainPaths(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("BPF maps need root")
	}
	hist, err := bpf.NewMap(bpf.MapSpec{Name: "tandem_rq_test", Type: bpf.Hash, KeySize: 4, ValueSize: rqValueSize, MaxEntries: 1024})
	if errors.Is(err, unix.EPERM) {
		t.Skipf("BPF not allowed here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	p := &bpfRunQueue{hist: hist}
	defer p.close()

	const threads = 600 // more than one 256-entry batch
	want := map[rqKey]uint64{}
	fill := func() {
		for tid := uint32(1); tid <= threads; tid++ {
			v := make([]byte, rqValueSize)
			slot := tid % rqSlots
			binary.NativeEndian.PutUint64(v[slot*8:], uint64(tid))
			binary.NativeEndian.PutUint64(v[rqSlots*8:], uint64(tid)*1000)
			if err := hist.Update(binary.NativeEndian.AppendUint32(nil, tid), v, unix.BPF_ANY); err != nil {
				t.Fatal(err)
			}
			want[rqKey{TID: tid, Slot: slot}] = uint64(tid)
			want[rqKey{TID: tid, Slot: rqSumSlot}] = uint64(tid) * 1000
		}
	}
	empty := func(path string) {
		if err := hist.NextKey(nil, make([]byte, 4)); !errors.Is(err, bpf.ErrKeyNotExist) {
			t.Errorf("%s left entries in the map: %v", path, err)
		}
	}

	fill()
	got, err := p.drain()
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(got, want) {
		t.Errorf("the batch drain read %d counts that differ from the %d stored", len(got), len(want))
	}
	empty("the batch drain")

	fill()
	got, err = p.drainByKey(map[rqKey]uint64{})
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(got, want) {
		t.Errorf("the key-by-key drain read %d counts that differ from the %d stored", len(got), len(want))
	}
	empty("the key-by-key drain")
}

// TestAttachTracepoint: a program attached to sched_switch through bpf.AttachTracepoint runs on every
// context switch, an unknown tracepoint is an error, and closing the link detaches the program. Here,
// beside the collector, so that tracefs is found the way the run-queue source finds it.
func TestAttachTracepoint(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("BPF programs need root")
	}
	tracefs := tracefsForTest(t)
	m, err := bpf.NewMap(bpf.MapSpec{Name: "tandem_rq_test", Type: bpf.Hash, KeySize: 4, ValueSize: 8, MaxEntries: 4})
	if errors.Is(err, unix.EPERM) {
		t.Skipf("BPF not allowed here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	key := binary.NativeEndian.AppendUint32(nil, 0)
	// Count every context switch under key 0.
	count := bpf.Instructions{
		bpf.Mov.Imm(bpf.R1, 0),
		bpf.StoreMem(bpf.RFP, -4, bpf.R1, bpf.Word),
		bpf.LoadMapFD(bpf.R1, m.FD()),
		bpf.Mov.Reg(bpf.R2, bpf.RFP),
		bpf.Add.Imm(bpf.R2, -4),
		bpf.Call(bpf.FnMapLookupElem),
		bpf.JEq.Imm(bpf.R0, 0, "out"),
		bpf.Mov.Imm(bpf.R1, 1),
		bpf.AtomicAdd(bpf.R0, 0, bpf.R1, bpf.DWord),
		bpf.Mov.Imm(bpf.R0, 0).Label("out"),
		bpf.Exit(),
	}
	p, err := bpf.NewTracepointProgram("tandem_test", "GPL", count)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := m.Update(key, make([]byte, 8), unix.BPF_ANY); err != nil {
		t.Fatal(err)
	}
	if _, err := bpf.AttachTracepoint(tracefs, "sched", "no_such_event", p); err == nil {
		t.Error("attached to a tracepoint that does not exist")
	}
	l, err := bpf.AttachTracepoint(tracefs, "sched", "sched_switch", p)
	if err != nil {
		t.Fatal(err)
	}
	v := make([]byte, 8)
	for range 50 {
		// Each sleep switches this thread out and back in.
		_ = unix.Nanosleep(&unix.Timespec{Nsec: 1e6}, nil)
	}
	if err := m.Lookup(key, v); err != nil {
		t.Fatal(err)
	}
	if n := binary.NativeEndian.Uint64(v); n < 50 {
		t.Errorf("the program counted %d context switches during 50 sleeps", n)
	}
	// Detached, it counts no more.
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	_ = m.Lookup(key, v)
	before := binary.NativeEndian.Uint64(v)
	for range 20 {
		_ = unix.Nanosleep(&unix.Timespec{Nsec: 1e6}, nil)
	}
	_ = m.Lookup(key, v)
	if after := binary.NativeEndian.Uint64(v); after != before {
		t.Errorf("after Close the program still ran: %d → %d", before, after)
	}
}

// tracefsForTest returns where tracefs has the sched tracepoints, as the agent finds it. Where neither
// usual place has them, it mounts tracefs on /sys/kernel/tracing for the test and unmounts it when the
// test ends, so the programs are tested wherever the kernel could run them; it skips only where the
// mount itself is refused (no tracefs in this kernel, no right to mount).
func tracefsForTest(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting tracefs and loading BPF programs need root")
	}
	if tracefs := FindTracefs(fileExists); fileExists(tracefs + "/events/sched/sched_switch/id") {
		return tracefs
	}
	const tracefs = "/sys/kernel/tracing"
	if err := unix.Mount("nodev", tracefs, "tracefs", 0, ""); err != nil {
		t.Skipf("tracefs is not mounted and cannot be: mount -t tracefs nodev %s: %v", tracefs, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(tracefs, 0); err != nil {
			t.Errorf("unmount the tracefs this test mounted (umount %s by hand): %v", tracefs, err)
		}
	})
	if !fileExists(tracefs + "/events/sched/sched_switch/id") {
		t.Fatalf("tracefs mounted on %s has no sched:sched_switch tracepoint", tracefs)
	}
	return tracefs
}
