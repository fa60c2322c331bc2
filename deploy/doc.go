// Package deploy holds the files that install Tandem. The cluster-side
// manifests are tied together by kustomization.yaml (Koordinator's namespace
// and PriorityClasses, the Role that lets nodes read their configuration,
// tandem-extender, tandem-webhook and the ClusterColocationProfile CRD);
// slo-controller-config.yaml is an example configuration applied on its own.
// The node-side files (the systemd unit for tandem-proxy,
// kubelet's systemd drop-in and its KubeletConfiguration drop-in) are embedded
// in this package, so that `tandemctl node install` carries them. Its tests
// decode every manifest strictly; the tier-2 e2e tests (e2e/cluster) apply
// them to a real cluster and run kubelet and the proxy with the node-side
// files.
package deploy
