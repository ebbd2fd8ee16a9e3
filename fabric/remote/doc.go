// Package remote is the cross-host fabric: a fabric.Fabric and
// fabric.Connector that carries the RC traffic of QPs whose peers are on
// other hosts over the reliable UDP transport (package transport, driven
// by transport/endpoint's I/O loop), and hands traffic between devices
// of this host to an embedded fabric.Local.
//
// A QP's connection is made when the engine calls Connect at RTR, and
// takes the peer's packet stream from the QP's rq_psn on; at RTS the
// QP's own stream starts at its sq_psn, with its retry limits (or
// earlier, in RTR, where the peer's first READ or atomic says: the
// response starts it at the peer's rq_psn, which the request carries,
// so a QP that stays in RTR still answers). Connection
// ids and tokens are derived, not negotiated: ConnIdentity, an HMAC of
// the tenant, both QP addresses and (for a stream's token) the stream's
// first PSN under the cluster secret, gives both hosts the same values
// from the QP attributes alone, and a QP pair connected again with new
// PSNs new tokens, so the old incarnation's packets are refused. Requests
// posted by the QP go out as
// transport messages; their completions come back through the loop and
// complete the requests. Requests from the peer go, packet by packet,
// straight into the local device's memory through its
// fabric.StreamResponder (Begin, Place in any order, Commit in order,
// Release), adapted to the transport's Sink.
//
// The fabric's host side is an address or a network interface: given
// Config.Interface, it binds its sockets to that interface
// (SO_BINDTODEVICE) and takes the interface's address and MTU where the
// config leaves them out (package hostnet resolves them when New runs,
// in the calling thread's network namespace).
//
// Stats are host-wide totals for monitoring: the loop's datagram
// counts, every connection's transport counters summed (those of
// disconnected QPs kept: the endpoint folds a connection's counters in
// when it removes it), and an RTT histogram per path, recorded by a
// wrapper around each connection's path selector as ACKs arrive. None
// of it locks or allocates on the data path.
//
// Invariants:
//   - Post never waits for the I/O loop: it posts a small request and
//     sends it itself if the endpoint's locks are free at once (TryLock,
//     and a write that takes only what the socket accepts), else appends
//     it to a submission queue under small locks that nothing holds
//     while waiting; so the engine may call it holding its data-path
//     gate while the loop is inside a StreamResponder call.
//   - Every posted request completes exactly once, in posting order per
//     QP: from the loop (transport completions), at once inside Post
//     (unreachable, refused before it was queued), or inside Disconnect
//     (OutcomeFlushed).
//   - StreamResponder and Incoming methods are called only from the loop
//     goroutine, with the endpoint's main lock held, inside the device's
//     data path entered with TryEnter (the transport's Gate): the loop
//     never waits for a device, and a packet for a device in a control
//     change is dropped (Stats.Busy) and answered with a BUSY NAK, for
//     its sender to resend soon without using up its retries (only a
//     change longer than Transport.BusyTimeout costs one). Disconnect
//     (and an unregister, and Close) wait for such a call in progress,
//     then release the connection's open Incomings inside Enter, which
//     may wait for the device; afterwards none of its Incomings or its
//     responder is called again. These must therefore not be called with
//     the engine's gate held.
//   - A packet of another tenant or with the wrong connection id or
//     token is dropped and counted (Stats); nothing else changes.
//   - The Completer is called with no lock of this package or the
//     endpoint held except the endpoint's delivery lock; it must not call
//     Disconnect or Close.
package remote
