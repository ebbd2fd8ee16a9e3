// Package cc holds the transport's congestion controllers, which plug
// into a transport.Conn through transport.CongestionControl (and
// transport.Pacer): New builds one from a Config, ParseKind reads its
// kind's name. Windows are in packets and may be fractional; a window
// below one packet sends one packet at a time, paced at one per
// RTT/cwnd.
//
// Controllers (the formulas, their sources and the reasons for each
// choice are in docs/multipath.md, "Congestion control"):
//
//   - fixed: transport.FixedWindow of MaxWindow packets.
//   - swift: Swift (SIGCOMM 2020), delay-based AIMD against a target of
//     base, per-hop and flow-scaling terms, decreasing at most once per
//     RTT. The delay it compares is, by default (DelayQuantile), a
//     quantile of the last RTT's samples, so that a minority of slow
//     paths under spraying does not collapse the window; DelayLatest is
//     plain Swift.
//   - cubic: CUBIC (RFC 9438) with the Reno-friendly region.
//   - PerPath (swift or cubic; UCCL's CubicPP): one controller per path
//     (path p uses state p % Paths); Window is the sum over the paths
//     heard of within PathIdle, bounded by MaxWindow.
//
// Every controller but fixed is a transport.Undoer (a connection with
// UndoCuts asks it to take back a cut whose losses proved spurious), and
// every controller is a transport.Pacer (with PacingGain g > 0 it spreads
// a window over an RTT: a gap of RTT/(g*cwnd)).
//
// Invariants:
//   - Controllers are fed time, never read a clock, and hold no
//     goroutines: the same events give the same windows.
//   - The window stays within [MinCwnd, MaxCwnd], finite, whatever the
//     events (zero or negative counts and samples, times out of order);
//     Window is within [1, MaxWindow], a pacing gap within [0, 1 s].
//   - After New, no call allocates.
package cc
