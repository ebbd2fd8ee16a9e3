// Package transport will hold the packet-spray reliable transport between
// hosts: a sans-IO core fed received packets and the current time that
// returns packets to send and its next timer deadline, with path
// selection, congestion control and loss recovery as small interfaces in
// the spirit of UCCL's hooks, and the UDP socket drivers that run it.
//
// Invariant: the core owns no goroutines, sockets or clocks, so the same
// code runs over sockets, under fault-injection tests and in a simulator.
package transport
