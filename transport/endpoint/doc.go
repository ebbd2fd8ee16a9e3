// Package endpoint runs transport connections over a UDP socket set: the
// I/O loop the sans-IO core leaves to its owner. One goroutine per
// Endpoint reads datagrams in batches, parses them, hands each to the
// connection its header names, runs the connections' timers, moves
// submitted messages into their connections, delivers completions, and
// sends what the connections have to send in batches (consecutive
// same-size datagrams go out as one UDP GSO send).
//
// Invariants:
//   - The loop is the only goroutine that calls a Conn's Handle,
//     Transmit and timers, all under the Endpoint's main lock. Other
//     goroutines reach a Conn through the Endpoint: Submit (and
//     SetLimits) only append to a queue under a small lock of its own and
//     wake the loop (a read deadline in the past interrupts a blocked
//     read), so they never wait for a Sink call the loop is in; Post,
//     Add, Remove and the stats take the main lock.
//   - Every submitted message completes exactly once, in submission
//     order per connection, through the connection's done callback: the
//     connection's own completion, or StatusFlushed when the connection
//     failed or was removed first. A full connection keeps the rest of
//     its queue, in order, until completions make room.
//   - Completions are delivered without the main lock; after Remove
//     returns, the connection's Sink and done are never called again.
//   - A datagram that does not parse, or names no connection, is dropped
//     and counted; nothing else changes.
//   - No allocation per packet in steady state: receive and send buffers
//     are the Endpoint's own, reused.
//   - Counters cost the loop nothing beyond an add under the lock it
//     holds: the loop's own (Stats), each connection's (ConnStats), and
//     ConnTotals, the connections' summed when asked, those of removed
//     connections included (folded in by Remove once they are closed,
//     so nothing is lost or counted twice).
package endpoint
