// Package netlab builds Linux network-namespace testbeds for exercising the
// transport over real kernel networking: real sockets, real veth links, real
// qdiscs, instead of loopback. Everything is done through netlink
// (vishvananda/netlink) and bpf(2); nothing shells out to ip or tc.
//
// TwoHost makes two hosts, each a named namespace, joined by a veth pair with
// an IPv4 address on each end, optional rate limit (tbf), random or bursty
// loss (a small eBPF classifier on clsact egress) and one-way delay, all
// per direction and all working on kernels built without netem (and fq).
// Delay is a delay line (delay.go): an eBPF program on clsact egress stamps
// each packet and redirects it into a tap device, a dedicated thread holds
// the frame until its entry time plus the delay and writes it back, and a
// second program sends it on out of the port; no qdisc such a kernel has
// can hold a packet for a fixed time. On the wire: rate limit, delay, loss.
// Link state, loss, rate and delay can be changed while traffic flows.
// Host.Do runs code inside a host so a test can open sockets there.
//
// LeafSpine builds a two-tier Clos fabric from the same pieces: hosts under
// leaf routers (default 2 leaves x 2 hosts), every leaf joined to every
// spine router (default 4), each host, leaf and spine its own namespace,
// each link a veth pair with a /31 in 198.18.0.0/15 (hosts of leaf l in
// 198.18.l.0/24, leaf l <-> spine s in 198.19.l.(2s)/31). Leaves and spines
// forward; a leaf reaches another leaf's hosts through one ECMP route over
// all spines, hashed on the 5-tuple, so a flow's UDP source port picks its
// spine and many source ports spread over all of them. tbf limits each
// direction of each leaf<->spine link to LinkRate (and of each host link to
// HostRate), so the fabric, not the CPU, is the bottleneck: a leaf's uplink
// (with two leaves, the bisection) carries Spines*LinkRate per direction,
// one flow at most LinkRate. While traffic runs a link can be made lossy
// (SetLinkLoss), black-holed by its leaf with the route still in place
// (BlackHole, a failing link nobody withdraws) or taken down (SetLinkUp);
// LinkCounters and LeafCounters report, per leaf->spine link, what the
// leaf's hashing put there, which shows how traffic spread. Fabric hosts
// are the same Host type as TwoHost's, so Host.Do opens sockets inside them.
//
// The pieces (namespace, port/veth, address, route, shaping, loss, sysctl)
// are kept small and independent so other topologies can be assembled from
// them.
//
// Invariants:
//
//   - Nothing is left behind. Every resource a Bed or Fabric makes is
//     recorded on an undo stack as it is made; a construction failure at any
//     step and Close both unwind that stack, removing qdiscs, BPF filters
//     and maps, delay lines (the thread ends before its fds close; the tap
//     goes with its fd, so even a crash leaves none), the veth pairs and the
//     namespaces. Close is idempotent.
//     Devices are only ever created inside bed namespaces, never in the
//     caller's.
//   - Names never collide: "<prefix>-<pid>-<random>-<node>" (node "a",
//     "leaf0", "spine3", "h1-0", ...), created with O_EXCL. Cleanup(prefix)
//     removes only leftovers whose creating process is gone (crashed runs),
//     never a live bed or fabric.
//   - A thread moved into a bed namespace is never handed back to the Go
//     scheduler while in a foreign namespace: code runs on a fresh goroutine
//     with its OS thread locked, the thread is moved back afterwards, and if
//     that fails the goroutine exits still locked so the runtime kills the
//     thread.
//   - Available reports, without side effects, whether beds can be built
//     here (root or CAP_NET_ADMIN+CAP_SYS_ADMIN, netns and veth support), so
//     callers can fall back to loopback with a clear reason.
//   - Sysctls are set only inside bed namespaces (routers' forwarding,
//     rp_filter, ECMP hash), never in the caller's.
//   - A delayed packet never leaves early (its due time counts from a
//     stamp taken as it entered, rounded so it can only be late) and a
//     delay line never reorders (due times never decrease, so shortening
//     the delay makes new packets wait behind older ones). It is late by
//     the thread's wake-up latency at most, which it mostly hides by waking
//     early by the lateness it observes and spinning the rest, spending at
//     most a quarter of its time spinning.
//   - Bad options get an error before anything is built.
package netlab
