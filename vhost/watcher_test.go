package vhost

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vstellar/vstellar/guestmem"
	"github.com/vstellar/vstellar/internal/testkit/wait"
	"github.com/vstellar/vstellar/virtio"
)

// watchDevice is the echo device plus a MemoryWatcher that checks, on
// every call, that no ring is being processed and that the table being
// replaced is still mapped.
type watchDevice struct {
	*echoDevice
	inProcess atomic.Int32

	mu       sync.Mutex
	cur      *guestmem.Table // the table the device believes in
	calls    int
	overlaps int  // SetMemory calls that found a ring being processed
	oldOK    int  // calls that could read every page of the old table
	oldGone  int  // calls that faulted reading the old table
	refuse   bool // SetMemory fails
}

var _ MemoryWatcher = (*watchDevice)(nil)

func (d *watchDevice) ProcessQueue(ctx context.Context, idx int, q *virtio.DeviceQueue, mem *guestmem.Table) error {
	d.inProcess.Add(1)
	defer d.inProcess.Add(-1)
	return d.echoDevice.ProcessQueue(ctx, idx, q, mem)
}

func (d *watchDevice) SetMemory(t *guestmem.Table) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls++
	if d.inProcess.Load() != 0 {
		d.overlaps++
	}
	if d.cur != nil {
		if readable(d.cur) {
			d.oldOK++
		} else {
			d.oldGone++
		}
	}
	if d.refuse {
		return errors.New("refused by the test")
	}
	d.cur = t
	return nil
}

func (d *watchDevice) snapshot() (cur *guestmem.Table, calls, overlaps, oldOK, oldGone int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.cur, d.calls, d.overlaps, d.oldOK, d.oldGone
}

// readable reads the first and last byte of every region of t and reports
// whether all of them are still mapped: a Mapping we unmapped has an
// empty View, and a read of memory unmapped behind its back faults, which
// Guard reports.
func readable(t *guestmem.Table) bool {
	return guestmem.Guard(func() error {
		var sum byte
		for _, r := range t.Regions() {
			b := r.Mapping.View().Bytes()
			if len(b) == 0 {
				return errors.New("unmapped")
			}
			sum += b[0] + b[len(b)-1]
		}
		_ = sum
		return nil
	}) == nil
}

// TestMemoryWatcherSeesOldMemoryMapped checks the order the MemoryWatcher
// contract promises: called with the rings quiesced, while the replaced
// mappings are still mapped, and those mappings are gone once the
// front-end has its acknowledgement.
func TestMemoryWatcherSeesOldMemoryMapped(t *testing.T) {
	dev := &watchDevice{echoDevice: newEchoDevice(t)}
	s := serve(t, NewBackend(dev, Options{}))
	g := newTestGuest(t, s.fe)
	g.handshake()
	g.start(8)
	first, calls, _, _, _ := dev.snapshot()
	if calls != 1 || first == nil || first.Len() != 2 {
		t.Fatalf("after start: %d calls, table %v", calls, first)
	}
	if got := g.request(0, []byte("before")); string(got) != "before" {
		t.Fatalf("echo %q", got)
	}

	// The same layout again: the device moves to the new table while the
	// old one is still mapped; afterwards the old one is unmapped.
	s.fe.mustAck(uint32(ReqSetMemTable), memTable(g.regions()...), g.memfd, g.memfd)
	second, calls, overlaps, oldOK, oldGone := dev.snapshot()
	if calls != 2 || second == first || oldOK != 1 || oldGone != 0 || overlaps != 0 {
		t.Fatalf("SET_MEM_TABLE: calls %d new table %v, old readable %d faulted %d, overlaps %d", calls, second != first, oldOK, oldGone, overlaps)
	}
	if readable(first) {
		t.Fatal("the replaced table is still mapped after the acknowledgement")
	}
	if got := g.request(1, []byte{0x0f}); got[0] != 0xf0 {
		t.Fatalf("echo after the change: %x", got)
	}

	// Removing a region: same order.
	s.fe.mustAck(uint32(ReqRemMemReg), singleRegion(g.regions()[1]))
	third, calls, overlaps, oldOK, oldGone := dev.snapshot()
	if calls != 3 || third.Len() != 1 || oldOK != 2 || oldGone != 0 || overlaps != 0 {
		t.Fatalf("REM_MEM_REG: calls %d regions %d, old readable %d faulted %d, overlaps %d", calls, third.Len(), oldOK, oldGone, overlaps)
	}
	if readable(second) {
		t.Fatal("the removed region is still mapped after the acknowledgement")
	}
	if !readable(third) {
		t.Fatal("the remaining region was unmapped")
	}
}

