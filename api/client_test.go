package api_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"path/filepath"
	"testing"

	"github.com/vstellar/vstellar/api"
)

// serve answers a temporary API socket with h and returns a Client for
// it.
func serve(t *testing.T, h http.HandlerFunc) *api.Client {
	t.Helper()
	sock := filepath.Join(t.TempDir(), api.APISocketName)
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	c := api.NewClient(sock)
	t.Cleanup(c.Close)
	return c
}

// TestClientErrors: an error answer is an *APIError with the body's
// message that matches the sentinel of its status; a missing daemon is
// ErrUnreachable.
func TestClientErrors(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		status int
		body   string
		want   error
		msg    string
	}{
		{400, `{"error": "bad"}`, api.ErrInvalid, "bad"},
		{404, `{"error": "nope"}`, api.ErrNotFound, "nope"},
		{409, `{"error": "dup"}`, api.ErrExists, "dup"},
		{503, `{"error": "bye"}`, api.ErrShuttingDown, "bye"},
		{500, `not json`, nil, "Internal Server Error"},
	} {
		var path string
		c := serve(t, func(w http.ResponseWriter, r *http.Request) {
			path = r.URL.EscapedPath()
			w.WriteHeader(tc.status)
			w.Write([]byte(tc.body))
		})
		_, err := c.Device(ctx, "a b")
		var ae *api.APIError
		if !errors.As(err, &ae) || ae.Status != tc.status || ae.Message != tc.msg {
			t.Errorf("HTTP %d: %v", tc.status, err)
		}
		for _, s := range []error{api.ErrInvalid, api.ErrNotFound, api.ErrExists, api.ErrShuttingDown} {
			if got := errors.Is(err, s); got != (s == tc.want) {
				t.Errorf("HTTP %d: errors.Is(%v, %v) = %v", tc.status, err, s, got)
			}
		}
		if path != api.DevicePath("a b") || path != "/v1/devices/a%20b" {
			t.Errorf("path %q", path)
		}
	}
	c := api.NewClient(filepath.Join(t.TempDir(), "absent.sock"))
	defer c.Close()
	if _, err := c.Health(ctx); !errors.Is(err, api.ErrUnreachable) {
		t.Fatalf("no daemon: %v", err)
	}
}
