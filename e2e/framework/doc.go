// Package framework runs the real pieces that Tandem's end-to-end tests and
// demo need: a private containerd (Debian's 1.6 or v2.4.2 built from source)
// with runc, a locally built test image, and a tandem-proxy in front of it,
// plus helpers that drive them through k8s.io/cri-client exactly as kubelet
// does.
//
// Everything a Containerd or Proxy creates lives under the directory it is
// given, so several instances (and a system containerd) never collide, and
// Stop leaves no process, mount or cgroup behind.
package framework
