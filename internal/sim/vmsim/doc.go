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
// The requests it sends were checked against recordings of QEMU 10.2.2
// and 11.1.3 driving vstellard from real guests (testdata/trace-*.txt,
// made by e2e/realvm's TestQEMUMessageTrace; TestTraceMatchesQEMU replays
// them here): the same requests in the same order, phase by phase, but
// for the guest's config reads and where QEMU 11.1.3 crashes (below).
//
// Transport (transport.go) is the guest verbs library's
// guestdriver.Transport onto a VM, and DeviceConfig a VM with one
// vStellar device: the simulated guest's side. They live here, not in
// guest-driver, so that the verbs library does not link the simulator.
//
// Invariants:
//   - Guest RAM is one sealed memfd, mapped once (MAP_SHARED) in the VMM and
//     never touched except where the guest driver puts rings and buffers, so
//     a 16 GiB VM costs address space, not memory. Low RAM is GPA
//     [0, min(size, 2 GiB)) at file offset 0; the rest is GPA [4 GiB, ...) at
//     file offset 2 GiB. Region user addresses are the VMM mapping's
//     addresses of those parts. The shared memory BAR lies above RAM, at a
//     1 GiB boundary.
//   - The message order is QEMU's generic device's (vhost-user-base.c):
//     connect (New, Reconnect) = frontend.Init; start (Start: the guest's
//     DRIVER_OK) = SET_FEATURES, GET_STATUS and SET_STATUS(+FEATURES_OK)
//     unless set, the memory table, per queue SET_VRING_NUM/BASE/ADDR/
//     KICK/CALL, SET_VRING_ENABLE 1 per queue, SET_VRING_CALL per queue
//     (the notifiers unmasked); stop (Stop, Reset, Close) =
//     SET_VRING_ENABLE 0 per queue, GET_VRING_BASE per queue. QEMU sends
//     no DRIVER_OK and no SET_STATUS 0 for this device: the rings' start
//     and stop are the device's.
//   - The memory table follows QEMU's vhost memory listener: guest RAM
//     plus, once the back-end has mapped a file into a shared memory
//     region, that range of the BAR with the back-end's file. With
//     CONFIGURE_MEM_SLOTS only the difference from what the back-end has
//     is sent, removals (REM_MEM_REG) first, then additions (ADD_MEM_REG);
//     without it, SET_MEM_TABLE at every start and change.
//   - The main loop (mainloop.go): every exchange the VMM starts holds it
//     throughout (a whole start is one hold), and each back-end request is
//     served under it: handled, acknowledged, then the memory table brought
//     up to date while the device runs (QEMU commits its memory
//     transaction after the acknowledgement). A back-end that waits for an
//     acknowledgement inside its handling of a front-end request
//     deadlocks here as under QEMU. The data path (Kick, Request,
//     interrupts) does not take the loop.
//   - Shared memory mappings are the device's: they last until
//     SHMEM_UNMAP, a guest reset (Reset: QEMU 11.1's virtio_reset drops
//     them) or Close, and across reconnects.
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
//
// Where the recordings and the simulation part: the guest program reads
// config space (one GET_CONFIG per read) where the simulated guest reads
// it only through ReadConfig, so config reads are left out of the
// comparison; and QEMU 11.1.3 does not survive a hot-unplug of a device
// whose doorbells are mapped: after the rings' stop and the disconnect,
// the device's finalize fails an assertion removing the mapping
// (memory_region_del_subregion); the simulated VM just disconnects. With
// CONFIGURE_MEM_SLOTS negotiated, 11.1.3 does not survive a guest reset
// either: virtio_reset drops the mapping while the device is stopped, and
// the next start's ADD/REM_MEM_REG bookkeeping looks the dropped region
// up to remove it and dereferences NULL (memory_region_get_fd); there the
// simulated VM sends the REM_MEM_REG and goes on. (vstellard withholds
// CONFIGURE_MEM_SLOTS for that reason, and the recordings show QEMU's
// SET_MEM_TABLE after a reset without the BAR's range: the mapping is
// gone, and the device maps its doorbells again.)
package vmsim
