package store

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/containerd/errdefs"

	"github.com/tandemkit/tandem/internal/durable"
)

// checkpointVersion is bumped when the on-disk format changes incompatibly.
const checkpointVersion = 1

// CheckpointFile is the checkpoint's name inside the state directory.
const CheckpointFile = "store.json"

// ErrCorrupt marks a checkpoint that exists but cannot be trusted. It wraps errdefs.ErrDataLoss.
var ErrCorrupt = fmt.Errorf("checkpoint corrupt: %w", errdefs.ErrDataLoss)

type checkpointFile struct {
	Version int `json:"version"`
	// Checksum is the SHA-256 of Data, so a torn or hand-edited file is detected rather than half-trusted.
	Checksum string          `json:"checksum"`
	Data     json.RawMessage `json:"data"`
}

// Checkpoint persists snapshots atomically: write a temporary file, fsync it, rename it over the old one
// and fsync the directory, so a crash at any point leaves either the old or the new checkpoint whole.
//
// Saves are group-committed: callers that ask while a write is in flight share the next write, whose
// snapshot is taken after they asked. Kubelet starting many pods at once then waits for at most two
// fsyncs per call instead of queueing behind one fsync per call.
type Checkpoint struct {
	path string

	mu        sync.Mutex
	cond      *sync.Cond
	requested uint64 // saves asked for
	done      uint64 // the newest request a finished write covered
	writing   bool
	lastErr   error
}

// NewCheckpoint returns a checkpoint in dir, creating dir if needed. Temporary files that a write
// killed between creating and renaming them left behind are removed.
func NewCheckpoint(dir string) (*Checkpoint, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create state dir %s (set --state-dir to a writable directory): %w", dir, err)
	}
	c := &Checkpoint{path: filepath.Join(dir, CheckpointFile)}
	c.cond = sync.NewCond(&c.mu)
	removeStaleTemps(c.path)
	return c, nil
}

// removeStaleTemps removes what writeAtomic left of earlier writes to path: nothing writes there before
// the Checkpoint that owns path exists. A file that cannot be removed costs disk space only, and the
// proxy must serve kubelet all the same, so failures are ignored.
func removeStaleTemps(path string) {
	stale, _ := filepath.Glob(path + durable.TempSuffix + "*")
	for _, f := range stale {
		_ = os.Remove(f)
	}
}

// Path is where the checkpoint lives.
func (c *Checkpoint) Path() string { return c.path }

// Save returns once a snapshot taken after the call began is on disk. snap is called by whichever caller
// performs the write.
func (c *Checkpoint) Save(snap func() *Snapshot) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.requested++
	mine := c.requested
	for c.done < mine {
		if c.writing {
			c.cond.Wait()
			continue
		}
		c.writing = true
		covers := c.requested
		c.mu.Unlock()
		err := c.write(snap())
		c.mu.Lock()
		c.writing = false
		c.done, c.lastErr = covers, err
		c.cond.Broadcast()
	}
	return c.lastErr
}

func (c *Checkpoint) write(snap *Snapshot) error {
	data, err := json.Marshal(persisted(snap))
	if err != nil {
		return fmt.Errorf("encode checkpoint: %w", err)
	}
	sum := sha256.Sum256(data)
	out, err := json.Marshal(checkpointFile{Version: checkpointVersion, Checksum: hex.EncodeToString(sum[:]), Data: data})
	if err != nil {
		return fmt.Errorf("encode checkpoint: %w", err)
	}
	if err := durable.WriteFile(c.path, out); err != nil {
		return fmt.Errorf("write checkpoint: %w", err)
	}
	return nil
}

// Load reads the checkpoint. A missing file returns an empty snapshot and no error; a file that fails
// to parse or whose checksum does not match returns an error wrapping ErrCorrupt.
func (c *Checkpoint) Load() (*Snapshot, error) {
	raw, err := os.ReadFile(c.path)
	if errors.Is(err, fs.ErrNotExist) {
		return &Snapshot{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read checkpoint %s: %w", c.path, err)
	}
	var f checkpointFile
	if err := json.Unmarshal(raw, &f); err != nil {
		return nil, fmt.Errorf("%s: %w: %w", c.path, err, ErrCorrupt)
	}
	if f.Version != checkpointVersion {
		return nil, fmt.Errorf("%s: version %d, want %d: %w", c.path, f.Version, checkpointVersion, ErrCorrupt)
	}
	sum := sha256.Sum256(f.Data)
	if hex.EncodeToString(sum[:]) != f.Checksum {
		return nil, fmt.Errorf("%s: checksum mismatch: %w", c.path, ErrCorrupt)
	}
	var snap Snapshot
	if err := json.Unmarshal(f.Data, &snap); err != nil {
		return nil, fmt.Errorf("%s: %w: %w", c.path, err, ErrCorrupt)
	}
	// Checkpoints written before the checkpoint kept only what Tandem reads hold every label and
	// annotation; the format is the same, so they load, and are cut down to what a new one holds.
	return persisted(&snap), nil
}

// SetAside renames a corrupt checkpoint out of the way, keeping it for inspection, and returns its new path.
func (c *Checkpoint) SetAside(now time.Time) (string, error) {
	dst := fmt.Sprintf("%s.corrupt-%s", c.path, now.UTC().Format("20060102T150405.000000000Z"))
	if err := os.Rename(c.path, dst); err != nil {
		return "", fmt.Errorf("set aside corrupt checkpoint %s: %w", c.path, err)
	}
	return dst, nil
}
