package vhost

import (
	"bytes"
	"encoding/binary"
	"net"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/vstellar/vstellar/guestmem"
	"github.com/vstellar/vstellar/virtio"
)

// testGuest is a guest with 4 MiB of memfd RAM laid out like QEMU lays out
// a machine with a hole: 2 MiB at GPA 0, 2 MiB at GPA 4 GiB from file
// offset 2 MiB. It drives the backend through a rawFE.
type testGuest struct {
	t     *testing.T
	fe    *rawFE
	memfd int
	mem   *guestmem.Table
	qs    []*virtio.DriverQueue
	kick  []int
	call  []int
	errfd []int
	next  uint64 // bump allocator in low RAM

	chMu    sync.Mutex
	chReqs  []uint32 // back-end requests received
	chMaps  [][]byte // SHMEM_MAP payloads
	chReply uint64   // ack value the channel answers with
	// chHold, when set, holds every acknowledgement until it is closed:
	// QEMU answers the back-end channel only from its main loop, never
	// while it waits for a reply of ours.
	chHold chan struct{}
}

const (
	regionSize = 2 << 20
	highGPA    = 4 << 30
	uvaBase    = 0x7f00_0000_0000
)

func (g *testGuest) regions() [][4]uint64 {
	return [][4]uint64{
		{0, regionSize, uvaBase, 0},
		{highGPA, regionSize, uvaBase + regionSize, regionSize},
	}
}

func newTestGuest(t *testing.T, fe *rawFE) *testGuest {
	t.Helper()
	fd, err := unix.MemfdCreate("guest-ram", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if err := unix.Ftruncate(fd, 2*regionSize); err != nil {
		t.Fatal(err)
	}
	var rs []guestmem.Region
	for _, r := range (&testGuest{}).regions() {
		mp, err := guestmem.MapOwn(fd, r[3], r[1])
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { mp.Unmap() })
		rs = append(rs, guestmem.Region{GuestPhys: r[0], Size: r[1], UserAddr: r[2], MmapOffset: r[3], Mapping: mp})
	}
	mem, err := guestmem.NewTable(rs)
	if err != nil {
		t.Fatal(err)
	}
	return &testGuest{t: t, fe: fe, memfd: fd, mem: mem, next: 0x1000}
}

func (g *testGuest) alloc(n uint64) uint64 {
	a := (g.next + 63) &^ 63
	g.next = a + n
	if g.next > regionSize {
		g.t.Fatal("guest out of low memory")
	}
	return a
}

func (g *testGuest) uva(gpa uint64) uint64 {
	if gpa >= highGPA {
		return uvaBase + regionSize + gpa - highGPA
	}
	return uvaBase + gpa
}

// handshake runs QEMU's connect sequence and sets up the back-end channel.
func (g *testGuest) handshake() {
	fe := g.fe
	feats := binary.LittleEndian.Uint64(fe.call(uint32(ReqGetFeatures), nil))
	if feats&(1<<30) == 0 {
		g.t.Fatalf("GET_FEATURES %#x lacks VHOST_USER_F_PROTOCOL_FEATURES", feats)
	}
	proto := binary.LittleEndian.Uint64(fe.call(uint32(ReqGetProtocolFeatures), nil))
	fe.send(uint32(ReqSetProtocolFeatures), vFlag, u64(proto))
	if n := binary.LittleEndian.Uint64(fe.call(uint32(ReqGetQueueNum), nil)); n != 2 {
		g.t.Fatalf("GET_QUEUE_NUM = %d", n)
	}
	fe.call(uint32(ReqGetMaxMemSlots), nil)
	chFE, chBE := socketPair(g.t)
	f, _ := chBE.File()
	chBE.Close()
	fe.mustAck(uint32(ReqSetBackendReqFD), nil, int(f.Fd()))
	f.Close()
	go g.serveChannel(chFE)
	g.t.Cleanup(func() { chFE.Close() })
	fe.send(uint32(ReqSetOwner), vFlag, nil)
	fe.call(uint32(ReqGetFeatures), nil)
	if cfg := fe.call(uint32(ReqGetShmemConfig), nil); len(cfg) != 2056 || binary.LittleEndian.Uint32(cfg) != 1 || binary.LittleEndian.Uint64(cfg[8:]) != 4096 {
		g.t.Fatalf("GET_SHMEM_CONFIG: %d bytes, %x", len(cfg), cfg[:16])
	}
}

// serveChannel answers back-end requests the way a front-end does.
func (g *testGuest) serveChannel(c *net.UnixConn) {
	ch := &rawFE{t: g.t, c: c}
	for {
		hdr := make([]byte, 12)
		oob := make([]byte, unix.CmsgSpace(8*4))
		n, oobn, _, _, err := c.ReadMsgUnix(hdr, oob)
		if err != nil || n != 12 {
			return
		}
		if oobn > 0 {
			msgs, _ := unix.ParseSocketControlMessage(oob[:oobn])
			for i := range msgs {
				fds, _ := unix.ParseUnixRights(&msgs[i])
				for _, fd := range fds {
					unix.Close(fd)
				}
			}
		}
		req, flags := binary.LittleEndian.Uint32(hdr), binary.LittleEndian.Uint32(hdr[4:])
		p := make([]byte, binary.LittleEndian.Uint32(hdr[8:]))
		if _, err := readFull(c, p); err != nil {
			return
		}
		g.chMu.Lock()
		g.chReqs = append(g.chReqs, req)
		if req == uint32(BackendShmemMap) {
			g.chMaps = append(g.chMaps, p)
		}
		reply, hold := g.chReply, g.chHold
		g.chMu.Unlock()
		if hold != nil {
			<-hold
		}
		if flags&needReply != 0 {
			b := make([]byte, 20)
			binary.LittleEndian.PutUint32(b, req)
			binary.LittleEndian.PutUint32(b[4:], vFlag|replyFlag)
			binary.LittleEndian.PutUint32(b[8:], 8)
			binary.LittleEndian.PutUint64(b[12:], reply)
			if _, err := ch.c.Write(b); err != nil {
				return
			}
		}
	}
}

