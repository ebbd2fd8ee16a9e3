// Package netsim is a deterministic, discrete-event network simulator for
// sans-IO transport endpoints, on a virtual clock, with every random draw
// from one seeded source: the same seed gives the same run, so a failure
// found by a fault-injection test replays exactly.
//
// It has two shapes. Sim joins two endpoints by a link each way that
// loses, duplicates, reorders, delays (with spikes) and partitions
// packets. Clos is a two-tier leaf-spine fabric carrying many flows (a
// pair of endpoints each, on two hosts): a packet crosses its host's
// NIC, then, between leaves, a leaf uplink to the spine ECMP picks from a
// hash of the two hosts, the packet's path (its UDP source-port entropy)
// and the seed, the spine's downlink, and the leaf's port to the host;
// under one leaf it skips the spines. Every link serialises at its rate
// behind a FIFO and drops what overflows its drop-tail buffer; links
// can also lose at random, and a black hole drops everything a leaf
// sends to one spine in a window. Each link counts what it did.
//
// Invariants:
//   - Time is virtual (ns); nothing sleeps, and nothing reads the clock.
//   - Endpoints are called one at a time, in event order; a packet handed
//     to Receive is valid only until Receive returns (its buffer is
//     reused).
//   - A link's backlog never exceeds its buffer (Clos); a packet dropped
//     is counted on the link that dropped it, once.
package netsim
