// Package qmptest is a QMP server for tests of QMP clients: it speaks
// QEMU's QMP framing over a real unix socket and models, with state, the
// commands a vhost-user hot-plug uses, with faults to inject.
//
// Framing as QEMU's: a greeting {"QMP": {"version", "capabilities"}}
// line on connect; commands are a stream of JSON objects; until
// qmp_capabilities only that command is accepted; each reply is one line
// ending in "\r\n", {"return": ...} or {"error": {"class", "desc"}}, with
// the command's "id" echoed; events {"event", "data", "timestamp"} are
// sent to the negotiated client. Like QEMU, one client is served at a
// time and the others wait in the listen backlog; state outlives
// connections.
//
// Commands: qmp_capabilities, query-version, chardev-add (unix socket
// client backends, which connect to the socket as QEMU does),
// chardev-remove, device_add, device_del (DEVICE_DELETED after
// Options.DeleteDelay, for the virtio backend child and then the
// device), query-pci (root ports are bridges; with Options.Unnumbered
// their devices are not listed, as QEMU does before the guest's firmware
// numbers the buses), query-chardev, qom-get (type and chardev of
// /machine/peripheral/ID). Error classes and descriptions are QEMU
// 10.0's where it has them (noted where qmptest words its own).
//
// Faults (SetFaults) make the server lie or die: a wrong or missing
// greeting, an event before the qmp_capabilities reply, and per command
// an error reply, no reply, a garbage line, a reply cut in half and the
// connection closed, a reply with the wrong id, a reply longer than
// go-qemu's 64 KiB line limit; and device_del whose DEVICE_DELETED never
// comes. A split write waits until the client has read the first part,
// so the client sees the parts in separate reads.
package qmptest
