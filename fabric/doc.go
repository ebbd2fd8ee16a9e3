// Package fabric is the seam between a device's engine and whatever
// carries its RC traffic to peer QPs. The requester side of an engine
// hands a Request to a Fabric; the fabric carries it to the device that
// owns the destination GID and calls that device's Responder, then reports
// the Outcome back through the requester's Completer.
//
// This package holds the interface and Local, the in-process fabric that
// joins the devices of one daemon (two VMs on one host): Post calls the
// destination's Responder directly, so a WRITE is one copy from the source
// guest's memory into the destination guest's. Package fabric/remote
// implements the same interfaces across hosts over the UDP transport: a
// Request goes as packets, which the far end places at their offsets on
// arrival through the device's StreamResponder, completing in order.
//
// Invariants:
//   - Complete is called exactly once per Post, possibly before Post
//     returns, in the order the requests of one source QP were posted.
//   - A Responder never blocks on another device: when it cannot serve a
//     request right now it answers OutcomeBusy (a control change holds its
//     data path for a moment: retry soon) or OutcomeRetry (its device is
//     stopped: retry after the QP's timeout), and the requester retries.
//   - A GID belongs to at most one device: Register refuses a GID another
//     device holds, so a guest cannot capture another tenant's traffic.
package fabric
