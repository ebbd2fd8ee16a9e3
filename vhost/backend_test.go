package vhost

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/vstellar/vstellar/virtio"
)

func TestHandshakeAndDataPath(t *testing.T) {
	dev := newEchoDevice(t)
	s := serve(t, NewBackend(dev, Options{Name: "t"}))
	g := newTestGuest(t, s.fe)
	g.handshake()

	proto := binary.LittleEndian.Uint64(s.fe.call(uint32(ReqGetProtocolFeatures), nil))
	if proto&(1<<22) == 0 || proto&(1<<20|1<<21) != 0 {
		t.Fatalf("protocol features %#x: want SHMEM at bit 22 and neither bit 20 nor 21", proto)
	}

	g.start(16)
	for i := range 3 {
		msg := []byte{byte(i), 2, 3, 4, 5}
		if got := g.request(0, msg); !bytes.Equal(got, msg) {
			t.Fatalf("queue 0 echo %d: got %x want %x", i, got, msg)
		}
	}
	if got := g.request(1, []byte{0x0f}); !bytes.Equal(got, []byte{0xf0}) {
		t.Fatalf("queue 1: got %x", got)
	}
	acts, _, _, mapErr := dev.snapshot()
	if acts != 1 || mapErr != nil {
		t.Fatalf("activations %d, SHMEM_MAP error %v", acts, mapErr)
	}
	reqs, maps := g.channelRequests()
	if !slices.Equal(reqs, []uint32{uint32(BackendShmemMap)}) || len(maps[0]) != 40 {
		t.Fatalf("back-end channel saw %v", reqs)
	}
	if l := binary.LittleEndian.Uint64(maps[0][24:]); l != 4096 || binary.LittleEndian.Uint64(maps[0][32:]) != 1 {
		t.Fatalf("SHMEM_MAP payload %x", maps[0])
	}
}

func TestConfigSpace(t *testing.T) {
	s := serve(t, NewBackend(newEchoDevice(t), Options{}))
	g := newTestGuest(t, s.fe)
	g.handshake()
	// QEMU reads all of config space: offset 0, size config_size.
	msg := append(state(0, 16), make([]byte, 4+16)...)
	binary.LittleEndian.PutUint32(msg[8:], 0)
	reply := s.fe.call(uint32(ReqGetConfig), msg)
	if len(reply) != 12+16 || reply[12] != 0xa0 || reply[27] != 0xaf {
		t.Fatalf("GET_CONFIG reply %x", reply)
	}
	// Beyond config space: an empty reply, which QEMU rejects.
	bad := append(state(8, 16), make([]byte, 4+16)...)
	if r := s.fe.call(uint32(ReqGetConfig), bad); len(r) != 0 {
		t.Fatalf("out-of-range GET_CONFIG answered %x", r)
	}
	// The device refuses writes.
	s.fe.mustFail(uint32(ReqSetConfig), append(state(0, 1), 0, 0, 0, 0, 7))
}

func TestGetVringBaseStopsRing(t *testing.T) {
	dev := newEchoDevice(t)
	s := serve(t, NewBackend(dev, Options{}))
	g := newTestGuest(t, s.fe)
	g.handshake()
	g.start(8)
	g.request(0, []byte("abc"))
	g.request(0, []byte("def"))

	base := s.fe.call(uint32(ReqGetVringBase), state(0, 0))
	if got := binary.LittleEndian.Uint32(base[4:]); got != 2 {
		t.Fatalf("GET_VRING_BASE = %d, want 2", got)
	}
	// Stopped: a new buffer and a kick are not processed.
	_, _, before, _ := dev.snapshot()
	g.qs[0].Add([]virtio.Buffer{{Addr: g.alloc(4), Len: 4}}, nil)
	g.qs[0].Publish()
	signalled(g.call[0], 0) // the interrupt every new call fd gets
	g.doKick(0)
	if signalled(g.call[0], 100*time.Millisecond) {
		t.Fatal("stopped ring interrupted the driver")
	}
	if _, _, after, _ := dev.snapshot(); after != before {
		t.Fatalf("stopped ring processed %d buffers", after-before)
	}
	// Restart from the base QEMU saved, with a fresh kick fd: the pending
	// buffer is processed.
	s.fe.mustAck(uint32(ReqSetVringBase), state(0, 2))
	k := eventfd(t)
	g.kick[0] = k
	s.fe.mustAck(uint32(ReqSetVringKick), u64(0), k)
	s.fe.mustAck(uint32(ReqSetVringCall), u64(0), g.call[0])
	g.doKick(0)
	for ok := false; !ok; {
		waitEvent(t, g.call[0])
		_, _, ok = g.qs[0].GetUsed()
	}
	if _, _, after, _ := dev.snapshot(); after != before+1 {
		t.Fatalf("restarted ring processed %d buffers, want 1", after-before)
	}
}

