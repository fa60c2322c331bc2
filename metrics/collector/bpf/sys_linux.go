package bpf

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Errors callers tell apart.
var (
	// ErrKeyNotExist: the key is not in the map, or an iteration or batch has reached its end.
	ErrKeyNotExist = errors.New("key does not exist")
	// ErrBatchNotSupported: the kernel has no batch operations (before 5.6) or not for this map type.
	ErrBatchNotSupported = errors.New("batch map operations not supported by this kernel")
)

// errnoENOTSUPP is the kernel's internal "operation not supported" (524), which the bpf system call
// returns for a map type without batch operations; x/sys/unix does not name it.
const errnoENOTSUPP = unix.Errno(524)

// The bpf(2) attribute layouts this package passes (include/uapi/linux/bpf.h, union bpf_attr). Each is
// the prefix of the union that its command reads; the kernel takes a shorter attribute as zero-filled.
type mapCreateAttr struct {
	mapType, keySize, valueSize, maxEntries, mapFlags, innerMapFD, numaNode uint32
	name                                                                    [unix.BPF_OBJ_NAME_LEN]byte
	_                                                                       uint32
}

type mapElemAttr struct {
	mapFD uint32
	_     uint32
	key   pointer
	value pointer // or next_key
	flags uint64
}

type mapBatchAttr struct {
	inBatch, outBatch, keys, values pointer
	count, mapFD                    uint32
	elemFlags, flags                uint64
}

type progLoadAttr struct {
	progType, insnCnt uint32
	insns, license    pointer
	logLevel, logSize uint32
	logBuf            pointer
	kernVersion       uint32
	progFlags         uint32
	name              [unix.BPF_OBJ_NAME_LEN]byte
}

// pointer is an address as bpf_attr carries it, in a 64-bit field. It is held as an unsafe.Pointer,
// not a number, so that the garbage collector sees it: what it points to stays alive, and a buffer on
// the goroutine's stack that moves before the system call takes the field along. (The attribute itself
// is passed the way unsafe.Pointer's rules allow for a call to an assembly function, which keeps it
// in place until the call returns.) It fills the field only on 64-bit machines, so on others the
// loader refuses to run (errNot64Bit) rather than hand the kernel half an address.
type pointer struct{ p unsafe.Pointer }

// errNot64Bit: the attribute layouts here are those of 64-bit machines, which are all Tandem ships for.
var errNot64Bit = errors.New("the run-queue programs' loader supports 64-bit machines only")

const is64Bit = unsafe.Sizeof(uintptr(0)) == 8

func bytesPtr(b []byte) pointer {
	if len(b) == 0 {
		return pointer{}
	}
	return pointer{p: unsafe.Pointer(&b[0])}
}

// sys calls bpf(2). The verifier gives up with EAGAIN when a signal is pending, and the Go runtime
// signals its threads to preempt goroutines; any command can come back with EINTR. Both are retried a
// few times.
func sys[T any](cmd int, attr *T) (int, error) {
	if !is64Bit {
		return -1, errNot64Bit
	}
	for range 10 {
		r, _, errno := unix.Syscall(unix.SYS_BPF, uintptr(cmd), uintptr(unsafe.Pointer(attr)), unsafe.Sizeof(*attr))
		if errno == unix.EINTR || (errno == unix.EAGAIN && cmd == unix.BPF_PROG_LOAD) {
			continue
		}
		if errno != 0 {
			return -1, errno
		}
		return int(r), nil
	}
	return -1, unix.EINTR
}

// closeFD closes *fd the first time and marks it closed, so that a second Close does nothing.
func closeFD(fd *int) error {
	if *fd < 0 {
		return nil
	}
	err := unix.Close(*fd)
	*fd = -1
	return err
}

// objName is a map or program name as the kernel keeps it: at most 15 characters.
func objName(name string) (out [unix.BPF_OBJ_NAME_LEN]byte) {
	copy(out[:len(out)-1], name)
	return out
}

// MapType is a BPF map type.
type MapType uint32

// The map types the run-queue source uses.
const (
	Hash    MapType = unix.BPF_MAP_TYPE_HASH
	LRUHash MapType = unix.BPF_MAP_TYPE_LRU_HASH
)

// MapSpec describes a map to create.
type MapSpec struct {
	Name                           string // shown by bpftool; at most 15 characters
	Type                           MapType
	KeySize, ValueSize, MaxEntries uint32
}

// Map is a BPF map the process holds a file descriptor to.
type Map struct {
	fd                 int
	keySize, valueSize int
}

