// Package frontend is the VMM's side of vhost-user: a front-end protocol
// client that drives a vhost-user back-end the way QEMU (>= 10.2, with the
// SHMEM series) drives `vhost-user-test-device-pci`. Tests, the demo and the
// benchmarks use it to talk to vstellard's back-end exactly as a VM would.
//
// The package deliberately shares no code with the back-end (package vhost):
// request codes, flag bits, protocol feature bits and every payload layout
// are written here again from the specification (docs/interop/vhost-user.rst
// and /work/shared/reference/vhost-user.md), with explicit native-endian
// encoding at fixed offsets, so that a disagreement between the back-end and
// the specification shows up as a failing test rather than being hidden by a
// shared definition.
//
// Invariants:
//   - A message is written with one sendmsg: the 12-byte header, the payload
//     and the file descriptors as SCM_RIGHTS, as QEMU does.
//   - Requests on the main socket are strictly serialised; a reply must carry
//     flags == REPLY|version exactly, echo the request code and have the size
//     the request implies. A reply that breaks the rules is an error, never
//     a panic. File descriptors a reply carries that were not expected are
//     closed.
//   - NEED_REPLY is set on exactly the requests QEMU's hw/virtio/vhost-user.c
//     sets it on (SET_MEM_TABLE, ADD/REM_MEM_REG, SET_BACKEND_REQ_FD,
//     SET_CONFIG, and the "write_sync" requests SET_VRING_ENABLE, and
//     SET_VRING_ADDR/SET_FEATURES when dirty logging is on), and only when
//     REPLY_ACK is negotiated. A non-zero ack is an error. Where QEMU waits
//     but REPLY_ACK is absent, a GET_FEATURES round trip is the barrier.
//   - The back-end channel (SET_BACKEND_REQ_FD) is served on its own
//     goroutine. SHMEM_MAP really maps the back-end's fd into an address
//     range reserved (PROT_NONE) at GET_SHMEM_CONFIG time; mappings must be
//     page-aligned, inside their region and must not overlap; SHMEM_UNMAP
//     must name exactly one existing mapping. All mappings are dropped on
//     device reset (SET_STATUS 0, RESET_DEVICE) and on Close. Every fd the
//     back-end sends is closed once handled.
//   - A request interrupted by its context, or an I/O error, leaves the
//     stream in an unknown state; the Frontend is then broken and every
//     later request fails.
package frontend