func TestReconnectKeepsDevice(t *testing.T) {
	dev := newEchoDevice(t)
	b := NewBackend(dev, Options{})
	s := serve(t, b)
	g := newTestGuest(t, s.fe)
	g.handshake()
	g.start(8)
	g.request(0, []byte("one"))
	s.fe.c.Close() // the front-end dies
	if err := s.wait(t); err != nil {
		t.Fatalf("Serve after front-end close: %v", err)
	}
	if _, deact, _, _ := dev.snapshot(); !slices.Equal(deact, []bool{false}) {
		t.Fatalf("deactivations %v, want one without reset", deact)
	}
	if b.Connected() {
		t.Fatal("backend still reports a connection")
	}

	s2 := serve(t, b)
	g2 := newTestGuest(t, s2.fe)
	g2.handshake()
	g2.start(8)
	if got := g2.request(0, []byte("two")); string(got) != "two" {
		t.Fatalf("after reconnect: %q", got)
	}
	if acts, _, _, _ := dev.snapshot(); acts != 2 {
		t.Fatalf("activations %d, want 2", acts)
	}
}

func TestResetDeviceDropsState(t *testing.T) {
	dev := newEchoDevice(t)
	s := serve(t, NewBackend(dev, Options{}))
	g := newTestGuest(t, s.fe)
	g.handshake()
	g.start(8)
	// QEMU's stop: disable, GET_VRING_BASE, SET_STATUS 0 (a suspend).
	for i := range 2 {
		s.fe.mustAck(uint32(ReqSetVringEnable), state(uint32(i), 0))
		s.fe.call(uint32(ReqGetVringBase), state(uint32(i), 0))
	}
	s.fe.mustAck(uint32(ReqSetStatus), u64(0))
	s.fe.mustAck(uint32(ReqResetDevice), nil)
	if _, deact, _, _ := dev.snapshot(); !slices.Equal(deact, []bool{false, true}) {
		t.Fatalf("deactivations %v, want suspend then reset", deact)
	}
	if st := binary.LittleEndian.Uint64(s.fe.call(uint32(ReqGetStatus), nil)); st != 0 {
		t.Fatalf("status after reset %#x", st)
	}
}

func TestSetMemTableWhileRunning(t *testing.T) {
	s := serve(t, NewBackend(newEchoDevice(t), Options{}))
	g := newTestGuest(t, s.fe)
	g.handshake()
	g.start(8)
	// A table without the low region would leave the rings outside guest
	// memory: refused, and the rings keep working on the old table.
	high := g.regions()[1]
	s.fe.mustFail(uint32(ReqSetMemTable), memTable(high), g.memfd)
	if got := g.request(0, []byte("still")); string(got) != "still" {
		t.Fatalf("after refused table: %q", got)
	}
	// The same layout again (as QEMU resends on hot-plug) is accepted and
	// the rings move onto it.
	s.fe.mustAck(uint32(ReqSetMemTable), memTable(g.regions()...), g.memfd, g.memfd)
	if got := g.request(0, []byte("moved")); string(got) != "moved" {
		t.Fatalf("after new table: %q", got)
	}
	// Removing the region holding the rings is refused too.
	s.fe.mustFail(uint32(ReqRemMemReg), singleRegion(g.regions()[0]))
	s.fe.mustAck(uint32(ReqRemMemReg), singleRegion(high))
	s.fe.mustAck(uint32(ReqAddMemReg), singleRegion(high), g.memfd)
	if got := g.request(1, []byte{1}); !bytes.Equal(got, []byte{0xfe}) {
		t.Fatalf("after remove/add: %x", got)
	}
}

