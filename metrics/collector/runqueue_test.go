package collector

import (
	"time"

	"errors"
	"maps"
	"path/filepath"
	"testing"

	"k8s.io/klog/v2/ktesting"
)

func TestRQSlot(t *testing.T) {
	t.Parallel()
	tests := []struct {
		nanos uint64
		want  uint32
	}{
		{0, 0},
		{999, 0},        // < 1µs
		{1000, 1},       // [1, 2) µs
		{1999, 1},       //
		{2000, 2},       // [2, 4) µs
		{1_000_000, 10}, // 1 ms: [512, 1024) µs
		{1_024_000, 11}, // [1024, 2048) µs
		{1 << 62, rqSlots - 1},
	}
	for _, tt := range tests {
		if got := rqSlot(tt.nanos); got != tt.want {
			t.Errorf("rqSlot(%d) = %d, want %d", tt.nanos, got, tt.want)
		}
		// Every latency must sit below its bucket's upper bound (except in the open last slot).
		if s := rqSlot(tt.nanos); s < rqSlots-1 && float64(tt.nanos)/1e9 >= rqUpperBound(int(s)) {
			t.Errorf("%d ns is not below the upper bound %g s of its slot %d", tt.nanos, rqUpperBound(int(s)), s)
		}
	}
}

func TestAggregateRunQueue(t *testing.T) {
	t.Parallel()
	entries := map[rqKey]uint64{
		{TID: 10, Slot: 1}:         3,
		{TID: 11, Slot: 1}:         2,
		{TID: 11, Slot: 5}:         1,
		{TID: 10, Slot: rqSumSlot}: 6000,
		{TID: 11, Slot: rqSumSlot}: 40000,
		{TID: 20, Slot: 3}:         9,   // another container
		{TID: 99, Slot: 3}:         100, // a host thread: dropped
	}
	owner := map[uint32]string{10: "a", 11: "a", 20: "b"}
	got := aggregateRunQueue(entries, owner)
	if len(got) != 2 {
		t.Fatalf("containers = %d, want 2", len(got))
	}
	a := got["a"]
	if a.counts[1] != 5 || a.counts[5] != 1 || a.count() != 6 || a.sumNanos != 46000 {
		t.Errorf("a = %+v", a)
	}
	if b := got["b"]; b.count() != 9 || b.counts[3] != 9 {
		t.Errorf("b = %+v", b)
	}

	// Prometheus buckets are cumulative by upper bound.
	buckets := a.promBuckets()
	for _, w := range []struct {
		le   float64
		want uint64
	}{{1e-6, 0}, {2e-6, 5}, {16e-6, 5}, {32e-6, 6}, {rqUpperBound(rqSlots - 2), 6}} {
		if buckets[w.le] != w.want {
			t.Errorf("bucket le=%g = %d, want %d", w.le, buckets[w.le], w.want)
		}
	}
}

// schedSwitchFormat is sched_switch's format file on the project's kernel (6.18).
const schedSwitchFormat = `name: sched_switch
ID: 372
format:
	field:unsigned short common_type;	offset:0;	size:2;	signed:0;
	field:unsigned char common_flags;	offset:2;	size:1;	signed:0;
	field:unsigned char common_preempt_count;	offset:3;	size:1;	signed:0;
	field:int common_pid;	offset:4;	size:4;	signed:1;

	field:char prev_comm[16];	offset:8;	size:16;	signed:0;
	field:pid_t prev_pid;	offset:24;	size:4;	signed:1;
	field:int prev_prio;	offset:28;	size:4;	signed:1;
	field:long prev_state;	offset:32;	size:8;	signed:1;
	field:char next_comm[16];	offset:40;	size:16;	signed:0;
	field:pid_t next_pid;	offset:56;	size:4;	signed:1;
	field:int next_prio;	offset:60;	size:4;	signed:1;
`

