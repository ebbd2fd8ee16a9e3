// Package transport is the reliable transport between hosts: a sans-IO
// connection state machine (Conn) that carries the device's RC semantics
// over UDP, with path selection and congestion control as small policy
// interfaces in the spirit of UCCL's hooks. The packet format is package
// transport/wire; the socket driver is transport/udp; the Linux testbeds
// for its tests are internal/netlab.
//
// A Conn is fed received packets (Handle) and the current time
// (HandleTimeout), and asked for packets to send (Transmit) and for its
// next deadline (Timeout). Messages are posted with Post and complete,
// exactly once and in order, through Completions. Inbound messages are
// placed through a Sink: the payload of every packet goes straight to its
// offset in the message as it arrives, in any order, and the message is
// committed once, in message order, when all of it is there.
//
// Invariants:
//   - No goroutines, sockets or clocks: time is the caller's nanoseconds,
//     so the same code runs over sockets, under fault injection and in a
//     simulator, deterministically.
//   - Every byte of a message is placed at most once and committed
//     exactly once; a message completes at the sender exactly once (OK,
//     or an error after which every later message is flushed), never
//     before the receiver committed it.
//   - A packet that does not belong to the connection (tenant, connection
//     id, token), or that contradicts what the connection knows (a PSN or
//     MSN outside the window, a message whose shape changed), is dropped
//     and counted; it changes nothing else.
//   - A packet the Sink's Gate turns away (its device in a control
//     change) is not received and changes nothing but counters; the peer
//     is told (a BUSY NAK) and resends it without taking it for a loss
//     or using up its retries, but for each whole BusyTimeout (busy.go).
//   - Transmit and Handle allocate nothing in steady state.
package transport
