// Package emtt will hold the extended memory translation table: one-step
// translation from (memory key, IOVA) to host address and memory type
// (guest RAM, IO/doorbell, GPU), in 2 MiB entries with exact tails, used
// by every DMA the engine performs.
//
// Invariants it will keep:
//   - Reads are lock-free for the engine; updates from the control path
//     never stall it.
//   - DMA into IO memory (doorbell pages) is refused.
//   - Every translation is bounds-checked against the memory region (PD,
//     access flags, range) before an address is produced.
package emtt
