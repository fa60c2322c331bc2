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
