// Package frontend is the VMM's side of vhost-user: a front-end protocol
// client that drives a vhost-user back-end the way QEMU (>= 10.2, with the
// SHMEM series) drives `vhost-user-test-device-pci`. Tests, the demo and the
// benchmarks use it (through package vmsim) to talk to vstellard's back-end
// exactly as a VM would. Init's sequence, and the sequences package vmsim
// builds from these requests, were checked against recordings of QEMU
// 10.2.2 and 11.1.3 driving vstellard
// (internal/sim/vmsim/testdata/trace-*.txt).
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
//   - The back-end channel (SET_BACKEND_REQ_FD) is read on a goroutine of
//     its own, and each request is handled and acknowledged on the main
//     loop (Options.MainLoop; by default, between two front-end requests):
//     like QEMU, never while a front-end request waits for its reply.
//     SHMEM_MAP really maps the back-end's fd into an address range
//     reserved (PROT_NONE) at GET_SHMEM_CONFIG time; mappings must be
//     page-aligned, inside their region and must not overlap; SHMEM_UNMAP
//     must name exactly one existing mapping. The ShmemSpace keeps a
//     descriptor of each mapped file until the mapping goes, for the VMM
//     to report it as memory, as QEMU does; every other fd the back-end
//     sends is closed once handled.
//   - Mappings are the device's, not the connection's: SET_STATUS and
//     RESET_DEVICE leave them, a new connection's GET_SHMEM_CONFIG of the
//     same sizes keeps them, and a Frontend given a ShmemSpace leaves them
//     there on Close. The VMM drops them on its own reset of the device
//     (ShmemSpace.DropMappings), as QEMU 11.1's virtio_reset does.
//   - A request interrupted by its context, or an I/O error, leaves the
//     stream in an unknown state; the Frontend is then broken and every
//     later request fails.
package frontend
