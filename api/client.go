package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// maxResponseBody bounds what the Client reads from the daemon.
const maxResponseBody = 16 << 20

// maxIdleConns bounds the connections a Client keeps open between
// requests.
const maxIdleConns = 64

// Client talks to the management API over its unix socket.
type Client struct {
	hc *http.Client
}

// NewClient returns a Client for the API socket at socketPath.
func NewClient(socketPath string) *Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socketPath)
		},
		// Room for every concurrent caller's connection: evicting an
		// idle connection (MaxIdleConns) can break a request that was
		// handed it at the same moment ("putIdleConn: too many idle
		// connections"), which a script creating devices in parallel
		// would see.
		MaxIdleConns:        maxIdleConns,
		MaxIdleConnsPerHost: maxIdleConns,
		IdleConnTimeout:     30 * time.Second,
	}
	return &Client{hc: &http.Client{Transport: tr}}
}

// Close releases idle connections.
func (c *Client) Close() { c.hc.CloseIdleConnections() }

// APIError is an error answer from the daemon. errors.Is matches it
// against ErrInvalid, ErrNotFound and ErrExists by status code.
type APIError struct {
	Status  int
	Message string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("vstellard: %s (HTTP %d)", e.Message, e.Status)
}

// Is maps status codes back to the package's sentinel errors.
func (e *APIError) Is(target error) bool {
	switch target {
	case ErrInvalid:
		return e.Status == http.StatusBadRequest
	case ErrNotFound:
		return e.Status == http.StatusNotFound
	case ErrExists:
		return e.Status == http.StatusConflict
	case ErrShuttingDown:
		return e.Status == http.StatusServiceUnavailable
	}
	return false
}

// Do sends a request with an optional JSON body to path (e.g.
// "/v1/devices") and returns the raw JSON answer of a 2xx response (empty
// for 204). Other answers give an *APIError.
func (c *Client) Do(ctx context.Context, method, path string, body any) (json.RawMessage, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://vstellard"+path, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if opErr := (*net.OpError)(nil); errors.As(err, &opErr) && opErr.Op == "dial" {
			return nil, fmt.Errorf("vstellard API: %w: %w", ErrUnreachable, err)
		}
		return nil, fmt.Errorf("vstellard API: %w", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBody))
	if err != nil {
		return nil, fmt.Errorf("vstellard API: reading answer: %w", err)
	}
	if resp.StatusCode/100 != 2 {
		var ae ErrorBody
		if json.Unmarshal(data, &ae) != nil || ae.Error == "" {
			ae.Error = http.StatusText(resp.StatusCode)
		}
		return nil, &APIError{Status: resp.StatusCode, Message: ae.Error}
	}
	return data, nil
}

func (c *Client) call(ctx context.Context, method, path string, body, out any) error {
	data, err := c.Do(ctx, method, path, body)
	if err != nil || out == nil {
		return err
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("vstellard API: decoding answer to %s %s: %w", method, path, err)
	}
	return nil
}

// Health returns GET /v1/health.
func (c *Client) Health(ctx context.Context) (Health, error) {
	var h Health
	return h, c.call(ctx, http.MethodGet, "/v1/health", nil, &h)
}

// Devices returns GET /v1/devices.
func (c *Client) Devices(ctx context.Context) ([]DeviceInfo, error) {
	var l DeviceList
	return l.Devices, c.call(ctx, http.MethodGet, "/v1/devices", nil, &l)
}

// Device returns GET /v1/devices/{name}.
func (c *Client) Device(ctx context.Context, name string) (DeviceInfo, error) {
	var d DeviceInfo
	return d, c.call(ctx, http.MethodGet, DevicePath(name), nil, &d)
}

// CreateDevice sends POST /v1/devices.
func (c *Client) CreateDevice(ctx context.Context, spec DeviceSpec) (DeviceInfo, error) {
	var d DeviceInfo
	return d, c.call(ctx, http.MethodPost, "/v1/devices", spec, &d)
}

// DestroyDevice sends DELETE /v1/devices/{name}.
func (c *Client) DestroyDevice(ctx context.Context, name string) error {
	return c.call(ctx, http.MethodDelete, DevicePath(name), nil, nil)
}

// DevicePath is the API path of the device called name, escaped.
func DevicePath(name string) string { return "/v1/devices/" + url.PathEscape(name) }

// DeviceStatus returns GET /v1/devices/{name}/stats.
func (c *Client) DeviceStatus(ctx context.Context, name string) (DeviceStatus, error) {
	var s DeviceStatus
	return s, c.call(ctx, http.MethodGet, DevicePath(name)+"/stats", nil, &s)
}

// QPs returns GET /v1/devices/{name}/qps with at most limit entries (0:
// the daemon's default).
func (c *Client) QPs(ctx context.Context, name string, limit int) (QPList, error) {
	var l QPList
	return l, c.call(ctx, http.MethodGet, DevicePath(name)+"/qps"+limitQuery(limit), nil, &l)
}

// MRs returns GET /v1/devices/{name}/mrs with at most limit entries (0:
// the daemon's default).
func (c *Client) MRs(ctx context.Context, name string, limit int) (MRList, error) {
	var l MRList
	return l, c.call(ctx, http.MethodGet, DevicePath(name)+"/mrs"+limitQuery(limit), nil, &l)
}

// Host returns GET /v1/host.
func (c *Client) Host(ctx context.Context) (HostStatus, error) {
	var h HostStatus
	return h, c.call(ctx, http.MethodGet, "/v1/host", nil, &h)
}

func limitQuery(limit int) string {
	if limit <= 0 {
		return ""
	}
	return "?limit=" + strconv.Itoa(limit)
}

// NICs returns GET /v1/host/nics.
func (c *Client) NICs(ctx context.Context) (NICList, error) {
	var l NICList
	return l, c.call(ctx, http.MethodGet, "/v1/host/nics", nil, &l)
}

// Paths returns GET /v1/host/paths.
func (c *Client) Paths(ctx context.Context) (PathList, error) {
	var l PathList
	return l, c.call(ctx, http.MethodGet, "/v1/host/paths", nil, &l)
}
