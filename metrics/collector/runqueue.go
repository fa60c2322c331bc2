package collector

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/klog/v2"
)

// Run-queue latency is the time from a task becoming runnable (woken, or preempted while runnable)
// to it running. The BPF program counts it per thread in log2 buckets of microseconds; user space
// maps threads to containers through the cgroup task lists and keeps cumulative histograms.
const (
	// rqSlots buckets: slot 0 is < 1µs, slot b ≥ 1 is [2^(b-1), 2^b) µs; the last slot also takes
	// everything longer (2^25 µs ≈ 34 s).
	rqSlots = 27
	// rqSumSlot is the key slot under which the program adds the nanoseconds waited.
	rqSumSlot = 32
)

// rqKey is the BPF map key: a thread and a slot (a bucket or rqSumSlot).
type rqKey struct {
	TID  uint32
	Slot uint32
}

// rqSlot is the bucket of a latency, the same function the BPF program computes.
func rqSlot(nanos uint64) uint32 {
	us := nanos / 1000
	slot := uint32(0)
	for us > 0 {
		us >>= 1
		slot++
	}
	return min(slot, rqSlots-1)
}

// rqUpperBound is the upper bound of a slot, in seconds: 2^b µs.
func rqUpperBound(slot int) float64 {
	return math.Ldexp(1, slot) / 1e6
}

// rqHist is a run-queue latency histogram: per-slot counts (not cumulative) and the total wait.
type rqHist struct {
	counts   [rqSlots]uint64
	sumNanos uint64
}

func (h *rqHist) add(o *rqHist) {
	for i := range h.counts {
		h.counts[i] += o.counts[i]
	}
	h.sumNanos += o.sumNanos
}

func (h *rqHist) count() uint64 {
	var n uint64
	for _, c := range h.counts {
		n += c
	}
	return n
}

// promBuckets turns per-slot counts into Prometheus' cumulative buckets, keyed by upper bound in
// seconds; the last slot is open-ended, so it only counts toward +Inf (the sample count).
func (h *rqHist) promBuckets() map[float64]uint64 {
	b := make(map[float64]uint64, rqSlots-1)
	var cum uint64
	for i := range rqSlots - 1 {
		cum += h.counts[i]
		b[rqUpperBound(i)] = cum
	}
	return b
}

// aggregateRunQueue sums per-thread map entries into per-container histograms; owner maps a thread
// to its container's ID. Threads of no known container (the host's own) are dropped.
func aggregateRunQueue(entries map[rqKey]uint64, owner map[uint32]string) map[string]*rqHist {
	out := map[string]*rqHist{}
	for k, v := range entries {
		id, ok := owner[k.TID]
		if !ok {
			continue
		}
		h := out[id]
		if h == nil {
			h = &rqHist{}
			out[id] = h
		}
		switch {
		case k.Slot == rqSumSlot:
			h.sumNanos += v
		case k.Slot < rqSlots:
			h.counts[k.Slot] += v
		}
	}
	return out
}

// tracepointOffset reads where a field sits in a tracepoint's record from its format file, so the
// program does not depend on one kernel's layout.
func tracepointOffset(format []byte, field string) (int16, error) {
	sc := bufio.NewScanner(bytes.NewReader(format))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(line, "field:") {
			continue
		}
		parts := strings.Split(line, ";")
		if len(parts) < 2 {
			continue
		}
		decl := strings.Fields(strings.TrimPrefix(parts[0], "field:"))
		if len(decl) == 0 || decl[len(decl)-1] != field {
			continue
		}
		off, ok := strings.CutPrefix(strings.TrimSpace(parts[1]), "offset:")
		if !ok {
			return 0, fmt.Errorf("tracepoint field %s: no offset", field)
		}
		n, err := strconv.ParseInt(off, 10, 16)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("tracepoint field %s: bad offset %q", field, off)
		}
		return int16(n), nil
	}
	return 0, fmt.Errorf("tracepoint has no field %s", field)
}

// schedOffsets are the record offsets the program reads.
type schedOffsets struct {
	wakeupPID, switchPrevPID, switchPrevState, switchNextPID int16
}

