// Package pvdma will pin guest memory on demand for DMA (PVDMA), in 2 MiB
// chunks aligned on guest physical addresses, through a map cache from
// chunk to host address with pin state and reference counts.
//
// Invariants it will keep (docs/architecture.md, ARCHITECTURE.md §3):
//   - Nothing pins all guest memory at start; pinning happens at first DMA
//     touch (or at REG_MR, as an option). Pin-all exists only as the
//     measured baseline that SR-IOV/VFIO passthrough imposes.
//   - Memory removed at run time is unpinned and its translations
//     invalidated before its mapping goes; DMA in flight against it fails
//     cleanly.
//   - Shared-memory (doorbell) pages are never pinned and never enter the
//     cache.
//
// The pinner is a seam: the default populates and mlocks the daemon's
// mapping of the guest memfd; VFIO/iommufd or host-RNIC pinners plug in on
// real hosts.
package pvdma
