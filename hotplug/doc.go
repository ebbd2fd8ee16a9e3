// Package hotplug attaches vStellar devices to running QEMU VMs and
// detaches them, over QMP, and writes the QEMU arguments that cold-plug
// them.
//
// A device is a vstellard vhost-user socket (one per device, see
// docs/operations.md) behind QEMU's generic vhost-user device,
// vhost-user-test-device-pci (QEMU 10.2 or later), with the vStellar
// device's properties: virtio-id 42, 3 queues, config space 256 bytes.
// Attach sends chardev-add, device_add and query-pci; Detach sends
// device_del, waits for DEVICE_DELETED and sends chardev-remove; both
// are described on the methods and in docs/attach.md.
//
// Invariants:
//   - Bad input (a Spec or id QEMU would refuse or choke on) is refused
//     before anything is sent, with an error wrapping ErrInvalid.
//   - A failed Attach removes what it added, so QEMU is left as it was;
//     the *StepError names the failed step, carries QEMU's error class
//     and description, and lists what was undone (or why it could not
//     be).
//   - Every wait is bounded: Dial by Options.ConnectTimeout, each reply
//     by Options.CommandTimeout, DEVICE_DELETED by Options.UnplugTimeout,
//     all within the caller's context. A peer that lies (garbage, a
//     wrong greeting, a reply out of step) or dies (hangs up mid-reply,
//     never answers) gives a precise error in time, leaks no goroutine
//     and panics nothing. A reply not received in time closes the
//     connection: QMP matches replies to commands by order only.
//
// Transport is go-qemu's qmp.SocketMonitor (pinned at
// v0.0.0-20250212194115-ee9b0668d242; its typed qmp/raw API is from
// QEMU 2.11 and cannot pass device properties, so commands are raw JSON
// maps). Its limits, each pinned by a test in goqemu_test.go:
//   - a line longer than 64 KiB kills its reader (bufio.Scanner, issue
//     #159): the connection is closed with an error saying so;
//   - the event channel is unbuffered and, once Events has been called,
//     an undrained event stalls every reply: Dial starts a goroutine that
//     drains it for the life of the Client;
//   - replies are matched to commands by order only, and an event that
//     comes before the qmp_capabilities reply is taken for it (PR #210):
//     every command carries an id, a reply with another id closes the
//     connection, and Dial checks the stream with query-version,
//     reconnecting once if it is out of step;
//   - Connect has no timeout, error replies lose their class, lines it
//     cannot decode are dropped silently, and Run's reply is a slice of
//     the reader's buffer that the next read overwrites: go-qemu talks
//     to a proxy (proxy.go) on a private abstract unix socket, not to
//     QEMU. The Client dials QEMU and reads it through a tap (monitor.go)
//     that bounds reads with deadlines, keeps each reply whole, hands
//     go-qemu a stand-in for it and nothing more until Run has returned,
//     and records what the peer sent that go-qemu ignored.
//
// Subpackage qmptest is a QMP server with state and faults for tests.
package hotplug
