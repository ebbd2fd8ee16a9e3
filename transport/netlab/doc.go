// Package netlab builds Linux network-namespace testbeds for exercising the
// transport over real kernel networking: real sockets, real veth links, real
// qdiscs, instead of loopback. Everything is done through netlink
// (vishvananda/netlink) and bpf(2); nothing shells out to ip or tc.
//
// TwoHost makes two hosts, each a named namespace, joined by a veth pair with
// an IPv4 address on each end, optional rate limit (tbf), random or bursty
// loss (a small eBPF classifier on clsact egress, so it works on kernels
// built without netem) and delay (netem, where the kernel has it). Link
// state, loss and rate can be changed while traffic flows. Host.Do runs code
// inside a host so a test can open sockets there.
//
// The pieces (namespace, port/veth, address, route, shaping, loss) are kept
// small and independent so other topologies can be assembled from them.
//
// Invariants:
//
//   - Nothing is left behind. Every resource a Bed makes is recorded on an
//     undo stack as it is made; a construction failure at any step and Close
//     both unwind that stack, removing qdiscs, BPF filters and maps, the veth
//     pair and the namespaces. Close is idempotent. Devices are only ever
//     created inside bed namespaces, never in the caller's.
//   - Names never collide: "<prefix>-<pid>-<random>-<host>", created with
//     O_EXCL. Cleanup(prefix) removes only leftovers whose creating process
//     is gone (crashed runs), never a live bed.
//   - A thread moved into a bed namespace is never handed back to the Go
//     scheduler while in a foreign namespace: code runs on a fresh goroutine
//     with its OS thread locked, the thread is moved back afterwards, and if
//     that fails the goroutine exits still locked so the runtime kills the
//     thread.
//   - Available reports, without side effects, whether beds can be built
//     here (root or CAP_NET_ADMIN+CAP_SYS_ADMIN, netns and veth support), so
//     callers can fall back to loopback with a clear reason.
//   - Bad options get an error before anything is built.
package netlab
