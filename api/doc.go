// Package api is vstellard's management API as its clients see it: the
// contract between the daemon and vstellarctl, tests and other tools.
// It holds the wire types of every request and answer (DeviceSpec,
// DeviceInfo, DeviceStatus, QPList, HostStatus, ...) with their JSON
// names, the sentinel errors a client matches (errors.Is against
// ErrInvalid, ErrNotFound, ...) and APIError, the rules of a device name
// (ValidateName), the socket's default place, and Client, which speaks
// HTTP over the unix socket.
//
// Package daemon serves this API; turning the state of devices, the
// engine and the fabric into these types is its job, not this
// package's. So that a client does not link the daemon, api must never
// import the data path (engine, device, vhost, transport, fabric,
// pvdma, emtt, guestmem, shmregion) or daemon: only the standard
// library and small leaf packages (hostnet for the host's interfaces).
package api
