package bpf

import (
	"encoding/binary"
	"errors"
	"os"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// newTestMap creates a real map in the kernel, or skips where the process may not.
func newTestMap(t *testing.T, spec MapSpec) *Map {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("BPF maps need root")
	}
	m, err := NewMap(spec)
	if errors.Is(err, unix.EPERM) {
		t.Skipf("BPF not allowed here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return m
}

func u32(v uint32) []byte { return binary.NativeEndian.AppendUint32(nil, v) }
func u64(v uint64) []byte { return binary.NativeEndian.AppendUint64(nil, v) }

func TestMapElements(t *testing.T) {
	m := newTestMap(t, MapSpec{Name: "tandem_test", Type: Hash, KeySize: 4, ValueSize: 8, MaxEntries: 16})
	if err := m.Update(u32(1), u64(10), unix.BPF_ANY); err != nil {
		t.Fatal(err)
	}
	if err := m.Update(u32(1), u64(11), unix.BPF_NOEXIST); !errors.Is(err, unix.EEXIST) {
		t.Errorf("BPF_NOEXIST over an existing key: %v, want EEXIST", err)
	}
	v := make([]byte, 8)
	if err := m.Lookup(u32(1), v); err != nil || binary.NativeEndian.Uint64(v) != 10 {
		t.Errorf("Lookup(1) = %d, %v; want 10", binary.NativeEndian.Uint64(v), err)
	}
	if err := m.Lookup(u32(2), v); !errors.Is(err, ErrKeyNotExist) {
		t.Errorf("Lookup of a missing key: %v, want ErrKeyNotExist", err)
	}
	if err := m.Lookup(u32(1), make([]byte, 4)); err == nil {
		t.Error("Lookup into a 4-byte value of an 8-byte map succeeded")
	}
	if err := m.Delete(u32(1)); err != nil {
		t.Fatal(err)
	}
	if err := m.Delete(u32(1)); !errors.Is(err, ErrKeyNotExist) {
		t.Errorf("second Delete: %v, want ErrKeyNotExist", err)
	}
}

func TestMapNextKeyVisitsEveryKey(t *testing.T) {
	m := newTestMap(t, MapSpec{Name: "tandem_test", Type: LRUHash, KeySize: 4, ValueSize: 8, MaxEntries: 64})
	want := map[uint32]bool{}
	for k := range uint32(20) {
		if err := m.Update(u32(k*7), u64(uint64(k)), unix.BPF_ANY); err != nil {
			t.Fatal(err)
		}
		want[k*7] = true
	}
	var key []byte
	got := map[uint32]bool{}
	for {
		next := make([]byte, 4)
		err := m.NextKey(key, next)
		if errors.Is(err, ErrKeyNotExist) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got[binary.NativeEndian.Uint32(next)] = true
		key = next
	}
	if len(got) != len(want) {
		t.Errorf("iteration visited %d keys, want %d: %v", len(got), len(want), got)
	}
	for k := range want {
		if !got[k] {
			t.Errorf("iteration missed key %d", k)
		}
	}
}

// TestLookupAndDeleteBatchDrainsTheMap: batches of 64 move all 1000 entries out, each once with its
// value, and leave the map empty.
func TestLookupAndDeleteBatchDrainsTheMap(t *testing.T) {
	const n = 1000
	m := newTestMap(t, MapSpec{Name: "tandem_test", Type: Hash, KeySize: 4, ValueSize: 16, MaxEntries: 2048})
	for k := range uint32(n) {
		v := append(u64(uint64(k)*3), u64(uint64(k)+1)...)
		if err := m.Update(u32(k), v, unix.BPF_ANY); err != nil {
			t.Fatal(err)
		}
	}
	keys, vals := make([]byte, 64*4), make([]byte, 64*16)
	var c BatchCursor
	seen := map[uint32]bool{}
	for calls := 0; ; calls++ {
		if calls > n {
			t.Fatal("the batches never reached the end of the map")
		}
		got, err := m.LookupAndDeleteBatch(&c, keys, vals)
		if errors.Is(err, ErrBatchNotSupported) {
			t.Skipf("this kernel has no batch operations: %v", err)
		}
		if err != nil && !errors.Is(err, ErrKeyNotExist) {
			t.Fatal(err)
		}
		for i := range got {
			k := binary.NativeEndian.Uint32(keys[i*4:])
			a, b := binary.NativeEndian.Uint64(vals[i*16:]), binary.NativeEndian.Uint64(vals[i*16+8:])
			if seen[k] {
				t.Errorf("key %d moved twice", k)
			}
			seen[k] = true
			if a != uint64(k)*3 || b != uint64(k)+1 {
				t.Errorf("key %d came with (%d, %d), want (%d, %d)", k, a, b, uint64(k)*3, uint64(k)+1)
			}
		}
		if err != nil {
			break
		}
	}
	if len(seen) != n {
		t.Errorf("the batches moved %d entries, want %d", len(seen), n)
	}
	if err := m.NextKey(nil, make([]byte, 4)); !errors.Is(err, ErrKeyNotExist) {
		t.Errorf("the map is not empty after the batches: NextKey = %v", err)
	}
	if _, err := m.LookupAndDeleteBatch(&BatchCursor{}, keys[:3], vals); err == nil {
		t.Error("a key buffer that is not a whole number of keys was taken")
	}
}

func TestProgramLoadsAndRefusalsCarryTheVerifierLog(t *testing.T) {
	m := newTestMap(t, MapSpec{Name: "tandem_test", Type: Hash, KeySize: 4, ValueSize: 8, MaxEntries: 4})
	good := Instructions{
		Mov.Imm(R1, 0),
		StoreMem(RFP, -4, R1, Word),
		LoadMapFD(R1, m.FD()),
		Mov.Reg(R2, RFP),
		Add.Imm(R2, -4),
		Call(FnMapLookupElem),
		Mov.Imm(R0, 0),
		Exit(),
	}
	p, err := NewTracepointProgram("tandem_test", "GPL", good)
	if err != nil {
		t.Fatalf("the verifier refused a valid program: %v", err)
	}
	defer p.Close()

	// Reading R2 before anything is written to it: the verifier says so, and the error must too.
	bad := Instructions{Mov.Reg(R0, R2), Exit()}
	_, err = NewTracepointProgram("tandem_test", "GPL", bad)
	if err == nil {
		t.Fatal("the verifier took a program that reads an unset register")
	}
	if !strings.Contains(err.Error(), "verifier:") || !strings.Contains(err.Error(), "R2 !read_ok") {
		t.Errorf("the error does not carry the verifier's reason: %v", err)
	}
}

// TestAttributeLayouts holds the attribute structs to the kernel's union bpf_attr, field by field: a
// field in the wrong place hands the kernel a wrong address (EFAULT) or a wrong size.
func TestAttributeLayouts(t *testing.T) {
	if !is64Bit {
		t.Skip("the layouts are those of 64-bit machines")
	}
	var (
		c mapCreateAttr
		e mapElemAttr
		b mapBatchAttr
		p progLoadAttr
	)
	tests := []struct {
		field     string
		got, want uintptr
	}{
		{"map_create.map_type", unsafe.Offsetof(c.mapType), 0},
		{"map_create.max_entries", unsafe.Offsetof(c.maxEntries), 12},
		{"map_create.map_flags", unsafe.Offsetof(c.mapFlags), 16},
		{"map_create.inner_map_fd", unsafe.Offsetof(c.innerMapFD), 20},
		{"map_create.numa_node", unsafe.Offsetof(c.numaNode), 24},
		{"map_create.map_name", unsafe.Offsetof(c.name), 28},
		{"sizeof map_create", unsafe.Sizeof(c), 48},
		{"elem.map_fd", unsafe.Offsetof(e.mapFD), 0},
		{"elem.key", unsafe.Offsetof(e.key), 8},
		{"elem.value", unsafe.Offsetof(e.value), 16},
		{"elem.flags", unsafe.Offsetof(e.flags), 24},
		{"sizeof elem", unsafe.Sizeof(e), 32},
		{"batch.in_batch", unsafe.Offsetof(b.inBatch), 0},
		{"batch.out_batch", unsafe.Offsetof(b.outBatch), 8},
		{"batch.keys", unsafe.Offsetof(b.keys), 16},
		{"batch.values", unsafe.Offsetof(b.values), 24},
		{"batch.count", unsafe.Offsetof(b.count), 32},
		{"batch.map_fd", unsafe.Offsetof(b.mapFD), 36},
		{"batch.elem_flags", unsafe.Offsetof(b.elemFlags), 40},
		{"batch.flags", unsafe.Offsetof(b.flags), 48},
		{"sizeof batch", unsafe.Sizeof(b), 56},
		{"prog_load.insn_cnt", unsafe.Offsetof(p.insnCnt), 4},
		{"prog_load.insns", unsafe.Offsetof(p.insns), 8},
		{"prog_load.license", unsafe.Offsetof(p.license), 16},
		{"prog_load.log_level", unsafe.Offsetof(p.logLevel), 24},
		{"prog_load.log_size", unsafe.Offsetof(p.logSize), 28},
		{"prog_load.log_buf", unsafe.Offsetof(p.logBuf), 32},
		{"prog_load.kern_version", unsafe.Offsetof(p.kernVersion), 40},
		{"prog_load.prog_flags", unsafe.Offsetof(p.progFlags), 44},
		{"prog_load.prog_name", unsafe.Offsetof(p.name), 48},
		{"sizeof prog_load", unsafe.Sizeof(p), 64},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s at %d, the kernel's at %d", tt.field, tt.got, tt.want)
		}
	}
}
