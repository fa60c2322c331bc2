// Package deploy holds the files that install Tandem: the cluster-side
// manifests tied together by kustomization.yaml (PriorityClasses, the node
// agent's Namespace, ServiceAccount and RBAC), and the node-side systemd unit
// for tandem-proxy, kubelet's systemd drop-in and its KubeletConfiguration
// drop-in. Its tests decode every manifest strictly; the tier-2 e2e tests
// (e2e/cluster) apply them to a real cluster and run kubelet and the proxy
// with the node-side files.
package deploy
