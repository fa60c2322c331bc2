// Package cluster runs a real Kubernetes cluster on this machine whose nodes run Tandem as
// docs/install.md installs it: etcd from Debian, kube-apiserver, kube-controller-manager,
// kube-scheduler and kubelet built from k8s.io/kubernetes, containerd with a CNI bridge, two host
// nodes whose kubelets talk to containerd through tandem-proxy (or to containerd with tandem-nri as
// its NRI plugin), and, when asked, a VM node: a qemu virtual machine with its own kernel, cgroup v2
// and systemd, joined by kubeadm (vm.go). Everything lives below one private directory, so that
// Down can remove every process, mount, cgroup and network device the cluster made.
//
// It lives in its own Go module so that Tandem's go.mod never pulls in
// k8s.io/kubernetes. cmd/cluster drives it from the command line (make
// cluster-up, cluster-down); the tier-2 tests use the same code.
package cluster
