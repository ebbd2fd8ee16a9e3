// Package pathsel holds the transport's path selectors: the policies
// that give every packet of a connection its path, the UDP source-port
// entropy the fabric's ECMP hashes (transport.PathSelector). Kinds:
// Single (one entropy: RoCE's ECMP baseline), OPS (random spray), RR,
// DWRR (weighted by RTT and loss), BestRTT, P2C (UCCL's power of two
// choices on EWMA RTT) and REPS (recycled entropies). New builds one from
// a Config; ParseKind and Kind.String name them for configs and CLIs.
//
// Every kind keeps the same per-path state (EWMA RTT, minimum RTT, loss
// counts and rate, last ACK) in one array, and every spraying kind
// shares the same black-hole handling: DownAfter losses in a row with no
// ACK take a path down; it is avoided but for probes (one new packet
// after ProbeInterval, then at doubling intervals up to
// MaxProbeInterval), and an ACK on it brings it back. A retransmission
// avoids the path its packet was last sent on (the selector remembers
// the paths of recent PSNs) and every path that lost a packet since its
// last ACK, and never probes. With Chunk > 1, one decision covers that
// many consecutive new packets. A retransmission timeout (OnTimeout)
// puts REPS in its freeze mode for FreezeTime: it reuses the entropies
// it holds and explores no new ones.
//
// internal/sim/pathbench runs the selectors over a simulated leaf-spine
// fabric (internal/sim/netsim) for tests and benchmarks.
//
// Invariants:
//   - SelectPath always returns a path below Paths (Single: Entropy),
//     whatever it was told before, including paths out of range, which
//     OnAck and OnLoss ignore.
//   - Deterministic: the same Config (Seed) and the same calls give the
//     same paths; time is the caller's, never read.
//   - SelectPath, OnAck, OnLoss and OnTimeout allocate nothing and take
//     amortised O(1) time (BestRTT's reports O(log Paths); REPS's frozen
//     decisions and losses O(RecycleBuffer)); a scan of all paths happens
//     only when a probe falls due, or when most paths are down.
//   - Not safe for concurrent use: a selector belongs to one connection.
package pathsel
