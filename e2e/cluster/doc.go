// Package cluster runs a real single-node Kubernetes cluster whose kubelet
// talks to containerd through tandem-proxy: etcd from Debian, kube-apiserver,
// kube-controller-manager, kube-scheduler and kubelet built from
// k8s.io/kubernetes, containerd with a CNI bridge, everything below one
// private directory so that Down can remove every process, mount, cgroup and
// network device the cluster made.
//
// It lives in its own Go module so that Tandem's go.mod never pulls in
// k8s.io/kubernetes. cmd/cluster drives it from the command line (make
// cluster-up, cluster-down); the tier-2 tests use the same code.
package cluster
