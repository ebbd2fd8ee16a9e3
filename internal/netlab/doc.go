// Package netlab builds Linux network-namespace testbeds for exercising the
// transport over real kernel networking: real sockets, real veth links, real
// qdiscs, instead of loopback. Everything is done through netlink
// (vishvananda/netlink) and bpf(2); nothing shells out to ip or tc.
//
// TwoHost makes two hosts, each a named namespace, joined by a veth pair
// with an IPv4 address on each end and, per direction, an optional rate
// limit (tbf), random or bursty loss (an eBPF classifier) and one-way delay
// (a delay line: delay.go says how, and why on kernels without netem),
// each changeable while traffic flows. LeafSpine builds a two-tier Clos
// fabric from the same pieces: hosts under leaf routers, every leaf joined
// to every spine, ECMP over the spines hashed on the 5-tuple (a flow's UDP
// source port picks its spine), links rate-limited so that the fabric is
// the bottleneck and able to turn lossy, black-holed or down while traffic
// runs. Host.Do runs code inside a host of either, so a test can open
// sockets there. Topologies, addressing and defaults: docs/transport.md,
// "Tests", and docs/multipath.md, "The real leaf-spine". The pieces
// (namespace, port/veth, address, route, shaping, loss, sysctl) are kept
// small and independent so other topologies can be assembled from them.
//
// Invariants:
//   - Nothing is left behind. Every resource a Bed or Fabric makes is
//     recorded on an undo stack as it is made; a construction failure at
//     any step and Close both unwind it: qdiscs, BPF filters and maps,
//     delay lines (the thread ends before its fds close; the tap goes with
//     its fd, so even a crash leaves none), veth pairs, namespaces. Close
//     is idempotent. Devices are only created inside bed namespaces.
//   - Names never collide: "<prefix>-<pid>-<random>-<node>" (node "a",
//     "leaf0", "h1-0", ...), created with O_EXCL. Cleanup(prefix) removes
//     only leftovers of crashed runs, never a live bed or fabric.
//   - A thread moved into a bed namespace is never handed back to the Go
//     scheduler while in a foreign namespace: code runs on a fresh
//     goroutine with its OS thread locked, the thread is moved back
//     afterwards, and if that fails the goroutine exits still locked so
//     the runtime kills the thread.
//   - Available reports, without side effects, whether beds can be built
//     here (root or CAP_NET_ADMIN+CAP_SYS_ADMIN, netns and veth support),
//     so callers can fall back to loopback with a clear reason.
//   - Sysctls (forwarding, rp_filter, ECMP hash) are set only inside bed
//     namespaces, never in the caller's.
//   - A delayed packet never leaves early and a delay line never reorders
//     (shortening the delay makes new packets wait behind older ones); it
//     is late by the thread's wake-up latency at most.
//   - Bad options get an error before anything is built.
package netlab
