//go:build linux

package netlab

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// namespace is one named network namespace made by this package.
type namespace struct {
	name   string         // entry under nsDir
	handle netns.NsHandle // keeps the namespace open for setns
	// nl is an rtnetlink socket created inside the namespace. A netlink
	// socket is bound to the namespace it was created in, so every later
	// link/addr/route/qdisc operation goes through it from any goroutine
	// without moving threads around.
	nl *netlink.Handle
}

// createNamespace makes a new named namespace with loopback up. On error
// nothing is left behind: no file under nsDir, no mount, no open handle.
func createNamespace(name string) (_ *namespace, err error) {
	if err := os.MkdirAll(nsDir, 0o755); err != nil {
		return nil, fmt.Errorf("netlab: create %s: %w", nsDir, err)
	}
	path := filepath.Join(nsDir, name)
	// O_EXCL: never adopt or clobber someone else's namespace.
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDONLY, 0o444)
	if err != nil {
		return nil, fmt.Errorf("netlab: create namespace file %s: %w", path, err)
	}
	f.Close()
	n := &namespace{name: name, handle: netns.None()}
	defer func() {
		if err != nil {
			err = errors.Join(err, n.close())
		}
	}()
	err = onThread(func() error {
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("netlab: unshare network namespace: %w", err)
		}
		return nil
	}, func() error {
		self := fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid())
		if err := unix.Mount(self, path, "none", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("netlab: bind-mount namespace to %s: %w", path, err)
		}
		h, err := netns.Get()
		if err != nil {
			return fmt.Errorf("netlab: open namespace %s: %w", name, err)
		}
		n.handle = h
		nl, err := netlink.NewHandle(unix.NETLINK_ROUTE)
		if err != nil {
			return fmt.Errorf("netlab: netlink socket in %s: %w", name, err)
		}
		n.nl = nl
		return nil
	})
	if err != nil {
		return nil, err
	}
	lo, err := n.nl.LinkByName("lo")
	if err != nil {
		return nil, fmt.Errorf("netlab: %s: find lo: %w", name, err)
	}
	if err := n.nl.LinkSetUp(lo); err != nil {
		return nil, fmt.Errorf("netlab: %s: set lo up: %w", name, err)
	}
	return n, nil
}

// close releases the handles and removes the name. Once the last reference
// is gone the kernel destroys the namespace and every device in it. It is
// safe on a partly built namespace.
func (n *namespace) close() error {
	if n.nl != nil {
		n.nl.Close()
		n.nl = nil
	}
	var errs []error
	if n.handle.IsOpen() {
		if err := n.handle.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close namespace handle: %w", err))
		}
		n.handle = netns.None()
	}
	if err := removeNamed(n.name); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// removeNamed unmounts and deletes nsDir/name, tolerating a half-made entry
// (file without mount) or an already removed one.
func removeNamed(name string) error {
	path := filepath.Join(nsDir, name)
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("netlab: unmount namespace %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("netlab: remove namespace %s: %w", path, err)
	}
	return nil
}

// listNamed returns the names under nsDir (none if it does not exist).
func listNamed() ([]string, error) {
	ents, err := os.ReadDir(nsDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("netlab: list %s: %w", nsDir, err)
	}
	names := make([]string, 0, len(ents))
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names, nil
}

// enter moves the calling (locked) thread into the namespace.
func (n *namespace) enter() error {
	if err := netns.Set(n.handle); err != nil {
		return fmt.Errorf("netlab: enter namespace %s: %w", n.name, err)
	}
	return nil
}
