// Package pathbench measures path selectors on a simulated leaf-spine
// fabric (internal/sim/netsim's Clos): a permutation of long WRITE transfers
// from every host of leaf 0 to a distinct host of leaf 1 (and back, if
// asked), each a pair of transport.Conn, all with one selector kind and
// the same transport settings. Run reports each flow's fate, the
// goodput as a fraction of the bisection capacity, and delivered bytes
// over time (to see a black hole bite and the selectors recover). Tests
// and benchmark commands share it.
//
// Invariants:
//   - A run is deterministic: the scenario's seed fixes the permutation,
//     the ECMP hash, every selector's seed and every Single entropy.
//   - The harness checks what it carries: every message completes once,
//     in order, OK only after the receiver committed it exactly once,
//     and every packet's bytes land at the offset they were sent from;
//     what does not hold is reported in Result.Violations.
package pathbench
