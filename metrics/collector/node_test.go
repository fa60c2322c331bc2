package collector

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseProcStat(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		in      string
		want    cpuTimes
		perCPU  map[int]cpuTimes
		wantErr bool
	}{
		{
			name: "kernel 6 layout, guest time not counted twice",
			in:   "cpu  100 10 50 800 40 0 5 0 30 0\ncpu0 50 5 25 400 20 0 3 0 15 0\ncpu1 50 5 25 400 20 0 2 0 15 0\nintr 5\n",
			// user+nice+system+idle+iowait+irq+softirq+steal = 1005; idle+iowait = 840
			want:   cpuTimes{total: 1005, idle: 840, cpus: 2},
			perCPU: map[int]cpuTimes{0: {total: 503, idle: 420}, 1: {total: 502, idle: 420}},
		},
		{
			name:   "steal counted per CPU",
			in:     "cpu  100 0 0 800 0 0 0 100 0 0\ncpu0 50 0 0 400 0 0 0 90 0 0\ncpu1 50 0 0 400 0 0 0 10 0 0\n",
			want:   cpuTimes{total: 1000, idle: 800, steal: 100, cpus: 2},
			perCPU: map[int]cpuTimes{0: {total: 540, idle: 400, steal: 90}, 1: {total: 460, idle: 400, steal: 10}},
		},
		{
			name:   "old kernel with four counters",
			in:     "cpu 10 0 10 80\ncpu0 10 0 10 80\n",
			want:   cpuTimes{total: 100, idle: 80, cpus: 1},
			perCPU: map[int]cpuTimes{0: {total: 100, idle: 80}},
		},
		{
			name:   "an offline CPU's gap in the numbers",
			in:     "cpu 10 0 10 80\ncpu0 5 0 5 40\ncpu3 5 0 5 40\n",
			want:   cpuTimes{total: 100, idle: 80, cpus: 2},
			perCPU: map[int]cpuTimes{0: {total: 50, idle: 40}, 3: {total: 50, idle: 40}},
		},
		{name: "no aggregate line", in: "cpu0 1 2 3 4\n", wantErr: true},
		{name: "no per-CPU lines", in: "cpu 1 2 3 4\n", wantErr: true},
		{name: "garbage counter", in: "cpu 1 x 3 4\ncpu0 1 2 3 4\n", wantErr: true},
		{name: "too few fields", in: "cpu 1 2\ncpu0 1 2\n", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := parseProcStat([]byte(tt.in))
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if got.all != tt.want {
				t.Errorf("got %+v, want %+v", got.all, tt.want)
			}
			if !tt.wantErr && !maps.Equal(got.perCPU, tt.perCPU) {
				t.Errorf("per CPU %+v, want %+v", got.perCPU, tt.perCPU)
			}
		})
	}
}

func TestSteal(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		prev, cur   string
		busy, steal int64
		perCPU      map[int]int64
	}{
		{
			name:   "no steal: busy is what is not idle",
			prev:   "cpu 0 0 0 0 0 0 0 0\ncpu0 0 0 0 0 0 0 0 0\ncpu1 0 0 0 0 0 0 0 0\n",
			cur:    "cpu 100 0 0 100 0 0 0 0\ncpu0 50 0 0 50 0 0 0 0\ncpu1 50 0 0 50 0 0 0 0\n",
			busy:   1000,
			perCPU: map[int]int64{0: 0, 1: 0},
		},
		{
			// Both CPUs wanted to run the whole time; the host took a fifth of one of them.
			name:   "steal is not busy, and lands on the CPU it hit",
			prev:   "cpu 0 0 0 0 0 0 0 0\ncpu0 0 0 0 0 0 0 0 0\ncpu1 0 0 0 0 0 0 0 0\n",
			cur:    "cpu 180 0 0 0 0 0 0 20\ncpu0 80 0 0 0 0 0 0 20\ncpu1 100 0 0 0 0 0 0 0\n",
			busy:   1800,
			steal:  200,
			perCPU: map[int]int64{0: 200, 1: 0},
		},
		{
			name:   "a counter going backwards reads as no steal",
			prev:   "cpu 0 0 0 0 0 0 0 50\ncpu0 0 0 0 0 0 0 0 50\n",
			cur:    "cpu 100 0 0 0 0 0 0 10\ncpu0 100 0 0 0 0 0 0 10\n",
			busy:   1000,
			perCPU: map[int]int64{0: 0},
		},
		{
			name:   "a CPU that came online has no steal figure yet",
			prev:   "cpu 0 0 0 0 0 0 0 0\ncpu0 0 0 0 0 0 0 0 0\n",
			cur:    "cpu 100 0 0 90 0 0 0 10\ncpu0 50 0 0 40 0 0 0 10\ncpu1 50 0 0 50 0 0 0 0\n",
			busy:   1000, // 100 of 200 ticks, on 2 CPUs
			steal:  100,  // 10 of 200 ticks
			perCPU: map[int]int64{0: 100},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			prev, err := parseProcStat([]byte(tt.prev))
			if err != nil {
				t.Fatal(err)
			}
			cur, err := parseProcStat([]byte(tt.cur))
			if err != nil {
				t.Fatal(err)
			}
			if got := busyMilli(prev.all, cur.all); got != tt.busy {
				t.Errorf("busy = %dm, want %dm", got, tt.busy)
			}
			if got := stealMilli(prev.all, cur.all); got != tt.steal {
				t.Errorf("steal = %dm, want %dm", got, tt.steal)
			}
			if got := perCPUSteal(prev, cur); !maps.Equal(got, tt.perCPU) {
				t.Errorf("per-CPU steal = %v, want %v", got, tt.perCPU)
			}
		})
	}
}

