package frontend

import "sync"

// Locks serialises what a front end does to one container: a refresh that moves a container to a new
// pool must not interleave with a start or an update that applies what hooks decided before. The zero
// value is ready to use.
type Locks struct {
	m sync.Map // container id → *sync.Mutex
}

// Lock takes the container's lock and returns its unlock.
func (l *Locks) Lock(id string) (unlock func()) {
	// Load first: a container's lock is taken at every lifecycle call and refresh, and LoadOrStore would
	// allocate a mutex each time only to throw it away.
	m, ok := l.m.Load(id)
	if !ok {
		m, _ = l.m.LoadOrStore(id, &sync.Mutex{})
	}
	mu := m.(*sync.Mutex)
	mu.Lock()
	return mu.Unlock
}

// Forget drops a removed container's lock, so that the map does not grow with every container the node
// ever ran.
func (l *Locks) Forget(id string) { l.m.Delete(id) }
