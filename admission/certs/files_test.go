package certs

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tandemkit/tandem/internal/polltest"
)

// pair makes a serving certificate and key as cert-manager would put them in its Secret.
func pair(t *testing.T) (certPEM, keyPEM []byte) {
	t.Helper()
	now := time.Now()
	ca, caKey, err := newCA("cert-manager", 24*time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	c, k, err := newServing(ca, caKey, Config{ServiceName: testSvc, Namespace: testNS}.dnsNames(), time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	return c, k
}

// secretVolume lays out files as kubelet does for a Secret volume: each path is a symlink through
// ..data, a symlink to a timestamped directory, and an update swaps ..data to a new directory.
type secretVolume struct {
	t   *testing.T
	dir string
	gen int
}

func newSecretVolume(t *testing.T, cert, key []byte) *secretVolume {
	v := &secretVolume{t: t, dir: t.TempDir()}
	v.write(cert, key)
	for _, name := range []string{"tls.crt", "tls.key"} {
		if err := os.Symlink(filepath.Join("..data", name), filepath.Join(v.dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return v
}

func (v *secretVolume) write(cert, key []byte) {
	v.gen++
	ts := fmt.Sprintf("..2030_01_01_00_00_%02d.%d", v.gen, v.gen)
	if err := os.Mkdir(filepath.Join(v.dir, ts), 0o755); err != nil {
		v.t.Fatal(err)
	}
	for name, b := range map[string][]byte{"tls.crt": cert, "tls.key": key} {
		if err := os.WriteFile(filepath.Join(v.dir, ts, name), b, 0o600); err != nil {
			v.t.Fatal(err)
		}
	}
	tmp := filepath.Join(v.dir, "..data_tmp")
	if err := os.Symlink(ts, tmp); err != nil {
		v.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(v.dir, "..data")); err != nil {
		v.t.Fatal(err)
	}
}

func (v *secretVolume) paths() (cert, key string) {
	return filepath.Join(v.dir, "tls.crt"), filepath.Join(v.dir, "tls.key")
}

func TestFilesReload(t *testing.T) {
	t.Parallel()
	ctx, logs := bufferedContext(t)
	certA, keyA := pair(t)
	v := newSecretVolume(t, certA, keyA)
	cert, key := v.paths()
	f, err := NewFiles(cert, key, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !f.Ready() || !servedLeaf(t, f).Equal(leafOf(t, certA)) {
		t.Fatal("NewFiles does not serve the files' certificate")
	}

	certB, keyB := pair(t)
	steps := []struct {
		name       string
		cert, key  []byte
		want       []byte // the certificate served after the poll
		wantErrLog int    // lines saying a pair does not load, so far
	}{
		{"unchanged", nil, nil, certA, 0},
		{"renewed", certB, keyB, certB, 0},
		{"certificate and key do not match", certA, keyB, certB, 1},
		{"still the same bad pair: not logged again", nil, nil, certB, 1},
		{"garbage", []byte("garbage"), []byte("garbage"), certB, 2},
		{"fixed", certA, keyA, certA, 2},
	}
	for _, st := range steps {
		if st.cert != nil {
			v.write(st.cert, st.key)
		}
		f.reload(ctx)
		if !servedLeaf(t, f).Equal(leafOf(t, st.want)) {
			t.Errorf("%s: serves another certificate than expected", st.name)
		}
		if n := strings.Count(logs.String(), "do not load"); n != st.wantErrLog {
			t.Errorf("%s: %d lines say the pair does not load, want %d", st.name, n, st.wantErrLog)
		}
	}
}

func TestNewFilesErrors(t *testing.T) {
	t.Parallel()
	certA, keyA := pair(t)
	_, keyB := pair(t)
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	certPath, keyPath, otherKey := write("a.crt", certA), write("a.key", keyA), write("b.key", keyB)
	tests := []struct {
		name      string
		cert, key string
		interval  time.Duration
	}{
		{"missing certificate", filepath.Join(dir, "none.crt"), keyPath, 0},
		{"missing key", certPath, filepath.Join(dir, "none.key"), 0},
		{"key of another certificate", certPath, otherKey, 0},
		{"negative interval", certPath, keyPath, -time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if _, err := NewFiles(tt.cert, tt.key, tt.interval); err == nil {
				t.Fatal("no error")
			}
		})
	}
}

func TestFilesRun(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(testContext(t))
	defer cancel()
	certA, keyA := pair(t)
	v := newSecretVolume(t, certA, keyA)
	cert, key := v.paths()
	f, err := NewFiles(cert, key, 5*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	if err := RegisterMetrics(reg, f); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()

	certB, keyB := pair(t)
	v.write(certB, keyB)
	b := leafOf(t, certB)
	polltest.Until(t, "the new certificate", func() bool {
		c, err := f.GetCertificate(nil)
		return err == nil && c.Leaf.Equal(b)
	})
	if got := gaugeValue(t, reg); got != float64(b.NotAfter.Unix()) {
		t.Errorf("expiration metric %v, want %v", got, b.NotAfter.Unix())
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
}
