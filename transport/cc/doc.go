// Package cc holds the transport's congestion controllers, which plug
// into a transport.Conn through transport.CongestionControl (and
// transport.Pacer): New builds one from a Config, ParseKind reads its
// kind's name. Windows are in packets and may be fractional; a window
// below one packet sends one packet at a time, paced at one per
// RTT/cwnd.
//
// Controllers:
//
//   - fixed: transport.FixedWindow of MaxWindow packets.
//
//   - swift (Kumar et al., SIGCOMM 2020, Algorithm 1; parameters as the
//     paper and htsim, target as UCCL's): target = BaseTarget +
//     Hops*HopScale + clamp(alpha/sqrt(cwnd) + beta_fs, 0, FSRange) with
//     alpha = FSRange/(1/sqrt(FSMinCwnd) - 1/sqrt(FSMaxCwnd)) and beta_fs
//     = -alpha/sqrt(FSMaxCwnd). Below the target: cwnd += AI*acked/cwnd
//     (cwnd += AI*acked below one packet). At or above it, at most once
//     per RTT (the guard restarts at every decrease, which UCCL's code
//     forgets): cwnd *= max(1 - Beta*(delay-target)/delay, 1 - MaxMDF). A
//     loss (fast recovery) or a timeout: cwnd *= 1 - MaxMDF under the same
//     guard; RetxReset timeouts in a row: cwnd = MinCwnd. The delay is the
//     RTT (send to acknowledgement; the wire has no NIC timestamps to
//     split off host delay).
//
//     Spraying: with packets sprayed over paths of which a few are slow
//     (congested elsewhere, or long), plain Swift (DelayLatest) reacts to
//     the latest sample; a slow path's sample arrives in almost every
//     RTT and the once-per-RTT decrease fires every RTT, so the window
//     collapses although most paths are idle (MSwift, arXiv 2509.07907).
//     The default, DelayQuantile, compares instead a quantile (Quantile,
//     default the median, MSwift's choice) of the last RTT's samples: a
//     minority of slow paths does not move it, a majority does. "The
//     last RTT" is the latest window's worth of samples (one window of
//     acknowledgements arrives per RTT), at least 32 of them so that a
//     quarter of slow paths moves the median with odds below 1e-3, at most
//     Samples, and only those taken within two mean RTTs (the 1/8 EWMA of
//     all samples), so that a connection that samples rarely (a window
//     below one packet) falls back to its latest samples instead of
//     following a delay long gone. We chose one statistic over the
//     connection's samples rather than per-path delays with a median
//     across paths because it needs no per-path state, follows whichever
//     paths the selector uses now, and costs O(Samples) per sample with
//     no allocation. The guard's RTT and the pacing RTT are the smoothed
//     statistic (1/8 EWMA).
//
//   - cubic (RFC 9438): slow start to ssthresh; then W_cubic(t) =
//     C*(t-K)³ + W_max (t in seconds since the epoch, K =
//     cbrt((W_max-cwnd)/C)), growing toward W_cubic(t+RTT) bounded to
//     1.5*cwnd per RTT, with the Reno-friendly estimate W_est (alpha =
//     3(1-Beta)/(1+Beta) until it reaches the window before the last
//     reduction, then 1) as a floor. A loss: fast convergence (W_max =
//     cwnd*(1+Beta)/2 if cwnd fell short of W_max), ssthresh = cwnd =
//     Beta*cwnd, once per congestion event: a loss of a packet sent
//     before the last reduction is part of it. A timeout: ssthresh as for
//     a loss (once per run of timeouts), cwnd = 1 packet, and the next
//     epoch starts with K = 0 and W_max = its window (§4.8). At datacenter
//     RTTs the cubic term grows slowly and the Reno-friendly region
//     governs, as the RFC intends. C = 0.4, Beta = 0.7.
//
//   - PerPath (swift or cubic; UCCL's CubicPP): one controller per path
//     (Paths states, path p uses p % Paths), fed the acknowledgements and
//     losses of its path; Window is the sum of the windows of the paths
//     heard of within PathIdle, bounded by MaxWindow; a timeout reaches
//     every path. Per-path windows start at 1 packet by default, so the
//     sum grows as paths are heard of.
//
// Undo: every controller but fixed is a transport.Undoer. A connection
// with UndoCuts marks the start of a loss episode and, once all its
// losses proved spurious (before a timeout), asks for its cut back:
// CUBIC restores the state it had at the mark (window, ssthresh, W_max
// and K, the epoch and the Reno-friendly estimate), keeping a larger
// window if it grew one since; Swift divides its window by the factor
// its loss decreases cut it by since the mark (what the delay did
// stays); PerPath asks each path. A timeout forgets the mark.
//
// Pacing: every controller is a transport.Pacer. Below one packet it
// asks for a gap of RTT/cwnd; with PacingGain g > 0 it asks for
// RTT/(g*cwnd) always, so a window goes out evenly over an RTT rather
// than in a burst.
//
// Invariants:
//   - Controllers are fed time, never read a clock, and hold no
//     goroutines: the same events give the same windows.
//   - The window stays within [MinCwnd, MaxCwnd], finite, whatever the
//     events (zero or negative counts and samples, times out of order);
//     Window is within [1, MaxWindow], a pacing gap within [0, 1 s].
//   - After New, no call allocates.
package cc
