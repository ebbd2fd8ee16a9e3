// Package device is the vStellar device model: the paravirtual RDMA device
// (virtio device id 42) that a vhost.Backend serves to one VM. It
// implements vhost.Device and vhost.MemoryWatcher.
//
// It advertises the ABI of package abi (features, config space with the
// per-device limits, the doorbell shared memory region), maps its own
// doorbell region into the guest on activation (shmid 0, or the documented
// guest-RAM fallback with SET_DOORBELL_AREA), executes every control
// command of the control queue, and delivers asynchronous events on the
// event queue. QPs', CQs' and SRQs' rings and state live in the device's
// engine (package engine), MRs in its emtt table; every GID in its table
// is registered on the device's fabric (shared by the devices of one
// daemon), so requests addressed to it reach this engine.
//
// Device holds the lifecycle (lifecycle.go, memory.go), config space and
// attributes (config.go, attr.go, port.go) and the operator's view
// (inspect.go, stats.go), and the parts that own their state, each
// stating its invariants:
//   - control (control.go): the control queue's buffers, counters and
//     dispatch; every request is copied out of guest memory before it is
//     looked at, and every chain gets a status, not a drop.
//   - objects (objects.go, slots.go; pd, cq, qp, srq, ah, mr.go): the
//     handle tables and the commands on them; references, ownership,
//     limits and the MR span budget.
//   - gidTable (gid.go): port 1's GIDs, on the fabric exactly while in
//     the table; link-local and host-prefix GIDs are the devices' own.
//   - doorbells (doorbell.go): where the doorbells are and whether the
//     engine runs on them.
//   - eventQueue (events.go): a fixed ring that drops the oldest event
//     and counts the loss.
//
// Across them:
//   - Guest-supplied numbers (handles, sizes, addresses, page lists) are
//     checked before use; a bad one gets a status and changes nothing.
//     A chain that breaks the virtqueue rules is returned as an error,
//     and the Backend marks the queue broken.
//   - Memory is bounded whatever the guest does: tables stop at the
//     limits, and buffers and rings are allocated once with the device.
//   - Handles are per device; a handle of another device's object names
//     nothing here. Each device owns its doorbell memfd (package
//     shmregion); no other device's doorbells are reachable from it.
//   - Guest memory is touched only inside ProcessQueue, by the engine
//     while it runs, and in SetMemory while the Backend keeps the old
//     mappings; Deactivate waits for running ProcessQueue calls and stops
//     the engine. Lock order: mu (lifecycle), run (ProcessQueue vs
//     Deactivate), ctl (control queue), omu (objects, GIDs, doorbells);
//     the engine's event callback takes none of them.
package device