// NewMap creates a map. Kernels before 4.15 take no map names; there the map is created without one.
func NewMap(spec MapSpec) (*Map, error) {
	attr := mapCreateAttr{mapType: uint32(spec.Type), keySize: spec.KeySize, valueSize: spec.ValueSize, maxEntries: spec.MaxEntries, name: objName(spec.Name)}
	fd, err := sys(unix.BPF_MAP_CREATE, &attr)
	if errors.Is(err, unix.EINVAL) && spec.Name != "" {
		attr.name = [unix.BPF_OBJ_NAME_LEN]byte{}
		fd, err = sys(unix.BPF_MAP_CREATE, &attr)
	}
	if err != nil {
		return nil, fmt.Errorf("create BPF map %s: %w", spec.Name, err)
	}
	return &Map{fd: fd, keySize: int(spec.KeySize), valueSize: int(spec.ValueSize)}, nil
}

// FD is the map's file descriptor, for LoadMapFD.
func (m *Map) FD() int { return m.fd }

// Close releases the map; the kernel frees it once no program uses it either.
func (m *Map) Close() error { return closeFD(&m.fd) }

func (m *Map) check(key, value []byte) error {
	if len(key) != m.keySize || (value != nil && len(value) != m.valueSize) {
		return fmt.Errorf("map of %d-byte keys and %d-byte values given %d and %d bytes", m.keySize, m.valueSize, len(key), len(value))
	}
	return nil
}

func (m *Map) elem(cmd int, key, value []byte, flags uint64) error {
	if err := m.check(key, value); err != nil {
		return err
	}
	attr := mapElemAttr{mapFD: uint32(m.fd), key: bytesPtr(key), value: bytesPtr(value), flags: flags}
	_, err := sys(cmd, &attr)
	if errors.Is(err, unix.ENOENT) {
		return ErrKeyNotExist
	}
	return err
}

// Update stores value under key (flags: unix.BPF_ANY, BPF_NOEXIST, BPF_EXIST).
func (m *Map) Update(key, value []byte, flags uint64) error {
	return m.elem(unix.BPF_MAP_UPDATE_ELEM, key, value, flags)
}

// Lookup copies the value stored under key into value.
func (m *Map) Lookup(key, value []byte) error {
	return m.elem(unix.BPF_MAP_LOOKUP_ELEM, key, value, 0)
}

// Delete removes key.
func (m *Map) Delete(key []byte) error {
	return m.elem(unix.BPF_MAP_DELETE_ELEM, key, nil, 0)
}

// NextKey copies the key after key into next; a nil key asks for the first. At the end it returns
// ErrKeyNotExist.
func (m *Map) NextKey(key, next []byte) error {
	if len(next) != m.keySize || (key != nil && len(key) != m.keySize) {
		return fmt.Errorf("map of %d-byte keys given %d and %d bytes", m.keySize, len(key), len(next))
	}
	attr := mapElemAttr{mapFD: uint32(m.fd), key: bytesPtr(key), value: bytesPtr(next)}
	_, err := sys(unix.BPF_MAP_GET_NEXT_KEY, &attr)
	if errors.Is(err, unix.ENOENT) {
		return ErrKeyNotExist
	}
	return err
}

// BatchCursor is where a batch operation resumes: a hash map's bucket number. Its zero value starts
// from the beginning.
type BatchCursor struct {
	started bool
	in, out uint64
}

// LookupAndDeleteBatch moves up to len(keys)/keySize entries out of the map into keys and values
// (packed, in the machine's byte order) and returns how many it moved. When the map has no more
// entries past the cursor it returns ErrKeyNotExist, with the entries of this last batch counted.
// Kernels without batch operations return ErrBatchNotSupported.
func (m *Map) LookupAndDeleteBatch(c *BatchCursor, keys, values []byte) (int, error) {
	n := len(keys) / m.keySize
	if n == 0 || len(keys) != n*m.keySize || len(values) != n*m.valueSize {
		return 0, fmt.Errorf("batch of %d-byte keys and %d-byte values given %d and %d bytes", m.keySize, m.valueSize, len(keys), len(values))
	}
	attr := mapBatchAttr{outBatch: pointer{p: unsafe.Pointer(&c.out)}, keys: bytesPtr(keys), values: bytesPtr(values), count: uint32(n), mapFD: uint32(m.fd)}
	if c.started {
		attr.inBatch = pointer{p: unsafe.Pointer(&c.in)}
	}
	_, err := sys(unix.BPF_MAP_LOOKUP_AND_DELETE_BATCH, &attr)
	switch {
	case errors.Is(err, unix.ENOENT):
		return int(attr.count), ErrKeyNotExist
	case errors.Is(err, unix.EINVAL), errors.Is(err, errnoENOTSUPP), errors.Is(err, unix.EOPNOTSUPP):
		return 0, fmt.Errorf("%w: %w", ErrBatchNotSupported, err)
	case err != nil:
		return 0, err
	}
	c.in, c.started = c.out, true
	return int(attr.count), nil
}

