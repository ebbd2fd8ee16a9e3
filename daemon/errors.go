package daemon

import (
	"errors"
	"net/http"
)

// Sentinel errors. Errors returned by the Manager wrap one of these when
// the cause is known, and the management API maps them to status codes.
var (
	// ErrInvalid: the request or configuration is malformed (400).
	ErrInvalid = errors.New("invalid argument")
	// ErrExists: a device with that name already exists (409).
	ErrExists = errors.New("device already exists")
	// ErrNotFound: no device with that name (404).
	ErrNotFound = errors.New("device not found")
	// ErrBusy: the device is being created or destroyed (409).
	ErrBusy = errors.New("device is busy")
	// ErrSocketInUse: another process listens on the socket path (409).
	ErrSocketInUse = errors.New("socket is in use by another process")
	// ErrShuttingDown: the Manager is shutting down (503).
	ErrShuttingDown = errors.New("daemon is shutting down")
	// ErrUnreachable: the Client found no daemon on the socket (absent,
	// or nothing listening).
	ErrUnreachable = errors.New("no vstellard answers on the API socket")
)

// httpStatus maps an error from the Manager to an HTTP status code.
func httpStatus(err error) int {
	switch {
	case errors.Is(err, ErrInvalid):
		return http.StatusBadRequest
	case errors.Is(err, ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, ErrExists), errors.Is(err, ErrBusy), errors.Is(err, ErrSocketInUse):
		return http.StatusConflict
	case errors.Is(err, ErrShuttingDown):
		return http.StatusServiceUnavailable
	default:
		return http.StatusInternalServerError
	}
}
