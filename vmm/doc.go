// Package vmm is a simulated VM for testing vhost-user back-ends: memfd
// guest RAM laid out like QEMU's x86 q35 machine, the vhost-user front-end
// (package vhost/frontend) driven in QEMU's message order, and the guest's
// virtio driver (package virtio's DriverQueue) working on rings in that RAM.
// It stands in for
//
//	qemu-system-x86_64 -object memory-backend-memfd,id=mem,size=...,share=on \
//	  -numa node,memdev=mem -chardev socket,id=c0,path=... \
//	  -device vhost-user-test-device-pci,chardev=c0,virtio-id=42,num_vqs=N,...
//
// Invariants:
//   - Guest RAM is one sealed memfd, mapped once (MAP_SHARED) in the VMM and
//     never touched except where the guest driver puts rings and buffers, so
//     a 16 GiB VM costs address space, not memory. Low RAM is GPA
//     [0, min(size, 2 GiB)) at file offset 0; the rest is GPA [4 GiB, ...) at
//     file offset 2 GiB. Region user addresses are the VMM mapping's
//     addresses of those parts.
//   - The message order is QEMU's: connect = frontend.Init; DRIVER_OK =
//     SET_FEATURES, GET_STATUS/SET_STATUS(+FEATURES_OK), memory table, per
//     queue SET_VRING_NUM/BASE/ADDR/KICK/CALL, SET_VRING_ENABLE 1 per queue,
//     GET_STATUS/SET_STATUS(+ACK|DRIVER|DRIVER_OK); stop = SET_VRING_ENABLE 0
//     per queue, GET_VRING_BASE per queue, SET_STATUS 0.
//   - Ring indices survive stops and reconnects: a restart resumes at the
//     back-end's last GET_VRING_BASE answer, or at the used index when the
//     back-end vanished without one (virtio_queue_restore_last_avail_idx).
//     Only Reset reinitialises the guest's rings.
//   - Kick eventfds play KVM ioeventfds (the guest writes them), call
//     eventfds play irqfds (the VMM waits on them). They, the memfd, the
//     mapping, the shared memory regions and the socket are all released by
//     Close.
//   - The DriverQueues are not safe for concurrent use; Request serialises
//     per queue, and callers using Queue directly must not mix it with
//     Request on the same queue concurrently.
package vmm
