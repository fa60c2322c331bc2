package yield

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/klog/v2/ktesting"

	"github.com/tandemkit/tandem/internal/polltest"
	"github.com/tandemkit/tandem/resource/sched"
)

// bePod starts a real process and lists it in a BE pod's container cgroup under root, as the kernel
// would; the directory tree stands in for the cgroup hierarchy, the process and its policy are real.
func bePod(t *testing.T, root, pod string) int {
	t.Helper()
	cmd := exec.Command("sleep", "300")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	dir := filepath.Join(root, pod, "ctr")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tasks"), []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid
}

// start runs a loop with cfg and deps until the test ends.
func start(t *testing.T, cfg Config, deps Deps) *Loop {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	l, err := New(cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() { _ = l.Run(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	return l
}

func waitPolicy(t *testing.T, tid int, want sched.Policy) {
	t.Helper()
	polltest.Until(t, fmt.Sprintf("thread %d to run under %s", tid, want), func() bool {
		a, err := sched.Of(tid)
		return err == nil && a.Policy == want
	})
}

func TestLoop(t *testing.T) {
	root := t.TempDir()
	first := bePod(t, root, "pod1")
	kick := make(chan struct{}, 1)
	reg := prometheus.NewRegistry()
	cfg := DefaultConfig()
	cfg.BECgroupDir, cfg.Interval = root, time.Hour
	be := cfg.Want.Policy
	l := start(t, cfg, Deps{Kick: kick, Registerer: reg})

	// The first sweep runs at start.
	waitPolicy(t, first, be)
	// A BE container started: with an hour between sweeps, only the kick can move it.
	second := bePod(t, root, "pod2")
	kick <- struct{}{}
	waitPolicy(t, second, be)
	// The sweep counts its moves once it is done, a moment after the thread moved.
	polltest.Until(t, "the sweep to count its moves", func() bool { return testutil.ToFloat64(l.moved.WithLabelValues(be.String())) >= 2 })
	if got := testutil.ToFloat64(l.moved.WithLabelValues(be.String())); got != 2 {
		t.Errorf("threads_moved_total{policy=%s} = %v, want 2", be, got)
	}
	// Switching it off gives every BE thread SCHED_OTHER back at once.
	off := cfg
	off.Enable = false
	if err := l.Reconfigure(off); err != nil {
		t.Fatal(err)
	}
	waitPolicy(t, first, sched.Other)
	waitPolicy(t, second, sched.Other)
	// While off, a kick moves nothing.
	third := bePod(t, root, "pod3")
	kick <- struct{}{}
	time.Sleep(50 * time.Millisecond) // real time: what is checked is that nothing happens
	if a, _ := sched.Of(third); a.Policy != sched.Other {
		t.Errorf("thread started while the loop is off runs under %s, want SCHED_OTHER", a.Policy)
	}
}

// TestStartDisabledUndoes: a loop that starts switched off moves back what an earlier run left idle.
func TestStartDisabledUndoes(t *testing.T) {
	root := t.TempDir()
	tid := bePod(t, root, "pod1")
	cfg := DefaultConfig()
	cfg.Enable, cfg.BECgroupDir, cfg.Interval = false, root, time.Hour
	if _, err := sched.Set(tid, cfg.Want); err != nil {
		t.Fatal(err)
	}
	start(t, cfg, Deps{})
	waitPolicy(t, tid, sched.Other)
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"default with a directory", Config{Enable: true, Want: DefaultConfig().Want, BECgroupDir: "/sys/fs/cgroup/cpu/kubepods/besteffort", Interval: time.Second}, true},
		{"no directory", Config{Enable: true, Want: DefaultConfig().Want, Interval: time.Second}, false},
		{"no interval", Config{Enable: true, Want: DefaultConfig().Want, BECgroupDir: "/x"}, false},
		{"the kernel's default", Config{Enable: true, Want: sched.Default, BECgroupDir: "/x", Interval: time.Second}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.cfg.Validate(); (err == nil) != tc.ok {
				t.Fatalf("Validate() = %v, want ok=%v", err, tc.ok)
			}
		})
	}
}

// TestBECgroupAppears: a BE cgroup that does not exist yet is swept once it does.
func TestBECgroupAppears(t *testing.T) {
	root := filepath.Join(t.TempDir(), "besteffort")
	cfg := DefaultConfig()
	cfg.BECgroupDir, cfg.Interval = root, 20*time.Millisecond
	start(t, cfg, Deps{})
	time.Sleep(60 * time.Millisecond) // real time: the loop sweeps the missing cgroup a few times first
	tid := bePod(t, root, "pod1")
	waitPolicy(t, tid, cfg.Want.Policy)
}
