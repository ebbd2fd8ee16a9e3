// Package guestdriver is the guest side of the vStellar device: a Go verbs
// library a program inside a (simulated) guest uses to do RDMA. Open a
// device, allocate a PD, register memory (MR), create CQs and RC QPs,
// connect a QP to a peer (GID, QPN), post send and receive work requests,
// poll CQs, arm them and wait for their events.
//
// Control operations (everything that creates, changes or destroys) are
// commands on the control virtqueue, encoded by package abi and answered
// with a status; blocking calls take a context. The data path never uses
// a virtqueue: PostSend/PostRecv write WQEs straight into rings in guest
// memory and store the producer index into the QP's doorbell record; Poll
// reads CQEs from the CQ ring up to the device's producer index. Only an
// idle device costs a notification (the wake-up protocol below), and
// asynchronous events (CQ notifications, CQ overflow, QP errors) arrive on
// the event virtqueue, which one goroutine per Device drains.
//
// Files: device.go (Open, commands, config), port.go (port and GIDs),
// memory.go (guest DMA buffers), doorbell.go (doorbell region, both
// modes), pd.go (PD, AH), mr.go, cq.go, qp.go, connect.go (RESET to RTS),
// post.go (work requests), events.go and transport.go.
//
// The library talks to the device only through a [Transport], the seam
// between the verbs logic and how the guest reaches the device: commands,
// config space, guest DMA memory, the doorbell region, the wake-up
// notification and the event queue. Package virtiopci is the transport
// for real guests; the simulated VM's (internal/sim/vmsim, a test rig that
// this package does not link) runs the "guest" inside the simulated VMM
// (guest memory is the VM's memfd RAM, doorbells are the SHMEM_MAP'd
// pages).
//
// Doorbells: with config status DOORBELL_SHMEM the records live in the
// device's shared memory region. With DOORBELL_GUEST_RAM (a VMM without
// SHMEM) the driver allocates a page-aligned area of the layout's size in
// guest RAM and registers it with SET_DOORBELL_AREA; the device then
// treats it as IO memory (no MR may cover it). Either is set up when the
// first CQ or QP needs it.
//
// Invariants:
//   - All bytes that cross to or from the device are encoded and decoded by
//     package abi; this package has no layouts of its own.
//   - Nothing the device returns is trusted blindly: config space is
//     validated before use (ABI major version, limits, doorbell geometry),
//     responses must have exactly the size the ABI defines, a non-OK
//     status becomes an error wrapping the abi.Status
//     (errors.Is(err, abi.StatusNotFound)), doorbell indices and WQE
//     strides in CREATE responses are checked, a CQ producer index more
//     than a ring ahead stops the CQ (ErrDevice) rather than returning
//     overwritten CQEs, and a consumer index ahead of the producer reads
//     as a full ring, never as room.
//   - Ring protocol: a producer writes the entries, then stores its index
//     with release; a consumer loads the other side's index with acquire
//     before it reads entries or reuses slots. Counters are free-running
//     u32s; the slot is counter & (size-1).
//   - Wake-up: after storing a producer index the driver loads
//     engine_flags and kicks abi.QueueWakeup only if EngineIdle is set.
//   - Posting and polling do not allocate (checked by a test); work
//     requests are checked against the QP's limits before anything is
//     written, and a batch posts the requests before the first bad one.
//   - A destroyed CQ or QP is never named to the device again (its number
//     may belong to a newer object); its rings go back to the driver's
//     DMA pool only after the device confirmed the destroy.
//   - Event buffers stay posted: each filled one is re-posted before its
//     event is handed on. Buffers a previous driver of the device posted
//     are read but not re-posted; Open posts only enough to bring the
//     queue up to eventBuffers, and replaces each predecessor's buffer
//     that comes back with one of its own, so any number of Opens fit.
//   - A QP moved to RESET restarts its producer counters at 0, as the
//     device zeroes its doorbell record.
package guestdriver
