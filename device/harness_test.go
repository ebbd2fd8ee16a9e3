package device

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"

	"github.com/vstellar/vstellar/guestmem"
	"github.com/vstellar/vstellar/vhost"
	"github.com/vstellar/vstellar/virtio"
	"github.com/vstellar/vstellar/virtio/abi"
)

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func newDevice(t testing.TB, cfg Config) *Device {
	t.Helper()
	if cfg.Name == "" {
		cfg.Name = "test0"
	}
	d, err := New(cfg, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// fakeEnv is a vhost.Env that records shared memory mappings and
// Schedule calls.
type fakeEnv struct {
	mu        sync.Mutex
	acked     uint64
	mem       *guestmem.Table
	mapErr    error
	mappings  []vhost.ShmemMapping
	rings     []vhost.GuestRange
	fds       []int
	scheduled []int
}

func (e *fakeEnv) AckedFeatures() uint64   { return e.acked }
func (e *fakeEnv) Memory() *guestmem.Table { return e.mem }
func (e *fakeEnv) Schedule(idx int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.scheduled = append(e.scheduled, idx)
}
func (e *fakeEnv) MapShmem(_ context.Context, m vhost.ShmemMapping, fd int) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.mapErr != nil {
		return e.mapErr
	}
	e.mappings = append(e.mappings, m)
	e.fds = append(e.fds, fd)
	return nil
}
func (e *fakeEnv) UnmapShmem(context.Context, vhost.ShmemMapping) error {
	return errors.New("unexpected unmap")
}
func (e *fakeEnv) ConfigChanged(context.Context) error { return nil }
func (e *fakeEnv) RingMemory() []vhost.GuestRange {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.rings
}

var _ vhost.Env = (*fakeEnv)(nil)

// allFeatures is what a driver acks when it takes everything offered.
func allFeatures(d *Device) uint64 { return d.Features() }

// activate activates d on a fakeEnv whose guest memory is a fresh 1 MiB
// table (tests that run commands touching memory use activateOn with
// their guest's table).
func activate(t testing.TB, d *Device, acked uint64) *fakeEnv {
	t.Helper()
	return activateOn(t, d, acked, newMemory(t))
}

func activateOn(t testing.TB, d *Device, acked uint64, mem *guestmem.Table) *fakeEnv {
	t.Helper()
	env := &fakeEnv{acked: acked, mem: mem}
	if err := d.Activate(context.Background(), env); err != nil {
		t.Fatal(err)
	}
	return env
}

// Guest memory for queue tests: one 1 MiB region at guest physical 0 with
// the rings at 0x1000 and a bump allocator for buffers from 0x10000.
const (
	memSize   = 1 << 20
	ringBase  = 0x1000
	bufBase   = 0x10000
	queueSize = 64
)

type guest struct {
	t    testing.TB
	mem  *guestmem.Table
	drv  *virtio.DriverQueue
	devq *virtio.DeviceQueue
	next uint64
}

// newMemory is 1 MiB of anonymous guest memory at guest physical 0.
func newMemory(t testing.TB) *guestmem.Table {
	t.Helper()
	m, err := guestmem.MapAnonymous(memSize)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Unmap() })
	mem, err := guestmem.NewTable([]guestmem.Region{{GuestPhys: 0, Size: memSize, UserAddr: 0x7f0000000000, Mapping: m}})
	if err != nil {
		t.Fatal(err)
	}
	return mem
}

func newGuest(t testing.TB, eventIdx bool) *guest {
	t.Helper()
	g := &guest{mem: newMemory(t)}
	g.reset(t, eventIdx)
	return g
}

// reset gives the guest fresh queues at the same place and an empty
// buffer allocator (fuzzing reuses one guest, and its memory, per
// device).
func (g *guest) reset(t testing.TB, eventIdx bool) {
	t.Helper()
	mem := g.mem
	rings, err := mem.Translate(ringBase, bufBase-ringBase)
	if err != nil {
		t.Fatal(err)
	}
	clear(rings.Bytes())
	dl, al, _ := virtio.RingSizes(queueSize)
	addrs := virtio.RingAddrs{Desc: ringBase, Avail: ringBase + dl}
	addrs.Used = (addrs.Avail + al + 3) &^ 3
	drv, err := virtio.NewDriverQueue(mem, queueSize, addrs, eventIdx)
	if err != nil {
		t.Fatal(err)
	}
	devq, err := virtio.NewDeviceQueue(mem, queueSize, addrs, eventIdx)
	if err != nil {
		t.Fatal(err)
	}
	g.t, g.drv, g.devq, g.next = t, drv, devq, bufBase
}

// alloc returns a guest buffer of n bytes (8-byte aligned), filled with
// 0xee so tests see exactly what the device wrote.
func (g *guest) alloc(n uint32) virtio.Buffer {
	g.t.Helper()
	addr := g.next
	g.next = (g.next + uint64(n) + 7) &^ 7
	if g.next > memSize {
		g.t.Fatal("test guest out of memory")
	}
	if n > 0 {
		b := g.bytes(addr, uint64(n))
		for i := range b {
			b[i] = 0xee
		}
	}
	return virtio.Buffer{Addr: addr, Len: n}
}

func (g *guest) bytes(addr, n uint64) []byte {
	g.t.Helper()
	v, err := g.mem.Translate(addr, n)
	if err != nil {
		g.t.Fatal(err)
	}
	return v.Bytes()
}

// put copies b into a fresh guest buffer.
func (g *guest) put(b []byte) virtio.Buffer {
	buf := g.alloc(uint32(len(b)))
	copy(g.bytes(buf.Addr, uint64(len(b))), b)
	return buf
}

// submit adds a chain and publishes it.
func (g *guest) submit(readable, writable []virtio.Buffer) uint16 {
	g.t.Helper()
	head, err := g.drv.Add(readable, writable)
	if err != nil {
		g.t.Fatal(err)
	}
	g.drv.Publish()
	return head
}

func (g *guest) process(d *Device) error {
	return d.ProcessQueue(context.Background(), abi.QueueControl, g.devq, g.mem)
}

// used reclaims one completion.
func (g *guest) used() (head uint16, written uint32) {
	g.t.Helper()
	head, written, ok := g.drv.GetUsed()
	if !ok {
		g.t.Fatalf("no used buffer (driver queue error: %v)", g.drv.Err())
	}
	return head, written
}

// command runs one request with a single response buffer of respLen bytes
// and returns what the device wrote.
func (g *guest) command(d *Device, req []byte, respLen uint32) []byte {
	g.t.Helper()
	var readable []virtio.Buffer
	if len(req) > 0 {
		readable = []virtio.Buffer{g.put(req)}
	}
	var writable []virtio.Buffer
	resp := g.alloc(respLen)
	if respLen > 0 {
		writable = []virtio.Buffer{resp}
	}
	head := g.submit(readable, writable)
	if err := g.process(d); err != nil {
		g.t.Fatal(err)
	}
	h, written := g.used()
	if h != head {
		g.t.Fatalf("used head %d, submitted %d", h, head)
	}
	if written > respLen {
		g.t.Fatalf("device claims %d bytes written into %d", written, respLen)
	}
	return append([]byte(nil), g.bytes(resp.Addr, uint64(written))...)
}
