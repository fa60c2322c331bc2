// Package store keeps what Tandem's front ends (tandem-proxy and tandem-nri) know about the pods and
// containers on the node: their identity, labels, annotations and cgroup parent, and the resources that
// were last applied to each container. The node loops read it to find the pods they act on.
//
// The runtime is the source of truth. The store is rebuilt from it at start and reconciled with it
// afterwards; the on-disk checkpoint only carries what the runtime cannot tell (the resources that
// policies decided) and the labels and annotations Tandem itself reads, so that a restarted proxy keeps
// its decisions.
//
// The store never keeps kubectl's last-applied-configuration annotation: it is a copy of the whole
// object as applied, Secrets' values included where a pod spec carries them, and nothing in Tandem or
// in the hook protocol needs it. Every other label and annotation is kept, as remote hook servers
// receive the pod's annotations in every container stage (as koord-runtime-proxy sends them); the proxy
// bounds their size when they arrive.
package store

import (
	"maps"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"

	"github.com/tandemkit/tandem/hooks"
)

// Pod is a pod sandbox as the proxy saw it.
type Pod struct {
	ID             string            `json:"id"`
	Name           string            `json:"name"`
	Namespace      string            `json:"namespace"`
	UID            string            `json:"uid"`
	Attempt        uint32            `json:"attempt,omitempty"`
	State          PodState          `json:"state"`
	CgroupParent   string            `json:"cgroupParent,omitempty"`
	RuntimeHandler string            `json:"runtimeHandler,omitempty"`
	Labels         map[string]string `json:"labels,omitempty"`
	Annotations    map[string]string `json:"annotations,omitempty"`
	// Resources are the pod-level resources: kubelet's, with what hooks set on the pod cgroup.
	Resources *hooks.Resources `json:"resources,omitempty"`
	// CreatedAt is the runtime's creation time in Unix nanoseconds.
	CreatedAt int64 `json:"createdAt,omitempty"`
}

// Container is a container as the proxy saw it.
type Container struct {
	ID           string            `json:"id"`
	PodSandboxID string            `json:"podSandboxId"`
	Name         string            `json:"name"`
	Attempt      uint32            `json:"attempt,omitempty"`
	State        ContainerState    `json:"state"`
	Image        string            `json:"image,omitempty"`
	Labels       map[string]string `json:"labels,omitempty"`
	Annotations  map[string]string `json:"annotations,omitempty"`
	// Resources are the Linux resources last applied through the proxy (or read back from the runtime
	// when the proxy did not see the container being created).
	Resources *hooks.Resources `json:"resources,omitempty"`
	CreatedAt int64            `json:"createdAt,omitempty"`
}

func (p *Pod) clone() *Pod {
	c := *p
	c.Labels = maps.Clone(p.Labels)
	c.Annotations = maps.Clone(p.Annotations)
	c.Resources = p.Resources.Clone()
	return &c
}

func (c *Container) clone() *Container {
	n := *c
	n.Labels = maps.Clone(c.Labels)
	n.Annotations = maps.Clone(c.Annotations)
	n.Resources = c.Resources.Clone()
	return &n
}

// kept is the copy the store keeps of p.
func (p *Pod) kept() *Pod {
	c := p.clone()
	delete(c.Annotations, corev1.LastAppliedConfigAnnotation)
	return c
}

// kept is the copy the store keeps of c.
func (c *Container) kept() *Container {
	n := c.clone()
	delete(n.Annotations, corev1.LastAppliedConfigAnnotation)
	return n
}

// Snapshot is a consistent copy of the store, sorted by id; it is also the checkpoint's payload.
type Snapshot struct {
	Pods       []*Pod       `json:"pods"`
	Containers []*Container `json:"containers"`
}

