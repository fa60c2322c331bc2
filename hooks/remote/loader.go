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
	last          []*spec // the specs of the last load, in order
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

	entries, err := os.ReadDir(l.dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		// Once: a node without hook servers need not have the directory. Its removal later is logged
		// by the Watcher.
		if !l.missingLogged {
			logger.Info("Hook directory does not exist; no hook servers until it is created", "dir", l.dir)
			l.missingLogged = true
		}
		entries = nil
	case err != nil:
		return nil, false, fmt.Errorf("read hook directory %s (check its permissions): %w", l.dir, err)
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
			if st.accepted != nil {
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

// readFile parses a file whose content changed. A rejected version is logged once, not at every load.
func (l *Loader) readFile(logger klog.Logger, name, path string) {
	st := l.files[name]
	if st == nil {
		st = &fileState{}
		l.files[name] = st
	}
	data, err := os.ReadFile(path)
	if err != nil {
		logger.Error(err, "Hook file unreadable; its previous version stays in force", "file", path)
		return
	}
	if st.read && bytes.Equal(st.raw, data) {
		return
	}
	st.raw, st.read = data, true
	s, err := parseFile(name, data)
	if err != nil {
		if st.parsed != nil {
			logger.Error(err, "Hook file rejected; its previous version stays in force", "file", path, "hook", st.parsed.name)
		} else {
			logger.Error(err, "Hook file rejected; it registers no hook until it is fixed", "file", path)
		}
		return
	}
	st.parsed = s
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
