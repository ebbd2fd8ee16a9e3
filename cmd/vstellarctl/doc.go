// Command vstellarctl is the operator's client for vstellard's management
// API, which it reaches over the daemon's unix socket, and for attaching
// vStellar devices to running QEMU VMs over QMP (package hotplug).
//
// Usage:
//
//	vstellarctl [--socket PATH] [--json] [--timeout DURATION] COMMAND
//	vstellarctl --version
//
//	health                          daemon health
//	devices list                    list devices
//	devices show NAME               one device: connection, objects, memory, traffic
//	devices qps NAME [--limit N]    its queue pairs
//	devices mrs NAME [--limit N]    its memory regions
//	devices create NAME [--limits JSON] [--pin MODE] [--pin-budget SIZE] [--tenant N]
//	devices destroy NAME
//	host [nics | paths]             pinned memory and fabric; interfaces and
//	                                RDMA devices; the fabric's paths and RTTs
//	attach --qmp SOCKET NAME        hot-plug into a running QEMU
//	detach --qmp SOCKET NAME        hot-unplug
//	qemu-args NAME...               cold-plug arguments
//
// Output is a table (or key: value lines) by default; --json, before the
// command or after it, prints JSON, and --version anywhere prints the
// version and does nothing else. Sizes take K, M, G or T.
// Exit status: 0 ok, 1 failed (host paths without a fabric too), 2 usage, 3 not found, 4 conflict (exists,
// busy), 5 invalid request, 6 no daemon on the socket, 7 daemon shutting
// down (docs/operations.md).
package main
