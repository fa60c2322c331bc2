// Package extendertest has fixtures for the tests of tandem-extender and its package.
package extendertest

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tandemkit/tandem/metrics/nodemetric"
)

// Node returns node i of a busy cluster as kube-scheduler's node informer holds it, which is what
// kube-scheduler sends an extender without nodeCacheCapable: kubelet's status with the 50 images
// it reports at most (nodeStatusMaxImages), each by digest and tag, the managedFields of kubeadm,
// kube-controller-manager, kubelet and tandem-proxy (kube-scheduler trims them from pods only),
// and a node metric sampled 30 seconds before now with room for batch pods.
func Node(i int, now time.Time) corev1.Node {
	name := fmt.Sprintf("ip-10-%d-%d-%d.eu-west-1.compute.internal", i/65536, i/256%256, i%256)
	metric, err := json.Marshal(nodemetric.NodeMetric{
		UpdateTime: now.Add(-30 * time.Second), ReportIntervalSeconds: 60,
		NodeUsage:   nodemetric.Resources{CPUMilli: 2000, MemoryBytes: 8 << 30},
		HPUsage:     nodemetric.Resources{CPUMilli: 1500, MemoryBytes: 6 << 30},
		Reclaimable: nodemetric.Resources{CPUMilli: 3000, MemoryBytes: 8 << 30},
	})
	if err != nil {
		panic(err) // a struct of numbers and a time always marshals
	}
	at := metav1.NewTime(now.Add(-time.Minute))
	n := corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, UID: types.UID(fmt.Sprintf("4c8c6a7e-3d55-4d1e-9a5e-%012d", i)), ResourceVersion: strconv.Itoa(1000000 + i),
			CreationTimestamp: at,
			Labels: map[string]string{
				"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
				"beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": "amd64",
				"node.kubernetes.io/instance-type": "m6i.4xlarge", "topology.kubernetes.io/region": "eu-west-1",
				"topology.kubernetes.io/zone": "eu-west-1a", "node-role.kubernetes.io/worker": "",
			},
			Annotations: map[string]string{
				"kubeadm.alpha.kubernetes.io/cri-socket":                 "unix:///var/run/tandem/tandem.sock",
				"node.alpha.kubernetes.io/ttl":                           "0",
				"volumes.kubernetes.io/controller-managed-attach-detach": "true",
				nodemetric.AnnotationKey:                                 string(metric),
			},
			ManagedFields: []metav1.ManagedFieldsEntry{
				{Manager: "kubeadm", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", Time: &at, FieldsType: "FieldsV1",
					FieldsV1: metav1.NewFieldsV1(`{"f:metadata":{"f:annotations":{"f:kubeadm.alpha.kubernetes.io/cri-socket":{}},"f:labels":{"f:node-role.kubernetes.io/worker":{}}}}`)},
				{Manager: "kube-controller-manager", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", Time: &at, FieldsType: "FieldsV1",
					FieldsV1: metav1.NewFieldsV1(`{"f:metadata":{"f:annotations":{"f:node.alpha.kubernetes.io/ttl":{}}},"f:spec":{"f:podCIDR":{},"f:podCIDRs":{".":{},"v:\"10.244.1.0/24\"":{}}}}`)},
				{Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", Time: &at, FieldsType: "FieldsV1",
					FieldsV1: metav1.NewFieldsV1(`{"f:metadata":{"f:annotations":{".":{},"f:volumes.kubernetes.io/controller-managed-attach-detach":{}},"f:labels":{".":{},"f:beta.kubernetes.io/arch":{},"f:beta.kubernetes.io/os":{},"f:kubernetes.io/arch":{},"f:kubernetes.io/hostname":{},"f:kubernetes.io/os":{},"f:node.kubernetes.io/instance-type":{},"f:topology.kubernetes.io/region":{},"f:topology.kubernetes.io/zone":{}}},"f:spec":{"f:providerID":{}}}`)},
				{Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", Time: &at, FieldsType: "FieldsV1", Subresource: "status",
					FieldsV1: metav1.NewFieldsV1(`{"f:status":{"f:allocatable":{"f:cpu":{},"f:ephemeral-storage":{},"f:memory":{},"f:pods":{}},"f:capacity":{"f:cpu":{},"f:ephemeral-storage":{},"f:memory":{},"f:pods":{}},"f:conditions":{"k:{\"type\":\"DiskPressure\"}":{"f:lastHeartbeatTime":{},"f:lastTransitionTime":{},"f:message":{},"f:reason":{},"f:status":{}},"k:{\"type\":\"MemoryPressure\"}":{"f:lastHeartbeatTime":{},"f:lastTransitionTime":{},"f:message":{},"f:reason":{},"f:status":{}},"k:{\"type\":\"PIDPressure\"}":{"f:lastHeartbeatTime":{},"f:lastTransitionTime":{},"f:message":{},"f:reason":{},"f:status":{}},"k:{\"type\":\"Ready\"}":{"f:lastHeartbeatTime":{},"f:lastTransitionTime":{},"f:message":{},"f:reason":{},"f:status":{}}},"f:images":{},"f:nodeInfo":{"f:bootID":{},"f:containerRuntimeVersion":{},"f:kernelVersion":{},"f:kubeProxyVersion":{},"f:kubeletVersion":{},"f:machineID":{},"f:osImage":{},"f:systemUUID":{}},"f:runtimeHandlers":{}}}`)},
				{Manager: "tandem-proxy", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", Time: &at, FieldsType: "FieldsV1",
					FieldsV1: metav1.NewFieldsV1(`{"f:metadata":{"f:annotations":{"f:tandem.io/node-metric":{}}}}`)},
				{Manager: "tandem-proxy", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", Time: &at, FieldsType: "FieldsV1", Subresource: "status",
					FieldsV1: metav1.NewFieldsV1(`{"f:status":{"f:allocatable":{"f:kubernetes.io/batch-cpu":{},"f:kubernetes.io/batch-memory":{}},"f:capacity":{"f:kubernetes.io/batch-cpu":{},"f:kubernetes.io/batch-memory":{}}}}`)},
			},
		},
		Spec: corev1.NodeSpec{PodCIDR: "10.244.1.0/24", PodCIDRs: []string{"10.244.1.0/24"}, ProviderID: "aws:///eu-west-1a/i-0123456789abcdef0"},
	}
	rl := corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("16"), corev1.ResourceMemory: resource.MustParse("63950552Ki"),
		corev1.ResourcePods: resource.MustParse("110"), corev1.ResourceEphemeralStorage: resource.MustParse("95551679124"),
		"hugepages-1Gi": resource.MustParse("0"), "hugepages-2Mi": resource.MustParse("0"),
		nodemetric.ResourceBatchCPU: resource.MustParse("3000"), nodemetric.ResourceBatchMemory: resource.MustParse("8Gi"),
	}
	n.Status.Capacity, n.Status.Allocatable = rl, rl
	for _, c := range []struct{ typ, status, reason, msg string }{
		{"MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"},
		{"DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"},
		{"PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"},
		{"Ready", "True", "KubeletReady", "kubelet is posting ready status"},
	} {
		n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: corev1.NodeConditionType(c.typ), Status: corev1.ConditionStatus(c.status),
			LastHeartbeatTime: at, LastTransitionTime: at, Reason: c.reason, Message: c.msg})
	}
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("10.%d.%d.%d", i/65536, i/256%256, i%256)},
		{Type: corev1.NodeHostName, Address: name}, {Type: corev1.NodeInternalDNS, Address: name}}
	n.Status.DaemonEndpoints.KubeletEndpoint.Port = 10250
	// KubeProxyVersion stays empty: kubelet stopped reporting it (it is deprecated), so a node of a
	// current cluster carries "kubeProxyVersion":"" like this one.
	n.Status.NodeInfo = corev1.NodeSystemInfo{
		MachineID: "ec2b3f1c5d6e7f8091a2b3c4d5e6f708", SystemUUID: "ec2b3f1c-5d6e-7f80-91a2-b3c4d5e6f708", BootID: "1f2e3d4c-5b6a-7980-a1b2-c3d4e5f60718",
		KernelVersion: "6.1.0-18-amd64", OSImage: "Debian GNU/Linux 12 (bookworm)", ContainerRuntimeVersion: "containerd://1.7.13",
		KubeletVersion: "v1.36.3", OperatingSystem: "linux", Architecture: "amd64",
	}
	n.Status.RuntimeHandlers = []corev1.NodeRuntimeHandler{{Name: "runc", Features: &corev1.NodeRuntimeHandlerFeatures{}}, {Name: "", Features: &corev1.NodeRuntimeHandlerFeatures{}}}
	for j := range 50 {
		repo := fmt.Sprintf("registry.example.com/platform-team/service-%02d", j)
		n.Status.Images = append(n.Status.Images, corev1.ContainerImage{
			Names:     []string{fmt.Sprintf("%s@sha256:%064x", repo, j*7919+i), fmt.Sprintf("%s:v1.%d.%d", repo, j, i%10)},
			SizeBytes: int64(50_000_000 + 1_000_000*j),
		})
	}
	return n
}
