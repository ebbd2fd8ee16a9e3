// Package engine is a device's data path: it owns the device's QPs and CQs
// at run time, finds work by watching their doorbell records, reads WQEs
// straight from the rings in guest memory, moves the bytes through a
// fabric.Fabric (translating every address through the device's emtt
// table), answers requests from peer QPs as a fabric.Responder, and writes
// CQEs into the CQ rings.
//
// Threading: one goroutine per started engine runs the requester side;
// responders run on whatever goroutine the fabric calls them from. The
// control path (package device) changes QPs and CQs through the methods of
// Engine, which hand the change to the engine race-free and return once it
// is in force (after DestroyQP returns, no goroutine touches that QP's
// rings again).
//
// Doorbells and idling: while there is work the engine polls the doorbell
// records of its live QPs and CQs. After a spell with no work it sets
// abi.EngineIdle in the doorbell region's device page, scans once more,
// and sleeps until Wake (the driver's kick on abi.QueueWakeup), a
// completion from the fabric, or a timer. So an idle device costs no CPU
// and a busy one never waits for a kick. See docs/spec.md, "Doorbell
// wake-up protocol".
//
// Invariants:
//   - Every guest-supplied number (ring indices, WQE fields, SGEs, keys,
//     QPNs) is checked before use; a bad WQE completes with an error
//     status and moves only its QP to ERR.
//   - A WQE is copied out of guest memory before it is decoded.
//   - Guest memory is touched only between Start and Stop, and never
//     through views older than the last SetMemory.
package engine
