// Package shmregion provides the shared-memory regions of a vStellar device:
// memfd-backed pages that the daemon maps for itself and hands to the
// VMM with SHMEM_MAP, which maps them into the guest through the device's
// virtio shared memory region (for the doorbell region, shmid 0).
//
// Invariants:
//   - Every Region is its own memfd. Two devices never share a file, so a
//     guest can reach another device's doorbell page by no offset or
//     length: the page is simply not in anything it was given.
//   - A Region's size is fixed at creation and sealed (F_SEAL_SHRINK,
//     F_SEAL_GROW, then F_SEAL_SEAL): a VMM holding the fd cannot truncate
//     it under the daemon's mapping (which would turn the daemon's
//     accesses into SIGBUS) nor grow it.
//   - These pages are not guest RAM. They are never pinned (PVDMA pins
//     only guest RAM) and, once the eMTT exists, are tagged IO memory so
//     that no DMA is ever aimed at them. This separation is what removes
//     Stellar's "stale 2 MiB pin covers a reused doorbell page" bug.
//   - The daemon's view is a guestmem.View over a MAP_SHARED mapping, so
//     the data path reads doorbells with the same bounds-checked, ordered
//     accessors it uses for rings.
//
// This package and guestmem are the only places allowed to use unsafe;
// this one does not need to.
package shmregion
