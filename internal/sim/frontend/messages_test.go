package frontend

import (
	"context"
	"errors"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

const v1 = Version // flags of a plain request

func TestHeaderAndConstants(t *testing.T) {
	// Spec tables, restated as literals.
	codes := map[Request]uint32{
		ReqGetFeatures: 1, ReqSetFeatures: 2, ReqSetOwner: 3, ReqResetOwner: 4, ReqSetMemTable: 5,
		ReqSetVringNum: 8, ReqSetVringAddr: 9, ReqSetVringBase: 10, ReqGetVringBase: 11,
		ReqSetVringKick: 12, ReqSetVringCall: 13, ReqSetVringErr: 14, ReqGetProtocolFeatures: 15,
		ReqSetProtocolFeatures: 16, ReqGetQueueNum: 17, ReqSetVringEnable: 18, ReqSetBackendReqFD: 21,
		ReqGetConfig: 24, ReqSetConfig: 25, ReqGetInflightFD: 31, ReqSetInflightFD: 32,
		ReqResetDevice: 34, ReqGetMaxMemSlots: 36, ReqAddMemReg: 37, ReqRemMemReg: 38,
		ReqSetStatus: 39, ReqGetStatus: 40, ReqGetShmemConfig: 44,
	}
	for r, c := range codes {
		if uint32(r) != c {
			t.Errorf("%v = %d, want %d", r, uint32(r), c)
		}
	}
	if BackendConfigChange != 2 || BackendShmemMap != 9 || BackendShmemUnmap != 10 {
		t.Error("back-end request codes differ from the spec")
	}
	want := uint64(1<<0 | 1<<1 | 1<<3 | 1<<5 | 1<<9 | 1<<10 | 1<<12 | 1<<13 | 1<<15 | 1<<16 | 1<<22)
	if SupportedProtocolFeatures != want {
		t.Errorf("SupportedProtocolFeatures = %#x, want %#x", SupportedProtocolFeatures, want)
	}
	if SupportedProtocolFeatures&(1<<20|1<<21) != 0 {
		t.Error("SHMEM must be bit 22 only")
	}
	var h [12]byte
	Header{Request: 24, Flags: 0xd, Size: 0x10c}.encode(h[:])
	if got, want := h[:], cat(le32(24), le32(0xd), le32(0x10c)); string(got) != string(want) {
		t.Errorf("header % x, want % x", got, want)
	}
	mm := ShmemMapping{ShmID: 3, FdOffset: 0x1000, ShmOffset: 0x2000, Len: 0x3000, Flags: 1}.Encode()
	if want := cat([]byte{3, 0, 0, 0, 0, 0, 0, 0}, le64(0x1000), le64(0x2000), le64(0x3000), le64(1)); string(mm) != string(want) {
		t.Errorf("VhostUserMMap % x, want % x", mm, want)
	}
	if got := decodeShmemMapping(mm); got != (ShmemMapping{ShmID: 3, FdOffset: 0x1000, ShmOffset: 0x2000, Len: 0x3000, Flags: 1}) {
		t.Errorf("decoded %+v", got)
	}
}

// TestRequestEncoding sends every request and checks header and payload
// byte for byte against the spec layouts.
func TestRequestEncoding(t *testing.T) {
	ctx := context.Background()
	f, be := newTestPair(t, Options{})
	// Everything negotiated except REPLY_ACK (covered in TestReplyAck).
	f.protocol.Store(SupportedProtocolFeatures &^ (1 << ProtoReplyAck))

	region := func(i uint64) MemRegion {
		return MemRegion{GuestPhys: i << 32, Size: 0x8000_0000, UserAddr: 0x7f00_0000_0000 + i<<31, MmapOffset: i << 31}
	}
	regBytes := func(r MemRegion) []byte {
		return cat(le64(r.GuestPhys), le64(r.Size), le64(r.UserAddr), le64(r.MmapOffset))
	}
	efd := eventfd(t)

	type step struct {
		name string
		call func() error
		// back-end side
		script func(b *fakeBackend)
	}
	steps := []step{
		{"GET_FEATURES", func() error {
			v, err := f.GetFeatures(ctx)
			if err == nil && v != 1<<30|1<<32 {
				t.Errorf("features %#x", v)
			}
			return err
		}, func(b *fakeBackend) {
			b.expect(ReqGetFeatures, v1, cat())
			b.replyU64(ReqGetFeatures, 1<<30|1<<32)
		}},
		{"SET_FEATURES", func() error { return f.SetFeatures(ctx, 1<<30|1<<32|1<<29) }, func(b *fakeBackend) {
			b.expect(ReqSetFeatures, v1, le64(1<<30|1<<32|1<<29))
		}},
		{"GET_PROTOCOL_FEATURES", func() error { _, err := f.GetProtocolFeatures(ctx); return err }, func(b *fakeBackend) {
			b.expect(ReqGetProtocolFeatures, v1, cat())
			b.replyU64(ReqGetProtocolFeatures, 0x7)
		}},
		{"SET_OWNER", func() error { return f.SetOwner(ctx) }, func(b *fakeBackend) { b.expect(ReqSetOwner, v1, cat()) }},
		{"RESET_OWNER", func() error { return f.ResetOwner(ctx) }, func(b *fakeBackend) { b.expect(ReqResetOwner, v1, cat()) }},
		{"GET_QUEUE_NUM", func() error { _, err := f.GetQueueNum(ctx); return err }, func(b *fakeBackend) {
			b.expect(ReqGetQueueNum, v1, cat())
			b.replyU64(ReqGetQueueNum, 4)
		}},
		{"GET_MAX_MEM_SLOTS", func() error { _, err := f.GetMaxMemSlots(ctx); return err }, func(b *fakeBackend) {
			b.expect(ReqGetMaxMemSlots, v1, cat())
			b.replyU64(ReqGetMaxMemSlots, 32)
		}},
		{"SET_MEM_TABLE", func() error {
			return f.SetMemTable(ctx, []MemRegion{region(0), region(1)}, []int{efd, efd})
		}, func(b *fakeBackend) {
			m := b.expect(ReqSetMemTable, v1, cat(le32(2), le32(0), regBytes(region(0)), regBytes(region(1))))
			if len(m.fds) != 2 {
				t.Errorf("SET_MEM_TABLE carried %d fds", len(m.fds))
			}
			closeFDs(m.fds)
		}},
		{"ADD_MEM_REG", func() error { return f.AddMemReg(ctx, region(1), efd) }, func(b *fakeBackend) {
			m := b.expect(ReqAddMemReg, v1, cat(le64(0), regBytes(region(1))))
			if len(m.fds) != 1 {
				t.Errorf("ADD_MEM_REG carried %d fds", len(m.fds))
			}
			closeFDs(m.fds)
		}},
		{"REM_MEM_REG", func() error { return f.RemMemReg(ctx, region(1)) }, func(b *fakeBackend) {
			r := region(1)
			r.MmapOffset = 0 // QEMU sends 0
			m := b.expect(ReqRemMemReg, v1, cat(le64(0), regBytes(r)))
			if len(m.fds) != 0 {
				t.Errorf("REM_MEM_REG carried %d fds", len(m.fds))
			}
		}},
		{"SET_VRING_NUM", func() error { return f.SetVringNum(ctx, 1, 256) }, func(b *fakeBackend) {
			b.expect(ReqSetVringNum, v1, cat(le32(1), le32(256)))
		}},
		{"SET_VRING_ADDR", func() error {
			return f.SetVringAddr(ctx, VringAddr{Index: 2, Desc: 0x1000, Used: 0x3000, Avail: 0x2000})
		}, func(b *fakeBackend) {
			b.expect(ReqSetVringAddr, v1, cat(le32(2), le32(0), le64(0x1000), le64(0x3000), le64(0x2000), le64(0)))
		}},
		{"SET_VRING_BASE", func() error { return f.SetVringBase(ctx, 1, 0xfffe) }, func(b *fakeBackend) {
			b.expect(ReqSetVringBase, v1, cat(le32(1), le32(0xfffe)))
		}},
		{"GET_VRING_BASE", func() error {
			v, err := f.GetVringBase(ctx, 3)
			if err == nil && v != 77 {
				t.Errorf("vring base %d", v)
			}
			return err
		}, func(b *fakeBackend) {
			b.expect(ReqGetVringBase, v1, cat(le32(3), le32(0)))
			b.reply(ReqGetVringBase, cat(le32(3), le32(77)))
		}},
		{"SET_VRING_KICK", func() error { return f.SetVringKick(ctx, 5, efd) }, func(b *fakeBackend) {
			m := b.expect(ReqSetVringKick, v1, le64(5))
			if len(m.fds) != 1 {
				t.Errorf("SET_VRING_KICK carried %d fds", len(m.fds))
			}
			closeFDs(m.fds)
		}},
		{"SET_VRING_KICK nofd", func() error { return f.SetVringKick(ctx, 5, -1) }, func(b *fakeBackend) {
			m := b.expect(ReqSetVringKick, v1, le64(5|0x100))
			if len(m.fds) != 0 {
				t.Errorf("no-fd SET_VRING_KICK carried %d fds", len(m.fds))
			}
		}},
		{"SET_VRING_CALL", func() error { return f.SetVringCall(ctx, 0, efd) }, func(b *fakeBackend) {
			closeFDs(b.expect(ReqSetVringCall, v1, le64(0)).fds)
		}},
		{"SET_VRING_ERR", func() error { return f.SetVringErr(ctx, 255, -1) }, func(b *fakeBackend) {
			b.expect(ReqSetVringErr, v1, le64(255|0x100))
		}},
		{"SET_VRING_ENABLE (barrier without REPLY_ACK)", func() error { return f.SetVringEnable(ctx, 1, true) }, func(b *fakeBackend) {
			b.expect(ReqSetVringEnable, v1, cat(le32(1), le32(1)))
			b.expect(ReqGetFeatures, v1, cat())
			b.replyU64(ReqGetFeatures, 1<<30)
		}},
		{"GET_CONFIG", func() error {
			got, err := f.GetConfig(ctx, 0, 4, 0)
			if err == nil && string(got) != "\x01\x02\x03\x04" {
				t.Errorf("config % x", got)
			}
			return err
		}, func(b *fakeBackend) {
			b.expect(ReqGetConfig, v1, cat(le32(0), le32(4), le32(0), make([]byte, 4)))
			b.reply(ReqGetConfig, cat(le32(0), le32(4), le32(0), []byte{1, 2, 3, 4}))
		}},
		{"SET_CONFIG", func() error { return f.SetConfig(ctx, 8, 1, []byte{9, 8}) }, func(b *fakeBackend) {
			b.expect(ReqSetConfig, v1, cat(le32(8), le32(2), le32(1), []byte{9, 8}))
		}},
		{"SET_STATUS", func() error { return f.SetStatus(ctx, 0xf) }, func(b *fakeBackend) {
			b.expect(ReqSetStatus, v1, le64(0xf))
		}},
		{"GET_STATUS", func() error { _, err := f.GetStatus(ctx); return err }, func(b *fakeBackend) {
			b.expect(ReqGetStatus, v1, cat())
			b.replyU64(ReqGetStatus, 0xb)
		}},
		{"RESET_DEVICE", func() error { return f.ResetDevice(ctx) }, func(b *fakeBackend) { b.expect(ReqResetDevice, v1, cat()) }},
		{"GET_INFLIGHT_FD", func() error {
			in, fd, err := f.GetInflightFD(ctx, 2, 256)
			if err == nil {
				if in.MmapSize != 0x2000 || in.MmapOffset != 0 || fd < 0 {
					t.Errorf("inflight %+v fd %d", in, fd)
				}
				unix.Close(fd)
			}
			return err
		}, func(b *fakeBackend) {
			b.expect(ReqGetInflightFD, v1, cat(le64(0), le64(0), le16(2), le16(256), make([]byte, 4)))
			b.reply(ReqGetInflightFD, cat(le64(0x2000), le64(0), le16(2), le16(256), make([]byte, 4)), efd)
		}},
		{"SET_INFLIGHT_FD", func() error {
			return f.SetInflightFD(ctx, Inflight{MmapSize: 0x2000, MmapOffset: 0x1000, NumQueues: 2, QueueSize: 256}, efd)
		}, func(b *fakeBackend) {
			m := b.expect(ReqSetInflightFD, v1, cat(le64(0x2000), le64(0x1000), le16(2), le16(256), make([]byte, 4)))
			if len(m.fds) != 1 {
				t.Errorf("SET_INFLIGHT_FD carried %d fds", len(m.fds))
			}
			closeFDs(m.fds)
		}},
		{"GET_SHMEM_CONFIG", func() error {
			sizes, err := f.GetShmemConfig(ctx)
			if err == nil && (sizes[0] != 0x4000 || sizes[7] != 0x1000) {
				t.Errorf("sizes %#x %#x", sizes[0], sizes[7])
			}
			return err
		}, func(b *fakeBackend) {
			b.expect(ReqGetShmemConfig, v1, cat())
			b.reply(ReqGetShmemConfig, shmemConfig(map[int]uint64{0: 0x4000, 7: 0x1000}))
		}},
		{"SET_PROTOCOL_FEATURES", func() error { return f.SetProtocolFeatures(ctx, 1<<ProtoReplyAck|1<<ProtoShmem) }, func(b *fakeBackend) {
			b.expect(ReqSetProtocolFeatures, v1, le64(0x400008))
		}},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			be.t = t
			be.run(s.script, func() {
				if err := s.call(); err != nil {
					t.Errorf("%s: %v", s.name, err)
				}
			})
		})
	}
}

