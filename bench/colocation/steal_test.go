package main

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

func TestParseSteal(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, in string
		want     []int64
	}{
		{
			name: "the total line is skipped; each CPU's 8th number is its steal",
			in: "cpu  1696972 4187 418728 2985663 11084 0 8443 4163 0 0\n" +
				"cpu0 859393 2122 202122 1493658 2778 0 2664 2114 0 0\n" +
				"cpu1 837579 2065 216606 1492004 8305 0 5779 2048 0 0\n" +
				"intr 123 4 5 6\nctxt 99\n",
			want: []int64{2114, 2048},
		},
		{
			name: "an offline CPU is missing: -1 in its place",
			in:   "cpu0 1 2 3 4 5 6 7 8 9 10\ncpu2 1 2 3 4 5 6 7 30 9 10\n",
			want: []int64{8, -1, 30},
		},
		{
			name: "a kernel without the steal column",
			in:   "cpu0 1 2 3 4 5 6 7\n",
			want: []int64{-1},
		},
		{
			name: "no trailing newline",
			in:   "cpu0 1 2 3 4 5 6 7 42",
			want: []int64{42},
		},
		{
			name: "not /proc/stat",
			in:   "cpufreq 1 2 3\nhello\n",
			want: []int64{},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := parseSteal([]byte(tc.in), nil); !slices.Equal(got, tc.want) && (len(got) != 0 || len(tc.want) != 0) {
				t.Errorf("parseSteal = %v, want %v", got, tc.want)
			}
		})
	}
}

func FuzzParseSteal(f *testing.F) {
	f.Add([]byte("cpu0 1 2 3 4 5 6 7 8 9 10\ncpu1 1 2 3 4 5 6 7 8 9 10\n"))
	f.Add([]byte("cpu99999999999999999999 1\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, v := range parseSteal(b, nil) {
			if v < -1 {
				t.Fatalf("steal %d", v)
			}
		}
	})
}

// ms is t0 plus n milliseconds, in Unix ns.
func ms(n float64) int64 { return time.Unix(1000, 0).UnixNano() + int64(n*float64(time.Millisecond)) }

func TestAppendIntervals(t *testing.T) {
	t.Parallel()
	lead := float64(stealLead / time.Millisecond)
	tenUnits := float64(10 * userTick / time.Millisecond) // the time a counter's jump of 10 units stands for
	for _, tc := range []struct {
		name    string
		samples []stealSample
		want    [][]interval
	}{
		{
			name: "no steal at all",
			samples: []stealSample{
				{at: ms(0), steal: []int64{5, 7}}, {at: ms(5), steal: []int64{5, 7}}, {at: ms(10), steal: []int64{5, 7}},
			},
		},
		{
			// Both vCPUs stolen: the sampler itself did not run for 100 ms, and then each counter
			// had jumped by 10 units.
			name: "a stall of both CPUs between two samples",
			samples: []stealSample{
				{at: ms(0), steal: []int64{5, 7}}, {at: ms(105), steal: []int64{15, 17}},
			},
			want: [][]interval{
				{{ms(-100 - lead), ms(105)}},
				{{ms(-100 - lead), ms(105)}},
			},
		},
		{
			// One vCPU stolen while the sampler ran on the other: the counter jumps only after the
			// stall, so the interval reaches back by the advance.
			name: "one CPU, its steal seen after the stall",
			samples: []stealSample{
				{at: ms(100), steal: []int64{5, 7}}, {at: ms(105), steal: []int64{5, 17}}, {at: ms(110), steal: []int64{5, 17}},
			},
			want: [][]interval{nil, {{ms(100 - tenUnits - lead), ms(105)}}},
		},
		{
			name: "a CPU that goes offline, and one that comes online, are skipped",
			samples: []stealSample{
				{at: ms(0), steal: []int64{5, -1}}, {at: ms(5), steal: []int64{-1, 9}}, {at: ms(10), steal: []int64{6, 9, 3}},
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var got [][]interval
			for i := 1; i < len(tc.samples); i++ {
				got = appendIntervals(got, tc.samples[i-1], tc.samples[i])
			}
			if !slices.EqualFunc(got, tc.want, slices.Equal) {
				t.Errorf("intervals %v, want %v", got, tc.want)
			}
		})
	}
}

