package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"

	"github.com/tandemkit/tandem/hooks"
	"github.com/tandemkit/tandem/hooks/policy"
	"github.com/tandemkit/tandem/proxy/store"
)

func TestLoadPolicies(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte(`resource-threshold-config: '{"clusterStrategy": {"cpuSuppressThresholdPercent": 120}}'`), 0o600); err != nil {
		t.Fatal(err)
	}
	typo := filepath.Join(dir, "typo.yaml")
	if err := os.WriteFile(typo, []byte(`cpu-burst-config: '{"clusterStrategy": {"cpuBurstPercnt": 200}}'`), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, path, wantErr string
	}{
		{name: "seed 004 as the operator runs it", path: "../../config/slo/testdata/seed004.yaml"},
		{name: "out-of-range value names its key", path: bad, wantErr: "cpuSuppressThresholdPercent"},
		{name: "typo names its key", path: typo, wantErr: "cpuBurstPercnt"},
		{name: "missing file", path: filepath.Join(dir, "nope.yaml"), wantErr: "nope.yaml"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, _, _, err := loadPolicies(tt.path, map[string]string{"kubernetes.io/kernel": "anolis"}, policy.DefaultConfig())
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("loadPolicies = %v, want an error naming %q", err, tt.wantErr)
			}
		})
	}
}

func TestWatchSLOReloadsOnChange(t *testing.T) {
	t.Parallel()
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	path := filepath.Join(t.TempDir(), "slo.yaml")
	if err := os.WriteFile(path, []byte("cpu-burst-config: '{}'\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var reloads atomic.Int32
	go watchSLO(ctx, path, func(context.Context) error { reloads.Add(1); return nil })
	time.Sleep(100 * time.Millisecond) // let the watch start
	if err := os.WriteFile(path, []byte(`cpu-burst-config: '{"clusterStrategy": {"policy": "auto"}}'`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for reloads.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no reload after the file changed")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestPodMeta(t *testing.T) {
	t.Parallel()
	st := store.New()
	st.PutPod(&store.Pod{ID: "sb1", UID: "u1"})
	st.PutContainer(&store.Container{ID: "c1", PodSandboxID: "sb1", Resources: &hooks.Resources{CPUShares: 1024}})
	st.PutContainer(&store.Container{ID: "c2", PodSandboxID: "sb1", Resources: &hooks.Resources{CPUShares: 512}})
	meta := podMeta(st)
	m, ok := meta("u1")
	if !ok || m.SandboxID != "sb1" || m.CPURequestMilli != 1500 {
		t.Fatalf("podMeta(u1) = %+v, %v; want sandbox sb1 and 1500m", m, ok)
	}
	// A change to the store is seen by the next question.
	st.RemoveContainer("c2")
	if m, _ := meta("u1"); m.CPURequestMilli != 1000 {
		t.Fatalf("after removing c2: %dm, want 1000m", m.CPURequestMilli)
	}
	if _, ok := meta("unknown"); ok {
		t.Fatal("an unknown pod was found")
	}
}
