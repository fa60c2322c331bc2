package remote

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"k8s.io/klog/v2"

	"github.com/tandemkit/tandem/hooks"
)

// LoaderConfig says where hook server registrations are and what they must not collide with.
type LoaderConfig struct {
	// Dir is the hooks.d directory; empty means DefaultDir.
	Dir string
	// Builtin are the in-process hooks. A file that takes one of their names or orders is rejected like
	// a malformed one, so that one bad file cannot stop every other file from loading.
	Builtin []hooks.Registration
}

// Loader reads a hooks.d directory into hook registrations, one hook per *.json file. A file that is
// malformed or invalid is rejected with one log line, and the last valid version of that file stays in
// force; a file never seen valid is left out. Files whose names start with "." are not read (editors'
// temporary files, the "..data" links of a mounted ConfigMap).
//
// Only root may register (trust.go): a directory or file that someone else owns or can write is
// refused with one log line, logged again only once it changed, and registers nothing, whatever an
// earlier version registered; so is a file whose hook server's socket others could create.
//
// The Loader owns one connection per endpoint. Unchanged endpoints keep their connection across loads;
// Prune closes the others once the new registrations are in force.
type Loader struct {
	dir      string
	reserved map[string]string // builtin names and orders, as "name:x" / "order:n", → builtin name

	mu            sync.Mutex
	files         map[string]*fileState // by file name
	conns         map[string]*Conn      // by socket path
	inUse         map[string]bool       // socket paths of the last load
	missingLogged bool
	// refusedDir is the directory's refusal last logged; nil while it is trusted.
	refusedDir *refusal
	last       []*spec // the specs of the last load, in order
}

// fileState is what the loader knows of one file.
type fileState struct {
	raw  []byte
	read bool
	// parsed is the last version that parsed and validated; accepted is the version in force, which
	// differs from parsed when parsed collides with another file's name or order.
	parsed, accepted *spec
	// clash is the name or order collision last logged for this file.
	clash string
	// refused is the file's refusal last logged; nil while it is trusted.
	refused *refusal
}

// NewLoader returns a loader for cfg.Dir. It reads nothing until Load.
func NewLoader(cfg LoaderConfig) *Loader {
	dir := cfg.Dir
	if dir == "" {
		dir = DefaultDir
	}
	l := &Loader{dir: filepath.Clean(dir), reserved: map[string]string{}, files: map[string]*fileState{}, conns: map[string]*Conn{}}
	for _, r := range cfg.Builtin {
		l.reserved["name:"+r.Name] = r.Name
		l.reserved[fmt.Sprintf("order:%d", r.Order)] = r.Name
	}
	return l
}

// Dir is the directory the loader reads.
func (l *Loader) Dir() string { return l.dir }

// Load reads the directory and returns the registrations it describes, in order. A missing directory
// gives none. It returns an error only when the directory cannot be read; the previous state stays then.
func (l *Loader) Load(ctx context.Context) ([]hooks.Registration, error) {
	regs, _, err := l.load(ctx)
	return regs, err
}

// load also reports whether the set of hooks changed since the last load.
func (l *Loader) load(ctx context.Context) ([]hooks.Registration, bool, error) {
	logger := klog.FromContext(ctx)
	l.mu.Lock()
	defer l.mu.Unlock()

	entries, err := l.readDir(logger)
	if err != nil {
		return nil, false, err
	}

	seen := map[string]bool{}
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".json") || strings.HasPrefix(name, ".") {
			continue
		}
		path := filepath.Join(l.dir, name)
		// Stat follows symbolic links, which is how a mounted ConfigMap presents its files.
		if fi, err := os.Stat(path); err != nil || !fi.Mode().IsRegular() {
			continue
		}
		seen[name] = true
		l.readFile(logger, name, path)
	}
	for name, st := range l.files {
		if !seen[name] {
			delete(l.files, name)
			// A refused directory was logged once for all its files.
			if st.accepted != nil && l.refusedDir == nil {
				logger.Info("Hook file removed; its hook is removed", "file", filepath.Join(l.dir, name), "hook", st.accepted.name)
			}
		}
	}

	specs := l.resolve(logger)
	changed := !slices.EqualFunc(specs, l.last, func(a, b *spec) bool { return a.equal(b) })
	l.last = specs
	regs := make([]hooks.Registration, 0, len(specs))
	l.inUse = map[string]bool{}
	for _, s := range specs {
		conn, ok := l.conns[s.path]
		if !ok {
			conn = &Conn{endpoint: s.endpoint, path: s.path}
			l.conns[s.path] = conn
		}
		l.inUse[s.path] = true
		name := s.name
		regs = append(regs, hooks.Registration{
			Name:          s.name,
			Order:         s.order,
			New:           func() (hooks.Hook, error) { return NewClient(name, conn), nil },
			Stages:        slices.Clone(s.stages),
			FailurePolicy: s.policy,
			Timeout:       s.timeout,
			Remote:        true,
		})
	}
	return regs, changed, nil
}

