package api

import "errors"

// Sentinel errors. The daemon's errors wrap one of these when the cause
// is known and answer them with a status code; a Client's *APIError
// matches them back by that code (errors.Is).
var (
	// ErrInvalid: the request or configuration is malformed (400).
	ErrInvalid = errors.New("invalid argument")
	// ErrExists: a device with that name already exists (409).
	ErrExists = errors.New("device already exists")
	// ErrNotFound: no device with that name (404).
	ErrNotFound = errors.New("device not found")
	// ErrShuttingDown: the daemon is shutting down (503).
	ErrShuttingDown = errors.New("daemon is shutting down")
	// ErrUnreachable: the Client found no daemon on the socket (absent,
	// or nothing listening).
	ErrUnreachable = errors.New("no vstellard answers on the API socket")
)
