package agent

import "testing"

func TestKubeletCgroupRoot(t *testing.T) {
	t.Parallel()
	tests := []struct{ beParent, want string }{
		{"/kubepods/besteffort", "/"},
		{"/node-a/kubepods/besteffort", "/node-a"},
		{"kubepods/besteffort", "/"},
		{"/a/b/kubepods/besteffort/", "/a/b"},
	}
	for _, tt := range tests {
		if got := kubeletCgroupRoot(tt.beParent); got != tt.want {
			t.Errorf("kubeletCgroupRoot(%q) = %q, want %q", tt.beParent, got, tt.want)
		}
	}
}
