package hostnet

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/vishvananda/netlink"
)

// dumpAttempts bounds the retries of a netlink dump the kernel
// interrupted because the table changed under it: a busy host settles
// within a few, and a host that never does gets an error, not a loop.
const dumpAttempts = 8

// Errors, wrapped with the interface or device they are about.
var (
	// ErrNoInterface: no network interface has the name.
	ErrNoInterface = errors.New("no such interface")
	// ErrInterfaceDown: the interface is administratively down.
	ErrInterfaceDown = errors.New("interface is down")
	// ErrNoAddress: the interface has no address a socket can bind for
	// traffic between hosts (of the family asked for).
	ErrNoAddress = errors.New("no usable address")
	// ErrBadName: the string cannot be a Linux interface name.
	ErrBadName = errors.New("invalid interface name")
	// ErrNoRDMA: the kernel has no RDMA netlink support.
	ErrNoRDMA = errors.New("this host has no RDMA netlink support (kernel without CONFIG_INFINIBAND / no ib_core)")
)

// Host is where discovery looks. The zero value is the calling thread's
// network namespace.
type Host struct {
	// Handle is a netlink handle into the namespace to look at
	// (netlink.NewHandleAt); nil: the calling thread's namespace, with a
	// socket per request. RDMA devices are listed through it only if it
	// has a NETLINK_RDMA socket, else in the calling thread's namespace
	// (which sees every RDMA device unless the kernel's RDMA netns mode
	// is exclusive).
	Handle *netlink.Handle
	// Sysfs is the sysfs mount RDMALinks reads port details from
	// (default "/sys").
	Sysfs string
}

func (h Host) handle() *netlink.Handle {
	if h.Handle != nil {
		return h.Handle
	}
	// The zero Handle is what netlink's package functions use: a new
	// socket per request, in the calling thread's namespace.
	return &netlink.Handle{}
}

func (h Host) sysfs() string {
	if h.Sysfs == "" {
		return "/sys"
	}
	return h.Sysfs
}

// dump runs a netlink dump, again while the kernel reports it
// interrupted, and returns only a complete result.
func dump[T any](ctx context.Context, what string, f func() (T, error)) (T, error) {
	var zero T
	for range dumpAttempts {
		if err := ctx.Err(); err != nil {
			return zero, fmt.Errorf("hostnet: %s: %w", what, err)
		}
		v, err := f()
		if err == nil {
			return v, nil
		}
		if !errors.Is(err, netlink.ErrDumpInterrupted) {
			return zero, err
		}
	}
	return zero, fmt.Errorf("hostnet: %s: interrupted %d times in a row (the table keeps changing): %w", what, dumpAttempts, netlink.ErrDumpInterrupted)
}

// ValidateName checks that name can be a Linux interface name, as the
// kernel's dev_valid_name does: 1 to 15 bytes, not "." or "..", no '/',
// ':' or white space.
func ValidateName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("hostnet: %w: empty", ErrBadName)
	case len(name) > 15:
		return fmt.Errorf("hostnet: %w: %q is %d bytes, at most 15", ErrBadName, name, len(name))
	case name == "." || name == "..":
		return fmt.Errorf("hostnet: %w: %q", ErrBadName, name)
	case strings.ContainsAny(name, "/:\x00 \t\n\v\f\r"):
		return fmt.Errorf("hostnet: %w: %q holds '/', ':', NUL or white space", ErrBadName, name)
	}
	return nil
}
