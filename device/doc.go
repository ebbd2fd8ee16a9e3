// Package device is the vStellar device model: the paravirtual RDMA device
// (virtio device id 42) that a vhost.Backend serves to one VM. It
// implements vhost.Device.
//
// What it does today: advertises the ABI of package abi (features, config
// space with the per-device limits, the doorbell shared memory region),
// maps the device's own doorbell region into the guest on activation
// (shmid 0, or the documented guest-RAM fallback when the front-end cannot),
// and serves the control queue: QUERY_DEVICE and RESET_STATE are executed,
// every other defined opcode is answered NOT_SUPPORTED until the data path
// lands.
//
// Invariants:
//   - Every request is copied out of guest memory into a private buffer
//     before it is looked at (the guest may change its buffers under us),
//     bounded by abi.MaxRequestSize so a hostile chain cannot make the
//     device copy much.
//   - Bad commands get a status, not a dropped chain: every popped chain is
//     pushed back, with the response written when the writable part can hold
//     at least a response header, and with written=0 otherwise. A chain
//     that breaks the virtqueue rules (Pop's virtio.ErrBadChain) is
//     returned as an error, and the Backend marks the queue broken and sets
//     DEVICE_NEEDS_RESET.
//   - Commands whose response is larger than the writable part are refused
//     before they execute (RESPONSE_TOO_SMALL), so a create command never
//     allocates something the guest cannot learn the handle of.
//   - Each device owns its doorbell memfd (package shmregion); no other
//     device's doorbells are reachable from it.
//   - The device touches guest memory only inside ProcessQueue; Deactivate
//     waits for running ProcessQueue calls to return.
package device
