// Package emtt holds the extended memory translation table: one-step
// translation from (memory key, IOVA) to host memory and memory type, used
// by every DMA the engine performs. A device has one Table; REG_MR inserts
// a Region, DEREG_MR removes it, and the engine translates the lkeys and
// rkeys of every work request through it.
//
// A key is index<<8 | tag: the index names a slot, the 8-bit tag changes
// every time the slot is reused, so a stale key (kept after DEREG_MR) or a
// forged one finds nothing rather than someone else's memory.
//
// Invariants:
//   - Reads are lock-free: Lookup is at most two atomic loads. Writers
//     (the control path) serialise on a mutex and publish immutable
//     Regions, so they never stall the engine.
//   - Every translation is checked against the region's protection
//     domain, access flags and range before any host memory is returned.
//   - Only guest RAM is translated for DMA; IO memory (a guest-RAM doorbell
//     area in the fallback mode) is reserved in the table, no region may
//     cover it, and Translate refuses any region that is not guest RAM.
//   - Regions keep the guest physical ranges they were built from, so
//     Rebind can move them onto a new guest memory table (or invalidate
//     them when their memory went away) before the old mappings are
//     unmapped.
//   - A region's host memory is indexed in 2 MiB IOVA entries with exact
//     tails; each piece points at its pvdma Area, so a translation with a
//     Hold also takes the pin references its DMA needs (pinning chunks on
//     first touch). A table with a pin cache binds only memory the cache
//     knows: the owner moves the cache (pvdma.Cache.SetMemory) first.
//
// Package internal/sim/twolevel models the two-step path this table
// replaces, for measurement.
package emtt
