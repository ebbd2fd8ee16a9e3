// Package guestdriver is the guest side of the vStellar device: a Go verbs
// library a program inside a (simulated) guest uses to do RDMA. Open a
// device, allocate a PD, register memory (MR), create CQs and RC QPs,
// connect a QP to a peer (GID, QPN), post send and receive work requests,
// poll CQs, arm them and wait for their events.
//
// Control operations (everything that creates, changes or destroys) are
// commands on the control virtqueue, encoded by package abi and answered
// with a status; blocking calls take a context. The data path uses no
// virtqueue: PostSend/PostRecv write WQEs into rings in guest memory and
// store the producer index into the QP's doorbell record; Poll reads CQEs
// up to the device's producer index. Asynchronous events arrive on the
// event virtqueue, which one goroutine per Device drains.
//
// The library reaches the device only through a [Transport]: commands,
// config space, guest DMA memory, the doorbell region, the wake-up kick
// and the event queue. Package virtiopci is the transport for real
// guests; the simulated VM's is in internal/sim/vmsim, which this package
// does not link. Doorbell records are in the device's shared memory
// (DOORBELL_SHMEM) or, without it, in a guest-RAM area registered when
// the first CQ or QP needs one (docs/spec.md §6.2). The files, and the
// reasons behind the rules below: docs/architecture.md, "guest-driver".
//
// Invariants:
//   - All bytes that cross to or from the device are encoded and decoded by
//     package abi; this package has no layouts of its own.
//   - Nothing the device returns is trusted blindly: config space is
//     validated before use, responses must have exactly the ABI's size, a
//     non-OK status becomes an error wrapping the abi.Status, doorbell
//     indices and WQE strides are checked, a CQ producer index more than a
//     ring ahead stops the CQ (ErrDevice), and a consumer index ahead of
//     the producer reads as a full ring, never as room.
//   - Rings: entries are written, then the index stored with release; the
//     other side's index is loaded with acquire before entries are read or
//     slots reused; counters are free-running u32s, the slot counter &
//     (size-1). After a producer store the driver kicks abi.QueueWakeup
//     only if EngineIdle is set (docs/spec.md §6.6).
//   - Posting and polling do not allocate; work requests are checked
//     against the QP's limits before anything is written, and a batch
//     posts the requests before the first bad one.
//   - A destroyed CQ or QP is never named to the device again; its rings
//     go back to the DMA pool only after the device confirmed the destroy.
//   - Event buffers stay posted: each is re-posted before its event is
//     handed on, and any number of successive Opens fit.
//   - A QP moved to RESET restarts its producer counters at 0.
package guestdriver