func shmemConfig(sizes map[int]uint64) []byte {
	b := make([]byte, shmemConfigSize)
	ne.PutUint32(b, uint32(len(sizes)))
	for id, sz := range sizes {
		ne.PutUint64(b[8+8*id:], sz)
	}
	return b
}

func TestReplyAck(t *testing.T) {
	ctx := context.Background()
	f, be := newTestPair(t, Options{})
	f.protocol.Store(SupportedProtocolFeatures)
	efd := eventfd(t)
	nr := uint32(Version | FlagNeedReply)

	// Requests QEMU acks: NEED_REPLY set, zero ack is success.
	for _, c := range []struct {
		req  Request
		call func() error
	}{
		{ReqSetMemTable, func() error { return f.SetMemTable(ctx, []MemRegion{{Size: 4096}}, []int{efd}) }},
		{ReqAddMemReg, func() error { return f.AddMemReg(ctx, MemRegion{Size: 4096}, efd) }},
		{ReqRemMemReg, func() error { return f.RemMemReg(ctx, MemRegion{Size: 4096}) }},
		{ReqSetConfig, func() error { return f.SetConfig(ctx, 0, 0, []byte{1}) }},
		{ReqSetVringEnable, func() error { return f.SetVringEnable(ctx, 0, true) }},
		{ReqSetVringAddr, func() error { return f.SetVringAddr(ctx, VringAddr{Flags: VringFlagLog}) }},
		{ReqSetFeatures, func() error { return f.SetFeatures(ctx, 1<<FeatureLogAll) }},
	} {
		be.run(func(b *fakeBackend) {
			m := b.expect(c.req, nr, nil)
			closeFDs(m.fds)
			b.replyU64(c.req, 0)
		}, func() {
			if err := c.call(); err != nil {
				t.Errorf("%v: %v", c.req, err)
			}
		})
		be.run(func(b *fakeBackend) {
			m := b.expect(c.req, nr, nil)
			closeFDs(m.fds)
			b.replyU64(c.req, 1)
		}, func() {
			var nack *NackError
			if err := c.call(); !errors.As(err, &nack) || nack.Request != c.req || nack.Value != 1 {
				t.Errorf("%v with non-zero ack: %v", c.req, err)
			}
		})
	}

	// Requests QEMU does not wait for carry no NEED_REPLY even with
	// REPLY_ACK: SET_STATUS, SET_VRING_NUM/BASE/KICK/CALL, plain
	// SET_VRING_ADDR and SET_FEATURES.
	for _, c := range []struct {
		req  Request
		call func() error
	}{
		{ReqSetStatus, func() error { return f.SetStatus(ctx, 0xf) }},
		{ReqSetVringNum, func() error { return f.SetVringNum(ctx, 0, 8) }},
		{ReqSetVringBase, func() error { return f.SetVringBase(ctx, 0, 0) }},
		{ReqSetVringKick, func() error { return f.SetVringKick(ctx, 0, -1) }},
		{ReqSetVringCall, func() error { return f.SetVringCall(ctx, 0, -1) }},
		{ReqSetVringAddr, func() error { return f.SetVringAddr(ctx, VringAddr{}) }},
		{ReqSetFeatures, func() error { return f.SetFeatures(ctx, 1<<32) }},
	} {
		be.run(func(b *fakeBackend) { b.expect(c.req, v1, nil) }, func() {
			if err := c.call(); err != nil {
				t.Errorf("%v: %v", c.req, err)
			}
		})
	}

	// Malformed replies are errors, not panics, and do not desynchronise.
	bad := []struct {
		name  string
		reply func(b *fakeBackend)
	}{
		{"flags without REPLY", func(b *fakeBackend) { writeRaw(b.c, uint32(ReqSetMemTable), Version, le64(0), nil) }},
		{"NEED_REPLY echoed", func(b *fakeBackend) {
			writeRaw(b.c, uint32(ReqSetMemTable), Version|FlagReply|FlagNeedReply, le64(0), nil)
		}},
		{"version 2", func(b *fakeBackend) { writeRaw(b.c, uint32(ReqSetMemTable), 2|FlagReply, le64(0), nil) }},
		{"wrong request", func(b *fakeBackend) { b.replyU64(ReqGetFeatures, 0) }},
		{"short ack", func(b *fakeBackend) { b.reply(ReqSetMemTable, le32(0)) }},
	}
	for _, c := range bad {
		be.run(func(b *fakeBackend) {
			closeFDs(b.expect(ReqSetMemTable, nr, nil).fds)
			c.reply(b)
		}, func() {
			if err := f.SetMemTable(ctx, []MemRegion{{Size: 4096}}, []int{efd}); !errors.Is(err, ErrProtocol) {
				t.Errorf("%s: %v", c.name, err)
			}
		})
	}
	// GET_CONFIG reply size must be 12+size.
	be.run(func(b *fakeBackend) {
		b.expect(ReqGetConfig, v1, nil)
		b.reply(ReqGetConfig, cat(le32(0), le32(2), le32(0), []byte{1, 2}))
	}, func() {
		if _, err := f.GetConfig(ctx, 0, 4, 0); !errors.Is(err, ErrProtocol) {
			t.Errorf("short GET_CONFIG reply: %v", err)
		}
	})
	// GET_VRING_BASE for the wrong ring.
	be.run(func(b *fakeBackend) {
		b.expect(ReqGetVringBase, v1, nil)
		b.reply(ReqGetVringBase, cat(le32(1), le32(5)))
	}, func() {
		if _, err := f.GetVringBase(ctx, 0); !errors.Is(err, ErrProtocol) {
			t.Errorf("GET_VRING_BASE for another ring: %v", err)
		}
	})
	// The connection still works after all that.
	be.run(func(b *fakeBackend) {
		b.expect(ReqGetFeatures, v1, nil)
		b.replyU64(ReqGetFeatures, 42)
	}, func() {
		if v, err := f.GetFeatures(ctx); err != nil || v != 42 {
			t.Errorf("GET_FEATURES after bad replies: %d, %v", v, err)
		}
	})
}

