package remote

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// Who may register a hook server. A registration sends every container's environment, mounts and
// annotations to the server it names and, with failurePolicy Fail, lets that server stop any pod from
// starting: writing one is as powerful as running tandem-proxy. So the proxy reads the hooks.d
// directory and a file in it only when no one but root could have written them, as sshd's StrictModes
// treats authorized_keys and sudo treats sudoers.d: owned by root (or by the user the proxy runs as,
// who can do all the proxy does anyway; that lets an unprivileged proxy under test read its own
// files), and writable by neither group nor others. A read-only mount counts as written by no one, so
// a ConfigMap volume (a 1777 directory, mounted read-only) stays usable.
//
// The socket a file names is not required to be root's: a hook server may run as a user of its own,
// and its socket's owner and mode say who may connect to that server, not who the server is. What
// decides who the server is, is who can create the socket path: its directory (or, when that does not
// exist yet, the nearest directory that does) must not be writable by group or others, or anyone could
// bind the path while the server is down and receive what the hook receives. containerd makes the
// same cut: a proxy plugin's socket is trusted because root named it in containerd's configuration,
// and NRI trusts the plugins it starts from /opt/nri/plugins and those that reach its socket (in a
// 0700 directory) because only root can put them there, whatever the socket's owner.

// trustProblem says why fi, a hooks.d directory or file, could have been written by someone other
// than root or the proxy's own user; "" when it could not. readOnly is whether its file system is
// mounted read-only.
func trustProblem(fi fs.FileInfo, readOnly bool) string {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return "its owner cannot be read"
	}
	switch {
	case st.Uid != 0 && int(st.Uid) != os.Geteuid():
		return fmt.Sprintf("owned by uid %d, not root", st.Uid)
	case writableByOthers(st.Mode, readOnly):
		return fmt.Sprintf("mode %04o lets group or others write it", st.Mode&0o7777)
	}
	return ""
}

func writableByOthers(mode uint32, readOnly bool) bool { return mode&0o022 != 0 && !readOnly }

// refusal is a refused directory or file as it was when it was logged, so that it is logged again
// only after it changed, not at every reload of the directory.
type refusal struct {
	problem          string
	ino, uid         uint64
	mode             uint32
	size, mtimeNanos int64
}

// refusalOf returns the refusal of fi for problem; withContent tells apart two versions of a file
// with one owner and mode (a directory's size and time change with every file written in it).
func refusalOf(fi fs.FileInfo, problem string, withContent bool) refusal {
	r := refusal{problem: problem}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		r.ino, r.uid, r.mode = st.Ino, uint64(st.Uid), st.Mode
	}
	if withContent {
		r.size, r.mtimeNanos = fi.Size(), fi.ModTime().UnixNano()
	}
	return r
}

// ownerMode returns fi's owner uid and its mode in octal, for log lines.
func ownerMode(fi fs.FileInfo) (int64, string) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return -1, fi.Mode().Perm().String()
	}
	return int64(st.Uid), fmt.Sprintf("%04o", st.Mode&0o7777)
}

// readOnlyFS reports whether path lies on a file system mounted read-only.
func readOnlyFS(path string) bool {
	var st unix.Statfs_t
	return unix.Statfs(path, &st) == nil && st.Flags&unix.ST_RDONLY != 0
}

// readChecked reads a hooks.d file and returns it with what the proxy checks its trust by. The file is
// opened once and checked and read through the same descriptor, so a file swapped after the check is
// not the one read. Symbolic links are followed: a ConfigMap volume presents its files through them,
// and the target must pass the check itself.
func readChecked(path string) ([]byte, fs.FileInfo, bool, error) {
	// O_NONBLOCK: a FIFO put in place of a file must not block the loader; it is refused below.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, nil, false, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, nil, false, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fi, false, fmt.Errorf("%s is not a regular file: %w", path, fs.ErrInvalid)
	}
	var sfs unix.Statfs_t
	readOnly := unix.Fstatfs(int(f.Fd()), &sfs) == nil && sfs.Flags&unix.ST_RDONLY != 0
	data, err := io.ReadAll(f)
	return data, fi, readOnly, err
}

// socketDirProblem checks who can create the socket path: its directory, or the nearest one that
// exists, must not be writable by group or others. It returns the problem, "" when there is none or it
// cannot be told (the connection then fails and says why).
func socketDirProblem(socket string) string {
	for dir := filepath.Dir(socket); ; dir = filepath.Dir(dir) {
		fi, err := os.Stat(dir)
		switch {
		case err == nil && fi.IsDir():
			if st, ok := fi.Sys().(*syscall.Stat_t); ok && writableByOthers(st.Mode, readOnlyFS(dir)) {
				return fmt.Sprintf("its socket's directory %s has mode %04o: group or others could serve in the hook server's place", dir, st.Mode&0o7777)
			}
			return ""
		case err == nil, !errors.Is(err, fs.ErrNotExist), dir == filepath.Dir(dir):
			return ""
		}
	}
}
