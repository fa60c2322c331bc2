package remote

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"

	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/tandemkit/tandem/hooks"
	"github.com/tandemkit/tandem/internal/polltest"
)

// bufferedContext returns a context whose logger keeps what it logs, and a function returning that text.
func bufferedContext(t *testing.T) (context.Context, func() string) {
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
	ctx := klog.NewContext(t.Context(), logger)
	return ctx, func() string { return logger.GetSink().(ktesting.Underlier).GetBuffer().String() }
}

type hookState struct {
	order  int
	policy hooks.FailurePolicy
}

// remoteHooks lists the remote hooks a dispatcher has in force.
func remoteHooks(d *hooks.Dispatcher) map[string]hookState {
	out := map[string]hookState{}
	for _, h := range d.Hooks() {
		if h.Remote {
			out[h.Name] = hookState{h.Order, h.FailurePolicy}
		}
	}
	return out
}

// startWatcher runs a watcher of dir that applies to a real dispatcher with one in-process hook at order 100.
func startWatcher(t *testing.T, ctx context.Context, dir string) (*hooks.Dispatcher, *Loader) {
	t.Helper()
	builtin := []hooks.Registration{{Name: "local", Order: 100, New: func() (hooks.Hook, error) { return countingHook{new(atomic.Int32)}, nil }}}
	d, err := hooks.NewDispatcher(ctx, builtin, nil)
	if err != nil {
		t.Fatal(err)
	}
	loader := NewLoader(LoaderConfig{Dir: dir, Builtin: builtin})
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- NewWatcher(loader, d.SetRemote).Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("watcher: %v", err)
		}
		_ = loader.Close()
	})
	return d, loader
}