// TestMemoryWatcherRefusal: a device that refuses a memory change keeps
// the rings and the Backend on the old table.
func TestMemoryWatcherRefusal(t *testing.T) {
	dev := &watchDevice{echoDevice: newEchoDevice(t)}
	s := serve(t, NewBackend(dev, Options{}))
	g := newTestGuest(t, s.fe)
	g.handshake()
	g.start(8)
	cur, _, _, _, _ := dev.snapshot()
	dev.mu.Lock()
	dev.refuse = true
	dev.mu.Unlock()
	s.fe.mustFail(uint32(ReqSetMemTable), memTable(g.regions()...), g.memfd, g.memfd)
	s.fe.mustFail(uint32(ReqRemMemReg), singleRegion(g.regions()[1]))
	if got, calls, _, _, _ := dev.snapshot(); got != cur || calls != 3 {
		t.Fatalf("table changed (%v) or calls %d", got != cur, calls)
	}
	if !readable(cur) {
		t.Fatal("the kept table was unmapped")
	}
	if got := g.request(0, []byte("kept")); string(got) != "kept" {
		t.Fatalf("echo after refusal: %q", got)
	}
}

// TestSchedule: Env.Schedule runs a queue as if kicked, from any goroutine,
// and does nothing for a ring that is not running or an unknown index.
func TestSchedule(t *testing.T) {
	dev := &envDevice{echoDevice: newEchoDevice(t)}
	s := serve(t, NewBackend(dev, Options{}))
	g := newTestGuest(t, s.fe)
	g.handshake()
	g.start(8)
	// The Backend activates the device after it has acknowledged
	// DRIVER_OK, so activation may trail start.
	var env Env
	wait.For(t, "device activation", func() bool { env = dev.env(); return env != nil })
	env.Schedule(-1)
	env.Schedule(2) // the echo device has two queues
	// The first kick starts the ring (as the VMM's armed kick fd does).
	if got := g.request(0, []byte("kick")); string(got) != "kick" {
		t.Fatalf("echo %q", got)
	}
	// Add a chain without kicking: only Schedule can get it processed.
	in, out := g.alloc(4), g.alloc(4)
	v, _ := g.mem.Translate(in, 4)
	v.CopyIn(0, []byte("sche"))
	head, err := g.qs[0].Add([]virtio.Buffer{{Addr: in, Len: 4}}, []virtio.Buffer{{Addr: out, Len: 4}})
	if err != nil {
		t.Fatal(err)
	}
	g.qs[0].Publish()
	done := make(chan struct{})
	go func() { env.Schedule(0); close(done) }()
	<-done
	for {
		waitEvent(t, g.call[0])
		if h, n, ok := g.qs[0].GetUsed(); ok {
			if h != head || n != 4 {
				t.Fatalf("used %d/%d", h, n)
			}
			break
		}
	}
	// Stopped ring: Schedule does nothing and the chain stays available.
	s.fe.call(uint32(ReqGetVringBase), state(0, 0))
	_, _, before, _ := dev.echoDevice.snapshot()
	if _, err := g.qs[0].Add([]virtio.Buffer{{Addr: in, Len: 4}}, []virtio.Buffer{{Addr: out, Len: 4}}); err != nil {
		t.Fatal(err)
	}
	g.qs[0].Publish()
	env.Schedule(0)
	time.Sleep(50 * time.Millisecond)
	if _, _, after, _ := dev.echoDevice.snapshot(); after != before {
		t.Fatalf("processed %d -> %d on a stopped ring", before, after)
	}
	if _, _, ok := g.qs[0].GetUsed(); ok {
		t.Fatal("a stopped ring completed a chain")
	}
}

// envDevice is the echo device that keeps the Env it was activated with.
type envDevice struct {
	*echoDevice
	mu sync.Mutex
	e  Env
}

func (d *envDevice) Activate(ctx context.Context, env Env) error {
	d.mu.Lock()
	d.e = env
	d.mu.Unlock()
	return d.echoDevice.Activate(ctx, env)
}

func (d *envDevice) env() Env {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.e
}

// hoardDevice leaves every buffer on queue 1 posted, as a device keeps
// event buffers until it has events, and counts ProcessQueue calls.
type hoardDevice struct {
	*echoDevice
	calls atomic.Int64
}

func (d *hoardDevice) ProcessQueue(ctx context.Context, idx int, q *virtio.DeviceQueue, mem *guestmem.Table) error {
	if idx == 1 {
		d.calls.Add(1)
		return nil
	}
	return d.echoDevice.ProcessQueue(ctx, idx, q, mem)
}

// TestPostedBuffersDoNotSpin: a device that leaves buffers posted is not
// called in a loop; the worker waits for the next kick.
func TestPostedBuffersDoNotSpin(t *testing.T) {
	dev := &hoardDevice{echoDevice: newEchoDevice(t)}
	s := serve(t, NewBackend(dev, Options{}))
	g := newTestGuest(t, s.fe)
	g.handshake()
	g.start(8)
	buf := g.alloc(16)
	if _, err := g.qs[1].Add(nil, []virtio.Buffer{{Addr: buf, Len: 16}}); err != nil {
		t.Fatal(err)
	}
	g.qs[1].Publish()
	g.doKick(1)
	waitFor := time.Now().Add(5 * time.Second)
	for dev.calls.Load() == 0 && time.Now().Before(waitFor) {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	if n := dev.calls.Load(); n < 1 || n > 2 {
		t.Fatalf("ProcessQueue called %d times for one kick", n)
	}
	// The ring still works: queue 0 echoes.
	if got := g.request(0, []byte("ok")); string(got) != "ok" {
		t.Fatalf("echo %q", got)
	}
}
