package remote

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tandemkit/tandem/hooks"
	"github.com/tandemkit/tandem/internal/polltest"
)

// nobody is the uid and gid of an unprivileged user who must not register hook servers.
const nobody = 65534

// TestLoaderRefusesUntrusted: a hook server is registered only by a file no one but root could have
// written, in a directory no one but root could have written, naming a socket no one but root (or
// the server's own user) could create. Otherwise one log line says what to fix, and the server is
// never called, however often the directory is read.
func TestLoaderRefusesUntrusted(t *testing.T) {
	tests := []struct {
		name      string
		needsRoot bool
		dirMode   fs.FileMode // hooks.d; 0755 when 0
		dirOwner  int         // chown hooks.d to this uid when not 0
		fileMode  fs.FileMode // the registration file; 0644 when 0
		fileOwner int         // chown the file to this uid when not 0
		// link makes the file a symbolic link to one outside hooks.d, as a ConfigMap volume presents it.
		link bool
		// sockDirMode is the mode of the directory the server's socket is in; t.TempDir's when 0.
		sockDirMode fs.FileMode
		// sockLater names a socket in a directory that does not exist yet, below the one above.
		sockLater bool
		wantHook  bool
		wantLog   []string // parts of the one refusal line
	}{
		{name: "root's 0644 file in a 0755 directory", wantHook: true},
		{name: "root's 0600 file behind a link", fileMode: 0o600, link: true, wantHook: true},
		{name: "root's socket directory 0750", sockDirMode: 0o750, wantHook: true},
		{name: "world-writable directory", dirMode: 0o777,
			wantLog: []string{"Hook directory refused", "chown root, chmod go-w", `mode="0777"`, "lets group or others write it"}},
		{name: "sticky world-writable directory", dirMode: 0o1777,
			wantLog: []string{"Hook directory refused", `mode="1777"`}},
		{name: "group-writable directory", dirMode: 0o775,
			wantLog: []string{"Hook directory refused", `mode="0775"`}},
		{name: "world-writable file", fileMode: 0o666,
			wantLog: []string{"Hook file refused", "chown root, chmod go-w", `mode="0666"`, "h.json"}},
		{name: "group-writable file", fileMode: 0o664,
			wantLog: []string{"Hook file refused", `mode="0664"`}},
		{name: "file owned by nobody", needsRoot: true, fileOwner: nobody,
			wantLog: []string{"Hook file refused", "owner=65534", `mode="0644"`, "owned by uid 65534, not root"}},
		{name: "link to a file owned by nobody", needsRoot: true, fileOwner: nobody, link: true,
			wantLog: []string{"Hook file refused", "owner=65534", "owned by uid 65534, not root"}},
		{name: "directory owned by nobody", needsRoot: true, dirOwner: nobody,
			wantLog: []string{"Hook directory refused", "owner=65534", "owned by uid 65534, not root"}},
		{name: "socket in a world-writable directory", sockDirMode: 0o1777,
			wantLog: []string{"Hook file refused", "others could create its hook server's socket", "has mode 1777"}},
		{name: "socket's directory yet to be made in a world-writable one", sockDirMode: 0o777, sockLater: true,
			wantLog: []string{"Hook file refused", "others could create its hook server's socket", "has mode 0777"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.needsRoot && os.Geteuid() != 0 {
				t.Skip("chown to another user needs root")
			}
			ctx, logs := bufferedContext(t)
			dir := filepath.Join(t.TempDir(), "hooks.d")
			mkdir(t, dir, or(tt.dirMode, 0o755))
			sockDir := t.TempDir()
			if tt.sockDirMode != 0 {
				chmod(t, sockDir, tt.sockDirMode)
			}
			server := &testServer{}
			endpoint := filepath.Join(sockDir, "h.sock")
			serve(t, endpoint, server)
			if tt.sockLater {
				endpoint = filepath.Join(sockDir, "later", "h.sock")
			}
			file := filepath.Join(dir, "h.json")
			target := file
			if tt.link {
				target = filepath.Join(t.TempDir(), "h.json")
				if err := os.Symlink(target, file); err != nil {
					t.Fatal(err)
				}
			}
			data := fmt.Sprintf(`{"endpoint": %q, "stages": ["PreCreateContainer"], "order": 500}`, endpoint)
			if err := os.WriteFile(target, []byte(data), 0o600); err != nil {
				t.Fatal(err)
			}
			chmod(t, target, or(tt.fileMode, 0o644))
			chown(t, target, tt.fileOwner)
			chown(t, dir, tt.dirOwner)

			builtin := []hooks.Registration{{Name: "local", Order: 100, New: func() (hooks.Hook, error) { return countingHook{new(atomic.Int32)}, nil }}}
			d, err := hooks.NewDispatcher(ctx, builtin, nil)
			if err != nil {
				t.Fatal(err)
			}
			l := NewLoader(LoaderConfig{Dir: dir, Builtin: builtin})
			t.Cleanup(func() { _ = l.Close() })
			// The watcher reads the directory again at every change to it, trusted or not.
			for range 3 {
				regs, err := l.Load(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if err := d.SetRemote(ctx, regs); err != nil {
					t.Fatal(err)
				}
			}
			want := map[string]hookState{}
			if tt.wantHook {
				want["h"] = hookState{500, hooks.Fail}
			}
			if got := remoteHooks(d); !reflect.DeepEqual(got, want) {
				t.Errorf("hooks in force %v, want %v", got, want)
			}
			if _, err := d.Run(ctx, hooks.PreCreateContainer, testPod(), testContainer()); err != nil && tt.wantHook {
				t.Errorf("CreateContainer hooks: %v", err)
			}
			calls, _ := server.calls()
			if wantCalls := map[bool]int{true: 1, false: 0}[tt.wantHook]; len(calls) != wantCalls {
				t.Errorf("the hook server received %d calls, want %d", len(calls), wantCalls)
			}
			refusals := refusalLines(logs())
			switch {
			case tt.wantLog == nil && len(refusals) > 0:
				t.Errorf("refused:\n%s", strings.Join(refusals, "\n"))
			case tt.wantLog != nil && len(refusals) != 1:
				t.Errorf("%d refusal lines over three loads, want one:\n%s", len(refusals), logs())
			case tt.wantLog != nil && !containsAll(refusals[0], tt.wantLog):
				t.Errorf("refusal line %q lacks one of %q", refusals[0], tt.wantLog)
			}
		})
	}
}

// TestWatcherTrustChanges follows one file through the chmod and chown mistakes an operator makes,
// with the watcher running: each refusal is logged once and takes the hook out at once, editing a
// refused file logs it again, and putting the owner and mode right brings the hook back.
func TestWatcherTrustChanges(t *testing.T) {
	ctx, logs := bufferedContext(t)
	dir := filepath.Join(t.TempDir(), "hooks.d")
	mkdir(t, dir, 0o755)
	sock := socketPath(t, "w.sock")
	server := &testServer{}
	serve(t, sock, server)
	d, _ := startWatcher(t, ctx, dir)
	file := filepath.Join(dir, "tuner.json")
	write := func(order int) {
		t.Helper()
		data := fmt.Sprintf(`{"endpoint": %q, "stages": ["PreCreateContainer"], "order": %d}`, sock, order)
		// In place, as an editor saving the file does: the mode stays what it was.
		if err := os.WriteFile(file, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	inForce := map[string]hookState{"tuner": {700, hooks.Fail}}
	steps := []struct {
		name     string
		change   func(t *testing.T)
		want     map[string]hookState
		refusals int // refusal lines logged so far
	}{
		{name: "root's file", change: func(*testing.T) { write(700) }, want: inForce},
		{name: "file made world-writable", change: func(t *testing.T) { chmod(t, file, 0o666) }, want: map[string]hookState{}, refusals: 1},
		{name: "refused file edited", change: func(*testing.T) { write(800) }, want: map[string]hookState{}, refusals: 2},
		{name: "file mode put right", change: func(t *testing.T) { chmod(t, file, 0o644) }, want: map[string]hookState{"tuner": {800, hooks.Fail}}, refusals: 2},
		{name: "directory made group-writable", change: func(t *testing.T) { chmod(t, dir, 0o775) }, want: map[string]hookState{}, refusals: 3},
		{name: "directory mode put right", change: func(t *testing.T) { chmod(t, dir, 0o755) }, want: map[string]hookState{"tuner": {800, hooks.Fail}}, refusals: 3},
	}
	for _, step := range steps {
		t.Run(step.name, func(t *testing.T) {
			step.change(t)
			polltest.Until(t, fmt.Sprintf("hooks %v", step.want), func() bool { return reflect.DeepEqual(remoteHooks(d), step.want) })
			polltest.Until(t, fmt.Sprintf("%d refusal lines", step.refusals), func() bool { return len(refusalLines(logs())) >= step.refusals })
			before, _ := server.calls()
			if _, err := d.Run(ctx, hooks.PreCreateContainer, testPod(), testContainer()); err != nil {
				t.Fatalf("CreateContainer hooks: %v", err)
			}
			after, _ := server.calls()
			if got, want := len(after)-len(before), len(step.want); got != want {
				t.Errorf("the hook server received %d calls, want %d", got, want)
			}
		})
	}
	// Every change above was read at least once more after it was logged.
	if got := refusalLines(logs()); len(got) != 3 {
		t.Errorf("%d refusal lines, want 3, one per refused change:\n%s", len(got), strings.Join(got, "\n"))
	}
}

func refusalLines(logs string) []string {
	var out []string
	for _, line := range strings.Split(logs, "\n") {
		if strings.Contains(line, "refused") {
			out = append(out, line)
		}
	}
	return out
}

func or(m, def fs.FileMode) fs.FileMode {
	if m == 0 {
		return def
	}
	return m
}

// mkdir makes dir with exactly mode, whatever the umask.
func mkdir(t *testing.T, dir string, mode fs.FileMode) {
	t.Helper()
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	chmod(t, dir, mode)
}

// chmod sets mode, sticky bit included.
func chmod(t *testing.T, path string, mode fs.FileMode) {
	t.Helper()
	m := mode.Perm()
	if mode&0o1000 != 0 {
		m |= fs.ModeSticky
	}
	if err := os.Chmod(path, m); err != nil {
		t.Fatal(err)
	}
}

// chown gives path to uid (and the same gid) when uid is not 0.
func chown(t *testing.T, path string, uid int) {
	t.Helper()
	if uid == 0 {
		return
	}
	if err := os.Chown(path, uid, uid); err != nil {
		t.Fatal(err)
	}
}

// TestLoaderReadOnlyMount: a ConfigMap volume is a world-writable directory (1777) mounted read-only;
// no one can write it, so its files register their hook servers.
func TestLoaderReadOnlyMount(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a file system needs root")
	}
	ctx, logs := bufferedContext(t)
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "mode=1777"); err != nil {
		t.Skipf("cannot mount a tmpfs here: %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, 0); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	sock := socketPath(t, "r.sock")
	serve(t, sock, &testServer{})
	data := fmt.Sprintf(`{"endpoint": %q, "stages": ["PreCreateContainer"], "order": 500}`, sock)
	if err := os.WriteFile(filepath.Join(dir, "ro.json"), []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("", dir, "", unix.MS_REMOUNT|unix.MS_RDONLY, "mode=1777"); err != nil {
		t.Fatalf("remount %s read-only: %v", dir, err)
	}
	l := NewLoader(LoaderConfig{Dir: dir})
	t.Cleanup(func() { _ = l.Close() })
	regs, err := l.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(regs) != 1 || regs[0].Name != "ro" {
		t.Errorf("registrations %+v, want the hook of ro.json:\n%s", regs, logs())
	}
}
