package store

// ContainerState is a container's state as the runtime last reported it. The values are CRI's names, so a
// checkpoint written before the type existed reads back unchanged and tandemctl prints what crictl prints.
type ContainerState string

// The container states the front ends record. NRI's paused container is recorded as running: its cgroup
// still holds the resources Tandem applied.
const (
	ContainerCreated ContainerState = "CONTAINER_CREATED"
	ContainerRunning ContainerState = "CONTAINER_RUNNING"
	ContainerExited  ContainerState = "CONTAINER_EXITED"
	ContainerUnknown ContainerState = "CONTAINER_UNKNOWN"
)

// Live reports whether the container's cgroup exists and can take new resources (created or running).
func (s ContainerState) Live() bool { return s == ContainerCreated || s == ContainerRunning }

// PodState is a pod sandbox's state as the runtime last reported it, in CRI's names.
type PodState string

// The pod sandbox states.
const (
	PodReady    PodState = "SANDBOX_READY"
	PodNotReady PodState = "SANDBOX_NOTREADY"
)