// readDir lists the directory if it exists and only root could have written it; none otherwise.
func (l *Loader) readDir(logger klog.Logger) ([]os.DirEntry, error) {
	fi, err := os.Stat(l.dir)
	if err == nil {
		if l.refuseDir(logger, fi) {
			return nil, nil
		}
		var entries []os.DirEntry
		if entries, err = os.ReadDir(l.dir); err == nil {
			return entries, nil
		}
	}
	l.refusedDir = nil
	if errors.Is(err, fs.ErrNotExist) {
		// Once: a node without hook servers need not have the directory. Its removal later is logged
		// by the Watcher.
		if !l.missingLogged {
			logger.Info("Hook directory does not exist; no hook servers until it is created", "dir", l.dir)
			l.missingLogged = true
		}
		return nil, nil
	}
	return nil, fmt.Errorf("read hook directory %s (check its permissions): %w", l.dir, err)
}

// refuseDir reports whether someone other than root could have written the directory, and logs it
// once until its owner or mode changes.
func (l *Loader) refuseDir(logger klog.Logger, fi fs.FileInfo) bool {
	problem := trustProblem(fi, readOnlyFS(l.dir))
	if problem == "" {
		if l.refusedDir != nil {
			logger.Info("Hook directory trusted again; reading its files", "dir", l.dir)
		}
		l.refusedDir = nil
		return false
	}
	r := refusalOf(fi, problem, false)
	if l.refusedDir == nil || *l.refusedDir != r {
		uid, mode := ownerMode(fi)
		logger.Error(nil, "Hook directory refused: only root may register hook servers, so none is registered from it until root owns it and only root can write it (chown root, chmod go-w)",
			"dir", l.dir, "owner", uid, "mode", mode, "problem", problem)
	}
	l.refusedDir = &r
	return true
}

// readFile checks who could have written a file and parses it when its content changed. A rejected or
// refused version is logged once, not at every load.
func (l *Loader) readFile(logger klog.Logger, name, path string) {
	st := l.files[name]
	if st == nil {
		st = &fileState{}
		l.files[name] = st
	}
	data, fi, readOnly, err := readChecked(path)
	if err != nil {
		logger.Error(err, "Hook file unreadable; its previous version stays in force", "file", path)
		return
	}
	prev := st.refused
	if problem := trustProblem(fi, readOnly); problem != "" {
		r := refusalOf(fi, problem, true)
		if prev == nil || *prev != r {
			uid, mode := ownerMode(fi)
			logger.Error(nil, "Hook file refused: only root may register hook servers, so it registers none until root owns it and only root can write it (chown root, chmod go-w)",
				"file", path, "owner", uid, "mode", mode, "problem", problem)
		}
		// Nothing of an untrusted file is kept: once trusted, it is read afresh.
		*st = fileState{refused: &r}
		return
	}
	st.refused = nil
	if !st.read || !bytes.Equal(st.raw, data) {
		st.raw, st.read = data, true
		if s, err := parseFile(name, data); err != nil {
			if st.parsed != nil {
				logger.Error(err, "Hook file rejected; its previous version stays in force", "file", path, "hook", st.parsed.name)
			} else {
				logger.Error(err, "Hook file rejected; it registers no hook until it is fixed", "file", path)
			}
		} else {
			st.parsed = s
		}
	}
	if st.parsed == nil {
		return
	}
	// Checked at every load: the socket's directory may change while the file does not.
	if problem := socketDirProblem(st.parsed.path); problem != "" {
		r := refusalOf(fi, problem, true)
		if prev == nil || *prev != r {
			logger.Error(nil, "Hook file refused: others could create its hook server's socket; chmod go-w that directory or move the socket to one only root can write",
				"file", path, "endpoint", st.parsed.endpoint, "problem", problem)
		}
		st.refused = &r
	}
}

