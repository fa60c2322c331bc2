package store

import (
	"cmp"
	"slices"
	"strings"
)

// What the checkpoint keeps of labels and annotations.
//
// The checkpoint is rewritten, whole, after every lifecycle call, so its size is what a save costs:
// kept whole, 110 pods (kubelet's default maxPods) at the proxy's metadata bound made a 72 MB file and a
// 460 ms save (BenchmarkCheckpointSave), which every pod start waited for. The runtime tells every label
// and annotation again when the store is reconciled at start; only while it does not answer does the
// store run on the checkpoint alone, and then only Tandem's own loops read it (the exclusive CPUs given
// back at start, the pool refresh). So the checkpoint keeps the keys in the domains those read, and at
// most maxPersistedMetadata bytes of them per pod or container, which keeps a save's cost independent of
// what any one pod carries.

// maxPersistedMetadata bounds the labels and annotations the checkpoint keeps per pod or container. The
// keys Tandem reads hold a QoS class or a small JSON document each.
const maxPersistedMetadata = 16 << 10

// readByTandem reports whether a label or annotation key is in a domain Tandem reads: its own, the
// Koordinator and openFuyao QoS dialects it accepts, and kubelet's kubernetes.io/config.* (static pods).
// kubectl.kubernetes.io, a subdomain, is not among them.
func readByTandem(key string) bool {
	domain, _, ok := strings.Cut(key, "/")
	if !ok {
		return false
	}
	switch {
	case domain == "kubernetes.io", domain == "openfuyao.com":
		return true
	case domain == "tandem.io", strings.HasSuffix(domain, ".tandem.io"):
		return true
	case domain == "koordinator.sh", strings.HasSuffix(domain, ".koordinator.sh"):
		return true
	}
	return false
}

// persisted returns snap with only the labels and annotations the checkpoint keeps. snap's maps are not
// modified; entries are copied where they change.
func persisted(snap *Snapshot) *Snapshot {
	out := &Snapshot{Pods: make([]*Pod, 0, len(snap.Pods)), Containers: make([]*Container, 0, len(snap.Containers))}
	for _, p := range snap.Pods {
		n := *p
		n.Labels, n.Annotations = persistedMetadata(p.Labels, p.Annotations)
		out.Pods = append(out.Pods, &n)
	}
	for _, c := range snap.Containers {
		n := *c
		n.Labels, n.Annotations = persistedMetadata(c.Labels, c.Annotations)
		out.Containers = append(out.Containers, &n)
	}
	return out
}

type metadataEntry struct {
	label      bool
	key, value string
}

func persistedMetadata(labels, annotations map[string]string) (map[string]string, map[string]string) {
	var kept []metadataEntry
	size := 0
	for _, m := range []struct {
		label bool
		m     map[string]string
	}{{true, labels}, {false, annotations}} {
		for k, v := range m.m {
			if readByTandem(k) {
				kept = append(kept, metadataEntry{m.label, k, v})
				size += len(k) + len(v)
			}
		}
	}
	if size > maxPersistedMetadata {
		// The largest go first: Tandem's own keys are small.
		slices.SortFunc(kept, func(a, b metadataEntry) int {
			return cmp.Or(cmp.Compare(len(b.key)+len(b.value), len(a.key)+len(a.value)), cmp.Compare(a.key, b.key), cmp.Compare(a.value, b.value))
		})
		for size > maxPersistedMetadata {
			size -= len(kept[0].key) + len(kept[0].value)
			kept = kept[1:]
		}
	}
	var l, a map[string]string
	for _, e := range kept {
		dst := &a
		if e.label {
			dst = &l
		}
		if *dst == nil {
			*dst = map[string]string{}
		}
		(*dst)[e.key] = e.value
	}
	return l, a
}
