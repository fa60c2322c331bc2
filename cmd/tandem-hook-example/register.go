package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/tandemkit/tandem/hooks/remote"
)

const hookName = "tandem-hook-example"

// register writes the hooks.d file that tells tandem-proxy about this server and returns its path.
// tandem-proxy watches the directory, so the hook is in force within a moment, without a restart.
func register(dir, socket string, order int, policy string) (string, error) {
	abs, err := filepath.Abs(socket)
	if err != nil {
		return "", err
	}
	cfg := remote.FileConfig{
		Name:     hookName,
		Endpoint: "unix://" + abs,
		// PreUpdateContainerResources too: kubelet's updates would otherwise undo the changes.
		Stages:        []string{"PreCreateContainer", "PreUpdateContainerResources"},
		FailurePolicy: policy,
		Timeout:       "1s",
		Order:         &order,
	}
	data, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return "", err
	}
	// Written beside the target under a name tandem-proxy skips (a leading dot), then renamed, so
	// tandem-proxy never reads half a file.
	path := filepath.Join(dir, hookName+".json")
	tmp := filepath.Join(dir, "."+hookName+".json.tmp")
	if err := os.WriteFile(tmp, append(data, '\n'), 0o644); err != nil {
		return "", fmt.Errorf("register in %s (does the directory exist, and may this user write it?): %w", dir, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return "", fmt.Errorf("register in %s: %w", dir, err)
	}
	return path, nil
}
