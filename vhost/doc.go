// Package vhost is the back-end side of the vhost-user protocol
// (QEMU docs/interop/vhost-user.rst), as QEMU's vhost-user-test-device-pci
// and Cloud Hypervisor's generic vhost-user device drive it.
//
// A [Backend] serves one [Device] to one front-end connection at a time.
// Messages are typed and decoded by functions that validate their payloads
// (messages.go); one table (dispatch.go) says, per request, how many file
// descriptors it may carry, which protocol feature it needs and whether it
// has a reply body, and one function answers every request: its own reply,
// or a REPLY_ACK when the front-end set NEED_REPLY.
//
// Invariants:
//   - Framing: the 12-byte header is read alone with room for 8
//     descriptors, MSG_CTRUNC ends the connection, then exactly Size payload
//     bytes are read. Every descriptor a message carries that its handler
//     does not take is closed.
//   - Bad input: a malformed payload, an out-of-range index or a request in
//     the wrong state gets an error reply and changes nothing. Only a
//     broken stream (bad header, truncated descriptors, EOF mid-message)
//     ends the connection, and only this device's connection.
//   - Guest memory is mapped MAP_SHARED per region honouring mmap_offset.
//     A memory change builds a new table, moves every ring onto it with the
//     ring workers quiesced, tells a MemoryWatcher device in the same
//     window, and only then unmaps what went away.
//   - Rings follow the spec's life cycle: configured while stopped, started
//     by the first kick, enabled by SET_VRING_ENABLE, stopped by
//     GET_VRING_BASE (which drops the kick and call descriptors), processed
//     only while started, enabled, unbroken and the device is active.
//   - The device outlives connections. A disconnect stops the rings, unmaps
//     memory and deactivates the device without a reset; the front-end
//     replays its set-up on reconnect (see docs/architecture.md).
//   - Activation: the device goes live on DRIVER_OK or on the rings' start
//     (every ring given a kick fd and enabled), whichever comes first;
//     QEMU's generic device sends no DRIVER_OK. It activates on a goroutine
//     of its own, so a SHMEM_MAP it waits for never holds up the front-end
//     (activation.go).
//   - Back-end requests (SHMEM_MAP, SHMEM_UNMAP, CONFIG_CHANGE_MSG) are sent
//     with NEED_REPLY, in order; their acknowledgements are read by the
//     channel's own goroutine, so a waiter can give up without breaking
//     the stream. Nothing on the connection goroutine waits for one.
//   - A file we mapped into shared memory that the front-end reports back
//     as guest memory (QEMU does, for the shared-memory BAR) is accepted
//     and kept out of the memory table: it is device memory.
package vhost