func readSchedOffsets(tracefs string) (schedOffsets, error) {
	read := func(event string) ([]byte, error) {
		b, err := os.ReadFile(filepath.Join(tracefs, "events", "sched", event, "format"))
		if err != nil {
			return nil, fmt.Errorf("read sched:%s tracepoint format (is tracefs mounted? mount -t tracefs nodev %s, then restart the agent): %w", event, tracefs, err)
		}
		return b, nil
	}
	var o schedOffsets
	wk, err := read("sched_wakeup")
	if err != nil {
		return o, err
	}
	sw, err := read("sched_switch")
	if err != nil {
		return o, err
	}
	if o.wakeupPID, err = tracepointOffset(wk, "pid"); err != nil {
		return o, err
	}
	if o.switchPrevPID, err = tracepointOffset(sw, "prev_pid"); err != nil {
		return o, err
	}
	if o.switchPrevState, err = tracepointOffset(sw, "prev_state"); err != nil {
		return o, err
	}
	if o.switchNextPID, err = tracepointOffset(sw, "next_pid"); err != nil {
		return o, err
	}
	return o, nil
}

// RunQueueSample is one sample of the run-queue source: every watched container's histogram, cumulative
// since Tandem started watching it, so a reader takes differences between two samples of its choice.
type RunQueueSample struct {
	// Seq numbers the source's samples from 1: a reader that has seen a Seq has seen its sample.
	Seq        uint64
	Time       time.Time
	Containers []RunQueueHistogram
}

// RunQueueHistogram is one container's run-queue latency histogram.
type RunQueueHistogram struct {
	Target
	hist rqHist
}

// Waits is how many times the container's threads waited for a CPU.
func (h *RunQueueHistogram) Waits() uint64 { return h.hist.count() }

// Waited is the time they waited, in all.
func (h *RunQueueHistogram) Waited() time.Duration {
	return time.Duration(min(h.hist.sumNanos, math.MaxInt64))
}

// AtLeast counts the waits of d or longer, to the histogram's resolution: d is taken up to the next
// bucket bound, a power of two microseconds, which RunQueueBound returns.
func (h *RunQueueHistogram) AtLeast(d time.Duration) uint64 {
	var n uint64
	for b := rqFirstSlotAtLeast(d); b < rqSlots; b++ {
		n += h.hist.counts[b]
	}
	return n
}

// Add counts n waits of d each, as the BPF program would: for readers' tests, which cannot run it.
func (h *RunQueueHistogram) Add(d time.Duration, n uint64) {
	h.hist.counts[rqSlot(uint64(max(d, 0)))] += n
	h.hist.sumNanos += uint64(max(d, 0)) * n
}

// RunQueueBound is the wait AtLeast(d) really counts from: d taken up to a power of two microseconds.
func RunQueueBound(d time.Duration) time.Duration {
	b := rqFirstSlotAtLeast(d)
	if b == 0 {
		return 0
	}
	return time.Duration(1<<(b-1)) * time.Microsecond
}

// rqFirstSlotAtLeast is the first slot whose waits are all d or longer: slot b ≥ 1 starts at 2^(b-1) µs.
func rqFirstSlotAtLeast(d time.Duration) int {
	if d <= 0 {
		return 0
	}
	for b := 1; b < rqSlots; b++ {
		if time.Duration(1<<(b-1))*time.Microsecond >= d {
			return b
		}
	}
	return rqSlots - 1
}

// rqProbe is the loaded BPF program; runqueue_linux.go has the real one.
type rqProbe interface {
	// drain returns the counts accumulated since the last drain and clears them.
	drain() (map[rqKey]uint64, error)
	close()
}

type rqContainer struct {
	Target
	hist rqHist // cumulative since Tandem started watching the container
}

// runQueueSource drains the BPF maps every interval into per-container cumulative histograms.
type runQueueSource struct {
	tracefs, proc, cgroupRoot string
	load                      func(tracefs string, off schedOffsets) (rqProbe, error)

	mu     sync.Mutex
	probe  rqProbe
	reader cgroupReader
	files  fileReader
	hists  map[string]*rqContainer
	// listed is which container's cgroup listed each thread at the last sample: a thread that exits
	// before the next one leaves its last waits in the map and its cgroup's list, and only this says
	// whose they were.
	listed map[uint32]string
	seq    uint64
	latest atomic.Pointer[RunQueueSample]
}

