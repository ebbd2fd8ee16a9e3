// Package engine is a device's data path: it owns the device's QPs and CQs
// at run time, finds work by watching their doorbell records, reads WQEs
// straight from the rings in guest memory, moves the bytes through a
// fabric.Fabric (translating every address through the device's emtt
// table), answers requests from peer QPs as a fabric.Responder, and writes
// CQEs into the CQ rings.
//
// Threading: one goroutine per started engine runs the requester side;
// responders run on whatever goroutine the fabric calls them from (with
// fabric.Local, the requesting engine's goroutine). The control path
// (package device) changes QPs and CQs through the methods of Engine,
// which hand the change to the engine race-free and return once it is in
// force (after DestroyQP returns, no goroutine touches that QP's rings
// again).
//
// Locking (see Engine): the engine goroutine holds a gate shared for one
// pass over its QPs; a responder only tries it and answers
// fabric.OutcomeRetry when a control change holds it, because blocking on
// our lock from another device's goroutine could deadlock two devices (or
// one device talking to itself). Changes that take something away from
// the data path (Stop, SetMemory, Reset, DestroyQP/CQ, ResizeCQ, RESET of
// a QP) take the gate exclusively; creations publish through atomic
// pointers and QP attributes are immutable snapshots, so setup never
// stalls running traffic. No lock is held across fabric.Post.
//
// Requester: stop and wait, one request per QP in flight. The head WQE is
// copied out of the ring, decoded, its SGEs translated (again on every
// retry: keys may have been deregistered meanwhile) and posted; a payload
// is copied exactly once, by the responder, from one guest's memory into
// the other's. RNR keeps the WQE at the head and retries after the QP's
// min_rnr_timer up to rnr_retry (7: for ever); OutcomeRetry and
// OutcomeUnreachable retry after the QP's timeout up to retry_cnt. Every
// other failure completes the WQE with the matching IB status.
//
// Errors: any error completion moves the QP to ERR; the engine then
// flushes every outstanding and newly posted WQE of both queues with
// WR_FLUSH_ERR. A move to ERR the data path caused raises one event:
// QP_REQ_ERR (peer rejected the request), QP_ACCESS_ERR (remote access
// error) or QP_FATAL (everything else; Info carries the WCStatus). A CQ
// that overflows raises CQ_ERR and takes its QPs to ERR. A fault on guest
// memory (the guest truncated its memory file) is recovered: the device
// stops touching guest memory and its QPs go to ERR; other devices are
// unaffected.
//
// Doorbells and idling: while there is work the engine polls the doorbell
// records of its live QPs. After a spell with no work (spinFor, yielding
// the processor between polls) it sets abi.EngineIdle in the doorbell
// region's device page, scans once more, and sleeps until Wake (the
// driver's kick on abi.QueueWakeup), a completion from the fabric, or a
// retry timer. So an idle device costs no CPU and a busy one never waits
// for a kick. See docs/spec.md, "Doorbell wake-up protocol".
//
// Invariants:
//   - Every guest-supplied number (ring indices, WQE fields, SGEs, keys,
//     QPNs) is checked before use; a bad WQE completes with an error
//     status and moves only its QP to ERR.
//   - A WQE is copied out of guest memory before it is decoded.
//   - Guest memory is touched only between Start and Stop, and never
//     through views older than the last SetMemory.
//   - An RC QP serves only the peer it is connected to (AV dgid and
//     dest_qp_num): a third QP cannot write into it or consume its
//     receives.
package engine
