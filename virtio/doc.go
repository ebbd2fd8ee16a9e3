// Package virtio implements split virtqueues over guest memory, for both
// ends of the ring: [DeviceQueue] is what vstellard runs for each queue of
// the paravirtual RDMA device, and [DriverQueue] is what a guest's virtio
// driver does, used by the simulated VMM in tests, the demo and benchmarks.
// It also holds the virtio feature, status and layout constants
// (VIRTIO 1.x, "Split Virtqueues" and "Reserved Feature Bits").
//
// All guest memory is reached through package guestmem; this package uses
// no unsafe.
//
// Invariants:
//
//   - Every number the guest writes (ring indices, head indices, descriptor
//     addresses, lengths, flags and next links, indirect table sizes) is
//     hostile. [DeviceQueue.Pop] reads each descriptor exactly once into
//     local variables, validates the whole chain (links, loops, flag
//     combinations, ordering, length sums, translation of every buffer
//     through the memory table) and only then hands out views. A rejected
//     chain yields an error wrapping [ErrBadChain] (and
//     [guestmem.ErrOutOfRange] where an address was the problem), never a
//     panic, and no byte of guest data memory has been written.
//   - A buffer (or indirect table) must lie wholly inside one memory
//     region. A buffer that crosses from one region into another, even an
//     adjacent one, is rejected: a Chain's views are then plain slices of
//     one mapping each, and one descriptor always yields at most one view.
//   - Ring indices are published with release ordering and read with
//     acquire ordering (guestmem's ordered accessors, which are Go atomics
//     and therefore sequentially consistent). The notification decisions
//     that need a full barrier (store an index, then load the other side's
//     event field) get it from that sequential consistency.
//   - A DeviceQueue or DriverQueue is owned by one goroutine at a time; it
//     holds no locks. The vhost layer hands a queue between its control
//     path and its worker explicitly.
//   - The driver side shares no chain-building or chain-walking code with
//     the device side, only the layout constants in layout.go, so that a
//     test pairing the two over the same memory checks the layout rather
//     than one implementation against itself.
package virtio
