package daemon

import (
	"errors"
	"net/http"

	"github.com/vstellar/vstellar/api"
)

// Sentinel errors of the Manager besides api's (api.ErrInvalid,
// api.ErrExists, api.ErrNotFound, api.ErrShuttingDown). Errors returned
// by the Manager wrap one of them when the cause is known, and the
// management API maps them to status codes.
var (
	// ErrBusy: the device is being created or destroyed (409).
	ErrBusy = errors.New("device is busy")
	// ErrSocketInUse: another process listens on the socket path (409).
	ErrSocketInUse = errors.New("socket is in use by another process")
)

// httpStatus maps an error from the Manager to an HTTP status code.
func httpStatus(err error) int {
	switch {
	case errors.Is(err, api.ErrInvalid):
		return http.StatusBadRequest
	case errors.Is(err, api.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, api.ErrExists), errors.Is(err, ErrBusy), errors.Is(err, ErrSocketInUse):
		return http.StatusConflict
	case errors.Is(err, api.ErrShuttingDown):
		return http.StatusServiceUnavailable
	default:
		return http.StatusInternalServerError
	}
}
