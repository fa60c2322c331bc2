// Package e2e holds Tandem's end-to-end tests: they run tandem-proxy in front
// of a private, real containerd (1.6 and 2.x) with runc and drive it with
// k8s.io/cri-client, the client kubelet uses. The tests carry the e2e build
// tag, need root, and are described in docs/e2e.md.
package e2e
