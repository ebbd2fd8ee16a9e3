package daemon_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/vstellar/vstellar/api"
	"github.com/vstellar/vstellar/internal/testkit/daemontest"
)

// rawDo sends a raw request over the API socket and returns status and
// body.
func rawDo(t *testing.T, sock, method, path, contentType, body string) (int, string, http.Header) {
	t.Helper()
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequest(method, "http://vstellard"+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

func TestAPICreateListShowDestroy(t *testing.T) {
	f := &daemontest.Factory{}
	r := run(t, testConfig(t, f))
	ctx := context.Background()

	h, err := r.client.Health(ctx)
	if err != nil || h.Status != "ok" || h.Devices != 0 {
		t.Fatalf("health: %+v %v", h, err)
	}
	if fi, err := os.Stat(r.m.APISocket()); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("API socket: %v %v", fi, err)
	}

	limits := json.RawMessage(`{"max_qp":8}`)
	d0, err := r.client.CreateDevice(ctx, api.DeviceSpec{Name: "d0", Limits: limits})
	if err != nil {
		t.Fatal(err)
	}
	if d0.Name != "d0" || d0.Socket != filepath.Join(r.m.RunDir(), "d0.sock") || d0.Connected || d0.Created.IsZero() {
		t.Fatalf("created %+v", d0)
	}
	if fi, err := os.Stat(d0.Socket); err != nil || fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != 0o600 {
		t.Fatalf("device socket: %v %v", fi, err)
	}
	if _, err := r.client.CreateDevice(ctx, api.DeviceSpec{Name: "d1"}); err != nil {
		t.Fatal(err)
	}

	list, err := r.client.Devices(ctx)
	if err != nil || len(list) != 2 || list[0].Name != "d0" || list[1].Name != "d1" {
		t.Fatalf("list: %+v %v", list, err)
	}
	c := dial(t, d0.Socket)
	ping(t, c)
	got, err := r.client.Device(ctx, "d0")
	if err != nil || !got.Connected || got.Connections != 1 {
		t.Fatalf("show: %+v %v", got, err)
	}

	if err := r.client.DestroyDevice(ctx, "d0"); err != nil {
		t.Fatal(err)
	}
	if line, _ := readLine(t, c); line != "bye\n" {
		t.Errorf("front-end was not told: got %q", line)
	}
	expectClosed(t, c)
	if _, err := os.Stat(d0.Socket); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket left behind: %v", err)
	}
	if n := f.Device("d0").Closes.Load(); n != 1 {
		t.Errorf("device closed %d times", n)
	}
	if n := f.Backend("d0").Shutdowns.Load(); n != 1 {
		t.Errorf("backend shut down %d times", n)
	}
	if _, err := r.client.Device(ctx, "d0"); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("show destroyed: %v", err)
	}
	if err := r.client.DestroyDevice(ctx, "d0"); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("destroy twice: %v", err)
	}
	// The name is free again.
	if _, err := r.client.CreateDevice(ctx, api.DeviceSpec{Name: "d0"}); err != nil {
		t.Fatal(err)
	}
}

func TestAPIInvalidNamesCreateNothing(t *testing.T) {
	f := &daemontest.Factory{}
	r := run(t, testConfig(t, f))
	before := dirNames(t, r.m.RunDir())
	for _, name := range []string{"../x", "", strings.Repeat("n", 65), "a/b", "..", ".", "/etc/passwd", "a b"} {
		body, _ := json.Marshal(api.DeviceSpec{Name: name})
		status, resp, _ := rawDo(t, r.m.APISocket(), "POST", "/v1/devices", "application/json", string(body))
		if status != http.StatusBadRequest || !strings.Contains(resp, `"error"`) {
			t.Errorf("create %q: %d %s", name, status, resp)
		}
	}
	if after := dirNames(t, r.m.RunDir()); !slices.Equal(before, after) {
		t.Errorf("run dir changed: %v -> %v", before, after)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(r.m.RunDir()), "x.sock")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("escaped the run dir: %v", err)
	}
	if f.Backend("../x") != nil {
		t.Error("factory called for an invalid name")
	}
	// Invalid names in the path.
	for _, p := range []string{"/v1/devices/a%2Fb", "/v1/devices/..%2Fx", "/v1/devices/a%20b"} {
		for _, method := range []string{"GET", "DELETE"} {
			status, resp, _ := rawDo(t, r.m.APISocket(), method, p, "", "")
			if status != http.StatusBadRequest {
				t.Errorf("%s %s: %d %s", method, p, status, resp)
			}
		}
	}
}

func TestAPIErrors(t *testing.T) {
	f := &daemontest.Factory{Err: func(s api.DeviceSpec) error {
		if s.Name == "badlimits" {
			return errors.Join(api.ErrInvalid, errors.New("max_qp too large"))
		}
		if s.Name == "broken" {
			return errors.New("out of memfds")
		}
		return nil
	}}
	r := run(t, testConfig(t, f))
	sock := r.m.APISocket()
	if _, err := r.client.CreateDevice(context.Background(), api.DeviceSpec{Name: "dup"}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, method, path, ctype, body string
		status                          int
		want                            string
	}{
		{"duplicate", "POST", "/v1/devices", "application/json", `{"name":"dup"}`, 409, "exists"},
		{"unknown field", "POST", "/v1/devices", "application/json", `{"name":"x","color":"red"}`, 400, "unknown field"},
		{"not json", "POST", "/v1/devices", "application/json", `name=x`, 400, "bad device spec"},
		{"two values", "POST", "/v1/devices", "", `{"name":"x"}{"name":"y"}`, 400, "trailing"},
		{"empty body", "POST", "/v1/devices", "", ``, 400, "empty"},
		{"limits not object", "POST", "/v1/devices", "", `{"name":"x","limits":[1]}`, 400, "JSON object"},
		{"too large", "POST", "/v1/devices", "", `{"name":"x","limits":{"a":"` + strings.Repeat("a", 70<<10) + `"}}`, 413, "larger"},
		{"content type", "POST", "/v1/devices", "text/plain", `{"name":"x"}`, 415, "content type"},
		{"factory invalid", "POST", "/v1/devices", "", `{"name":"badlimits"}`, 400, "max_qp"},
		{"factory failure", "POST", "/v1/devices", "", `{"name":"broken"}`, 500, "memfds"},
		{"no device", "GET", "/v1/devices/nope", "", ``, 404, "not found"},
		{"destroy no device", "DELETE", "/v1/devices/nope", "", ``, 404, "not found"},
		{"no endpoint", "GET", "/v2/devices", "", ``, 404, "no such endpoint"},
		{"bad method", "PUT", "/v1/devices/dup", "", ``, 405, "Method Not Allowed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body, hdr := rawDo(t, sock, tc.method, tc.path, tc.ctype, tc.body)
			var e struct{ Error string }
			if err := json.Unmarshal([]byte(body), &e); err != nil {
				t.Fatalf("error body is not JSON: %q", body)
			}
			if status != tc.status || !strings.Contains(e.Error, tc.want) {
				t.Fatalf("%d %q, want %d mentioning %q", status, e.Error, tc.status, tc.want)
			}
			if ct := hdr.Get("Content-Type"); ct != "application/json" {
				t.Errorf("content type %q", ct)
			}
			if tc.status == 405 && hdr.Get("Allow") == "" {
				t.Error("405 without Allow")
			}
		})
	}
	if names := dirNames(t, r.m.RunDir()); !slices.Equal(names, []string{"dup.sock", "vstellard.sock"}) {
		t.Errorf("run dir after failed creates: %v", names)
	}
}
