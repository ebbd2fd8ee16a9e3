package vhost

// EchoDevice lets the external tests (which drive the backend with the
// independent front-end in package vmm) use the echo test device.
type EchoDevice = echoDevice

var NewEchoDevice = newEchoDevice