func TestDescriptorLoopBreaksOnlyThatQueue(t *testing.T) {
	dev := newEchoDevice(t)
	b := NewBackend(dev, Options{})
	s := serve(t, b)
	g := newTestGuest(t, s.fe)
	g.handshake()
	g.start(8)
	// Forge a two-descriptor loop on queue 0: 0 -> 1 -> 0.
	desc, err := g.mem.Translate(g.qs[0].Addrs().Desc, 16*8)
	if err != nil {
		t.Fatal(err)
	}
	buf := g.alloc(64)
	for i, next := range []uint16{1, 0} {
		desc.PutUint64(uint64(i*16), buf)
		desc.PutUint32(uint64(i*16+8), 8)
		desc.PutUint16(uint64(i*16+12), 1) // NEXT
		desc.PutUint16(uint64(i*16+14), next)
	}
	avail, _ := g.mem.Translate(g.qs[0].Addrs().Avail, 6+2*8)
	avail.PutUint16(4, 0)          // ring[0] = head 0
	avail.StoreUint16Release(2, 1) // idx = 1
	g.doKick(0)
	waitEvent(t, g.errfd[0])
	if st := binary.LittleEndian.Uint64(s.fe.call(uint32(ReqGetStatus), nil)); st&uint64(virtio.StatusDeviceNeedsReset) == 0 {
		t.Fatalf("status %#x lacks DEVICE_NEEDS_RESET", st)
	}
	if b.Stats().BrokenQueues.Load() != 1 {
		t.Fatalf("broken queues %d", b.Stats().BrokenQueues.Load())
	}
	// Queue 1 still works, and the connection is alive.
	if got := g.request(1, []byte{0}); !bytes.Equal(got, []byte{0xff}) {
		t.Fatalf("queue 1 after queue 0 broke: %x", got)
	}
}

