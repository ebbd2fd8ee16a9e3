// Package device is the vStellar device model: the paravirtual RDMA device
// (virtio device id 42) that a vhost.Backend serves to one VM. It
// implements vhost.Device and vhost.MemoryWatcher.
//
// It advertises the ABI of package abi (features, config space with the
// per-device limits, the doorbell shared memory region), maps its own
// doorbell region into the guest on activation (shmid 0, or the documented
// guest-RAM fallback with SET_DOORBELL_AREA), executes every control
// command of the control queue, and delivers asynchronous events on the
// event queue. The resource model (objects.go) holds PDs, CQs, QPs, AHs
// and the GID table; MRs live in the device's emtt table; QPs' and CQs'
// rings and state live in the device's engine (package engine), which the
// device starts when doorbells exist and stops on deactivation. Every GID
// in the table is registered on the device's fabric (shared by the
// devices of one daemon), so requests addressed to it reach this engine.
// Files: control.go (framing and dispatch), one file per object kind
// (pd, cq, qp, mr, ah, gid, port), doorbell.go (engine start/stop and
// SET_DOORBELL_AREA), events.go, memory.go (guest memory changes),
// lifecycle.go (Activate/Deactivate).
//
// Invariants:
//   - Every request is copied out of guest memory into a device-owned
//     buffer before it is looked at (the guest may change its buffers under
//     us), bounded by abi.MaxRequestSize so a hostile chain cannot make the
//     device copy much. Guest-supplied numbers (handles, sizes, addresses,
//     page lists) are checked before use; a bad one gets a status and
//     changes nothing. REG_MR's page list is read entry by entry, each
//     entry checked after it is read.
//   - Bad commands get a status, not a dropped chain: every popped chain is
//     pushed back, with the response written when the writable part can hold
//     at least a response header, and with written=0 otherwise. A chain
//     that breaks the virtqueue rules (Pop's virtio.ErrBadChain) is
//     returned as an error, and the Backend marks the queue broken and sets
//     DEVICE_NEEDS_RESET.
//   - Commands whose response is larger than the writable part are refused
//     before they execute (RESPONSE_TOO_SMALL), so a create command never
//     allocates something the guest cannot learn the handle of.
//   - Memory is bounded whatever the guest does: object tables stop at the
//     limits (NO_RESOURCES, nothing allocated), MR page-list spans share a
//     per-device budget checked while the list is read (mr.go), the event
//     queue is a fixed ring that drops the oldest event and counts the
//     loss, and the control buffers are allocated once with the device.
//   - Link-local GIDs (fe80::/10) are the devices' own: a guest cannot add
//     one, so it cannot take another device's predictable index-0 GID.
//   - Pending events naming a CQ or QP are dropped when it is destroyed,
//     so a reused number never receives the old object's events.
//   - Handles are per device; a handle of another device's object names
//     nothing here. Each device owns its doorbell memfd (package
//     shmregion); no other device's doorbells are reachable from it.
//   - Guest memory is touched only inside ProcessQueue, by the engine
//     while it runs, and in SetMemory while the Backend keeps the old
//     mappings; Deactivate waits for running ProcessQueue calls and stops
//     the engine. Lock order: mu (lifecycle), run (ProcessQueue vs
//     Deactivate), omu (objects); the engine's event callback takes none
//     of them.
package device
