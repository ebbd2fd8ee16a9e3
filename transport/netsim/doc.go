// Package netsim is a deterministic, discrete-event network simulator for
// sans-IO transport endpoints: packets cross links that lose, duplicate,
// reorder, delay (with spikes) and partition them, all drawn from one
// seeded random source, on a virtual clock. The same seed gives the same
// run, so a failure found by a fault-injection test replays exactly.
//
// Invariants:
//   - Time is virtual (ns); nothing sleeps, and nothing reads the clock.
//   - Endpoints are called one at a time, in event order; a packet handed
//     to Receive is valid only until Receive returns (its buffer is
//     reused).
package netsim
