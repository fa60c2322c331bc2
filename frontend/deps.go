package frontend

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tandemkit/tandem/hooks"
	"github.com/tandemkit/tandem/resource/cgroup"
	"github.com/tandemkit/tandem/store"
)

// Deps are the collaborators the agent gives a front end; tests pass their own.
type Deps struct {
	// Hooks run the policies on lifecycle calls; nil runs none.
	Hooks *hooks.Dispatcher
	// Cgroups writes pod-level settings hooks ask for, and container files the runtime cannot take; nil
	// leaves them unapplied, with a log line.
	Cgroups cgroup.Writer
	// RDT moves containers into the RDT class hooks chose; nil leaves them where they are, with a log line.
	RDT RDT
	// Registerer receives the front end's metrics; nil means they are kept but not exposed.
	Registerer prometheus.Registerer
	// Refresh asks the front end to run PreUpdateContainerResources for every live container and send the
	// runtime what changed: how LS and BE containers follow their pools when exclusive CPUs come or go.
	Refresh <-chan struct{}
	// Synchronized is called once the store holds what the runtime reported at (re)connection, before any
	// lifecycle event is handled: the exclusive CPUs of the containers found are restored there. The NRI
	// plugin calls it at each synchronization; the proxy's caller does the same after Recover.
	Synchronized func(context.Context, *store.Snapshot)
}

// RDT moves a container's tasks into a resctrl group; resource/resctrl.CgroupMover is one.
type RDT interface {
	// Assign moves the tasks of the container whose cgroup is ctrCgroup (relative to the hierarchy) into
	// group.
	Assign(ctx context.Context, group, ctrCgroup string) error
}
