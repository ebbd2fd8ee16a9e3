package vhost

import (
	"bytes"
	"encoding/binary"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/vstellar/vstellar/virtio"
)

// A front-end that shrinks the file behind a region after mapping it makes
// the next touch of that memory fault. The fault must break that ring
// only: the daemon, the connection and the other ring go on.
func TestShrunkMemoryBreaksOnlyThatRing(t *testing.T) {
	dev := newEchoDevice(t)
	b := NewBackend(dev, Options{})
	s := serve(t, b)
	g := newTestGuest(t, s.fe)
	g.handshake()
	g.start(8)

	// Queue a request whose buffers live in the high region...
	in, out := uint64(highGPA), uint64(highGPA+4096)
	v, _ := g.mem.Translate(in, 4)
	v.CopyIn(0, []byte("boom"))
	if _, err := g.qs[0].Add([]virtio.Buffer{{Addr: in, Len: 4}}, []virtio.Buffer{{Addr: out, Len: 4}}); err != nil {
		t.Fatal(err)
	}
	// ...then cut the high region out of the file and kick.
	if err := unix.Ftruncate(g.memfd, regionSize); err != nil {
		t.Fatal(err)
	}
	g.qs[0].Publish()
	g.doKick(0)
	waitEvent(t, g.errfd[0])
	if b.Stats().BrokenQueues.Load() != 1 {
		t.Fatalf("broken queues = %d", b.Stats().BrokenQueues.Load())
	}
	if got := g.request(1, []byte{0x55}); !bytes.Equal(got, []byte{0xaa}) {
		t.Fatalf("queue 1 after the fault: %x", got)
	}
	if st := binary.LittleEndian.Uint64(s.fe.call(uint32(ReqGetStatus), nil)); st&uint64(virtio.StatusDeviceNeedsReset) == 0 {
		t.Fatalf("status %#x lacks DEVICE_NEEDS_RESET", st)
	}
}

// The rings themselves in memory the front-end takes away: the
// notification fields the worker touches around ProcessQueue (used ring
// flags, avail event) fault too, and that must cost that ring only, not
// the process (it used to: "fatal error: fault").
func TestShrunkMemoryUnderTheRingsBreaksOnlyThatRing(t *testing.T) {
	dev := newEchoDevice(t)
	b := NewBackend(dev, Options{})
	s := serve(t, b)
	g := newTestGuest(t, s.fe)
	g.handshake()
	// Without EVENT_IDX, suppressing notifications writes the used ring's
	// flags before anything else touches the ring.
	s.fe.mustAck(uint32(ReqSetFeatures), u64(virtio.FeatureMask(virtio.FeatureVersion1)|1<<30))
	var fds []int
	for range g.regions() {
		fds = append(fds, g.memfd)
	}
	s.fe.mustAck(uint32(ReqSetMemTable), memTable(g.regions()...), fds...)
	const n = 8
	d, _, _ := virtio.RingSizes(n)
	g.setupQueueAt(0, n, virtio.RingAddrs{Desc: highGPA, Avail: highGPA + d, Used: highGPA + 4096})
	g.setupQueue(1, n)
	if got := g.request(0, []byte("ok")); !bytes.Equal(got, []byte("ok")) {
		t.Fatalf("queue 0: %q", got)
	}

	if err := unix.Ftruncate(g.memfd, regionSize); err != nil {
		t.Fatal(err)
	}
	g.doKick(0)
	waitEvent(t, g.errfd[0])
	if b.Stats().BrokenQueues.Load() != 1 {
		t.Fatalf("broken queues = %d", b.Stats().BrokenQueues.Load())
	}
	if got := g.request(1, []byte{0x55}); !bytes.Equal(got, []byte{0xaa}) {
		t.Fatalf("queue 1 after the fault: %x", got)
	}
}

// Configuring a ring reads its indices: a front-end that shrank the file
// and then sends SET_VRING_ADDR for rings in the lost memory gets an
// error reply and DEVICE_NEEDS_RESET, not a daemon killed by SIGBUS in
// the message dispatcher (it was, before every handler ran in
// guestmem.Guard).
func TestShrunkMemoryFailsRingSetUp(t *testing.T) {
	dev := newEchoDevice(t)
	b := NewBackend(dev, Options{})
	s := serve(t, b)
	g := newTestGuest(t, s.fe)
	g.handshake()
	g.start(8)
	if err := unix.Ftruncate(g.memfd, regionSize); err != nil {
		t.Fatal(err)
	}
	const n = 8
	d, _, _ := virtio.RingSizes(n)
	s.fe.mustAck(uint32(ReqGetVringBase), state(0, 0))
	s.fe.mustAck(uint32(ReqSetVringNum), state(0, n))
	s.fe.mustAck(uint32(ReqSetVringBase), state(0, 0))
	if ack := s.fe.ack(uint32(ReqSetVringAddr), vringAddr(0, g.uva(highGPA), g.uva(highGPA+4096), g.uva(highGPA+d))); ack == 0 {
		t.Fatal("SET_VRING_ADDR on memory the front-end took away succeeded")
	}
	if st := binary.LittleEndian.Uint64(s.fe.call(uint32(ReqGetStatus), nil)); st&uint64(virtio.StatusDeviceNeedsReset) == 0 {
		t.Fatalf("status %#x lacks DEVICE_NEEDS_RESET", st)
	}
	if got := g.request(1, []byte{0x55}); !bytes.Equal(got, []byte{0xaa}) {
		t.Fatalf("queue 1 after the fault: %x", got)
	}
}
