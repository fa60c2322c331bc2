package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
	"k8s.io/klog/v2"

	"github.com/tandemkit/tandem/config/slo"
	"github.com/tandemkit/tandem/hooks/policy"
)

// loadPolicies reads an slo-controller-config (seed 004's ConfigMap, or a file of its sections),
// validates it, resolves it for this node and maps it onto the built-in policies.
func loadPolicies(path string, nodeLabels map[string]string, base policy.Config) (policy.Config, slo.Resolved, []string, error) {
	fail := func(err error) (policy.Config, slo.Resolved, []string, error) {
		return base, slo.Resolved{}, nil, fmt.Errorf("--slo-config %s: %w", path, err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return fail(err)
	}
	cfg, err := slo.ParseFile(raw)
	if err != nil {
		return fail(err)
	}
	if err := cfg.Validate(); err != nil {
		return fail(err)
	}
	r, err := cfg.ForNode(nodeLabels)
	if err != nil {
		return fail(err)
	}
	out := policy.FromSLO(base, r)
	if err := out.Validate(); err != nil {
		return fail(err)
	}
	warnings := cfg.Warnings()
	for _, m := range r.Matches {
		if m.Applied != "" {
			warnings = append(warnings, fmt.Sprintf("%s: node strategy %q applies to this node", m.Section, m.Applied))
		}
		for _, ign := range m.Ignored {
			warnings = append(warnings, fmt.Sprintf("%s: node strategy %q also matches this node and is ignored: the first match wins", m.Section, ign))
		}
	}
	return out, r, warnings, nil
}

// watchSLO reloads the policies when the file changes. The directory is watched, not the file: a mounted
// ConfigMap is replaced by swapping a symlink. A file that does not load keeps the policies in force.
func watchSLO(ctx context.Context, path string, reload func(context.Context) error) {
	logger := klog.FromContext(ctx).WithValues("sloConfig", path)
	w, err := fsnotify.NewWatcher()
	if err != nil {
		logger.Error(err, "slo-config not watched; changes need a restart")
		return
	}
	defer w.Close()
	if err := w.Add(filepath.Dir(path)); err != nil {
		logger.Error(err, "slo-config not watched; changes need a restart")
		return
	}
	var debounce <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case err := <-w.Errors:
			logger.Error(err, "Watching slo-config")
		case <-w.Events:
			// Editors and kubelet write in several steps; reload once they are done.
			debounce = time.After(200 * time.Millisecond)
		case <-debounce:
			if err := reload(ctx); err != nil {
				logger.Error(err, "slo-config rejected; the policies in force stay")
				continue
			}
			logger.Info("Policies reloaded from slo-config")
		}
	}
}
