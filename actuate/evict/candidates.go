package evict

import (
	"github.com/tandemkit/tandem/metrics/collector"
	"github.com/tandemkit/tandem/resource/qos"
)

// bePods groups the snapshot's containers by pod and keeps the pods whose every container is BE, in
// snapshot order, with what meta knows of them. Both eviction loops choose among these and nothing else.
func bePods(snap *collector.Snapshot, meta func(podUID string) (PodMeta, bool)) []*candidate {
	byPod := map[string]*candidate{}
	notBE := map[string]bool{}
	var order []string
	for _, c := range snap.Containers {
		key := c.PodUID
		if key == "" {
			key = c.Namespace + "/" + c.Pod
		}
		if c.QoS != qos.BE {
			notBE[key] = true
			continue
		}
		cd, ok := byPod[key]
		if !ok {
			cd = &candidate{pod: Pod{Namespace: c.Namespace, Name: c.Pod, UID: c.PodUID}}
			if m, ok := meta(c.PodUID); ok {
				cd.pod.SandboxID = m.SandboxID
				cd.request = m.CPURequestMilli
				if m.Priority != nil {
					cd.priority = *m.Priority
				}
			}
			byPod[key] = cd
			order = append(order, key)
		}
		cd.memory += c.MemoryBytes
		cd.cpu += c.CPUMilli
	}
	var out []*candidate
	for _, k := range order {
		if !notBE[k] {
			out = append(out, byPod[k])
		}
	}
	return out
}