// Store is safe for concurrent use. Every value it returns is a copy.
type Store struct {
	mu         sync.RWMutex
	pods       map[string]*Pod
	containers map[string]*Container
	// gen counts mutations. Entries remember the generation that last touched them, and removals leave a
	// tombstone, so a reconcile that listed the runtime at generation g never drops an entry added after g
	// nor resurrects one removed after g.
	gen        uint64
	touched    map[string]uint64
	tombstones map[string]uint64
}

// New returns an empty store.
func New() *Store {
	return &Store{
		pods:       map[string]*Pod{},
		containers: map[string]*Container{},
		touched:    map[string]uint64{},
		tombstones: map[string]uint64{},
	}
}

func (s *Store) touch(id string) {
	s.gen++
	s.touched[id] = s.gen
	delete(s.tombstones, id)
}

// PutPod adds or replaces a pod.
func (s *Store) PutPod(p *Pod) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pods[p.ID] = p.kept()
	s.touch(p.ID)
}

// PutContainer adds or replaces a container.
func (s *Store) PutContainer(c *Container) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.containers[c.ID] = c.kept()
	s.touch(c.ID)
}

// Pod returns a copy of the pod with that id.
func (s *Store) Pod(id string) (*Pod, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	p, ok := s.pods[id]
	if !ok {
		return nil, false
	}
	return p.clone(), true
}

// Container returns a copy of the container with that id.
func (s *Store) Container(id string) (*Container, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	c, ok := s.containers[id]
	if !ok {
		return nil, false
	}
	return c.clone(), true
}

// UpdatePod applies fn to the stored pod, if present, and reports whether it was.
func (s *Store) UpdatePod(id string, fn func(*Pod)) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.pods[id]
	if !ok {
		return false
	}
	fn(p)
	s.touch(id)
	return true
}

// UpdateContainer applies fn to the stored container, if present, and reports whether it was.
func (s *Store) UpdateContainer(id string, fn func(*Container)) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.containers[id]
	if !ok {
		return false
	}
	fn(c)
	s.touch(id)
	return true
}

// UpdatePodContainers applies fn to every stored container of a pod.
func (s *Store) UpdatePodContainers(podID string, fn func(*Container)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, c := range s.containers {
		if c.PodSandboxID == podID {
			fn(c)
			s.touch(id)
		}
	}
}

// RemoveContainer forgets a container and returns what was stored.
func (s *Store) RemoveContainer(id string) (*Container, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.containers[id]
	s.forget(id)
	delete(s.containers, id)
	return c, ok
}

// RemovePod forgets a pod and every container in it, and returns the removed containers.
func (s *Store) RemovePod(id string) (*Pod, []*Container) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.pods[id]
	var removed []*Container
	for cid, c := range s.containers {
		if c.PodSandboxID == id {
			removed = append(removed, c)
			delete(s.containers, cid)
			s.forget(cid)
		}
	}
	delete(s.pods, id)
	s.forget(id)
	return p, removed
}

func (s *Store) forget(id string) {
	s.gen++
	delete(s.touched, id)
	s.tombstones[id] = s.gen
}

// Generation returns the current mutation count; pass it to Reconcile.
func (s *Store) Generation() uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.gen
}

// Snapshot returns a sorted deep copy of everything stored.
func (s *Store) Snapshot() *Snapshot {
	s.mu.RLock()
	defer s.mu.RUnlock()
	snap := &Snapshot{Pods: make([]*Pod, 0, len(s.pods)), Containers: make([]*Container, 0, len(s.containers))}
	for _, p := range s.pods {
		snap.Pods = append(snap.Pods, p.clone())
	}
	for _, c := range s.containers {
		snap.Containers = append(snap.Containers, c.clone())
	}
	slices.SortFunc(snap.Pods, func(a, b *Pod) int { return compare(a.ID, b.ID) })
	slices.SortFunc(snap.Containers, func(a, b *Container) int { return compare(a.ID, b.ID) })
	return snap
}

