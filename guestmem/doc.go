// Package guestmem maps guest RAM and gives bounds-checked access to it.
//
// Guest memory reaches vstellard as file descriptors (memfd) passed by the
// VMM with SET_MEM_TABLE or ADD_MEM_REG. A [Mapping] is one MAP_SHARED mmap
// of such a file; a [Region] places part of a mapping at a guest physical
// address and at the VMM's user address; a [Table] is an immutable,
// sorted set of non-overlapping regions that translates guest physical
// addresses (descriptors, rings, MRs) and VMM user addresses (vring
// addresses) into [View]s.
//
// Invariants:
//   - A View is only ever created from a live Mapping and never extends past
//     it; every accessor on a View checks its offset and length, so no
//     guest-supplied number can make the daemon read or write outside the
//     guest's memory. Out-of-range accesses through a View are programming
//     errors and panic like an out-of-range slice index; guest-supplied
//     numbers are checked with [Table.Translate] or [View.Sub], which return
//     errors.
//   - Mappings are page-aligned and page-rounded, so the aligned 32-bit word
//     around any 2-byte-aligned 16-bit field inside a View is mapped. The
//     ordered 16-bit accessors use atomic operations on that word: Go has no
//     16-bit atomics, and the virtio ring indices are 16 bits wide.
//   - A Table never changes; memory updates build a new Table. Whoever
//     unmaps a Mapping must first make sure nobody holds Views into it (the
//     vhost backend quiesces its rings before it swaps tables).
//
// This package and shmregion are the only places that use unsafe on guest
// memory (docs/architecture.md, "unsafe", lists the system-call
// boundaries that use it too).
package guestmem
