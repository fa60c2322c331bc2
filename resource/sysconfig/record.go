package sysconfig

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"

	"github.com/tandemkit/tandem/internal/durable"
)

// recordVersion is the record's format; a record of another version is refused, not guessed at.
const recordVersion = 1

// record is what Tandem must put back: per file (its full path), the value it held before Tandem's first
// write and the values Tandem wrote since.
type record struct {
	Version int               `json:"version"`
	Files   map[string]*entry `json:"files"`
}

type entry struct {
	// Original is the value to restore.
	Original string `json:"original"`
	// Wrote lists the last two values Tandem wrote (one after the first write). The file holds the last,
	// or the one before it if the agent died between saving the record and writing; a file holding
	// either holds Tandem's value.
	Wrote []string `json:"wrote"`
}

func (r record) clone() record {
	c := record{Version: r.Version, Files: make(map[string]*entry, len(r.Files))}
	for f, e := range r.Files {
		c.Files[f] = &entry{Original: e.Original, Wrote: append([]string(nil), e.Wrote...)}
	}
	return c
}

// loadRecord reads the record at path; none is an empty record.
func loadRecord(path string) (record, error) {
	empty := record{Version: recordVersion, Files: map[string]*entry{}}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		// No record (where the state directory cannot even exist, saving will say so).
		return empty, nil
	}
	if err != nil {
		return record{}, fmt.Errorf("read the record of original system settings %s: %w", path, err)
	}
	var r record
	if err := json.Unmarshal(b, &r); err != nil || r.Version != recordVersion {
		if err == nil {
			err = fmt.Errorf("version %d, want %d", r.Version, recordVersion)
		}
		return record{}, fmt.Errorf("the record of original system settings %s is unreadable (%w): it holds the values the node "+
			"had before Tandem wrote its own; restore them by hand from it, then remove it", path, err)
	}
	if r.Files == nil {
		r.Files = map[string]*entry{}
	}
	for f, e := range r.Files {
		if e == nil {
			delete(r.Files, f)
		}
	}
	return r, nil
}

// saveRecord replaces the record at path with r, synced to disk (file and directory) before it returns;
// an empty record removes the file.
func saveRecord(path string, r record) error {
	if err := durable.SaveJSON(path, r, len(r.Files) == 0); err != nil {
		return fmt.Errorf("save the record of original system settings: %w", err)
	}
	return nil
}