// resolve picks the version of each file in force and gives Koordinator files their order. Files are
// taken by name; a file whose name or order another file (earlier by name) or a built-in hook already
// has falls back to its previous version, or is left out.
func (l *Loader) resolve(logger klog.Logger) []*spec {
	taken := map[string]string{}
	for k, v := range l.reserved {
		taken[k] = "built-in hook " + v
	}
	koordinatorIndex := 0
	var out []*spec
	for _, file := range slices.Sorted(maps.Keys(l.files)) {
		st := l.files[file]
		var order int
		if st.parsed != nil && st.parsed.koordinator {
			// Each Koordinator file keeps its place whether or not the files around it are valid.
			order = koordinatorOrderBase + koordinatorIndex
			koordinatorIndex++
		}
		if st.refused != nil {
			// Logged when it was refused; a refused file has no version in force.
			st.accepted, st.clash = nil, ""
			continue
		}
		var pick *spec
		clash := ""
		for _, cand := range []*spec{st.parsed, st.accepted} {
			if cand == nil {
				continue
			}
			c := *cand
			if c.koordinator {
				c.order = order
			}
			if by, ok := taken["name:"+c.name]; ok {
				clash = fmt.Sprintf("hook name %q is already used by %s", c.name, by)
				continue
			}
			if by, ok := taken[fmt.Sprintf("order:%d", c.order)]; ok {
				clash = fmt.Sprintf("order %d is already used by %s", c.order, by)
				continue
			}
			pick = &c
			break
		}
		path := filepath.Join(l.dir, file)
		if clash != "" && clash != st.clash {
			logger.Error(nil, "Hook file rejected: give it a name and an order of its own", "file", path, "problem", clash,
				"previousVersionInForce", pick != nil)
		}
		st.clash = clash
		if !pick.equal(st.accepted) {
			switch {
			case pick == nil:
				logger.Info("Hook file left out", "file", path)
			case pick.koordinator:
				logger.Info("Hook server registered from a Koordinator hook file", "file", path, "hook", pick.name, "endpoint", pick.endpoint,
					"stages", pick.stages, "failurePolicy", pick.policy, "timeout", pick.timeout, "order", pick.order)
			default:
				logger.Info("Hook server registered", "file", path, "hook", pick.name, "endpoint", pick.endpoint,
					"stages", pick.stages, "failurePolicy", pick.policy, "timeout", pick.timeout, "order", pick.order)
			}
		}
		st.accepted = pick
		if pick == nil {
			continue
		}
		taken["name:"+pick.name] = "hooks.d file " + file
		taken[fmt.Sprintf("order:%d", pick.order)] = "hooks.d file " + file
		out = append(out, pick)
	}
	slices.SortFunc(out, func(a, b *spec) int { return a.order - b.order })
	return out
}

// Prune closes the connections of endpoints the last Load did not return. Call it once that load's
// registrations are in force, so no hook in use loses its connection.
func (l *Loader) Prune(ctx context.Context) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for path, c := range l.conns {
		if l.inUse[path] {
			continue
		}
		delete(l.conns, path)
		if err := c.Close(); err != nil {
			klog.FromContext(ctx).Error(err, "Closing the connection to a hook server", "endpoint", c.endpoint)
		}
	}
}

// Close closes every connection. Hooks the loader returned fail from then on.
func (l *Loader) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var errs []error
	for path, c := range l.conns {
		delete(l.conns, path)
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}
