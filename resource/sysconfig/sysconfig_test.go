package sysconfig

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"k8s.io/klog/v2/ktesting"
)

// The tests run on a temporary proc and sys tree: they change node-wide settings, which a unit test must
// not do on the real node (e2e/sysconfig_test.go does, against a real tandem-proxy), and the Anolis
// memcg_reaper file exists on no kernel here.

// memTotal is a 16 GiB node: factor 100 gives 167772 kB; the kernel's default is sqrt(16 × 16777216) =
// 16384 kB, so the floor is 16384 kB; the ceiling 5 % = 838860 kB.
const memTotal = 16777216

const (
	minFree  = minFreeKbytesFile
	wsf      = watermarkScaleFactorFile
	reap     = reapBackgroundFile
	gi       = groupIdentityFile
	origMin  = "67584"
	origWSF  = "10"
	origReap = "0"
	origGI   = "0"
)

type tree struct {
	proc, sys, record string
}

// newTree lays out the files a node has; anolis adds memcg_reaper.
func newTree(t *testing.T, anolis bool) tree {
	t.Helper()
	dir := t.TempDir()
	tr := tree{proc: filepath.Join(dir, "proc"), sys: filepath.Join(dir, "sys"), record: filepath.Join(dir, "state", "sysconfig.json")}
	put := func(path, v string) {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	put(filepath.Join(tr.proc, "meminfo"), "MemTotal:       "+strconv.Itoa(memTotal)+" kB\nMemFree:         8000000 kB\n")
	put(filepath.Join(tr.proc, minFree), origMin)
	put(filepath.Join(tr.proc, wsf), origWSF)
	if anolis {
		put(filepath.Join(tr.sys, reap), origReap)
		put(filepath.Join(tr.proc, gi), origGI)
	} else if err := os.MkdirAll(filepath.Join(tr.sys, "kernel", "mm"), 0o755); err != nil {
		t.Fatal(err)
	}
	return tr
}

func (tr tree) path(rel string) string {
	if rel == reap {
		return filepath.Join(tr.sys, rel)
	}
	return filepath.Join(tr.proc, rel)
}

func (tr tree) read(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(tr.path(rel))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func (tr tree) keeper(t *testing.T) *Keeper {
	t.Helper()
	k, err := New(Config{ProcRoot: tr.proc, SysRoot: tr.sys, Record: tr.record})
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func p(v int64) *int64 { return &v }

// step is one thing that happens to the node; want lists file values after it, states the keys' states.
type step struct {
	name    string
	apply   *Want
	restore bool // the agent stops
	kill    bool // the agent dies (SIGKILL) and starts again: a new Keeper on the same record
	foreign map[string]string
	want    map[string]string
	states  map[string]State
	// detail: a key's Detail must contain this.
	detail map[string]string
	// recorded: whether the record file exists after the step.
	recorded bool
}

func TestKeeper(t *testing.T) {
	// seed is the system-config an operator runs on its Anolis nodes under Koordinator.
	seed := Want{MinFreeKbytesFactor: p(100), WatermarkScaleFactor: p(150), MemcgReapBackGround: p(1), SchedGroupIdentityEnabled: p(1)}
	originals := map[string]string{minFree: origMin, wsf: origWSF, reap: origReap, gi: origGI}
	seedValues := map[string]string{minFree: "167772", wsf: "150", reap: "1", gi: "1"}
	allApplied := map[string]State{KeyMinFreeKbytesFactor: Applied, KeyWatermarkScaleFactor: Applied, KeyMemcgReapBackGround: Applied,
		KeySchedGroupIdentity: Applied}
	allOff := map[string]State{KeyMinFreeKbytesFactor: Off, KeyWatermarkScaleFactor: Off, KeyMemcgReapBackGround: Off, KeySchedGroupIdentity: Off}
	tests := []struct {
		name   string
		anolis bool
		steps  []step
	}{
		{name: "apply, change, unset restores", anolis: true, steps: []step{
			{name: "operator's values", apply: &seed, want: seedValues, states: allApplied, recorded: true,
				detail: map[string]string{KeyMinFreeKbytesFactor: "min_free_kbytes 167772 = 100 × 16777216 kB MemTotal / 10000"}},
			{name: "change", apply: &Want{MinFreeKbytesFactor: p(200), WatermarkScaleFactor: p(10)},
				want: map[string]string{minFree: "335544", wsf: "10", reap: origReap, gi: origGI},
				states: map[string]State{KeyMinFreeKbytesFactor: Applied, KeyWatermarkScaleFactor: Applied, KeyMemcgReapBackGround: Off,
					KeySchedGroupIdentity: Off}, recorded: true},
			{name: "section removed", apply: &Want{}, want: originals, states: allOff, recorded: false},
		}},
		{name: "stop restores", anolis: true, steps: []step{
			{name: "operator's values", apply: &seed, want: seedValues, states: allApplied, recorded: true},
			{name: "stop", restore: true, want: originals, states: allOff, recorded: false},
		}},
		{name: "restart after SIGKILL restores the originals from the record", anolis: true, steps: []step{
			{name: "operator's values", apply: &seed, want: seedValues, recorded: true},
			{name: "killed and started again", kill: true, apply: &seed, want: seedValues, states: allApplied, recorded: true},
			{name: "stop", restore: true, want: originals, recorded: false},
		}},
		{name: "restart after SIGKILL without the section restores at once", anolis: true, steps: []step{
			{name: "operator's values", apply: &seed, want: seedValues, recorded: true},
			{name: "killed and started again", kill: true, apply: &Want{}, want: originals, states: allOff, recorded: false},
		}},
		{name: "a second write keeps the first original", steps: []step{
			{name: "100", apply: &Want{MinFreeKbytesFactor: p(100)}, want: map[string]string{minFree: "167772"}, recorded: true},
			{name: "200", apply: &Want{MinFreeKbytesFactor: p(200)}, want: map[string]string{minFree: "335544"}, recorded: true},
			{name: "killed", kill: true, restore: true, want: map[string]string{minFree: origMin}, recorded: false},
		}},
		{name: "refusals write nothing", anolis: true, steps: []step{
			// 1 × 16777216 / 10000 = 1677 kB: below the kernel's own 16384.
			{name: "too small", apply: &Want{MinFreeKbytesFactor: p(1), WatermarkScaleFactor: p(5), MemcgReapBackGround: p(2), SchedGroupIdentityEnabled: p(-1)},
				want: originals, recorded: false,
				states: map[string]State{KeyMinFreeKbytesFactor: Refused, KeyWatermarkScaleFactor: Refused, KeyMemcgReapBackGround: Refused,
					KeySchedGroupIdentity: Refused},
				detail: map[string]string{KeyMinFreeKbytesFactor: "below the floor of 16384 kB", KeyWatermarkScaleFactor: "5 is outside 10..400",
					KeyMemcgReapBackGround: "2 is outside 0..1"}},
			// 600 is 6 % of memory.
			{name: "too large", apply: &Want{MinFreeKbytesFactor: p(600), WatermarkScaleFactor: p(401)}, want: originals, recorded: false,
				states: map[string]State{KeyMinFreeKbytesFactor: Refused, KeyWatermarkScaleFactor: Refused},
				detail: map[string]string{KeyMinFreeKbytesFactor: "above the ceiling of 838860 kB", KeyWatermarkScaleFactor: "401 is outside 10..400"}},
			{name: "an overflowing factor", apply: &Want{MinFreeKbytesFactor: p(1 << 62)}, want: originals, recorded: false,
				states: map[string]State{KeyMinFreeKbytesFactor: Refused}, detail: map[string]string{KeyMinFreeKbytesFactor: "more than the node's memory"}},
			{name: "the bounds themselves", apply: &Want{MinFreeKbytesFactor: p(500), WatermarkScaleFactor: p(400)},
				want: map[string]string{minFree: "838860", wsf: "400"}, recorded: true,
				states: map[string]State{KeyMinFreeKbytesFactor: Applied, KeyWatermarkScaleFactor: Applied}},
		}},
		{name: "a refused change keeps the value in force", steps: []step{
			{name: "100", apply: &Want{MinFreeKbytesFactor: p(100)}, want: map[string]string{minFree: "167772"}, recorded: true},
			{name: "10000", apply: &Want{MinFreeKbytesFactor: p(10000)}, want: map[string]string{minFree: "167772"}, recorded: true,
				states: map[string]State{KeyMinFreeKbytesFactor: Refused}, detail: map[string]string{KeyMinFreeKbytesFactor: "keeps 167772"}},
			{name: "stop", restore: true, want: map[string]string{minFree: origMin}, recorded: false},
		}},
		{name: "no memcg_reaper or group identity on this kernel", steps: []step{
			{name: "operator's values", apply: &seed, want: map[string]string{minFree: "167772", wsf: "150"}, recorded: true,
				states: map[string]State{KeyMinFreeKbytesFactor: Applied, KeyWatermarkScaleFactor: Applied, KeyMemcgReapBackGround: Ignored,
					KeySchedGroupIdentity: Ignored},
				detail: map[string]string{KeyMemcgReapBackGround: "this kernel has no ", KeySchedGroupIdentity: "sched_group_identity_enabled"}},
		}},
		{name: "a value set by someone else is left alone", steps: []step{
			{name: "operator's values", apply: &seed, want: map[string]string{minFree: "167772", wsf: "150"}, recorded: true},
			{name: "sysctl -w", foreign: map[string]string{minFree: "99999"}, want: map[string]string{minFree: "99999"}, recorded: true},
			{name: "section removed", apply: &Want{}, want: map[string]string{minFree: "99999", wsf: origWSF}, recorded: false,
				detail: map[string]string{KeyMinFreeKbytesFactor: "set by someone else"}},
		}},
		{name: "a value set by someone else becomes the original at the next write", steps: []step{
			{name: "100", apply: &Want{MinFreeKbytesFactor: p(100)}, want: map[string]string{minFree: "167772"}, recorded: true},
			{name: "sysctl -w", foreign: map[string]string{minFree: "99999"}, want: map[string]string{minFree: "99999"}, recorded: true},
			{name: "200", apply: &Want{MinFreeKbytesFactor: p(200)}, want: map[string]string{minFree: "335544"}, recorded: true},
			{name: "stop", restore: true, want: map[string]string{minFree: "99999"}, recorded: false},
		}},
		{name: "a value the node already holds is not recorded", steps: []step{
			{name: "10 is the kernel's", apply: &Want{WatermarkScaleFactor: p(10)}, want: map[string]string{wsf: origWSF}, recorded: false,
				states: map[string]State{KeyWatermarkScaleFactor: Applied}},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, ctx := ktesting.NewTestContext(t)
			tr := newTree(t, tc.anolis)
			k := tr.keeper(t)
			for _, s := range tc.steps {
				for rel, v := range s.foreign {
					if err := os.WriteFile(tr.path(rel), []byte(v), 0o644); err != nil {
						t.Fatal(err)
					}
				}
				if s.kill {
					k = tr.keeper(t)
				}
				var got []Result
				if s.apply != nil {
					got = k.Apply(ctx, *s.apply)
				}
				if s.restore {
					if err := k.Restore(ctx); err != nil {
						t.Fatalf("%s: Restore: %v", s.name, err)
					}
					got = k.Results()
				}
				for rel, v := range s.want {
					if g := tr.read(t, rel); g != v {
						t.Errorf("%s: %s = %s, want %s", s.name, rel, g, v)
					}
				}
				byKey := map[string]Result{}
				for _, r := range got {
					byKey[r.Key] = r
				}
				for key, st := range s.states {
					if r := byKey[key]; r.State != st {
						t.Errorf("%s: %s is %q (%s), want %q", s.name, key, r.State, r.Detail, st)
					}
				}
				for key, d := range s.detail {
					if r := byKey[key]; !strings.Contains(r.Detail, d) {
						t.Errorf("%s: %s detail %q, want it to contain %q", s.name, key, r.Detail, d)
					}
				}
				if _, err := os.Stat(tr.record); (err == nil) != s.recorded {
					t.Errorf("%s: record exists = %v, want %v", s.name, err == nil, s.recorded)
				}
				if k.Recorded() != s.recorded {
					t.Errorf("%s: Recorded() = %v, want %v", s.name, k.Recorded(), s.recorded)
				}
			}
		})
	}
}

// TestRecordBeforeWrite: the original is on disk before the file changes, so an agent killed right after
// the write finds it; a record that cannot be saved means nothing is written.
func TestRecordBeforeWrite(t *testing.T) {
	t.Parallel()
	_, ctx := ktesting.NewTestContext(t)
	tr := newTree(t, false)
	k := tr.keeper(t)
	k.Apply(ctx, Want{MinFreeKbytesFactor: p(100)})
	b, err := os.ReadFile(tr.record)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"original": "67584"`) || !strings.Contains(string(b), `"167772"`) {
		t.Fatalf("record = %s, want the original 67584 and the written 167772", b)
	}

	// The state directory is a file: the record cannot be written.
	tr2 := newTree(t, false)
	if err := os.WriteFile(filepath.Dir(tr2.record), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	k2 := tr2.keeper(t)
	got := k2.Apply(ctx, Want{MinFreeKbytesFactor: p(100)})
	if got[0].State != Ignored || !strings.Contains(got[0].Detail, "nothing written") {
		t.Fatalf("with no record possible: %+v, want Ignored, nothing written", got[0])
	}
	if v := tr2.read(t, minFree); v != origMin {
		t.Fatalf("min_free_kbytes = %s with no record possible, want %s untouched", v, origMin)
	}
}

// TestBadRecord: a record Tandem cannot read stops it from writing, and stays for a human.
func TestBadRecord(t *testing.T) {
	t.Parallel()
	for _, body := range []string{"{not json", `{"version": 2, "files": {}}`} {
		tr := newTree(t, false)
		if err := os.MkdirAll(filepath.Dir(tr.record), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(tr.record, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := New(Config{ProcRoot: tr.proc, SysRoot: tr.sys, Record: tr.record})
		if err == nil || !strings.Contains(err.Error(), tr.record) {
			t.Fatalf("New with record %q: err = %v, want one naming the record", body, err)
		}
		if b, _ := os.ReadFile(tr.record); string(b) != body {
			t.Fatalf("the bad record was changed to %q", b)
		}
	}
}

// TestResultsSeeForeignWrites: Results says when an applied file was changed since.
func TestResultsSeeForeignWrites(t *testing.T) {
	t.Parallel()
	_, ctx := ktesting.NewTestContext(t)
	tr := newTree(t, false)
	k := tr.keeper(t)
	k.Apply(ctx, Want{WatermarkScaleFactor: p(150)})
	if err := os.WriteFile(tr.path(wsf), []byte("77"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := k.Results()[1]
	if r.State != Applied || !strings.Contains(r.Detail, "now holds 77") {
		t.Fatalf("Results()[1] = %+v, want Applied saying the file now holds 77", r)
	}
}

func TestKernelMinFreeKbytes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ mem, want int64 }{
		{mem: 16777216, want: 16384},
		{mem: 24683656, want: 19873}, // this machine
		{mem: 512, want: 128},        // clamped up
		{mem: 8 << 30, want: 256 << 10},
	} {
		if got := kernelMinFreeKbytes(tc.mem); got != tc.want {
			t.Errorf("kernelMinFreeKbytes(%d) = %d, want %d", tc.mem, got, tc.want)
		}
	}
}

func TestMemTotal(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, tc := range []struct {
		name, body string
		want       int64
	}{
		{name: "ok", body: "MemTotal:       24683656 kB\nMemFree: 1 kB\n", want: 24683656},
		{name: "no line", body: "MemFree: 1 kB\n"},
		{name: "no unit", body: "MemTotal: 5\n"},
		{name: "zero", body: "MemTotal: 0 kB\n"},
	} {
		f := filepath.Join(dir, tc.name)
		if err := os.WriteFile(f, []byte(tc.body), 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := memTotalKB(f)
		if (err == nil) != (tc.want > 0) || got != tc.want {
			t.Errorf("%s: memTotalKB = %d, %v; want %d", tc.name, got, err, tc.want)
		}
	}
}

// TestNoMeminfo: without a memory size the factor cannot be turned into kB: Ignored, nothing written.
func TestNoMeminfo(t *testing.T) {
	t.Parallel()
	_, ctx := ktesting.NewTestContext(t)
	tr := newTree(t, false)
	if err := os.Remove(filepath.Join(tr.proc, "meminfo")); err != nil {
		t.Fatal(err)
	}
	r := tr.keeper(t).Apply(ctx, Want{MinFreeKbytesFactor: p(100)})[0]
	if r.State != Ignored || tr.read(t, minFree) != origMin {
		t.Fatalf("%+v, min_free_kbytes %s; want Ignored and %s", r, tr.read(t, minFree), origMin)
	}
}
