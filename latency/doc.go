// Package latency records durations into a fixed histogram cheaply
// enough for a data or control path, and reads them back as snapshots for
// metrics and the management API.
//
// The buckets are powers of two in microseconds (1 µs .. about 1 s, then
// +Inf): fixed, so that snapshots of many recorders add up bucket by
// bucket (a host's pin latency is the sum of its devices'), and coarse,
// because an operator needs the order of magnitude, not the digits.
//
// A Recorder is safe for concurrent use and never allocates or locks; a
// Histogram is a plain value.
package latency
