package vhost

// EchoDevice lets the external tests (which drive the backend with the
// independent front-end in package vmsim) use the echo test device.
type EchoDevice = echoDevice

var NewEchoDevice = newEchoDevice
