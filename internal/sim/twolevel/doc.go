// Package twolevel models the two-level address translation that the eMTT
// replaces, so that cmd/vstellar-bench can compare the two in one run.
//
// On a host RNIC whose virtual devices (VFs) are passed to VMs, a DMA is
// translated twice. The NIC's MTT maps (memory key, IOVA) to a guest
// physical address, one entry per 4 KiB page of the MR. Then the IOMMU
// maps guest physical to host physical: the NIC asks its Address
// Translation Cache (ATC, PCIe ATS) first, a few dozen entries shared by
// every virtual device of the NIC, and on a miss the IOMMU walks the page
// table of that device's domain. With many devices the ATC thrashes and
// most pages cost a walk. The eMTT (package emtt) does it in one step, in
// 2 MiB entries.
//
// The model is made of the real data structures, not of delays:
//   - [MTT]: per device, key -> region (PD, access, IOVA, length) with a
//     guest physical page frame per 4 KiB IOVA page. Lookups check key, PD,
//     access and range as emtt does and fail with emtt's errors.
//   - [Domain]: per device, a 4-level radix page table like x86
//     second-level (VT-d) tables: 9 bits a level over 4 KiB pages (48-bit
//     guest physical addresses), 512-entry tables allocated as mappings
//     need them. A walk is four dependent loads: each level's entry names
//     the next table. [NewDomain] maps all of a device's guest RAM, as
//     VFIO does for a passed-through device.
//   - [ATC]: one per NIC, shared by all its devices, fully associative
//     with true LRU replacement, keyed by (device id, guest physical page).
//     Its lookup is a hash probe, not a scan of every entry: the hardware
//     compares all entries at once, so the model must not charge it per
//     entry.
//   - [HostMemory]: the host physical address space. Each guest memory
//     mapping gets a host physical base, so a host address is a number the
//     page tables can hold, and turns back into the bytes it names with
//     [HostMemory.View].
//   - [NIC.Translate] checks the MTT region and then translates every
//     4 KiB page the DMA touches through the ATC, walking the IOMMU on a
//     miss, and returns the host address of the first byte.
//
// Invariants:
//   - A translation returns the same host bytes emtt's Translate returns
//     for the same MR, or the same error for the same bad key, PD, access
//     or range.
//   - The cost of a translation comes only from the data-structure work:
//     no sleeps, spins or synthetic delays.
//   - An ATC entry is only ever filled from a walk of the domain of the
//     device that asked, and is keyed by that device, so one device never
//     gets another's translation.
//   - Not safe for concurrent use: the model is one NIC translation unit,
//     driven from one goroutine. Domains and MTTs are built before use.
//
// What the model leaves out, so its costs understate the real gap: an ATC
// miss on real hardware is a PCIe round trip to the IOMMU (about 1 µs)
// before the walk even starts; here a miss costs only the walk through
// the CPU's caches, which stand in for the IOMMU's paging-structure
// caches (and the CPU's caches stand in for the NIC's MTT cache too). The
// model also consults the ATC only once per 4 KiB page, where a NIC needs
// a translation for every DMA request it issues (a few hundred bytes to
// 4 KiB each). On the other side, its IOMMU pages are 4 KiB, so the ATC
// reaches 64 x 4 KiB = 256 KiB: a host that maps guest RAM with 2 MiB
// IOMMU pages, and whose ATS answers cover 2 MiB, misses less.
package twolevel
