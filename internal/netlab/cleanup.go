//go:build linux

package netlab

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// Cleanup removes namespaces named with prefix whose creating process no
// longer exists: the leftovers of runs that crashed or were killed before
// Close. Beds of live processes, including this one, are left alone, so it
// is safe to call while parallel test processes use the same prefix. (A
// dead creator's pid reused by an unrelated process makes its leftovers look
// live; they are then kept, never wrongly removed.) Removing the name drops
// the last reference, and the kernel destroys the namespace with its
// devices, qdiscs and filters. It returns the names it removed.
func Cleanup(prefix string) ([]string, error) {
	if err := validatePrefix(prefix); err != nil {
		return nil, err
	}
	names, err := listNamed()
	if err != nil {
		return nil, err
	}
	var removed []string
	var errs []error
	for _, name := range names {
		pid, ok := parseNSName(prefix, name)
		if !ok || processAlive(pid) {
			continue
		}
		if err := removeNamed(name); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, name)
	}
	if err := errors.Join(errs...); err != nil {
		return removed, fmt.Errorf("netlab: cleanup %q: %w", prefix, err)
	}
	return removed, nil
}

// processAlive reports whether pid exists (EPERM means it exists but is not
// ours to signal).
func processAlive(pid int) bool {
	err := unix.Kill(pid, 0)
	return err == nil || errors.Is(err, unix.EPERM)
}