func newRunQueueSource(tracefs, proc, cgroupRoot string) *runQueueSource {
	return &runQueueSource{tracefs: tracefs, proc: proc, cgroupRoot: cgroupRoot, load: loadRunQueueProbe, hists: map[string]*rqContainer{}}
}

func (r *runQueueSource) detect(context.Context) error {
	off, err := readSchedOffsets(r.tracefs)
	if err != nil {
		return err
	}
	reader, err := detectReader(r.cgroupRoot)
	if err != nil {
		return err
	}
	p, err := r.load(r.tracefs, off)
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.probe, r.reader = p, reader
	r.mu.Unlock()
	return nil
}

// tasksFile lists a cgroup's threads: "tasks" on v1 (in the cpu hierarchy), "cgroup.threads" on v2.
func (r *runQueueSource) tasksFile(rel string) string {
	if r.reader.version() == 1 {
		return filepath.Join(r.cgroupRoot, "cpu", rel, "tasks")
	}
	return filepath.Join(r.cgroupRoot, rel, "cgroup.threads")
}

func (r *runQueueSource) sample(ctx context.Context, targets []Target, now func() time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.probe == nil {
		return
	}
	entries, err := r.probe.drain()
	if err != nil {
		klog.FromContext(ctx).V(2).Info("Skipping run-queue sample", "err", err.Error())
		return
	}
	owner := map[uint32]string{}
	live := map[string]bool{}
	for _, t := range targets {
		if t.ContainerID == "" || live[t.ContainerID] {
			continue
		}
		rel := resolveCgroup(r.reader.dir, t)
		if rel == "" {
			continue
		}
		live[t.ContainerID] = true
		b, err := r.files.read(r.tasksFile(rel))
		if err != nil {
			continue
		}
		for len(b) > 0 {
			line := b
			if i := bytes.IndexByte(b, '\n'); i >= 0 {
				line, b = b[:i], b[i+1:]
			} else {
				b = nil
			}
			if tid, ok := parseTID(line); ok {
				owner[tid] = t.ContainerID
			}
		}
		if r.hists[t.ContainerID] == nil {
			r.hists[t.ContainerID] = &rqContainer{Target: t}
		}
	}
	prev := r.listed
	r.listed = owner
	for id, h := range aggregateRunQueue(entries, threadOwners(owner, prev, live)) {
		if c := r.hists[id]; c != nil {
			c.hist.add(h)
		}
	}
	out := make([]RunQueueHistogram, 0, len(r.hists))
	for id, c := range r.hists {
		if !live[id] {
			delete(r.hists, id)
			continue
		}
		out = append(out, RunQueueHistogram{Target: c.Target, hist: c.hist})
	}
	r.seq++
	r.latest.Store(&RunQueueSample{Seq: r.seq, Time: now(), Containers: out})
}

// threadOwners says whose waits each drained thread's are: the container whose cgroup lists it now,
// or, for a thread that has exited since the last sample (a worker pool replacing its threads, a
// process that ended), the container that listed it then, while that container lives. A thread born
// and gone between two samples was never listed and is not counted. now is not modified.
func threadOwners(now, prev map[uint32]string, live map[string]bool) map[uint32]string {
	var out map[uint32]string
	for tid, id := range prev {
		if _, ok := now[tid]; ok || !live[id] {
			continue
		}
		if out == nil {
			out = make(map[uint32]string, len(now)+len(prev))
			maps.Copy(out, now)
		}
		out[tid] = id
	}
	if out == nil {
		return now
	}
	return out
}

// parseTID parses a decimal thread id without allocating.
func parseTID(b []byte) (uint32, bool) {
	if len(b) == 0 || len(b) > 10 {
		return 0, false
	}
	var v uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + uint64(c-'0')
	}
	if v > 1<<32-1 {
		return 0, false
	}
	return uint32(v), true
}

func (r *runQueueSource) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.probe != nil {
		r.probe.close()
		r.probe = nil
	}
}
