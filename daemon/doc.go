// Package daemon is the body of vstellard: it owns the set of vStellar
// devices served by one process, one vhost-user unix socket per device,
// and the management API through which operators create and destroy
// devices at run time.
//
// A Manager is built from a Config (New) and runs until its context ends
// (Run). Everything it needs is injected: the logger, and the
// DeviceFactory that builds a device model and its vhost-user Backend.
// There is no package-level state.
//
// Invariants:
//
//   - Every device name is checked by api.ValidateName before it touches
//     the file system, so a name can never escape the run directory.
//   - A device serves at most one front-end connection at a time. A second
//     connection is accepted, logged and closed; the first one is not
//     disturbed. When the active connection ends (for any reason,
//     including a protocol error) the next connection is a reconnect to
//     the same device state.
//   - An error on one connection ends only that connection. Devices share
//     no goroutines, locks held across I/O, or sockets, so one misbehaving
//     front-end cannot stall another device.
//   - Panics in a device's goroutines are not swallowed: they are logged
//     with the device name and re-raised, which terminates the process.
//     Device state after a panic cannot be trusted, and a supervisor
//     restart is the only safe recovery.
//   - A socket file is removed only by the Manager that created it, or,
//     when stale (nothing listens on it), before it is replaced. A live
//     socket belongs to another process and is never touched.
//   - Sockets are created inside a private (0700) staging directory, given
//     their final mode, and only then linked to their public path, so there
//     is no window in which a socket is reachable with a wider mode.
//   - Destroying a device runs in a fixed order: stop accepting, tell the
//     front-end (Backend.Shutdown), cancel the connection, wait for it,
//     free the device model (Close), remove the socket file. Shutdown of
//     the Manager stops the API first, then destroys all devices in
//     parallel, bounded by a timeout, and leaves the run directory as it
//     found it.
package daemon