// Program is a loaded BPF program.
type Program struct{ fd int }

// logSize is the verifier log a failed load is retried with: far more than the run-queue programs'
// verdicts take; a longer log is cut, and the error keeps its end.
const logSize = 256 << 10

// NewTracepointProgram loads a tracepoint program under license. If the verifier refuses it, the error
// carries the end of the verifier's log, which says why.
func NewTracepointProgram(name, license string, insns Instructions) (*Program, error) {
	code, err := insns.Assemble()
	if err != nil {
		return nil, fmt.Errorf("assemble BPF program %s: %w", name, err)
	}
	lic := append([]byte(license), 0)
	attr := progLoadAttr{
		progType: unix.BPF_PROG_TYPE_TRACEPOINT,
		insnCnt:  uint32(len(code) / 8),
		insns:    bytesPtr(code),
		license:  bytesPtr(lic),
		name:     objName(name),
	}
	load := func() (int, error) { return sys(unix.BPF_PROG_LOAD, &attr) }
	fd, err := load()
	if errors.Is(err, unix.EINVAL) && name != "" {
		// Kernels before 4.15 take no program names.
		attr.name = [unix.BPF_OBJ_NAME_LEN]byte{}
		fd, err = load()
	}
	if err == nil {
		return &Program{fd: fd}, nil
	}
	if errors.Is(err, unix.EPERM) {
		return nil, fmt.Errorf("load BPF program %s (needs CAP_BPF and CAP_PERFMON, or CAP_SYS_ADMIN): %w", name, err)
	}
	// Load once more with the verifier's log to say why.
	log := make([]byte, logSize)
	attr.logLevel, attr.logSize, attr.logBuf = 1, logSize, bytesPtr(log)
	fd, lerr := load()
	if lerr == nil {
		// Refused once, then taken: a transient failure (memory, say) that passed.
		return &Program{fd: fd}, nil
	}
	if tail := verifierTail(log); tail != "" {
		return nil, fmt.Errorf("load BPF program %s: %w; verifier: %s", name, err, tail)
	}
	return nil, fmt.Errorf("load BPF program %s: %w", name, err)
}

// verifierTail is the last lines of a verifier log, where it says what it refused.
func verifierTail(log []byte) string {
	if i := bytes.IndexByte(log, 0); i >= 0 {
		log = log[:i]
	}
	lines := strings.Split(strings.TrimSpace(string(log)), "\n")
	return strings.Join(lines[max(0, len(lines)-4):], " | ")
}

// FD is the program's file descriptor.
func (p *Program) FD() int { return p.fd }

// Close unloads the program once nothing is attached to it.
func (p *Program) Close() error { return closeFD(&p.fd) }

// Link is a program attached to a tracepoint; closing it detaches the program.
type Link struct{ fd int }

// AttachTracepoint runs prog on every hit of the tracepoint group:event, on every CPU, through a
// tracepoint perf event (the attachment every kernel since 4.7 has). tracefs is where tracefs is
// mounted (/sys/kernel/tracing).
func AttachTracepoint(tracefs, group, event string, prog *Program) (*Link, error) {
	b, err := os.ReadFile(filepath.Join(tracefs, "events", group, event, "id"))
	if err != nil {
		return nil, fmt.Errorf("find tracepoint %s:%s: %w", group, event, err)
	}
	id, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return nil, fmt.Errorf("tracepoint %s:%s has id %q: %w", group, event, b, err)
	}
	attr := unix.PerfEventAttr{
		Type:        unix.PERF_TYPE_TRACEPOINT,
		Size:        uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
		Config:      id,
		Sample:      1,
		Wakeup:      1,
		Sample_type: unix.PERF_SAMPLE_RAW,
	}
	// The program hangs off the tracepoint itself, so one event (CPU 0, any process) runs it everywhere.
	fd, err := unix.PerfEventOpen(&attr, -1, 0, -1, unix.PERF_FLAG_FD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("open perf event for tracepoint %s:%s: %w", group, event, err)
	}
	if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_SET_BPF, prog.fd); err != nil {
		_ = unix.Close(fd)
		return nil, fmt.Errorf("attach BPF program to tracepoint %s:%s: %w", group, event, err)
	}
	if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_ENABLE, 0); err != nil {
		_ = unix.Close(fd)
		return nil, fmt.Errorf("enable tracepoint %s:%s: %w", group, event, err)
	}
	return &Link{fd: fd}, nil
}

// Close detaches the program.
func (l *Link) Close() error { return closeFD(&l.fd) }
