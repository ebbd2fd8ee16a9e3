// Command vstellarctl is the operator's client for vstellard's management
// API, which it reaches over the daemon's unix socket.
//
// Usage:
//
//	vstellarctl [--socket PATH] [--json] [--timeout DURATION] COMMAND
//
//	health                          daemon health
//	devices list                    list devices
//	devices show NAME               show one device
//	devices create NAME [--limits JSON] [--pin MODE] [--pin-budget BYTES]
//	                                create a device (limits: a JSON object;
//	                                pin: on-demand, at-reg-mr or all)
//	devices destroy NAME            destroy a device
//
// Output is a table (or key: value lines) by default; --json prints the
// daemon's JSON answer unchanged. Exit status: 0 on success, 1 if the
// daemon refused or could not be reached, 2 for bad usage.
package main