const schedWakeupFormat = `name: sched_wakeup
format:
	field:unsigned short common_type;	offset:0;	size:2;	signed:0;
	field:char comm[16];	offset:8;	size:16;	signed:0;
	field:pid_t pid;	offset:24;	size:4;	signed:1;
	field:int prio;	offset:28;	size:4;	signed:1;
`

func TestReadSchedOffsets(t *testing.T) {
	t.Parallel()
	tracefs := t.TempDir()
	writeFiles(t, filepath.Join(tracefs, "events", "sched", "sched_switch"), map[string]string{"format": schedSwitchFormat})
	writeFiles(t, filepath.Join(tracefs, "events", "sched", "sched_wakeup"), map[string]string{"format": schedWakeupFormat})
	got, err := readSchedOffsets(tracefs)
	if err != nil {
		t.Fatal(err)
	}
	want := schedOffsets{wakeupPID: 24, switchPrevPID: 24, switchPrevState: 32, switchNextPID: 56}
	if got != want {
		t.Errorf("offsets = %+v, want %+v", got, want)
	}
	if _, err := readSchedOffsets(t.TempDir()); err == nil {
		t.Error("an unmounted tracefs was accepted")
	}
	if _, err := tracepointOffset([]byte(schedWakeupFormat), "next_pid"); err == nil {
		t.Error("a missing field was found")
	}
}

type fakeProbe struct {
	drains []map[rqKey]uint64
	closed bool
}

func (f *fakeProbe) drain() (map[rqKey]uint64, error) {
	if len(f.drains) == 0 {
		return nil, errors.New("nothing")
	}
	d := f.drains[0]
	f.drains = f.drains[1:]
	return d, nil
}

func (f *fakeProbe) close() { f.closed = true }

func TestRunQueueSourceMapsThreadsToContainers(t *testing.T) {
	t.Parallel()
	_, ctx := ktesting.NewTestContext(t)
	dir := t.TempDir()
	cg, tracefs := filepath.Join(dir, "cgroup"), filepath.Join(dir, "tracing")
	fakeV1Root(t, cg)
	writeFiles(t, filepath.Join(tracefs, "events", "sched", "sched_switch"), map[string]string{"format": schedSwitchFormat})
	writeFiles(t, filepath.Join(tracefs, "events", "sched", "sched_wakeup"), map[string]string{"format": schedWakeupFormat})
	rel := "kubepods/poda/aaa"
	writeFiles(t, filepath.Join(cg, "cpuacct", rel), nil)
	writeFiles(t, filepath.Join(cg, "cpu", rel), map[string]string{"tasks": "100\n101\n"})
	probe := &fakeProbe{drains: []map[rqKey]uint64{
		{{100, 2}: 4, {101, 2}: 1, {100, rqSumSlot}: 12000, {7, 2}: 50},
		{{101, 4}: 2, {101, rqSumSlot}: 20000},
	}}
	src := newRunQueueSource(tracefs, "", cg)
	src.load = func(_ string, o schedOffsets) (rqProbe, error) {
		if o.switchNextPID != 56 {
			t.Errorf("program built with next_pid at %d, want 56", o.switchNextPID)
		}
		return probe, nil
	}
	if err := src.detect(ctx); err != nil {
		t.Fatal(err)
	}
	tg := Target{Namespace: "ns", Pod: "a", Container: "c", ContainerID: "aaa", CgroupParent: "/kubepods/poda"}
	src.sample(ctx, []Target{tg}, time.Now)
	// Thread 101 exits before the second drain: its last waits are still the container's.
	writeFiles(t, filepath.Join(cg, "cpu", rel), map[string]string{"tasks": "100\n"})
	src.sample(ctx, []Target{tg}, time.Now)
	sample := src.latest.Load()
	got := sample.Containers
	if len(got) != 1 || sample.Seq != 2 {
		t.Fatalf("sample %d, containers = %+v; want the second, with one container", sample.Seq, got)
	}
	h := got[0].hist
	if got[0].Waits() != 7 || got[0].Waited() != 32*time.Microsecond || got[0].AtLeast(8*time.Microsecond) != 2 || got[0].AtLeast(9*time.Microsecond) != 0 {
		t.Errorf("Waits %d, Waited %v, AtLeast(8µs) %d, AtLeast(9µs) %d; want 7, 32µs, 2 (slot 4 is 8-16µs), 0",
			got[0].Waits(), got[0].Waited(), got[0].AtLeast(8*time.Microsecond), got[0].AtLeast(9*time.Microsecond))
	}
	if h.counts[2] != 5 || h.counts[4] != 2 || h.count() != 7 || h.sumNanos != 32000 {
		t.Errorf("cumulative histogram = %+v, want 5 in slot 2, 2 in slot 4, 32µs in all", h)
	}
	src.close()
	if !probe.closed {
		t.Error("probe left attached after close")
	}
}

