package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

func TestCopyExecutable(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	content := bytes.Repeat([]byte("\x7fELF floor "), 10000)
	if err := os.WriteFile(src, content, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		src     string // the benchmark's executable when empty
		dst     string
		wantErr bool
	}{
		{name: "fresh file", dst: filepath.Join(dir, "floor-proxy")},
		// A leftover copy is never overwritten: the run's directory is new, so one would mean a second
		// floor started in the same place.
		{name: "existing file", dst: src, wantErr: true},
		{name: "missing directory", dst: filepath.Join(dir, "nope", "floor-proxy"), wantErr: true},
		{name: "source missing", src: filepath.Join(dir, "absent"), dst: filepath.Join(dir, "copy-of-nothing"), wantErr: true},
		// Opening a directory succeeds and reading it fails: the copy is created, then removed.
		{name: "source unreadable", src: dir, dst: filepath.Join(dir, "half-copy"), wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			from := tc.src
			if from == "" {
				from = src
			}
			err := copyExecutable(from, tc.dst)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("copyExecutable(%s) = nil, want an error", tc.dst)
				}
				if tc.dst == src {
					// The file already there is left as it was.
					if got, rerr := os.ReadFile(src); rerr != nil || !bytes.Equal(got, content) {
						t.Errorf("a refused copy changed %s (%d bytes, read error %v)", src, len(got), rerr)
					}
				} else if _, serr := os.Stat(tc.dst); !os.IsNotExist(serr) {
					t.Errorf("a failed copy left %s behind (stat: %v)", tc.dst, serr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(tc.dst)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, content) {
				t.Errorf("copy has %d bytes, want the %d of the source", len(got), len(content))
			}
			fi, err := os.Stat(tc.dst)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode().Perm()&0o100 == 0 {
				t.Errorf("copy's mode %v is not executable", fi.Mode())
			}
			srcInfo, _ := os.Stat(src)
			if os.SameFile(fi, srcInfo) {
				t.Error("copy is the source file itself, want a file of its own")
			}
		})
	}
}
