// Package udp is the socket layer the transport runs over: a Conn is a set
// of UDP sockets on one local address, read and written in batches with
// recvmmsg/sendmmsg, with UDP GSO on send and GRO on receive where the
// kernel has them. It knows nothing of the transport's packets; the
// transport hands it datagrams (Message) and gets datagrams back.
//
// # Paths are source ports
//
// The transport spreads a connection over network paths by varying the
// UDP source port (ECMP hashes it). A Conn therefore owns Config.Paths
// sockets bound to the consecutive ports base..base+Paths-1; Message.Path
// picks the socket, hence the source port, of each datagram. This is the
// simplest design that works on Linux without privileges: a UDP socket
// can only send from the port it is bound to (IP_PKTINFO sets the source
// address, not the port), SO_REUSEPORT shares one port rather than giving
// several, and raw sockets would need CAP_NET_RAW and our own checksums.
// One fd per path is cheap up to the few hundred paths the transport uses
// (MaxPaths bounds it). Every socket also receives: a datagram's Path on
// ReadBatch is the local port it arrived on, so peers may answer to any
// port of the range. A blocked ReadBatch waits on one epoll instance over
// all the sockets (itself registered with the Go runtime's poller), so
// reading costs one wait for any number of paths; with one path it waits
// on the socket directly. Port 0 in Config.Addr finds a free range.
//
// The cost of the design is on send: one sendmmsg carries datagrams of one
// socket only, so WriteBatch issues one system call per run of consecutive
// messages on the same path. Callers that batch should group by path.
//
// TryWriteBatch is WriteBatch for a caller that must not wait (a poster
// sending its own datagrams while it holds locks others wait on): it
// sends what the sockets take at once and returns.
//
// # Offloads
//
// Listen probes UDP_SEGMENT (Linux >= 4.18) and UDP_GRO (>= 5.0). With
// GSO, WriteBatch hands a run of consecutive messages to one peer with
// equal lengths (the last may be shorter) to the kernel as one send whose
// iovecs point at the callers' buffers, so nothing is copied; the kernel
// cuts it into datagrams. If the kernel refuses a segmented send, the
// datagrams are sent again one by one (and on EIO, a device without
// checksum offload, GSO is turned off for good). With GRO the kernel may
// deliver several datagrams of one flow as one buffer with their segment
// size; the Conn receives into its own 64 KiB buffers and copies each
// segment into the caller's Messages, keeping what does not fit for the
// next call. The price of GRO is that copy and a bound of 8 kernel
// buffers per receive call (like wireguard-go, which reads 2): traffic
// that does not coalesce (many peers, tiny bursts) moves at most 8
// datagrams per call, so such users may prefer DisableGRO. DisableGSO and
// DisableGRO force the plain paths; both are tested (a GSO refusal is
// forced in a namespace whose loopback MTU is smaller than the segment).
//
// # Invariants
//
//   - A datagram is delivered whole or not at all: one longer than the
//     caller's buffer is dropped and counted (Stats.Truncated), never cut.
//     GRO never changes datagram boundaries as the caller sees them.
//   - ReadBatch, WriteBatch and TryWriteBatch allocate nothing in steady
//     state: all system-call scratch space (headers, iovecs, addresses,
//     control messages, GRO buffers) is allocated at Listen, and peer
//     addresses are netip.AddrPort values.
//   - The Conn keeps no reference to a caller's buffer after a call.
//   - WriteBatch sends a prefix of its messages, in order, and says how
//     many; a message it cannot send (bad path, destination of the other
//     family, N out of range) is an ErrBadMessage, not a partial send.
//     TryWriteBatch does the same and never waits: for buffer space, or
//     for another write in progress (it then sends nothing).
//   - Close (or the end of Listen's context) wakes blocked readers and
//     writers with net.ErrClosed; no socket fd is used after it is closed.
//
// BlastThroughput and PingPong are the raw-UDP baselines that transport
// benchmarks compare against.
package udp
