package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"google.golang.org/protobuf/proto"
	"k8s.io/klog/v2/ktesting"

	"github.com/tandemkit/tandem/hooks"
	"github.com/tandemkit/tandem/hooks/remote"
	"github.com/tandemkit/tandem/hooks/remote/v1alpha1"
	"github.com/tandemkit/tandem/internal/polltest"
)

func TestDecide(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		annotations map[string]string
		want        *v1alpha1.LinuxContainerResources
		wantErr     string
	}{
		{name: "no annotations", annotations: map[string]string{"other": "1"}},
		{name: "shares", annotations: map[string]string{annotationCPUShares: "512"}, want: &v1alpha1.LinuxContainerResources{CpuShares: 512}},
		{name: "cpuset", annotations: map[string]string{annotationCPUSet: "0-1,3"}, want: &v1alpha1.LinuxContainerResources{CpusetCpus: "0-1,3"}},
		{name: "both, with spaces", annotations: map[string]string{annotationCPUShares: " 2 ", annotationCPUSet: " 1 "},
			want: &v1alpha1.LinuxContainerResources{CpuShares: 2, CpusetCpus: "1"}},
		{name: "shares not a number", annotations: map[string]string{annotationCPUShares: "lots"}, wantErr: "example.tandem.io/cpu-shares"},
		{name: "shares below the kernel's range", annotations: map[string]string{annotationCPUShares: "1"}, wantErr: "from 2 to 262144"},
		{name: "shares above the kernel's range", annotations: map[string]string{annotationCPUShares: "262145"}, wantErr: "from 2 to 262144"},
		{name: "cpuset empty", annotations: map[string]string{annotationCPUSet: ""}, wantErr: "example.tandem.io/cpuset"},
		{name: "cpuset backwards range", annotations: map[string]string{annotationCPUSet: "3-1"}, wantErr: `"3-1"`},
		{name: "cpuset junk", annotations: map[string]string{annotationCPUSet: "0,a"}, wantErr: `"a"`},
		{name: "cpuset trailing comma", annotations: map[string]string{annotationCPUSet: "0,"}, wantErr: "cpu list"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := decide(tt.annotations)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one mentioning %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(got, tt.want) {
				t.Errorf("decide = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestRun runs the server as its users do: it registers itself in a hooks.d directory, tandem-proxy's
// loader picks the file up, and container creations through the dispatcher get the annotated resources.
// On shutdown the registration file goes away.
func TestRun(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	dir := t.TempDir()
	sock := filepath.Join(dir, "ex.sock")
	hooksDir := filepath.Join(dir, "hooks.d")
	if err := os.Mkdir(hooksDir, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--listen", sock, "--hooks-dir", hooksDir, "--failure-policy", "Fail", "--order", "4200"})
	}()
	regFile := filepath.Join(hooksDir, hookName+".json")
	polltest.Until(t, "the registration file", func() bool { _, err := os.Stat(regFile); return err == nil })

	data, err := os.ReadFile(regFile)
	if err != nil {
		t.Fatal(err)
	}
	var cfg remote.FileConfig
	if err := json.Unmarshal(data, &cfg); err != nil {
		t.Fatalf("registration file %s: %v", data, err)
	}
	if cfg.Endpoint != "unix://"+sock || cfg.Order == nil || *cfg.Order != 4200 || cfg.FailurePolicy != "Fail" {
		t.Errorf("registration file = %s, want endpoint unix://%s, order 4200, Fail", data, sock)
	}

	loader := remote.NewLoader(remote.LoaderConfig{Dir: hooksDir})
	defer func() { _ = loader.Close() }()
	regs, err := loader.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(regs) != 1 || regs[0].Name != hookName {
		t.Fatalf("loader found %+v, want the %s hook", regs, hookName)
	}
	d, err := hooks.NewDispatcher(ctx, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.SetRemote(ctx, regs); err != nil {
		t.Fatal(err)
	}

	ctr := &hooks.ContainerInfo{ID: "c1", Name: "app", Resources: &hooks.Resources{CPUShares: 102, CpusetCpus: "0-1"}}
	tests := []struct {
		name        string
		stage       hooks.Stage
		annotations map[string]string
		want        *hooks.ResourceAdjustment
		wantErr     func(error) bool
	}{
		{name: "create with both annotations", stage: hooks.PreCreateContainer,
			annotations: map[string]string{annotationCPUShares: "512", annotationCPUSet: "1"},
			want:        &hooks.ResourceAdjustment{CPUShares: hooks.Int64(512), CpusetCpus: hooks.String("1")}},
		{name: "update keeps the shares", stage: hooks.PreUpdateContainerResources,
			annotations: map[string]string{annotationCPUShares: "512"},
			want:        &hooks.ResourceAdjustment{CPUShares: hooks.Int64(512)}},
		{name: "no annotations, no change", stage: hooks.PreCreateContainer},
		{name: "bad annotation fails the creation", stage: hooks.PreCreateContainer,
			annotations: map[string]string{annotationCPUShares: "0"}, wantErr: errdefs.IsInvalidArgument},
		{name: "not registered for start", stage: hooks.PreStartContainer, annotations: map[string]string{annotationCPUShares: "512"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := &hooks.PodInfo{Name: "web", Namespace: "default", UID: "u1", Annotations: tt.annotations}
			adj, err := d.Run(ctx, tt.stage, pod, ctr)
			if tt.wantErr != nil {
				if !tt.wantErr(err) || !strings.Contains(err.Error(), annotationCPUShares) {
					t.Fatalf("err = %v, want an invalid-argument error naming the annotation", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got *hooks.ResourceAdjustment
			if adj != nil {
				got = adj.Resources
			}
			if g, w := jsonOf(got), jsonOf(tt.want); g != w {
				t.Errorf("resources = %s, want %s", g, w)
			}
		})
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("run did not return after its context was cancelled")
	}
	if _, err := os.Stat(regFile); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("registration file still there after shutdown (stat: %v)", err)
	}
}

func jsonOf(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(err)
	}
	return string(b)
}
