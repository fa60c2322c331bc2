package nri

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
)

// containerd's restrict_oom_score_adj (on wherever containerd lacks CAP_SYS_RESOURCE, as in rootless or
// unprivileged setups) raises a CRI request's oom_score_adj to containerd's own before it builds the
// spec. An NRI adjustment goes into the spec after that, so an adjustment below what containerd may set
// makes runc fail the container ("can't get final child's PID from pipe"). The plugin cannot read
// containerd's setting, so it does what the setting would: it never asks for a score below both
// containerd's own and the one containerd already put in the spec (which containerd allowed).

// unknownScore marks a runtime score the plugin could not read.
const unknownScore = int64(-1 << 62)

// dial connects to containerd's NRI socket and reads containerd's own oom_score_adj through the peer's
// pid. With hostPID (the DaemonSet's) the pid is visible; without it the score stays unknown.
func (p *Plugin) dial(logger klog.Logger, path string) (net.Conn, error) {
	c, err := net.Dial("unix", path)
	if err != nil {
		return nil, err
	}
	score, err := peerOOMScore(c, p.procRoot)
	if err != nil {
		score = unknownScore
		logger.V(2).Info("containerd's oom_score_adj not readable; an NRI adjustment will not lower a container's below what containerd set", "err", err)
	}
	p.runtimeOOM.Store(score)
	return c, nil
}

// peerOOMScore reads the oom_score_adj of the process on the other end of a unix socket.
func peerOOMScore(c net.Conn, procRoot string) (int64, error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return 0, fmt.Errorf("%T is not a unix socket", c)
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) { cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }); err != nil {
		return 0, err
	}
	if credErr != nil {
		return 0, fmt.Errorf("peer credentials: %w", credErr)
	}
	if cred.Pid <= 0 {
		return 0, fmt.Errorf("containerd's pid is not visible from this pid namespace (run with hostPID)")
	}
	b, err := os.ReadFile(filepath.Join(procRoot, strconv.Itoa(int(cred.Pid)), "oom_score_adj"))
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}

// oomScore is the oom_score_adj to put in a new container's adjustment for a hook's value v: v, unless
// that is below both containerd's own score and the spec's, in which case the lower of those two. ok is
// false when neither is known: the adjustment then leaves the score as containerd set it.
func oomScore(v int64, runtime int64, spec *int64) (int64, bool) {
	var floor int64
	switch {
	case runtime != unknownScore && spec != nil:
		floor = min(runtime, *spec)
	case runtime != unknownScore:
		floor = runtime
	case spec != nil:
		floor = *spec
	default:
		return 0, false
	}
	return max(v, floor), true
}