// TestWatcherReload walks a hooks.d directory through the changes an operator makes, against a real
// dispatcher and real hook servers, checking after each which hooks are in force and which server a
// container creation reaches.
func TestWatcherReload(t *testing.T) {
	ctx, logs := bufferedContext(t)
	dir := filepath.Join(t.TempDir(), "hooks.d")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	s1, s2 := &testServer{}, &testServer{}
	p1, p2 := socketPath(t, "1.sock"), socketPath(t, "2.sock")
	serve(t, p1, s1)
	serve(t, p2, s2)
	d, loader := startWatcher(t, ctx, dir)

	tandemFile := func(endpoint string, order int) string {
		return fmt.Sprintf(`{"endpoint": "unix://%s", "stages": ["PreCreateContainer"], "order": %d, "timeout": "1s"}`, endpoint, order)
	}
	steps := []struct {
		name    string
		write   map[string]string
		remove  []string
		waitLog []string // parts of a log line that shows the change was seen, when the hooks stay as they were
		want    map[string]hookState
		reached []*testServer
		check   func(t *testing.T)
	}{{
		name: "empty directory",
		want: map[string]hookState{},
	}, {
		name:    "add a file",
		write:   map[string]string{"tuner.json": tandemFile(p1, 500)},
		want:    map[string]hookState{"tuner": {500, hooks.Fail}},
		reached: []*testServer{s1},
	}, {
		name:    "change its order and endpoint",
		write:   map[string]string{"tuner.json": tandemFile(p2, 600)},
		want:    map[string]hookState{"tuner": {600, hooks.Fail}},
		reached: []*testServer{s2},
		check: func(t *testing.T) {
			loader.mu.Lock()
			defer loader.mu.Unlock()
			if _, ok := loader.conns["unix://"+p1]; ok {
				t.Error("the connection to the old endpoint is still open")
			}
		},
	}, {
		name:    "malformed JSON keeps the previous version",
		write:   map[string]string{"tuner.json": `{"endpoint": "unix://` + p1},
		waitLog: []string{"Hook file rejected; its previous version stays in force", `file="` + filepath.Join(dir, "tuner.json") + `"`, "unexpected end of JSON input"},
		want:    map[string]hookState{"tuner": {600, hooks.Fail}},
		reached: []*testServer{s2},
	}, {
		name:    "a Koordinator file as koordlet writes it",
		write:   map[string]string{"koordlet.json": `{"remote-endpoint": "` + p1 + `", "failure-policy": "Ignore", "runtime-hooks": ["PreRunPodSandbox", "PreCreateContainer"]}`},
		want:    map[string]hookState{"tuner": {600, hooks.Fail}, "koordlet": {10000, hooks.Ignore}},
		reached: []*testServer{s1, s2},
	}, {
		name:    "an order a built-in hook has is rejected",
		write:   map[string]string{"clash.json": tandemFile(p1, 100)},
		waitLog: []string{"Hook file rejected", `file="` + filepath.Join(dir, "clash.json") + `"`, "order 100 is already used by built-in hook local"},
		want:    map[string]hookState{"tuner": {600, hooks.Fail}, "koordlet": {10000, hooks.Ignore}},
		reached: []*testServer{s1, s2},
	}, {
		name:    "remove a file",
		remove:  []string{"tuner.json", "clash.json"},
		want:    map[string]hookState{"koordlet": {10000, hooks.Ignore}},
		reached: []*testServer{s1},
	}}
	for _, step := range steps {
		t.Run(step.name, func(t *testing.T) {
			for name, content := range step.write {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			for _, name := range step.remove {
				if err := os.Remove(filepath.Join(dir, name)); err != nil {
					t.Fatal(err)
				}
			}
			if step.waitLog != nil {
				polltest.Until(t, fmt.Sprintf("a log line with %q", step.waitLog), func() bool {
					for _, line := range strings.Split(logs(), "\n") {
						if containsAll(line, step.waitLog) {
							return true
						}
					}
					return false
				})
			}
			polltest.Until(t, fmt.Sprintf("hooks %v", step.want), func() bool { return reflect.DeepEqual(remoteHooks(d), step.want) })

			before := map[*testServer]int{}
			for _, s := range []*testServer{s1, s2} {
				rpcs, _ := s.calls()
				before[s] = len(rpcs)
			}
			if _, err := d.Run(ctx, hooks.PreCreateContainer, testPod(), testContainer()); err != nil {
				t.Fatalf("CreateContainer hooks: %v", err)
			}
			for _, s := range []*testServer{s1, s2} {
				rpcs, _ := s.calls()
				want := 0
				for _, r := range step.reached {
					if r == s {
						want = 1
					}
				}
				if got := len(rpcs) - before[s]; got != want {
					name := map[*testServer]string{s1: "server 1", s2: "server 2"}[s]
					t.Errorf("%s received %d calls, want %d", name, got, want)
				}
			}
			if step.check != nil {
				step.check(t)
			}
		})
	}
}

// TestWatcherMissingDirectory: a directory that does not exist yet, or whose parent does not, is no
// error; hooks come when it is created, go when it is removed and come back with it.
func TestWatcherMissingDirectory(t *testing.T) {
	ctx, logs := bufferedContext(t)
	dir := filepath.Join(t.TempDir(), "etc", "tandem", "hooks.d")
	p := socketPath(t, "h.sock")
	serve(t, p, &testServer{})
	d, _ := startWatcher(t, ctx, dir)

	polltest.Until(t, "the missing directory to be logged", func() bool { return strings.Contains(logs(), "Hook directory does not exist") })
	file := fmt.Sprintf(`{"endpoint": %q, "stages": ["PreCreateContainer"], "order": 700}`, p)
	for round := range 2 {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "late.json"), []byte(file), 0o644); err != nil {
			t.Fatal(err)
		}
		polltest.Until(t, fmt.Sprintf("round %d: the hook of the new directory", round), func() bool {
			return reflect.DeepEqual(remoteHooks(d), map[string]hookState{"late": {700, hooks.Fail}})
		})
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
		polltest.Until(t, fmt.Sprintf("round %d: hooks to go with the directory", round), func() bool { return len(remoteHooks(d)) == 0 })
	}
	if n := strings.Count(logs(), "Hook directory does not exist"); n != 1 {
		t.Errorf("the missing directory was logged %d times, want once", n)
	}
}