func TestHostileFrontEnd(t *testing.T) {
	type step func(t *testing.T, s *served, g *testGuest)
	errorAck := func(req Request, payload func(g *testGuest) []byte, fds func(g *testGuest) []int) step {
		return func(t *testing.T, s *served, g *testGuest) {
			var f []int
			if fds != nil {
				f = fds(g)
			}
			s.fe.mustFail(uint32(req), payload(g), f...)
		}
	}
	none := func(*testGuest) []int { return nil }
	mem := func(g *testGuest) []int { return []int{g.memfd} }
	cases := []struct {
		name string
		run  step
		// fatal: the connection must end (and only it).
		fatal bool
	}{
		{name: "queue index out of range", run: errorAck(ReqSetVringNum, func(*testGuest) []byte { return state(7, 8) }, none)},
		{name: "queue size not a power of two", run: errorAck(ReqSetVringNum, func(*testGuest) []byte { return state(0, 6) }, none)},
		{name: "queue size above maximum", run: errorAck(ReqSetVringNum, func(*testGuest) []byte { return state(0, 512) }, none)},
		{name: "ring address outside every region", run: func(t *testing.T, s *served, g *testGuest) {
			s.fe.mustAck(uint32(ReqSetMemTable), memTable(g.regions()...), g.memfd, g.memfd)
			s.fe.mustAck(uint32(ReqSetVringNum), state(0, 8))
			s.fe.mustFail(uint32(ReqSetVringAddr), vringAddr(0, 0x1000, 0x2000, 0x3000))
		}},
		{name: "wrong fd count for memory table", run: errorAck(ReqSetMemTable, func(g *testGuest) []byte { return memTable(g.regions()...) }, mem)},
		{name: "overlapping regions", run: errorAck(ReqSetMemTable, func(g *testGuest) []byte {
			r := g.regions()
			r[1][0] = r[0][0] + 4096
			return memTable(r...)
		}, func(g *testGuest) []int { return []int{g.memfd, g.memfd} })},
		{name: "region beyond the file", run: errorAck(ReqAddMemReg, func(g *testGuest) []byte {
			return singleRegion([4]uint64{8 << 30, 1 << 20, 0x10000000, 1 << 40})
		}, mem)},
		{name: "region backed by a non-file", run: errorAck(ReqAddMemReg, func(g *testGuest) []byte {
			return singleRegion([4]uint64{8 << 30, 4096, 0x10000000, 0})
		}, func(g *testGuest) []int { return []int{eventfd(g.t)} })},
		{name: "memory table with zero regions", run: errorAck(ReqSetMemTable, func(*testGuest) []byte { return state(0, 0) }, mem)},
		{name: "fd on a request that takes none", run: errorAck(ReqSetOwner, func(*testGuest) []byte { return nil }, mem)},
		{name: "kick without fd or NOFD", run: errorAck(ReqSetVringKick, func(*testGuest) []byte { return u64(0) }, none)},
		{name: "kick fd that is not an eventfd", run: errorAck(ReqSetVringKick, func(*testGuest) []byte { return u64(0) }, mem)},
		{name: "call fd that is a socket", run: func(t *testing.T, s *served, g *testGuest) {
			a, b := socketPair(t)
			defer a.Close()
			defer b.Close()
			f, _ := a.File()
			defer f.Close()
			s.fe.mustFail(uint32(ReqSetVringCall), u64(1), int(f.Fd()))
		}},
		{name: "kick with reserved bits", run: errorAck(ReqSetVringKick, func(*testGuest) []byte { return u64(1 << 20) }, none)},
		{name: "features never offered", run: errorAck(ReqSetFeatures, func(*testGuest) []byte { return u64(1 << 63) }, none)},
		{name: "short payload", run: errorAck(ReqSetVringNum, func(*testGuest) []byte { return []byte{1, 2, 3} }, none)},
		{name: "unknown request", run: errorAck(Request(999), func(*testGuest) []byte { return []byte{1} }, none)},
		{name: "request not negotiated", run: func(t *testing.T, s *served, g *testGuest) {
			s.fe.send(uint32(ReqSetProtocolFeatures), vFlag, u64(1<<3)) // REPLY_ACK only
			if r := s.fe.call(uint32(ReqGetShmemConfig), nil); len(r) != 0 {
				t.Fatalf("GET_SHMEM_CONFIG without SHMEM answered %d bytes", len(r))
			}
			s.fe.mustFail(uint32(ReqAddMemReg), singleRegion(g.regions()[0]), g.memfd)
		}},
		{name: "unserved request that promises a reply", run: func(t *testing.T, s *served, g *testGuest) {
			if v := binary.LittleEndian.Uint64(s.fe.call(uint32(ReqCheckDeviceState), nil)); v == 0 {
				t.Fatal("CHECK_DEVICE_STATE answered success")
			}
		}},
		{name: "bad version", fatal: true, run: func(t *testing.T, s *served, g *testGuest) {
			s.fe.send(uint32(ReqGetFeatures), 0x2, nil)
		}},
		{name: "oversized payload", fatal: true, run: func(t *testing.T, s *served, g *testGuest) {
			s.fe.send(uint32(ReqSetOwner), vFlag, make([]byte, 8192))
		}},
		{name: "truncated header", fatal: true, run: func(t *testing.T, s *served, g *testGuest) {
			s.fe.c.Write([]byte{1, 0, 0, 0, 1, 0})
			s.fe.c.CloseWrite()
		}},
		{name: "payload longer than sent", fatal: true, run: func(t *testing.T, s *served, g *testGuest) {
			h := make([]byte, 12)
			binary.LittleEndian.PutUint32(h, uint32(ReqSetFeatures))
			binary.LittleEndian.PutUint32(h[4:], vFlag)
			binary.LittleEndian.PutUint32(h[8:], 8)
			s.fe.c.Write(append(h, 1, 2, 3))
			s.fe.c.CloseWrite()
		}},
		{name: "more than eight fds", fatal: true, run: func(t *testing.T, s *served, g *testGuest) {
			fds := make([]int, 12)
			for i := range fds {
				fds[i] = g.memfd
			}
			s.fe.send(uint32(ReqSetMemTable), vFlag, memTable(g.regions()...), fds...)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// A bystander device on the same process keeps working.
			bystander := serve(t, NewBackend(newEchoDevice(t), Options{}))
			bg := newTestGuest(t, bystander.fe)
			bg.handshake()
			bg.start(8)

			fdsBefore := openFDs(t)
			s := serve(t, NewBackend(newEchoDevice(t), Options{}))
			g := newTestGuest(t, s.fe)
			g.handshake()
			c.run(t, s, g)
			if c.fatal {
				err := s.wait(t)
				if err == nil || errors.Is(err, io.EOF) {
					t.Fatalf("Serve ended with %v, want a protocol error", err)
				}
			} else {
				// The connection still answers.
				if f := binary.LittleEndian.Uint64(s.fe.call(uint32(ReqGetFeatures), nil)); f&(1<<30) == 0 {
					t.Fatalf("GET_FEATURES after bad input: %#x", f)
				}
				s.fe.c.Close()
				s.wait(t)
			}
			if got := bg.request(0, []byte("ok")); string(got) != "ok" {
				t.Fatalf("bystander: %q", got)
			}
			// Every descriptor the bad message carried is closed (allow
			// for the guest's own memfd, channel and eventfds).
			time.Sleep(10 * time.Millisecond)
			if after := openFDs(t); after > fdsBefore+8 {
				t.Fatalf("fd leak: %d open before, %d after", fdsBefore, after)
			}
		})
	}
}