func compare(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// ReconcileResult says what a reconcile changed.
type ReconcileResult struct {
	// Released are the stored containers (and pods) that the runtime no longer has.
	ReleasedPods       []*Pod
	ReleasedContainers []*Container
	// Adopted are runtime entries the store did not know.
	AdoptedPods       int
	AdoptedContainers int
}

// Reconcile makes the store agree with a listing of the runtime taken when the store was at generation
// since. Runtime entries replace stored ones but keep the stored Resources when the runtime reports none
// (the runtime does not always echo what was applied). Stored entries missing from the listing are released,
// unless they were touched after the listing began; listed entries removed after it began stay removed.
func (s *Store) Reconcile(since uint64, runtime *Snapshot) ReconcileResult {
	s.mu.Lock()
	defer s.mu.Unlock()
	var res ReconcileResult
	seen := make(map[string]bool, len(runtime.Pods)+len(runtime.Containers))
	for _, p := range runtime.Pods {
		seen[p.ID] = true
		if s.changedSince(p.ID, since) {
			continue
		}
		n := p.kept()
		if old, ok := s.pods[p.ID]; ok {
			if n.Resources == nil {
				n.Resources = old.Resources
			}
		} else {
			res.AdoptedPods++
		}
		s.pods[p.ID] = n
		s.touched[p.ID] = s.gen
	}
	for _, c := range runtime.Containers {
		seen[c.ID] = true
		if s.changedSince(c.ID, since) {
			continue
		}
		n := c.kept()
		if old, ok := s.containers[c.ID]; ok {
			if n.Resources == nil {
				n.Resources = old.Resources
			}
		} else {
			res.AdoptedContainers++
		}
		s.containers[c.ID] = n
		s.touched[c.ID] = s.gen
	}
	for id, p := range s.pods {
		if !seen[id] && !s.changedSince(id, since) {
			res.ReleasedPods = append(res.ReleasedPods, p)
			delete(s.pods, id)
			delete(s.touched, id)
		}
	}
	for id, c := range s.containers {
		if !seen[id] && !s.changedSince(id, since) {
			res.ReleasedContainers = append(res.ReleasedContainers, c)
			delete(s.containers, id)
			delete(s.touched, id)
		}
	}
	// Tombstones only matter to a reconcile that was already listing when they were made.
	for id, g := range s.tombstones {
		if g <= since {
			delete(s.tombstones, id)
		}
	}
	s.gen++
	return res
}

func (s *Store) changedSince(id string, since uint64) bool {
	if g, ok := s.tombstones[id]; ok && g > since {
		return true
	}
	g, ok := s.touched[id]
	return ok && g > since
}

// Load replaces the whole content with a snapshot, typically the checkpoint read at start before the
// runtime could be asked.
func (s *Store) Load(snap *Snapshot) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pods = make(map[string]*Pod, len(snap.Pods))
	s.containers = make(map[string]*Container, len(snap.Containers))
	s.touched = map[string]uint64{}
	s.tombstones = map[string]uint64{}
	for _, p := range snap.Pods {
		s.pods[p.ID] = p.kept()
	}
	for _, c := range snap.Containers {
		s.containers[c.ID] = c.kept()
	}
	s.gen++
}

// HookInfo is what hooks see of the stored pod; it shares the pod's maps, so hooks must not change them.
func (p *Pod) HookInfo() *hooks.PodInfo {
	return &hooks.PodInfo{
		ID: p.ID, Name: p.Name, Namespace: p.Namespace, UID: p.UID, Attempt: p.Attempt,
		RuntimeHandler: p.RuntimeHandler, Labels: p.Labels, Annotations: p.Annotations,
		CgroupParent: p.CgroupParent, Resources: p.Resources,
	}
}

// HookInfo is what hooks see of the stored container; it shares the container's maps.
func (c *Container) HookInfo() *hooks.ContainerInfo {
	return &hooks.ContainerInfo{
		ID: c.ID, Name: c.Name, Attempt: c.Attempt, Labels: c.Labels, Annotations: c.Annotations, Resources: c.Resources,
	}
}
