// Package vmsim is a simulated VM for testing vhost-user back-ends: memfd
// guest RAM laid out like QEMU's x86 q35 machine, the vhost-user front-end
// (internal/sim/frontend) driven as QEMU drives its generic device, and
// the guest's virtio driver (package virtio's DriverQueue) working on
// rings in that RAM. It stands in for
//
//	qemu-system-x86_64 -object memory-backend-memfd,id=mem,size=...,share=on \
//	  -numa node,memdev=mem -chardev socket,id=c0,path=... \
//	  -device vhost-user-test-device-pci,chardev=c0,virtio-id=42,num_vqs=N,...
//
// TestTraceMatchesQEMU checks it against recordings of QEMU 10.2.2 and
// 11.1.3 (testdata/trace-*.txt); the message order, QEMU's reasons and
// where the simulation parts from QEMU are in docs/architecture.md, "How
// a VMM drives a device". Transport is the guest verbs library's
// guestdriver.Transport onto a VM, DeviceConfig a VM with one vStellar
// device (here, so that the library does not link the simulator).
//
// Invariants:
//   - Guest RAM is one sealed memfd, mapped once (MAP_SHARED) and touched
//     only where the guest driver puts rings and buffers, so a 16 GiB VM
//     costs address space, not memory. Low RAM is GPA [0, min(size,
//     2 GiB)) at file offset 0, the rest GPA [4 GiB, ...) at offset 2 GiB;
//     region user addresses are the VMM mapping's. The shared memory BAR
//     lies above RAM, at a 1 GiB boundary.
//   - Messages go in QEMU's order (vhost-user-base.c): connect (New,
//     Reconnect) is frontend.Init; start (Start, the guest's DRIVER_OK)
//     and stop (Stop, Reset, Close) send what QEMU sends. The memory
//     table is guest RAM plus the BAR ranges the back-end has mapped.
//   - The main loop (mainloop.go) is held by every exchange the VMM
//     starts (a whole start is one hold) and by each back-end request:
//     handled, acknowledged, then the memory table brought up to date. A
//     back-end that waits for an acknowledgement inside its handling of
//     a front-end request deadlocks here as under QEMU. The data path
//     (Kick, Request, interrupts) does not take the loop.
//   - Shared memory mappings last until SHMEM_UNMAP, a guest reset
//     (Reset) or Close, and across reconnects.
//   - Ring indices survive stops and reconnects: a restart resumes at the
//     back-end's last GET_VRING_BASE answer, or at the used index when the
//     back-end vanished without one. Only Reset reinitialises the rings.
//   - Kick eventfds play KVM ioeventfds (the guest writes them), call
//     eventfds irqfds (the VMM waits on them). They, the memfd, the
//     mapping, the shared memory regions and the socket are all released
//     by Close.
//   - The DriverQueues are not safe for concurrent use; Request serialises
//     per queue, and callers using Queue directly must not mix it with
//     Request on the same queue concurrently.
package vmsim