// A protocol feature the Backend is told to withhold is neither offered
// nor accepted.
func TestWithheldProtocolFeature(t *testing.T) {
	s := serve(t, NewBackend(newEchoDevice(t), Options{Withhold: ProtoConfigureMemSlots.Mask()}))
	offered := binary.LittleEndian.Uint64(s.fe.call(uint32(ReqGetProtocolFeatures), nil))
	if offered&ProtoConfigureMemSlots.Mask() != 0 || offered&ProtoShmem.Mask() == 0 {
		t.Fatalf("offered %#x", offered)
	}
	s.fe.send(uint32(ReqSetProtocolFeatures), vFlag, u64(offered|ProtoConfigureMemSlots.Mask()))
	// Refused: nothing was negotiated, MQ's GET_QUEUE_NUM included.
	if r := s.fe.call(uint32(ReqGetQueueNum), nil); len(r) != 0 {
		t.Fatalf("GET_QUEUE_NUM answered %x after a refused SET_PROTOCOL_FEATURES", r)
	}
	s.fe.send(uint32(ReqSetProtocolFeatures), vFlag, u64(offered))
	// The offer taken: ADD_MEM_REG is not negotiated.
	s.fe.mustFail(uint32(ReqAddMemReg), singleRegion([4]uint64{0, regionSize, uvaBase, 0}), eventfd(t))
}

// Requests that change or read the device's session wait for SET_OWNER:
// before it (and after RESET_OWNER) they fail and change nothing, while
// the handshake QEMU sends first is served.
func TestSessionRequestsNeedAnOwner(t *testing.T) {
	s := serve(t, NewBackend(newEchoDevice(t), Options{}))
	g := newTestGuest(t, s.fe)
	fe := s.fe
	if f := binary.LittleEndian.Uint64(fe.call(uint32(ReqGetFeatures), nil)); f&(1<<30) == 0 {
		t.Fatalf("GET_FEATURES before SET_OWNER: %#x", f)
	}
	proto := binary.LittleEndian.Uint64(fe.call(uint32(ReqGetProtocolFeatures), nil))
	fe.mustAck(uint32(ReqSetProtocolFeatures), u64(proto))
	fe.mustFail(uint32(ReqSetMemTable), memTable(g.regions()...), g.memfd, g.memfd)
	fe.mustFail(uint32(ReqSetVringNum), state(0, 8))
	fe.mustFail(uint32(ReqSetFeatures), u64(1<<32|1<<30))
	fe.mustAck(uint32(ReqSetOwner), nil)
	fe.mustAck(uint32(ReqSetMemTable), memTable(g.regions()...), g.memfd, g.memfd)
	fe.mustAck(uint32(ReqSetVringNum), state(0, 8))
	fe.mustAck(uint32(ReqResetOwner), nil)
	fe.mustFail(uint32(ReqSetVringNum), state(0, 8))
	if got := s.b.Stats().FailedMsgs.Load(); got != 4 {
		t.Errorf("%d failed requests counted, want 4", got)
	}
}
