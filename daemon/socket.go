package daemon

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/vstellar/vstellar/api"
)

// probeTimeout bounds the connect used to tell a live socket from a stale
// one.
const probeTimeout = time.Second

// socketFile is a socket file this process created; remove deletes it only
// if the path still names that same file.
type socketFile struct {
	path string
	info os.FileInfo
}

// listenSocket listens on a unix socket at path with the given mode.
//
// An existing file at path is removed only if it is a socket nothing
// listens on (stale, e.g. after a crash); a live socket belongs to another
// process and gives ErrSocketInUse, as does any other kind of file.
//
// The socket is bound in a private 0700 staging directory next to path,
// chmod'ed, and then hard-linked to path. link(2) does not replace an
// existing file, so a socket that appears at path meanwhile is never
// clobbered, and the socket is never reachable with a wider mode than
// asked.
func listenSocket(path string, mode os.FileMode) (*net.UnixListener, *socketFile, error) {
	if err := checkSocketPath(path); err != nil {
		return nil, nil, err
	}
	if err := removeStale(path); err != nil {
		return nil, nil, err
	}
	stage, err := os.MkdirTemp(filepath.Dir(path), ".vstellard-")
	if err != nil {
		return nil, nil, fmt.Errorf("socket %s: staging directory: %w", path, err)
	}
	defer os.RemoveAll(stage)
	tmp := filepath.Join(stage, "s")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	if err != nil {
		return nil, nil, fmt.Errorf("socket %s: %w", path, err)
	}
	// We remove the public name ourselves (socketFile.remove); the staging
	// name is gone when this function returns.
	ln.SetUnlinkOnClose(false)
	fail := func(err error) (*net.UnixListener, *socketFile, error) {
		ln.Close()
		return nil, nil, err
	}
	if err := os.Chmod(tmp, mode); err != nil {
		return fail(fmt.Errorf("socket %s: %w", path, err))
	}
	if err := os.Link(tmp, path); err != nil {
		if errors.Is(err, os.ErrExist) {
			return fail(fmt.Errorf("%w: %s appeared while binding", ErrSocketInUse, path))
		}
		return fail(fmt.Errorf("socket %s: %w", path, err))
	}
	info, err := os.Lstat(path)
	if err != nil {
		return fail(fmt.Errorf("socket %s: %w", path, err))
	}
	return ln, &socketFile{path: path, info: info}, nil
}

// checkSocketPath refuses a path too long for sockaddr_un.
func checkSocketPath(path string) error {
	if len(path) > sunPathMax {
		return fmt.Errorf("%w: socket path %s is too long (%d bytes, the limit is %d)", api.ErrInvalid, path, len(path), sunPathMax)
	}
	return nil
}

// removeStale removes path if it is a socket with no listener. It returns
// nil if path does not exist.
func removeStale(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("socket %s: %w", path, err)
	}
	if fi.Mode().Type() != os.ModeSocket {
		return fmt.Errorf("%w: %s exists and is not a socket; not touching it", ErrSocketInUse, path)
	}
	// Probing with connect is the only way to tell whether anyone listens
	// (/proc/net/unix shows bind names, not later links). A live listener
	// sees one short connection that closes without a message.
	c, err := net.DialTimeout("unix", path, probeTimeout)
	if err == nil {
		c.Close()
		return fmt.Errorf("%w: %s has a live listener (another vstellard?)", ErrSocketInUse, path)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("%w: %s: cannot tell whether it is stale: %w", ErrSocketInUse, path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing stale socket %s: %w", path, err)
	}
	return nil
}

// remove deletes the socket file if path still names the file we created.
func (s *socketFile) remove() error {
	fi, err := os.Lstat(s.path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("removing socket %s: %w", s.path, err)
	}
	if !os.SameFile(fi, s.info) {
		return fmt.Errorf("not removing socket %s: it was replaced by another file", s.path)
	}
	if err := os.Remove(s.path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing socket %s: %w", s.path, err)
	}
	return nil
}
