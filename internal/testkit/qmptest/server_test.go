package qmptest

import (
	"bufio"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func tempDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "qt")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func start(t testing.TB, opts Options) *Server {
	t.Helper()
	s, err := Start(filepath.Join(tempDir(t), "qmp.sock"), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// client is a raw QMP client.
type client struct {
	t testing.TB
	c net.Conn
	r *bufio.Reader
}

func dial(t testing.TB, s *Server) *client {
	t.Helper()
	c, err := net.Dial("unix", s.Path())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &client{t: t, c: c, r: bufio.NewReader(c)}
}

// line reads one line and checks QMP's "\r\n" end.
func (c *client) line() map[string]any {
	c.t.Helper()
	c.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	l, err := c.r.ReadString('\n')
	if err != nil || !strings.HasSuffix(l, "\r\n") {
		c.t.Fatalf("read %q: %v", l, err)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(l), &m); err != nil {
		c.t.Fatalf("line %q: %v", l, err)
	}
	return m
}

func (c *client) send(s string) {
	c.t.Helper()
	if _, err := c.c.Write([]byte(s)); err != nil {
		c.t.Fatal(err)
	}
}

// do sends a command and returns the next line that is not an event.
func (c *client) do(cmd string) map[string]any {
	c.t.Helper()
	c.send(cmd)
	for {
		if m := c.line(); m["event"] == nil {
			return m
		}
	}
}

func (c *client) negotiate() {
	c.t.Helper()
	c.line()
	c.do(`{"execute": "qmp_capabilities"}`)
}

func errClass(m map[string]any) string {
	e, _ := m["error"].(map[string]any)
	s, _ := e["class"].(string)
	return s
}

func errDesc(m map[string]any) string {
	e, _ := m["error"].(map[string]any)
	s, _ := e["desc"].(string)
	return s
}

func TestNegotiationAndFraming(t *testing.T) {
	s := start(t, Options{Version: [3]int{10, 0, 2}})
	c := dial(t, s)
	g := c.line()
	qmp, _ := g["QMP"].(map[string]any)
	v, _ := qmp["version"].(map[string]any)
	q, _ := v["qemu"].(map[string]any)
	if q["major"] != 10.0 || q["minor"] != 0.0 || q["micro"] != 2.0 || !slices.Equal(qmp["capabilities"].([]any), []any{"oob"}) {
		t.Fatalf("greeting %v", g)
	}
	if m := c.do(`{"execute": "query-version", "id": 7}`); errClass(m) != "CommandNotFound" || m["id"] != 7.0 ||
		errDesc(m) != "Expecting capabilities negotiation with 'qmp_capabilities'" {
		t.Fatalf("before negotiation: %v", m)
	}
	// Commands are a JSON stream: two in one write, split across writes.
	c.send(`{"execute": "qmp_capabilities", "id": "a"}{"execute": "qmp_capa`)
	if m := c.line(); m["id"] != "a" || m["return"] == nil {
		t.Fatalf("qmp_capabilities: %v", m)
	}
	c.send(`bilities", "id": {"x": [1]}}`)
	if m := c.line(); errClass(m) != "CommandNotFound" || !strings.Contains(errDesc(m), "already complete") || m["id"].(map[string]any)["x"] == nil {
		t.Fatalf("again: %v", m)
	}
	for cmd, want := range map[string]string{
		`{"execute": "nope"}`:                                   "The command nope has not been found",
		`{"arguments": {}}`:                                     "QMP input lacks member 'execute'",
		`{"execute": 5}`:                                        "QMP input lacks member 'execute'",
		`{"execute": "query-pci", "arguments": [1]}`:            "QMP input member 'arguments' must be an object",
		`{"execute": "query-pci", "frob": 1}`:                   "QMP input member 'frob' is unexpected",
		`{"execute": "chardev-remove", "arguments": {}}`:        "Parameter 'id' is missing",
		`{"execute": "chardev-remove", "arguments": {"id": 1}}`: "Invalid parameter type for 'id', expected: string",
	} {
		if m := c.do(cmd); !strings.Contains(errDesc(m), want) {
			t.Errorf("%s: %v, want %q", cmd, m, want)
		}
	}
	if m := c.do(`{"execute": "query-version"}`); m["return"].(map[string]any)["qemu"] == nil || m["id"] != nil {
		t.Fatalf("query-version: %v", m)
	}
	// Bad JSON: an error, then the connection ends.
	c.send(`{"execute": nope}`)
	if m := c.line(); !strings.HasPrefix(errDesc(m), "JSON parse error") {
		t.Fatalf("bad JSON: %v", m)
	}
	if _, err := c.r.ReadString('\n'); err == nil {
		t.Fatal("connection open after bad JSON")
	}
}

func TestHotplugState(t *testing.T) {
	dir := tempDir(t)
	s := start(t, Options{})
	ln, err := net.Listen("unix", filepath.Join(dir, "be.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c := dial(t, s)
	c.negotiate()
	add := `{"execute": "chardev-add", "arguments": {"id": "c0", "backend": {"type": "socket", "data": {"addr": {"type": "unix", "data": {"path": "` + dir + `/be.sock"}}, "server": false}}}}`
	if m := c.do(add); m["return"] == nil {
		t.Fatal(m)
	}
	be, err := ln.Accept() // the chardev connected, as QEMU's does
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	if m := c.do(add); errDesc(m) != "Chardev with id 'c0' already exists" {
		t.Fatal(m)
	}
	dev := `{"execute": "device_add", "arguments": {"driver": "vhost-user-test-device-pci", "id": "vst0", "chardev": "c0", "virtio-id": 42, "num_vqs": 3, "vq_size": 256, "config_size": 256, "bus": "rp1"}}`
	for cmd, want := range map[string]string{
		strings.Replace(dev, `"rp1"`, `"pcie.0"`, 1):                       "Bus 'pcie.0' does not support hotplugging",
		strings.Replace(dev, `"rp1"`, `"rp9"`, 1):                          "Bus 'rp9' not found",
		strings.Replace(dev, `"c0"`, `"c9"`, 1):                            "Property 'vhost-user-test-device-pci.chardev' can't find value 'c9'",
		strings.Replace(dev, `"vhost-user-test-device-pci"`, `"x-pci"`, 1): "'x-pci' is not a valid device model name",
		strings.Replace(dev, `256, "config`, `4096, "config`, 1):           "would abort QEMU",
	} {
		if m := c.do(cmd); errDesc(m) != want && !strings.Contains(errDesc(m), want) {
			t.Errorf("%s: %v, want %q", cmd, m, want)
		}
	}
	if len(s.Devices()) != 0 {
		t.Fatalf("refused device_add changed state: %+v", s.Devices())
	}
	if m := c.do(dev); m["return"] == nil {
		t.Fatal(m)
	}
	if m := c.do(dev); errDesc(m) != "Duplicate device ID 'vst0'" {
		t.Fatal(m)
	}
	if m := c.do(`{"execute": "chardev-remove", "arguments": {"id": "c0"}}`); errDesc(m) != "Chardev 'c0' is busy" {
		t.Fatal(m)
	}
	pci := c.do(`{"execute": "query-pci"}`)
	b, _ := json.Marshal(pci["return"])
	if !strings.Contains(string(b), `"devices":[{"bus":2,`) || !strings.Contains(string(b), `"qdev_id":"vst0"`) || !strings.Contains(string(b), `"device":4202`) {
		t.Fatalf("query-pci %s", b)
	}
	if m := c.do(`{"execute": "qom-get", "arguments": {"path": "/machine/peripheral/vst0", "property": "chardev"}}`); m["return"] != "c0" {
		t.Fatal(m)
	}
	// device_del: the reply, then DEVICE_DELETED for the backend child
	// and for the device.
	c.send(`{"execute": "device_del", "arguments": {"id": "vst0"}, "id": 1}`)
	var seen []string
	for len(seen) < 3 {
		m := c.line()
		switch {
		case m["id"] == 1.0:
			seen = append(seen, "reply")
		case m["event"] == "DEVICE_DELETED":
			data := m["data"].(map[string]any)
			ts := m["timestamp"].(map[string]any)
			if ts["seconds"].(float64) < 1e9 {
				t.Fatalf("timestamp %v", ts)
			}
			seen = append(seen, data["path"].(string))
		}
	}
	if !slices.Equal(seen, []string{"reply", "/machine/peripheral/vst0/virtio-backend", "/machine/peripheral/vst0"}) {
		t.Fatalf("saw %v", seen)
	}
	if m := c.do(`{"execute": "device_del", "arguments": {"id": "vst0"}}`); errClass(m) != "DeviceNotFound" {
		t.Fatal(m)
	}
	if m := c.do(`{"execute": "chardev-remove", "arguments": {"id": "c0"}}`); m["return"] == nil {
		t.Fatal(m)
	}
	be.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := be.Read(make([]byte, 1)); err == nil {
		t.Fatal("chardev-remove left the backend connection open")
	}
}

func TestOneClientAtATime(t *testing.T) {
	s := start(t, Options{})
	a := dial(t, s)
	a.negotiate()
	b := dial(t, s)
	b.c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if _, err := b.r.ReadString('\n'); err == nil {
		t.Fatal("a second client was greeted while the first is connected")
	}
	a.c.Close()
	if g := b.line(); g["QMP"] == nil {
		t.Fatalf("greeting %v", g)
	}
	if s.Connections() != 2 {
		t.Fatalf("%d connections", s.Connections())
	}
}

func TestFaultKinds(t *testing.T) {
	s := start(t, Options{})
	s.SetFaults(Faults{Commands: map[string]Fault{
		"query-version": {Kind: Huge, Size: 1000},
		"query-pci":     {Kind: HangUp},
	}})
	c := dial(t, s)
	c.negotiate()
	if m := c.do(`{"execute": "query-version"}`); len(m["qmptest-padding"].(string)) != 1000 || m["return"] == nil {
		t.Fatal("no padding")
	}
	c.send(`{"execute": "query-pci", "id": "x"}`)
	c.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	rest, err := c.r.ReadString('\n')
	if err == nil || !strings.HasPrefix(rest, `{"`) || strings.Contains(rest, "\n") {
		t.Fatalf("hang-up sent %q, %v", rest, err)
	}
	if Refuse.String() != "refuse" || FaultKind(0).String() != "none" {
		t.Fatal("names")
	}
}

// FuzzRequests sends arbitrary bytes as commands: every line back is a
// QMP reply or event, and the server neither hangs nor dies.
func FuzzRequests(f *testing.F) {
	for _, s := range []string{
		`{"execute": "query-pci"}`,
		`{"execute": "device_add", "arguments": {"driver": "vhost-user-test-device-pci", "id": "v", "chardev": "c", "bus": "rp0"}}`,
		`{"execute": "chardev-add", "arguments": {"id": "c", "backend": {"type": "socket", "data": {"addr": {"type": "unix", "data": {"path": "/nonexistent/x.sock"}}, "reconnect-ms": 5}}}}`,
		`{"execute": "device_del", "arguments": {"id": "v"}, "id": [1, {"a": null}]}`,
		`{"execute": "qom-get", "arguments": {"path": "/machine/peripheral/v", "property": "chardev"}}`,
		`{"execute": "chardev-remove", "arguments": {"id": "c"}}{"execute": "query-chardev"}`,
		`{"execute": "qmp_capabilities"}`, `[]`, `{"execute": null}`, `{`, "\x00",
	} {
		f.Add(s)
	}
	dir := tempDir(f)
	s := start(f, Options{ChardevDir: dir, DeleteDelay: time.Microsecond})
	f.Fuzz(func(t *testing.T, in string) {
		c := dial(t, s)
		c.negotiate()
		c.send(in)
		c.c.(*net.UnixConn).CloseWrite()
		c.c.SetReadDeadline(time.Now().Add(10 * time.Second))
		for {
			l, err := c.r.ReadString('\n')
			if err != nil {
				if ne, ok := err.(net.Error); ok && ne.Timeout() {
					t.Fatal("the server did not end the connection")
				}
				if l != "" {
					t.Fatalf("partial line %q", l)
				}
				break
			}
			var m map[string]json.RawMessage
			if err := json.Unmarshal([]byte(l), &m); err != nil {
				t.Fatalf("line %q: %v", l, err)
			}
			n := 0
			for _, k := range []string{"return", "error", "event"} {
				if m[k] != nil {
					n++
				}
			}
			if n != 1 {
				t.Fatalf("line %q", l)
			}
		}
		c.c.Close()
	})
}