func (g *testGuest) channelRequests() ([]uint32, [][]byte) {
	g.chMu.Lock()
	defer g.chMu.Unlock()
	return append([]uint32(nil), g.chReqs...), append([][]byte(nil), g.chMaps...)
}

// start runs QEMU's DRIVER_OK sequence with queues of size n.
func (g *testGuest) start(n uint16) {
	g.startRings(n)
	g.fe.mustAck(uint32(ReqSetStatus), u64(uint64(virtio.StatusAcknowledge|virtio.StatusDriver|virtio.StatusFeaturesOK|virtio.StatusDriverOK)))
}

// startRings is the start sequence up to the rings, where QEMU's generic
// device stops: it never sends DRIVER_OK.
func (g *testGuest) startRings(n uint16) {
	fe := g.fe
	fe.mustAck(uint32(ReqSetFeatures), u64(virtio.FeatureMask(virtio.FeatureVersion1, virtio.FeatureEventIdx)|1<<30))
	fe.mustAck(uint32(ReqSetStatus), u64(uint64(virtio.StatusAcknowledge|virtio.StatusDriver|virtio.StatusFeaturesOK)))
	var fds []int
	for range g.regions() {
		fds = append(fds, g.memfd)
	}
	fe.mustAck(uint32(ReqSetMemTable), memTable(g.regions()...), fds...)
	g.qs, g.kick, g.call, g.errfd = nil, nil, nil, nil
	for i := range 2 {
		g.setupQueue(uint32(i), n)
	}
}

func (g *testGuest) setupQueue(i uint32, n uint16) {
	d, a, u := virtio.RingSizes(n)
	g.setupQueueAt(i, n, virtio.RingAddrs{Desc: g.alloc(d), Avail: g.alloc(a), Used: g.alloc(u)})
}

// setupQueueAt sets up queue i with its rings at ra.
func (g *testGuest) setupQueueAt(i uint32, n uint16, ra virtio.RingAddrs) {
	fe := g.fe
	q, err := virtio.NewDriverQueue(g.mem, n, ra, true)
	if err != nil {
		g.t.Fatal(err)
	}
	g.qs = append(g.qs, q)
	fe.mustAck(uint32(ReqSetVringNum), state(i, uint32(n)))
	fe.mustAck(uint32(ReqSetVringBase), state(i, 0))
	fe.mustAck(uint32(ReqSetVringAddr), vringAddr(i, g.uva(ra.Desc), g.uva(ra.Used), g.uva(ra.Avail)))
	k, c, e := eventfd(g.t), eventfd(g.t), eventfd(g.t)
	g.kick, g.call, g.errfd = append(g.kick, k), append(g.call, c), append(g.errfd, e)
	fe.mustAck(uint32(ReqSetVringKick), u64(uint64(i)), k)
	fe.mustAck(uint32(ReqSetVringCall), u64(uint64(i)), c)
	fe.mustAck(uint32(ReqSetVringErr), u64(uint64(i)), e)
	fe.mustAck(uint32(ReqSetVringEnable), state(i, 1))
}

func (g *testGuest) doKick(q int) {
	var one [8]byte
	binary.NativeEndian.PutUint64(one[:], 1)
	unix.Write(g.kick[q], one[:])
}

// request sends data on queue q and returns what the device wrote back.
func (g *testGuest) request(q int, data []byte) []byte {
	g.t.Helper()
	in, out := g.alloc(uint64(len(data))), g.alloc(uint64(len(data)))
	v, err := g.mem.Translate(in, uint64(len(data)))
	if err != nil {
		g.t.Fatal(err)
	}
	v.CopyIn(0, data)
	head, err := g.qs[q].Add([]virtio.Buffer{{Addr: in, Len: uint32(len(data))}}, []virtio.Buffer{{Addr: out, Len: uint32(len(data))}})
	if err != nil {
		g.t.Fatal(err)
	}
	if g.qs[q].Publish() {
		g.doKick(q)
	}
	// Interrupts may be spurious (one comes with every new call fd), so
	// wait until the used ring really has the completion.
	var h uint16
	var n uint32
	for ok := false; !ok; {
		waitEvent(g.t, g.call[q])
		h, n, ok = g.qs[q].GetUsed()
	}
	if h != head {
		g.t.Fatalf("used head %d, want %d", h, head)
	}
	res, _ := g.mem.Translate(out, uint64(n))
	return bytes.Clone(res.Bytes())
}