func TestNewStalls(t *testing.T) {
	t.Parallel()
	got := newStalls([][]interval{
		{{ms(50), ms(60)}, {ms(0), ms(10)}, {ms(5), ms(20)}, {ms(20), ms(25)}},
		nil,
	})
	want := stalls{{{ms(0), ms(25)}, {ms(50), ms(60)}}, nil}
	if !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("newStalls = %v, want %v (sorted, overlapping and touching intervals merged)", got, want)
	}
}

func TestOverlaps(t *testing.T) {
	t.Parallel()
	// CPU 0 stalled over [100, 200] ms and [300, 310] ms; CPU 1 over [150, 160] ms; CPU 2 never.
	st := stalls{{{ms(100), ms(200)}, {ms(300), ms(310)}}, {{ms(150), ms(160)}}, nil}
	cpus := func(cs ...int) cpuSet {
		var s cpuSet
		for _, c := range cs {
			s = s.add(c)
		}
		return s
	}
	for _, tc := range []struct {
		name     string
		from, to float64
		cpus     cpuSet
		want     bool
	}{
		{"inside a stall of its CPU", 120, 130, cpus(0), true},
		{"spans a whole stall", 50, 400, cpus(0), true},
		{"ends as the stall starts", 90, 100, cpus(0), true},
		{"starts as the stall ends", 200, 210, cpus(0), true},
		{"between two stalls", 201, 299, cpus(0), false},
		{"after every stall", 311, 400, cpus(0), false},
		{"before every stall", 0, 99, cpus(0), false},
		{"the stall was on a CPU it never ran on", 120, 130, cpus(2), false},
		{"migrated from a quiet CPU to a stalled one", 150, 155, cpus(2, 1), true},
		{"migrated between quiet CPUs while one was stalled", 120, 130, cpus(1, 2), false},
		{"CPUs unknown: every CPU", 120, 130, 0, true},
		{"a CPU beyond the set's bits: every CPU", 120, 130, cpus(2, 70), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := st.overlaps(ms(tc.from), ms(tc.to), tc.cpus); got != tc.want {
				t.Errorf("overlaps([%v, %v] ms, cpus %b) = %v, want %v", tc.from, tc.to, tc.cpus, got, tc.want)
			}
		})
	}
	if (stalls{}).overlaps(ms(0), ms(1000), 0) || stalls(nil).overlaps(ms(0), ms(1000), allCPUs) {
		t.Errorf("no steal at all, yet a request overlaps a stall")
	}
}

// TestStealSampler samples a stat file the test rewrites: the sampler's last sample, taken by end,
// sees the change, so the test needs no waiting.
func TestStealSampler(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "stat")
	const before = "cpu0 1 2 3 4 5 6 7 0100 9 10\ncpu1 1 2 3 4 5 6 7 0200 9 10\n"
	const after = "cpu0 1 2 3 4 5 6 7 0100 9 10\ncpu1 1 2 3 4 5 6 7 0203 9 10\n"
	if err := os.WriteFile(path, []byte(before), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := startStealSampler(path, time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	from := time.Now().UnixNano()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	// In place and of the same length, so that a read at any moment parses.
	if _, err := f.WriteAt([]byte(after), 0); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	to := time.Now().UnixNano()
	st, n, cpu, gap, err := s.end()
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 || len(st) != 2 || len(st[0]) != 0 || len(st[1]) != 1 {
		t.Fatalf("stalls %v (%d intervals), want one interval on CPU 1", st, n)
	}
	if !st.overlaps(from, to, cpuSet(0).add(1)) || st.overlaps(from, to, cpuSet(0).add(0)) {
		t.Errorf("stalls %v do not cover the rewrite [%d, %d] on CPU 1 alone", st, from, to)
	}
	if cpu < 0 || gap <= 0 {
		t.Errorf("sampler CPU time %v, longest gap %v", cpu, gap)
	}
	if st, n, _, _, err := s.end(); st != nil || n != 0 || err != nil {
		t.Errorf("a second end returned %v, %d, %v", st, n, err)
	}
}

func TestStealSamplerProcStat(t *testing.T) {
	t.Parallel()
	s, err := startStealSampler("/proc/stat", stealEvery)
	if err != nil {
		t.Skipf("no /proc/stat: %v", err)
	}
	if _, _, _, _, err := s.end(); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkStealRead is the sampler's cost per sample; the run records the real figure per cell.
func BenchmarkStealRead(b *testing.B) {
	r, err := openStealReader("/proc/stat")
	if err != nil {
		b.Skip(err)
	}
	defer r.close()
	var s stealSample
	for b.Loop() {
		if err := r.read(&s); err != nil {
			b.Fatal(err)
		}
	}
}