func TestBusyMilli(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		prev, cur cpuTimes
		want      int64
	}{
		{"half busy on 2 CPUs is one core", cpuTimes{total: 1000, idle: 500, cpus: 2}, cpuTimes{total: 1200, idle: 600, cpus: 2}, 1000},
		{"fully busy on 4 CPUs", cpuTimes{total: 0, idle: 0, cpus: 4}, cpuTimes{total: 400, idle: 0, cpus: 4}, 4000},
		{"idle", cpuTimes{total: 0, idle: 0, cpus: 2}, cpuTimes{total: 400, idle: 400, cpus: 2}, 0},
		{"no time passed", cpuTimes{total: 10, idle: 5, cpus: 2}, cpuTimes{total: 10, idle: 5, cpus: 2}, 0},
		{"idle counter went backwards (CPU hot-unplug)", cpuTimes{total: 100, idle: 90, cpus: 2}, cpuTimes{total: 200, idle: 50, cpus: 2}, 2000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := busyMilli(tt.prev, tt.cur); got != tt.want {
				t.Errorf("busyMilli = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestParseMeminfo(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		in       string
		wantUsed int64
		wantErr  bool
	}{
		{"used is total minus available", "MemTotal: 8000 kB\nMemFree: 100 kB\nMemAvailable: 6000 kB\n", 2000 * 1024, false},
		{"available above total reads as 0", "MemTotal: 8000 kB\nMemAvailable: 9000 kB\n", 0, false},
		{"no MemAvailable", "MemTotal: 8000 kB\nMemFree: 100 kB\n", 0, true},
		{"bad number", "MemTotal: x kB\nMemAvailable: 1 kB\n", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m, err := parseMeminfo([]byte(tt.in))
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if got := m.used(); got != tt.wantUsed {
				t.Errorf("used = %d, want %d", got, tt.wantUsed)
			}
		})
	}
}

func FuzzParseProcStat(f *testing.F) {
	f.Add([]byte("cpu  100 10 50 800 40 0 5 0 30 0\ncpu0 50 5 25 400 20 0 3 0 15 0\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := parseProcStat(b)
		if err != nil {
			return
		}
		t1 := st.all
		if t1.idle > t1.total || t1.cpus < 1 {
			t.Fatalf("inconsistent %+v", t1)
		}
		if m := busyMilli(cpuTimes{cpus: t1.cpus}, t1); m < 0 || m > int64(t1.cpus)*1000 {
			t.Fatalf("busy %d outside [0, %d]", m, t1.cpus*1000)
		}
		if m := stealMilli(cpuTimes{cpus: t1.cpus}, t1); m < 0 || m > int64(t1.cpus)*1000 {
			t.Fatalf("steal %d outside [0, %d]", m, t1.cpus*1000)
		}
	})
}

func FuzzParseMeminfo(f *testing.F) {
	f.Add([]byte("MemTotal: 8000 kB\nMemAvailable: 6000 kB\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := parseMeminfo(b)
		if err != nil {
			return
		}
		if u := m.used(); u < 0 || u > m.total {
			t.Fatalf("used %d outside [0, %d]", u, m.total)
		}
	})
}

func TestFileReaderKeys(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// Larger than the initial buffer, with the wanted key at the very end.
	var big strings.Builder
	for i := range 3000 {
		fmt.Fprintf(&big, "filler_%d %d\n", i, i)
	}
	big.WriteString("total_inactive_file 4096")
	tests := []struct {
		name    string
		content string
		want    uint64
		wantErr bool
	}{
		{"plain", "cache 1\ntotal_inactive_file 42\n", 42, false},
		{"bigger than the buffer, no trailing newline", big.String(), 4096, false},
		{"absent key leaves zero", "cache 1\n", 0, false},
		{"bad value", "total_inactive_file x\n", 0, true},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := filepath.Join(dir, fmt.Sprint(i))
			if err := os.WriteFile(p, []byte(tt.content), 0o644); err != nil {
				t.Fatal(err)
			}
			var r fileReader
			var got uint64
			err := r.keys(p, map[string]*uint64{"total_inactive_file": &got})
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("got %d, want %d", got, tt.want)
			}
		})
	}
}

func TestFileReaderUint(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tests := []struct {
		content string
		want    uint64
		wantErr bool
	}{{"123\n", 123, false}, {"max\n", 0, false}, {"-1\n", 0, true}, {"", 0, true}}
	for i, tt := range tests {
		p := filepath.Join(dir, fmt.Sprint(i))
		if err := os.WriteFile(p, []byte(tt.content), 0o644); err != nil {
			t.Fatal(err)
		}
		var r fileReader
		got, err := r.uint(p)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("uint(%q) = %d, %v; want %d, error %v", tt.content, got, err, tt.want, tt.wantErr)
		}
	}
}
