// Package endpoint runs transport connections over a UDP socket set: the
// I/O loop the sans-IO core leaves to its owner. One goroutine per
// Endpoint reads datagrams in batches, parses them, hands each to the
// connection its header names, runs the connections' timers, and sends
// what they have to send in batches (consecutive same-size datagrams go
// out as one UDP GSO send).
//
// Invariants:
//   - The loop is the only goroutine that calls a Conn's Handle,
//     Transmit and timers; Post and Completions from other goroutines go
//     through the Endpoint, which serialises them with the loop and wakes
//     it (a read deadline in the past interrupts a blocked read).
//   - A datagram that does not parse, or names no connection, is dropped
//     and counted; nothing else changes.
//   - No allocation per packet in steady state: receive and send buffers
//     are the Endpoint's own, reused.
package endpoint