func TestRunQueueBound(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want time.Duration }{
		{0, 0}, {time.Nanosecond, time.Microsecond}, {time.Microsecond, time.Microsecond},
		{1500 * time.Microsecond, 2048 * time.Microsecond}, {4 * time.Millisecond, 4096 * time.Microsecond},
		{4096 * time.Microsecond, 4096 * time.Microsecond}, {time.Hour, time.Duration(1<<25) * time.Microsecond},
	}
	for _, tt := range tests {
		if got := RunQueueBound(tt.in); got != tt.want {
			t.Errorf("RunQueueBound(%v) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

func TestThreadOwners(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		now, prev map[uint32]string
		live      map[string]bool
		want      map[uint32]string
	}{
		{
			name: "listed now",
			now:  map[uint32]string{10: "a", 20: "b"},
			live: map[string]bool{"a": true, "b": true},
			want: map[uint32]string{10: "a", 20: "b"},
		},
		{
			name: "exited since the last sample: the container that listed it",
			now:  map[uint32]string{10: "a"},
			prev: map[uint32]string{10: "a", 11: "a"},
			live: map[string]bool{"a": true},
			want: map[uint32]string{10: "a", 11: "a"},
		},
		{
			name: "moved to another container: where it is now",
			now:  map[uint32]string{10: "b"},
			prev: map[uint32]string{10: "a"},
			live: map[string]bool{"a": true, "b": true},
			want: map[uint32]string{10: "b"},
		},
		{
			name: "its container is gone too: dropped",
			now:  map[uint32]string{20: "b"},
			prev: map[uint32]string{10: "a", 20: "b"},
			live: map[string]bool{"b": true},
			want: map[uint32]string{20: "b"},
		},
		{
			name: "no container lists anything now",
			now:  map[uint32]string{},
			prev: map[uint32]string{10: "a"},
			live: map[string]bool{"a": true},
			want: map[uint32]string{10: "a"},
		},
		{
			name: "first sample",
			now:  map[uint32]string{10: "a"},
			live: map[string]bool{"a": true},
			want: map[uint32]string{10: "a"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			now := maps.Clone(tt.now)
			if got := threadOwners(tt.now, tt.prev, tt.live); !maps.Equal(got, tt.want) {
				t.Errorf("threadOwners = %v, want %v", got, tt.want)
			}
			if !maps.Equal(now, tt.now) {
				t.Errorf("threadOwners changed now to %v", tt.now)
			}
		})
	}
}

func TestParseTID(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want uint32
		ok   bool
	}{{"1", 1, true}, {"4194304", 4194304, true}, {"4294967295", 4294967295, true}, {"4294967296", 0, false}, {"", 0, false}, {"12a", 0, false}, {"-1", 0, false}}
	for _, tt := range tests {
		if got, ok := parseTID([]byte(tt.in)); got != tt.want || ok != tt.ok {
			t.Errorf("parseTID(%q) = %d, %v; want %d, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}
