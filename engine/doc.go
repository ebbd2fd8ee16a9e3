// Package engine is a device's data path: it owns the device's QPs, CQs and SRQs
// at run time, finds work by watching their doorbell records, reads WQEs
// straight from the rings in guest memory, moves the bytes through a
// fabric.Fabric (translating every address through the device's emtt
// table), answers requests from peer QPs as a fabric.Responder (Respond,
// or Begin and its Incoming for a fabric that streams packets), and
// writes CQEs into the CQ rings.
//
// A started engine's requester side (stop and wait, one request per QP
// in flight) runs on a data-path thread (Cores) that polls it among the
// engines placed there; responders run on the fabric's goroutine. The
// control path (package device) changes QPs and CQs only through
// Engine's methods, which return once the change is in force. A busy
// answer (fabric.OutcomeBusy) is retried after 20 µs and costs a retry
// only when it lasts a whole timeout.
//
// Layout: Engine (api.go, lifecycle.go) holds objects (objects.go),
// guest (ring.go) and waker (waker.go); a qp owns its state word
// (qpstate.go) and its requester (requester.go, flush.go) and responder
// (responder.go, stream.go) state; cq and srq own their rings.
//
// The rationale (the gate and lock order, why a responder only tries
// the gate, the responder's steps, retries, errors, the idle
// protocol) is in docs/architecture.md, "### engine"; the doorbell
// protocol in docs/spec.md §6.6. Where code depends on it, it refers
// there.
//
// Invariants:
//   - Every guest-supplied number (ring indices, WQE fields, SGEs, keys,
//     QPNs) is checked before use; a bad WQE completes with an error
//     status and moves only its QP to ERR.
//   - A WQE is copied out of guest memory before it is decoded.
//   - A payload is copied exactly once, from one guest's memory into the
//     other's (guestmem.CopyViews, or Place for a streamed request).
//   - A control call that fails changes nothing (a MODIFY_QP that loses
//     to the data path's move to ERR takes its attributes back).
//   - Guest memory is touched only between Start and Stop, never through
//     views older than the last SetMemory, and always inside
//     guestmem.Guard: a fault fails this device's QPs, never the daemon.
//   - Respond and the streaming responder's methods never block on the
//     gate (Respond tries it and answers fabric.OutcomeBusy; Begin's
//     caller enters it with TryEnter or Enter); nothing inside a pass
//     takes the gate shared a second time.
//   - An RC QP serves only the peer it is connected to (AV dgid and
//     dest_qp_num): a third QP cannot write into it or consume its
//     receives.
//   - An idle engine costs no CPU and a busy one never waits for a kick.
package engine
