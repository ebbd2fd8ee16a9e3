package daemon_test

import (
	"context"
	"encoding/binary"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/vstellar/vstellar/api"
	"github.com/vstellar/vstellar/daemon"
	"github.com/vstellar/vstellar/guestmem"
	"github.com/vstellar/vstellar/internal/testkit/wait"
	"github.com/vstellar/vstellar/vhost"
	"github.com/vstellar/vstellar/virtio"
)

// nullDevice is the smallest vhost.Device: one queue, no config space.
type nullDevice struct{}

func (nullDevice) NumQueues() int                            { return 1 }
func (nullDevice) MaxQueueSize() uint16                      { return 256 }
func (nullDevice) Features() uint64                          { return 1 << 32 } // VIRTIO_F_VERSION_1
func (nullDevice) ConfigSize() uint32                        { return 0 }
func (nullDevice) ReadConfig(uint32, []byte)                 {}
func (nullDevice) WriteConfig(uint32, []byte) error          { return nil }
func (nullDevice) ShmemRegions() []uint64                    { return nil }
func (nullDevice) Activate(context.Context, vhost.Env) error { return nil }
func (nullDevice) Deactivate(bool)                           {}
func (nullDevice) ProcessQueue(context.Context, int, *virtio.DeviceQueue, *guestmem.Table) error {
	return nil
}

func vhostFactory(_ context.Context, spec api.DeviceSpec, _ daemon.Shared, log *slog.Logger) (daemon.Instance, error) {
	return daemon.Instance{Backend: vhost.NewBackend(nullDevice{}, vhost.Options{Name: spec.Name, Logger: log})}, nil
}

// getFeatures sends GET_FEATURES and returns the answer.
func getFeatures(t *testing.T, c *net.UnixConn) uint64 {
	t.Helper()
	var req [12]byte
	binary.LittleEndian.PutUint32(req[0:], 1) // GET_FEATURES
	binary.LittleEndian.PutUint32(req[4:], 1) // version 1
	if _, err := c.Write(req[:]); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var resp [20]byte
	if _, err := readFull(c, resp[:]); err != nil {
		t.Fatalf("GET_FEATURES reply: %v", err)
	}
	if r, f, n := binary.LittleEndian.Uint32(resp[0:]), binary.LittleEndian.Uint32(resp[4:]), binary.LittleEndian.Uint32(resp[8:]); r != 1 || f&4 == 0 || n != 8 {
		t.Fatalf("reply header %d %#x %d", r, f, n)
	}
	return binary.LittleEndian.Uint64(resp[12:])
}

func readFull(c *net.UnixConn, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		k, err := c.Read(b[n:])
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// TestVhostBackendIsolation runs the real vhost.Backend: a front-end that
// sends a malformed header loses its connection, another device keeps
// answering, and shutdown disconnects everyone.
func TestVhostBackendIsolation(t *testing.T) {
	cfg := daemon.DefaultConfig()
	cfg.RunDir = shortTempDir(t)
	cfg.Factory = vhostFactory
	cfg.Devices = []api.DeviceSpec{{Name: "good"}, {Name: "bad"}}
	r := run(t, cfg)

	good, bad := dial(t, r.m.SocketPath("good")), dial(t, r.m.SocketPath("bad"))
	if f := getFeatures(t, good); f&(1<<32) == 0 {
		t.Fatalf("features %#x lack VERSION_1", f)
	}
	getFeatures(t, bad)

	garbage := []byte{0xff, 0xff, 0xff, 0xff, 0xfe, 0xff, 0xff, 0xff, 0, 0, 0, 0}
	if _, err := bad.Write(garbage); err != nil {
		t.Fatal(err)
	}
	expectClosed(t, bad)
	getFeatures(t, good)
	wait.For(t, "bad's error recorded", func() bool { return info(t, r.m, "bad").LastError != "" })
	if i := info(t, r.m, "bad"); i.Connected || !strings.Contains(i.LastError, "header") {
		t.Errorf("bad: %+v", i)
	}
	if i := info(t, r.m, "good"); !i.Connected || i.LastError != "" {
		t.Errorf("good: %+v", i)
	}
	// A second front-end on good is refused; good keeps working.
	expectClosed(t, dial(t, r.m.SocketPath("good")))
	getFeatures(t, good)
	// bad takes a reconnect.
	getFeatures(t, dial(t, r.m.SocketPath("bad")))

	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	expectClosed(t, good)
}
