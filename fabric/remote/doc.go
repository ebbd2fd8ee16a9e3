// Package remote is the cross-host fabric: a fabric.Fabric and
// fabric.Connector that carries the RC traffic of QPs whose peers are on
// other hosts over the reliable UDP transport (package transport, driven
// by transport/endpoint's I/O loop), and hands traffic between devices
// of this host to an embedded fabric.Local.
//
// The engine calls Connect at RTR and RTS. Connection ids and tokens are
// derived, not negotiated (ConnIdentity, under the cluster secret), so a
// QP pair connected again with new PSNs refuses the old incarnation's
// packets. A QP's requests go out as transport messages; the peer's go,
// packet by packet, straight into the local device's memory through its
// fabric.StreamResponder, adapted to the transport's Sink. Streams,
// tokens, the early response stream and the reasons for each:
// docs/transport.md, "Between VMs".
//
// Given Config.Interface, the sockets are bound to that interface
// (SO_BINDTODEVICE, docs/operations.md); package hostnet resolves its
// address and MTU when New runs, in the calling thread's network
// namespace. Stats are host-wide totals (what they sum: docs/transport.md,
// "Counters"); none of it locks or allocates on the data path.
//
// Invariants (why: docs/transport.md, "Locking" and "Busy peer"):
//   - Post never waits for the I/O loop: a small request is sent inline
//     only with locks got at once (TryLock, a write taking what the
//     socket accepts), else queued under small locks that nothing holds
//     while waiting; so the engine may call it holding its gate.
//   - Every posted request completes exactly once, in posting order per
//     QP: from the loop, inside Post (unreachable, refused before it was
//     queued), or inside Disconnect (OutcomeFlushed).
//   - StreamResponder and Incoming methods are called only from the loop
//     goroutine, with the endpoint's main lock held, inside the device's
//     data path entered with TryEnter (the transport's Gate): the loop
//     never waits for a device. A packet for a device in a control
//     change is dropped (Stats.Busy) and answered with a BUSY NAK.
//   - Disconnect, an unregister and Close wait for such a call in
//     progress, then release the connection's open Incomings inside
//     Enter, which may wait for the device; none of its Incomings or its
//     responder is called again. So none of them may be called with the
//     engine's gate held.
//   - A packet of another tenant or with the wrong connection id or
//     token is dropped and counted (Stats); nothing else changes.
//   - The Completer is called with no lock of this package or the
//     endpoint held except the endpoint's delivery lock; it must not call
//     Disconnect or Close.
package remote