// TestLoaderConnections: one connection per endpoint, kept while some file uses it.
func TestLoaderConnections(t *testing.T) {
	ctx, _ := bufferedContext(t)
	dir := t.TempDir()
	write := func(name, endpoint string, order int) {
		t.Helper()
		data := fmt.Sprintf(`{"endpoint": %q, "stages": ["PreCreateContainer"], "order": %d}`, endpoint, order)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	l := NewLoader(LoaderConfig{Dir: dir})
	t.Cleanup(func() { _ = l.Close() })
	conns := func() map[string]*Conn {
		t.Helper()
		regs, err := l.Load(ctx)
		if err != nil {
			t.Fatal(err)
		}
		l.Prune(ctx)
		out := map[string]*Conn{}
		for _, r := range regs {
			h, err := r.New()
			if err != nil {
				t.Fatal(err)
			}
			out[r.Name] = h.(*Client).conn
		}
		return out
	}

	write("a.json", "/run/one.sock", 1)
	write("b.json", "unix:///run/one.sock", 2)
	first := conns()
	if first["a"] != first["b"] {
		t.Error("two files with the same socket got two connections")
	}
	write("b.json", "/run/two.sock", 3)
	second := conns()
	if second["a"] != first["a"] {
		t.Error("an unchanged endpoint lost its connection")
	}
	if second["b"] == first["b"] {
		t.Error("a changed endpoint kept the old connection")
	}
	if err := os.Remove(filepath.Join(dir, "a.json")); err != nil {
		t.Fatal(err)
	}
	conns()
	first["a"].mu.Lock()
	closed := first["a"].closed
	first["a"].mu.Unlock()
	if !closed {
		t.Error("the connection of a removed endpoint is still open")
	}
}

// TestLoaderClashes: names and orders are unique; the file that takes one already taken is rejected,
// and its previous version stays if it had one.
func TestLoaderClashes(t *testing.T) {
	tests := []struct {
		name    string
		initial map[string]int // file → order, loaded first
		then    map[string]int // then written and loaded
		want    map[string]int // hook → order in force
		wantLog string
	}{
		{name: "same order: the later file by name is left out", then: map[string]int{"a.json": 500, "b.json": 500},
			want: map[string]int{"a": 500}, wantLog: `order 500 is already used by hooks.d file a.json`},
		{name: "an edit to a taken order keeps the previous version", initial: map[string]int{"a.json": 500, "b.json": 600},
			then: map[string]int{"b.json": 500}, want: map[string]int{"a": 500, "b": 600}, wantLog: `previousVersionInForce=true`},
		{name: "a built-in order", then: map[string]int{"a.json": 100}, want: map[string]int{}, wantLog: "built-in hook local"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, logs := bufferedContext(t)
			dir := t.TempDir()
			l := NewLoader(LoaderConfig{Dir: dir, Builtin: []hooks.Registration{{Name: "local", Order: 100}}})
			t.Cleanup(func() { _ = l.Close() })
			for _, files := range []map[string]int{tt.initial, tt.then} {
				for f, order := range files {
					data := fmt.Sprintf(`{"endpoint": "/run/%s.sock", "stages": ["PreCreateContainer"], "order": %d}`, f, order)
					if err := os.WriteFile(filepath.Join(dir, f), []byte(data), 0o644); err != nil {
						t.Fatal(err)
					}
				}
				if _, err := l.Load(ctx); err != nil {
					t.Fatal(err)
				}
			}
			regs, err := l.Load(ctx)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]int{}
			for _, r := range regs {
				got[r.Name] = r.Order
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("hooks in force %v, want %v", got, tt.want)
			}
			if !strings.Contains(logs(), tt.wantLog) {
				t.Errorf("log does not contain %q:\n%s", tt.wantLog, logs())
			}
			if n := strings.Count(logs(), "Hook file rejected"); n != 1 {
				t.Errorf("the clash was logged %d times over three loads, want once", n)
			}
		})
	}
}

func containsAll(s string, parts []string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}
