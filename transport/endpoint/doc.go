// Package endpoint runs transport connections over a UDP socket set: the
// I/O loop the sans-IO core leaves to its owner. One goroutine per
// Endpoint reads datagrams in batches, parses them, hands each to the
// connection its header names, runs the connections' timers, moves
// submitted messages into their connections, delivers completions, and
// sends what the connections have to send in batches (consecutive
// same-size datagrams go out as one UDP GSO send).
//
// A small message (at most 4 KiB) leaves from its submitter's
// goroutine: Submit, finding the main lock free, posts it and sends it
// itself (at most inlineMax datagrams, without waiting for socket buffer
// space), so the round trip does not wait for the loop to be woken and
// scheduled. See docs/transport.md, "Latency".
//
// Invariants:
//   - The loop is the only goroutine that calls a Conn's Handle and
//     timers; they and every Transmit run under the Endpoint's main
//     lock. Other goroutines reach a Conn through the Endpoint: Submit
//     only tries the main lock (TryLock): with it, a small message and
//     nothing queued for the connection, it posts and transmits inline;
//     else it appends to a queue under a small lock of its own and wakes
//     the loop (a read deadline in the past interrupts a blocked read).
//     SetLimits and StartSend always queue. So none of them waits for a
//     Sink call the loop is in, nor for the socket: an inline send takes
//     only what the socket accepts at once and leaves the rest to the
//     loop. Post, Add, Remove and the stats take the main lock.
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
//     holds (an atomic add for the datagrams an inline send wrote,
//     after it let go of the lock): the loop's own (Stats), each
//     connection's (ConnStats), and
//     ConnTotals, the connections' summed when asked, those of removed
//     connections included (folded in by Remove once they are closed,
//     so nothing is lost or counted twice).
package endpoint
