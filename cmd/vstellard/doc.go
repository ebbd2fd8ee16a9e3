// Command vstellard is the vStellar host daemon: it serves one
// paravirtual RDMA device (virtio id 42) per VM over a vhost-user unix
// socket, and a management API on <run-dir>/vstellard.sock through which
// devices are created and destroyed at run time (see package daemon and
// cmd/vstellarctl).
//
// Usage:
//
//	vstellard [--config FILE] [--run-dir DIR] [--log-level LEVEL]
//	          [--log-format text|json] [--socket-mode MODE]
//	          [--shutdown-timeout DURATION] [--pin-budget SIZE] [--device NAME]...
//	          [--fabric-listen IP:PORT --gid-prefix PREFIX --fabric-secret-file FILE
//	           [--fabric-mtu MTU] [--fabric-paths N] [--spray SELECTOR] [--cc CONTROLLER]
//	           [--peer GID_PREFIX=IP:PORT]...] [--version]
//
// The --fabric-* flags (or the config file's "fabric" object, see
// daemon.FabricSpec) join this host's devices to those of other hosts over
// the cross-host transport: each device's GID is the host's prefix and
// its GUID, and a QP connected to a GID of a peer's prefix sends to that
// peer's vstellard.
// Flags override the config file, which overrides the defaults. --device
// may be repeated; its devices are created at start with default limits,
// after those of the config file. SIGTERM or SIGINT shut the daemon down
// cleanly: every front-end is told, every device freed, every socket
// removed. Exit status: 0 after a clean shutdown, 1 if the daemon failed at
// run time (worth a restart), 2 for bad flags or configuration, a
// configured device the daemon refuses included (the systemd unit's
// RestartPreventExitStatus=2 does not restart it). Sizes take K, M, G or T
// (--pin-budget 64G). Errors are one line naming the flag, or the config
// file with line and column, and the key.
//
// This package is the composition root: main wires the device model
// (package device) and the vhost-user back-end (package vhost) into the
// daemon's DeviceFactory; nothing else here has logic of its own.
package main
