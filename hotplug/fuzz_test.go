package hotplug

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// Lines QEMU 10.0.2 sent (see qemu_test.go), and lies.
var qmpSeeds = []string{
	`{"QMP": {"version": {"qemu": {"micro": 2, "minor": 0, "major": 10}, "package": "Debian 1:10.0.2+ds-2+deb13u1~bpo12+1"}, "capabilities": ["oob"]}}`,
	`{"return": {}, "id": 1}`,
	`{"id": "vst-3", "error": {"class": "DeviceNotFound", "desc": "Device 'vst0' not found"}}`,
	`{"id": 12, "error": {"class": "GenericError", "desc": "'vhost-user-test-device-pci' is not a valid device model name"}}`,
	`{"timestamp": {"seconds": 1795360513, "microseconds": 743275}, "event": "RESUME"}`,
	`{"timestamp": {"seconds": 1, "microseconds": 2}, "event": "DEVICE_DELETED", "data": {"device": "vst0", "path": "/machine/peripheral/vst0"}}`,
	`{"return": [{"bus": 0, "devices": [{"bus": 0, "slot": 1, "function": 0, "qdev_id": "rp0", "id": {"device": 12, "vendor": 6966}, "pci_bridge": {"bus": {"number": 1}, "devices": [{"bus": 1, "slot": 0, "function": 0, "qdev_id": "vst0", "id": {"vendor": 6900, "device": 4202}}]}}]}], "id": "vst-9"}`,
	`{"error": {"class": "GenericError", "desc": "JSON parse error, invalid keyword 'garbage'"}}`,
	`{"return": {}, "error": {"class": "x", "desc": "y"}}`,
	`{"QMP": {"version": {"qemu": {"major": -1, "minor": 0, "micro": 0}}, "capabilities": []}}`,
	`{"event": "", "return": {}}`, `null`, `[]`, `"x"`, `{}`, ``, "\x00garbage",
}

func FuzzParseMessage(f *testing.F) {
	for _, s := range qmpSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		m, err := parseMessage(line)
		if err != nil {
			return
		}
		switch m.kind {
		case kindGreeting:
			if v := m.version; v.Major < 0 || v.Minor < 0 || v.Micro < 0 || m.capabilities == nil {
				t.Fatalf("greeting %+v", m)
			}
		case kindReply:
			if (m.ret == nil) == (m.qerr == nil) || m.qerr != nil && m.qerr.Class == "" {
				t.Fatalf("reply with ret %s and error %v", m.ret, m.qerr)
			}
			if m.ret != nil && !json.Valid(m.ret) {
				t.Fatalf("return %q is not JSON", m.ret)
			}
		case kindEvent:
			if m.event == "" {
				t.Fatal("event without a name")
			}
		default:
			t.Fatalf("kind %d", m.kind)
		}
	})
}

func FuzzFindPCI(f *testing.F) {
	f.Add([]byte(`[{"bus": 0, "devices": [{"bus": 0, "slot": 1, "function": 0, "qdev_id": "rp0", "pci_bridge": {"bus": {"number": 1}, "devices": [{"bus": 1, "slot": 0, "function": 0, "qdev_id": "vst0", "id": {"vendor": 6900, "device": 4202}}]}}]}]`), "vst0")
	f.Add([]byte(`[{"bus": 0, "devices": [{"bus": 300, "slot": 0, "function": 0, "qdev_id": "vst0"}]}]`), "vst0")
	f.Add([]byte(`[{"bus": 0, "devices": [{"qdev_id": "rp0", "pci_bridge": {"bus": {"number": 0}}}]}]`), "vst0")
	f.Add([]byte(`{}`), "")
	f.Fuzz(func(t *testing.T, ret []byte, id string) {
		d, ok, err := findPCI(ret, id)
		if err != nil && ok {
			t.Fatal("found and failed")
		}
		if ok {
			a := d.Address
			if d.QdevID != id || a.Bus < 0 || a.Bus > 255 || a.Slot < 0 || a.Slot > 31 || a.Function < 0 || a.Function > 7 {
				t.Fatalf("found %+v for %q", d, id)
			}
			if s := a.String(); len(s) != 7 {
				t.Fatalf("address %q", s)
			}
		}
	})
}

// chunkConn hands out its data in chunks of the given sizes, then EOF.
type chunkConn struct {
	net.Conn // nil: only Read is used
	data     []byte
	sizes    []byte
}

func (c *chunkConn) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := len(c.data)
	if len(c.sizes) > 0 {
		n = min(n, int(c.sizes[0])+1)
		c.sizes = c.sizes[1:]
	}
	n = copy(p, c.data[:n])
	c.data = c.data[n:]
	return n, nil
}

func (c *chunkConn) Close() error                     { return nil }
func (c *chunkConn) SetDeadline(time.Time) error      { return nil }
func (c *chunkConn) SetReadDeadline(time.Time) error  { return nil }
func (c *chunkConn) SetWriteDeadline(time.Time) error { return nil }

// FuzzTap reads a stream through the tap with a bufio.Scanner, as
// go-qemu does (Connect's progress after each handshake line, a release
// after each reply past it), and checks it sees exactly the stream's
// lines, whatever the chunking, and that the tap kept each reply, and
// nothing else. A hold that nothing ends would hang it.
func FuzzTap(f *testing.F) {
	f.Add([]byte(strings.Join(qmpSeeds, "\r\n")+"\r\n"), []byte{3, 200, 1})
	f.Add([]byte("a\nb\r\n\n{\"return\": {}, \"id\": \"vst-1\"}\n{\"id\": \"vst-2\", \"error\": {\"class\": \"C\", \"desc\": \"D\"}}\npartial"), []byte{0})
	f.Add(bytes.Repeat([]byte("x"), maxLine+5), []byte{255})
	f.Fuzz(func(t *testing.T, data, sizes []byte) {
		var lost error
		tp := newTap(&chunkConn{data: data, sizes: sizes}, func(err error) { lost = err })
		sc := bufio.NewScanner(tp)
		var got []string
		complete := bytes.Count(data, []byte("\n"))
		for sc.Scan() {
			got = append(got, sc.Text())
			switch {
			case len(got) <= handshakeLines:
				tp.advance(len(got))
			case len(got) > complete:
				// A line cut by EOF is no reply: the proxy never
				// passes one on.
			case goQEMUReply(sc.Bytes()):
				if r, ok := tp.takeReply(); !ok || string(r) != sc.Text() {
					t.Fatalf("reply %q kept as %q (%v)", sc.Text(), r, ok)
				}
				tp.release()
			}
		}
		var want []string
		for l := range strings.SplitSeq(string(data), "\n") {
			want = append(want, strings.TrimSuffix(l, "\r"))
		}
		if want[len(want)-1] == "" {
			want = want[:len(want)-1]
		}
		if errors.Is(sc.Err(), errLineTooLong) || sc.Err() == bufio.ErrTooLong {
			if lost == nil {
				t.Fatal("an over-long line was not reported")
			}
			return
		}
		if sc.Err() != nil || strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Fatalf("scanned %q (%v), want %q", got, sc.Err(), want)
		}
		if r, ok := tp.takeReply(); ok {
			t.Fatalf("kept %q, which go-qemu never took", r)
		}
		if tp.lines != complete {
			t.Fatalf("tap saw %d lines, want %d", tp.lines, complete)
		}
	})
}
