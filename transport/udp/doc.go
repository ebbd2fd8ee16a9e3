// Package udp is the socket layer the transport runs over: a Conn is a set
// of UDP sockets on one local address, read and written in batches with
// recvmmsg/sendmmsg, with UDP GSO on send and GRO on receive where the
// kernel has them (Listen probes them; DisableGSO and DisableGRO force the
// plain paths). It knows nothing of the transport's packets; the transport
// hands it datagrams (Message) and gets datagrams back.
//
// Paths are source ports: a Conn owns Config.Paths sockets (at most
// MaxPaths) bound to the consecutive ports base..base+Paths-1, and
// Message.Path picks the socket, hence the source port, of each datagram.
// Every socket also receives: a datagram's Path on ReadBatch is the local
// port it arrived on. A blocked ReadBatch waits once for all the sockets
// (one epoll set). Port 0 in Config.Addr finds a free range. One sendmmsg
// carries datagrams of one socket only, so WriteBatch makes one system
// call per run of messages on the same path: callers that batch should
// group by path. TryWriteBatch is WriteBatch for a caller that must not
// wait (a poster holding locks others wait on). Why one socket per path,
// and what GSO and GRO cost and save: docs/transport.md, "The socket
// layer".
//
// Invariants:
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
