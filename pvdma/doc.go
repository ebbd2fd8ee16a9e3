// Package pvdma pins guest memory on demand for DMA (PVDMA): in 2 MiB
// chunks aligned on guest physical addresses, when a DMA first touches
// them, through a map cache from chunk to host memory with pin state and
// reference counts.
//
// A [Pool] is one host: its pinned-memory budget, the LRU order of the
// chunks pinned under it and its metrics. A [Cache] is one device: the map
// cache over that device's guest memory, an [Area] per guest memory
// region, its own budget and its [Mode]. A [Hold] is what a DMA (or a
// long-lived user, an MR pinned at registration) keeps while it uses
// chunks; a held chunk is never released.
//
// Invariants:
//   - Nothing pins all guest memory at start unless the device asked for
//     ModeAll, the baseline that SR-IOV/VFIO passthrough imposes.
//   - Only guest memory regions from the memory table enter the cache.
//     Shared-memory (doorbell) pages are not guest RAM and never do; guest
//     RAM the device reserves as IO memory (the doorbell fallback) is cut
//     out of every chunk pinned around it ([Cache.ExcludeIO]).
//   - Memory removed at run time is unpinned and its Area marked gone
//     before the mapping goes ([Cache.SetMemory]); a later acquisition
//     fails with ErrRemoved, a DMA already holding it finishes on memory
//     that is still mapped (the engine quiesces before vhost unmaps).
//   - Acquiring a pinned chunk is lock-free and writes one cache line:
//     an atomic add on its state word and one on its hit count beside it.
//     Through an area's [Pins] (the copy of its data path a translation
//     keeps) it reads nothing of the Area itself. Pinning, eviction and
//     memory changes take locks (the cache's, then the pool's) and never
//     wait for the engine.
//   - A chunk is released only with no reference; the LRU picks the chunk
//     least recently acquired, first from the device over its own budget,
//     else from any device of the host. A chunk's slot is emptied only
//     after its pages are unpinned, so a re-pin can never be undone by a
//     late unpin of the chunk it replaces.
//
// The [Pinner] is a seam: the default populates and mlocks the daemon's
// own mapping of the guest memfd; a VFIO/iommufd or host-RNIC (ibv_reg_mr)
// pinner plugs in on real hosts (docs/architecture.md, "PVDMA").
package pvdma
