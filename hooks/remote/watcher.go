package remote

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
	"k8s.io/klog/v2"

	"github.com/tandemkit/tandem/hooks"
)

const (
	// debounce lets a burst of events (an editor's write, rename and chmod; a ConfigMap's link swap)
	// end before the directory is read, so it is read once, complete.
	debounce = 100 * time.Millisecond
	// retryMissing is how often a missing directory, or one whose parent is missing, is looked for.
	retryMissing = time.Second
)

// Watcher keeps the hook servers of a hooks.d directory in force: it loads the directory, hands the
// registrations to apply (tandem-proxy passes Dispatcher.SetRemote) and does so again after every
// change to the directory.
type Watcher struct {
	loader *Loader
	apply  func(context.Context, []hooks.Registration) error
	// lastWatchErr keeps a directory that cannot be watched from filling the log every retry.
	lastWatchErr string
}

// NewWatcher returns a watcher of loader's directory. Close the loader after Run returns.
func NewWatcher(loader *Loader, apply func(context.Context, []hooks.Registration) error) *Watcher {
	return &Watcher{loader: loader, apply: apply}
}

// Run applies the directory's registrations, then watches it until ctx is done. A directory that does not
// exist yet is waited for. Run returns an error only when it cannot watch at all.
func (w *Watcher) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch hook directory %s (raise fs.inotify.max_user_instances if it is exhausted): %w", w.loader.Dir(), err)
	}
	defer fw.Close()

	dir := w.loader.Dir()
	parent := filepath.Dir(dir)
	watchingDir := w.watchDir(ctx, fw)
	if !watchingDir {
		// The parent tells when the directory appears; the ticker covers a missing parent.
		_ = fw.Add(parent)
	}
	pending := !w.reload(ctx, true)

	retry := time.NewTicker(retryMissing)
	defer retry.Stop()
	timer := time.NewTimer(debounce)
	timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-fw.Events:
			if !ok {
				return nil
			}
			switch {
			case ev.Name == dir && ev.Has(fsnotify.Create):
				watchingDir = w.watchDir(ctx, fw)
			case ev.Name == dir && (ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename)):
				logger.Info("Hook directory removed; its hooks are removed until it is back", "dir", dir)
				watchingDir = false
				_ = fw.Remove(dir)
				_ = fw.Add(parent)
			case ev.Name == dir && ev.Has(fsnotify.Chmod):
				// The directory's owner or mode changed (inotify's IN_ATTRIB): who may register
				// may have changed with it.
			case filepath.Dir(ev.Name) != dir:
				continue
			}
			timer.Reset(debounce)
		case err, ok := <-fw.Errors:
			if !ok {
				return nil
			}
			// An overflow loses events; a reload reads everything anew.
			logger.Error(err, "Watching the hook directory", "dir", dir)
			timer.Reset(debounce)
		case <-retry.C:
			if !watchingDir {
				if watchingDir = w.watchDir(ctx, fw); watchingDir {
					timer.Reset(debounce)
				} else {
					_ = fw.Add(parent)
				}
			}
		case <-timer.C:
			pending = !w.reload(ctx, pending)
		}
	}
}

// watchDir starts watching the directory, if it exists.
func (w *Watcher) watchDir(ctx context.Context, fw *fsnotify.Watcher) bool {
	err := fw.Add(w.loader.Dir())
	if err == nil {
		return true
	}
	if !errors.Is(err, fs.ErrNotExist) && err.Error() != w.lastWatchErr {
		klog.FromContext(ctx).Error(err, "Cannot watch the hook directory; retrying", "dir", w.loader.Dir())
	}
	w.lastWatchErr = err.Error()
	return false
}

// reload loads the directory and applies it if it changed (or force is set). It reports whether the
// registrations in force are those of the directory; if not, the next change applies them whether or
// not it changes anything itself.
func (w *Watcher) reload(ctx context.Context, force bool) bool {
	logger := klog.FromContext(ctx)
	regs, changed, err := w.loader.load(ctx)
	if err != nil {
		logger.Error(err, "Hook directory not reloaded; the hooks in force stay")
		return false
	}
	if !changed && !force {
		return true
	}
	if err := w.apply(ctx, regs); err != nil {
		logger.Error(err, "Hook servers not updated; the hooks in force stay", "dir", w.loader.Dir())
		return false
	}
	w.loader.Prune(ctx)
	names := make([]string, 0, len(regs))
	for _, r := range regs {
		names = append(names, r.Name)
	}
	logger.Info("Hook servers in force", "dir", w.loader.Dir(), "hooks", names)
	return true
}
