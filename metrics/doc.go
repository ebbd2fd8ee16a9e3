// Package metrics exposes a vstellard's state to Prometheus.
//
// A Collector reads the daemon at scrape time (daemon.Manager's
// DeviceStates, pinned-memory pool and fabric): nothing is updated on a
// data or control path for metrics' sake, the counters the packages keep
// anyway are read and converted. Handler serves a private registry (never
// the global one) with the Collector, the Go runtime's and the process's
// collectors.
//
// Names follow Prometheus practice: the vstellard_ prefix, base units
// (seconds, bytes), _total on counters. Labels stay low in cardinality: a
// device's name at most (a host serves about a thousand), an opcode, a
// drop reason or a path index; never a QP, a key or an address.
//
// A scrape during mass device destruction sees each device whole or not
// at all: a device whose model is closed while it is read shows only its
// connection state (daemon.DeviceState.Model is nil).
package metrics