func TestUnexpectedReplyFDsClosed(t *testing.T) {
	ctx := context.Background()
	f, be := newTestPair(t, Options{})
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(p[0])
	be.run(func(b *fakeBackend) {
		b.expect(ReqGetFeatures, v1, nil)
		b.reply(ReqGetFeatures, le64(1), p[1])
		unix.Close(p[1])
	}, func() {
		if _, err := f.GetFeatures(ctx); err != nil {
			t.Error(err)
		}
	})
	// Every write end is closed, so the read end sees EOF.
	var buf [1]byte
	if n, err := unix.Read(p[0], buf[:]); n != 0 || err != nil {
		t.Errorf("pipe read = %d, %v: the front-end kept the unexpected fd", n, err)
	}
}

func TestFDPassing(t *testing.T) {
	ctx := context.Background()
	f, be := newTestPair(t, Options{})
	efd := eventfd(t)
	be.run(func(b *fakeBackend) {
		m := b.expect(ReqSetVringCall, v1, le64(0))
		if len(m.fds) != 1 {
			t.Errorf("got %d fds", len(m.fds))
			return
		}
		// The back-end signals the call eventfd it received.
		if _, err := unix.Write(m.fds[0], le64(1)); err != nil {
			t.Error(err)
		}
		closeFDs(m.fds)
	}, func() {
		if err := f.SetVringCall(ctx, 0, efd); err != nil {
			t.Fatal(err)
		}
	})
	var b [8]byte
	if _, err := unix.Read(efd, b[:]); err != nil || ne.Uint64(b[:]) != 1 {
		t.Errorf("eventfd read %v, %d", err, ne.Uint64(b[:]))
	}
}

