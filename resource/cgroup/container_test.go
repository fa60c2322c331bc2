package cgroup

import (
	"slices"
	"testing"
)

func TestContainerPaths(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, parent string
		want         []string
	}{
		{"no parent: containerd's default", "", []string{"/k8s.io/c1", "/system.slice/cri-containerd-c1.scope"}},
		{"cgroupfs parent", "/kubepods/besteffort/pod1", []string{"/kubepods/besteffort/pod1/c1", "/kubepods/besteffort/pod1/cri-containerd-c1.scope"}},
		{"systemd slice", "kubepods-besteffort-pod1_2.slice", []string{
			"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1_2.slice/cri-containerd-c1.scope",
			"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1_2.slice/c1",
		}},
		{"guaranteed systemd slice", "kubepods-pod9.slice", []string{"/kubepods.slice/kubepods-pod9.slice/cri-containerd-c1.scope", "/kubepods.slice/kubepods-pod9.slice/c1"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := ContainerPaths(tc.parent, "c1"); !slices.Equal(got, tc.want) {
				t.Fatalf("ContainerPaths(%q) = %q, want %q", tc.parent, got, tc.want)
			}
		})
	}
}
