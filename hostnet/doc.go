// Package hostnet reports what the host's network offers vstellard: its
// network interfaces with their addresses, the RDMA devices the kernel
// knows, and the address the cross-host fabric binds when it is told an
// interface name instead of an address (Resolve).
//
// Discovery goes through netlink (vishvananda/netlink). A Host names the
// network namespace it looks at: its Handle's, or the calling thread's
// when Handle is nil (the zero Host, which the package-level functions
// use). Tests give it a handle into a namespace they built.
//
// Invariants:
//   - Nothing here changes the host: every call only reads (netlink
//     dumps and gets, sysfs files).
//   - A netlink dump the kernel interrupted (NLM_F_DUMP_INTR: the table
//     changed while it was read) is retried, up to dumpAttempts times;
//     partial results are never returned.
//   - Nothing is filtered out of Interfaces: loopback and interfaces
//     that are down are listed and marked, so a caller decides.
//   - Resolve picks only a global unicast address (not loopback, not
//     link-local, not multicast) that the kernel lets a socket bind
//     (not tentative or failed duplicate address detection), on an
//     interface that is administratively up; each way to fail has its
//     own error (ErrNoInterface, ErrInterfaceDown, ErrNoAddress).
//   - RDMA: a kernel without RDMA netlink support (no CONFIG_INFINIBAND,
//     or ib_core not loaded) is ErrNoRDMA; a kernel with support and no
//     device is an empty list and no error.
package hostnet
