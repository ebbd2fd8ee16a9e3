// Package engine is a device's data path: it owns the device's QPs and CQs
// at run time, finds work by watching their doorbell records, reads WQEs
// straight from the rings in guest memory, moves the bytes through a
// fabric.Fabric (translating every address through the device's emtt
// table), answers requests from peer QPs as a fabric.Responder, and writes
// CQEs into the CQ rings.
//
// Threading: one goroutine per started engine runs the requester side;
// responders run on whatever goroutine the fabric calls them from (with
// fabric.Local, the requesting engine's goroutine; with a streaming
// fabric, its I/O loop). The control path
// (package device) changes QPs and CQs through the methods of Engine,
// which hand the change to the engine race-free and return once it is in
// force (after DestroyQP returns, no goroutine touches that QP's rings
// again).
//
// Locking (see Engine): the engine goroutine holds a gate shared for one
// pass over its QPs, fabric.Post included: on purpose, because the
// requester's memory (its SGEs' views) must stay mapped while the
// responder copies from or into it. Changes that take something away
// from the data path (Stop, SetMemory, Reset, DestroyQP/CQ, ResizeCQ,
// RESET of a QP) take the gate exclusively, once no request of theirs is
// in flight; creations publish through atomic pointers and QP attributes
// are immutable snapshots, so setup never stalls running traffic.
// Freedom from deadlock rests on three rules: Respond only tries the
// gate (and answers fabric.OutcomeBusy when a control change holds or
// waits for it), since it runs on another device's goroutine, or on our
// own for a loopback request, and blocking there could deadlock two
// devices or one device with itself; nothing inside a pass blocks on the
// gate shared a second time (a reader that blocks behind a waiting
// writer while it already holds the lock deadlocks with that writer);
// and the streaming responder's methods (Begin and those of its
// Incoming) take no lock of the gate themselves: their caller enters the
// data path first, with TryEnter (a fabric's I/O loop, which serves every
// device of its host: it drops what a device in a control change cannot
// take and answers it with a BUSY NAK, so the peer resends it once the
// device is free, with no loss or timeout counted; docs/wire.md) or Enter, which waits for the gate, from
// a goroutine that nothing holding the gate ever waits for (a fabric's
// Post never waits for its loop: it sends or queues without waiting;
// Connect and Disconnect are called with mu held but never the gate).
//
// Streaming responder: a fabric whose requests arrive in packets (the
// cross-host transport) calls Begin, which checks a request as Respond
// would (QP state, peer, access, rkey, range; for SEND, SEND_IMM and
// WRITE_IMM the receive WQE req.RecvAhead past the next unconsumed one,
// or RNR) and translates and pins its target without any effect, then
// the Incoming's Place for every piece (straight into guest memory),
// Commit once, in order (the receive WQE, which must be next by then, is
// consumed and its CQE written; an atomic is performed), ReadAt for a
// READ's response, and Release. Between steps the gate may be let go:
// each step checks that guest memory was not changed (a memory
// generation, bumped by Start, Stop, SetMemory and Reset) and the QP not
// reset or destroyed (a per-QP generation), and refuses otherwise, so a
// late piece never lands in memory that went away. Stop, a VM's pause,
// first lets Incomings already begun end (up to QuiesceTimeout) and
// answers new ones "retry", so a pause does not cut a peer's WRITE in
// half and fail its QP. Incomings are reused
// from a free list (no allocation per message), except READs, whose
// ReadAt outlives Release.
//
// Connections: if the fabric is a fabric.Connector, MODIFY_QP makes the
// QP's connection when it enters RTR (receive side, from rq_psn) and
// updates it when it enters RTS (send side, from sq_psn; retry limits) or
// a connection attribute changes; a
// refusal fails the MODIFY_QP, which changes nothing. RESET, DestroyQP and
// Reset end it (Disconnect) before they wait for the QP's requests, so a
// dead peer cannot hold them for the retry limit; the requests flushed
// that way are dropped with the queues, without completions.
//
// Requester: stop and wait, one request per QP in flight. The head WQE is
// copied out of the ring, decoded, its SGEs translated (again on every
// retry: keys may have been deregistered meanwhile) and posted; a payload
// is copied exactly once, by the responder, from one guest's memory into
// the other's. RNR keeps the WQE at the head and retries after the
// responder's min_rnr_timer, which the RNR NAK carries
// (fabric.Request.RNRTimer), up to rnr_retry (7: for ever; after seven
// NAKs of one WQE at least 1 ms apart, so that a QP waiting for ever
// costs next to nothing); OutcomeRetry and OutcomeUnreachable retry after
// the QP's timeout up to retry_cnt; OutcomeBusy retries after 20 µs and
// counts as one retry only when it lasts a whole timeout. Every other failure completes the WQE
// with the matching IB status; a fabric that retries by itself reports
// only the end: RETRY_EXC_ERR, RNR_RETRY_EXC_ERR, WR_FLUSH_ERR (its
// connection failed) or LOC_PROT_ERR (our memory went away under the
// transfer).
//
// Errors: any error completion moves the QP to ERR; the engine then
// flushes every outstanding and newly posted WQE of both queues with
// WR_FLUSH_ERR. A move to ERR the data path caused raises one event:
// QP_REQ_ERR (peer rejected the request), QP_ACCESS_ERR (remote access
// error) or QP_FATAL (everything else; Info carries the WCStatus). A CQ
// that overflows, or loses its ring or doorbell record, raises CQ_ERR and
// takes its QPs to ERR; no QP is created on a CQ in error, and a QP that
// completes into one goes to ERR. A fault on guest
// memory (the guest truncated its memory file) is recovered: the device
// stops touching guest memory and its QPs go to ERR; other devices are
// unaffected. The control path touches guest memory too (doorbell
// records at Start and creation, RESET, ResizeCQ) and guards it the same
// way: the call fails with StatusBadAddress.
//
// Doorbells and idling: while there is work the engine polls the doorbell
// records of its live QPs. After a spell with no progress (spinFor,
// yielding the processor between polls; a retry that only ends in another
// RNR NAK or transport retry is not progress) it sets abi.EngineIdle in
// the doorbell region's device page, scans once more, and sleeps until
// Wake (the driver's kick on abi.QueueWakeup), a completion from the
// fabric, or a control change. A retry deadline or the idle poll
// (SetIdlePoll) wakes it only to scan with EngineIdle still set; unless
// that scan makes progress it sleeps again at once. So an idle device
// costs no CPU, a waiting QP or a polling device little, and a busy one
// never waits for a kick. See docs/spec.md, "Doorbell wake-up protocol".
//
// Invariants:
//   - Every guest-supplied number (ring indices, WQE fields, SGEs, keys,
//     QPNs) is checked before use; a bad WQE completes with an error
//     status and moves only its QP to ERR.
//   - A WQE is copied out of guest memory before it is decoded.
//   - A control call that fails changes nothing (a MODIFY_QP that loses
//     to the data path's move to ERR takes its attributes back).
//   - Guest memory is touched only between Start and Stop, and never
//     through views older than the last SetMemory.
//   - An RC QP serves only the peer it is connected to (AV dgid and
//     dest_qp_num): a third QP cannot write into it or consume its
//     receives.
package engine
