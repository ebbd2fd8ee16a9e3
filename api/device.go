package api

import (
	"encoding/json"
	"time"
)

// Health is the answer of GET /v1/health.
type Health struct {
	Status  string `json:"status"` // "ok" or "shutting down"
	Devices int    `json:"devices"`
}

// DeviceList is the answer of GET /v1/devices.
type DeviceList struct {
	Devices []DeviceInfo `json:"devices"`
}

// ErrorBody is the body of every error answer.
type ErrorBody struct {
	Error string `json:"error"`
}

// DeviceInfo is the externally visible state of a device.
type DeviceInfo struct {
	Name   string `json:"name"`
	Socket string `json:"socket"`
	// Connected is true while a front-end connection is being served.
	Connected bool      `json:"connected"`
	Created   time.Time `json:"created"`
	// Connections counts front-end connections served (reconnects
	// included); Refused counts connections closed because another was
	// active.
	Connections uint64 `json:"connections"`
	Refused     uint64 `json:"refused_connections"`
	// LastError is the error that ended the most recent failed
	// connection, if any.
	LastError string `json:"last_error,omitempty"`
	// Tenant is the device's tenant on the cross-host fabric.
	Tenant uint32 `json:"tenant,omitempty"`
}

// DeviceSpec describes a device to create: the body of POST /v1/devices
// and an entry of vstellard's config file.
type DeviceSpec struct {
	// Name is the device name (see ValidateName); the device socket is
	// <RunDir>/<Name>.sock.
	Name string `json:"name"`
	// Limits is a JSON object passed through to the device model
	// unchanged. Absent or null means the device model's defaults.
	Limits json.RawMessage `json:"limits,omitempty"`
	// Pin says how the device pins guest memory for DMA. Absent means on
	// demand with no budget of its own.
	Pin *PinSpec `json:"pin,omitempty"`
	// Tenant is the tenant the device's VM belongs to: over the
	// cross-host fabric its QPs connect only to QPs of the same tenant.
	Tenant uint32 `json:"tenant,omitempty"`
}

// PinSpec is a device's pinning policy.
type PinSpec struct {
	// Mode is "on-demand" (pin 2 MiB chunks at first DMA, the default),
	// "at-reg-mr" (also pin an MR's memory when it is registered) or
	// "all" (pin all guest memory when the VMM adds it: the VFIO
	// baseline).
	Mode string `json:"mode,omitempty"`
	// Budget bounds the memory this device pins on demand, in bytes
	// (0: only the daemon's pin_budget_bytes).
	Budget uint64 `json:"budget_bytes,omitempty"`
}

// The pin modes a PinSpec names, as its Mode and MemoryStatus.PinMode
// write them.
const (
	PinOnDemand = "on-demand"
	PinAtRegMR  = "at-reg-mr"
	PinAll      = "all"
)

// PinChunkSize is the granule of pinning (2 MiB): a PinSpec's Budget, if
// not 0, holds at least one chunk.
const PinChunkSize = 2 << 20