func TestContextCancelBreaks(t *testing.T) {
	f, be := newTestPair(t, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	be.run(func(b *fakeBackend) {
		b.expect(ReqGetFeatures, v1, nil)
		cancel() // and never answer
	}, func() {
		if _, err := f.GetFeatures(ctx); !errors.Is(err, context.Canceled) {
			t.Errorf("GetFeatures: %v", err)
		}
	})
	if _, err := f.GetFeatures(context.Background()); !errors.Is(err, ErrBroken) {
		t.Errorf("after an interrupted request: %v", err)
	}
}

// MemTable follows what the back-end accepted: SET_MEM_TABLE replaces it,
// ADD_MEM_REG and REM_MEM_REG change it, a refused request does not.
func TestMemTableShadow(t *testing.T) {
	ctx := context.Background()
	f, be := newTestPair(t, Options{})
	proto := uint64(1<<ProtoConfigureMemSlots | 1<<ProtoReplyAck)
	be.run(func(b *fakeBackend) { b.expect(ReqSetProtocolFeatures, v1, le64(proto)) }, func() {
		if err := f.SetProtocolFeatures(ctx, proto); err != nil {
			t.Fatal(err)
		}
	})
	efd := eventfd(t)
	r := func(i uint64) MemRegion {
		return MemRegion{GuestPhys: i << 30, Size: 4096, UserAddr: 0x7f00_0000_0000 + i<<20, MmapOffset: i << 12}
	}
	call := func(req Request, ack uint64, fn func() error) error {
		var err error
		be.run(func(b *fakeBackend) {
			closeFDs(b.expect(req, v1|FlagNeedReply, nil).fds)
			b.replyU64(req, ack)
		}, func() { err = fn() })
		return err
	}
	if err := call(ReqSetMemTable, 0, func() error { return f.SetMemTable(ctx, []MemRegion{r(0), r(1)}, []int{efd, efd}) }); err != nil {
		t.Fatal(err)
	}
	if err := call(ReqAddMemReg, 0, func() error { return f.AddMemReg(ctx, r(2), efd) }); err != nil {
		t.Fatal(err)
	}
	if err := call(ReqAddMemReg, 1, func() error { return f.AddMemReg(ctx, r(3), efd) }); err == nil {
		t.Fatal("a refused ADD_MEM_REG succeeded")
	}
	if err := call(ReqRemMemReg, 0, func() error { return f.RemMemReg(ctx, r(0)) }); err != nil {
		t.Fatal(err)
	}
	if got, want := f.MemTable(), []MemRegion{r(1), r(2)}; !slices.Equal(got, want) {
		t.Errorf("memory table %+v, want %+v", got, want)
	}
}
