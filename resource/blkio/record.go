package blkio

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"syscall"

	"github.com/tandemkit/tandem/internal/durable"
)

// recordVersion is the record's format; a record of another version is refused, not guessed at.
const recordVersion = 1

// record holds, per "file device" (io.max 254:0), the value the line had before Tandem's first write.
type record struct {
	Version int `json:"version"`
	// Dir is the BE parent the lines belong to.
	Dir   string            `json:"dir"`
	Lines map[string]string `json:"lines"`
}

func (r record) clone() record {
	return record{Version: r.Version, Dir: r.Dir, Lines: maps.Clone(r.Lines)}
}

// loadRecord reads the record at path; none is an empty record.
func loadRecord(path string) (record, error) {
	empty := record{Version: recordVersion, Lines: map[string]string{}}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		return empty, nil
	}
	if err != nil {
		return record{}, fmt.Errorf("read the record of the BE parent's original block I/O limits %s: %w", path, err)
	}
	var r record
	if err := json.Unmarshal(b, &r); err != nil || r.Version != recordVersion {
		if err == nil {
			err = fmt.Errorf("version %d, want %d", r.Version, recordVersion)
		}
		return record{}, fmt.Errorf("the record of the BE parent's original block I/O limits %s is unreadable (%w): it holds the lines "+
			"the BE parent had before Tandem wrote its own; put them back by hand from it, then remove it", path, err)
	}
	if r.Lines == nil {
		r.Lines = map[string]string{}
	}
	return r, nil
}

// saveRecord replaces the record at path with r, synced to disk before it returns; an empty record
// removes the file.
func saveRecord(path string, r record) error {
	if err := durable.SaveJSON(path, r, len(r.Lines) == 0); err != nil {
		return fmt.Errorf("save the record of the BE parent's original block I/O limits: %w", err)
	}
	return nil
}
