package frontend

import (
	"context"
	"net"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/vstellar/vstellar/guestmem"
	"golang.org/x/sys/unix"
)

// initScript answers QEMU's connect sequence for a back-end offering
// protocol features offered and SHMEM region 0 of shmSize bytes. It
// returns the back-end's end of the back-end channel.
func initScript(t *testing.T, b *fakeBackend, offered uint64, nq int, shmSize uint64, chOut chan<- *net.UnixConn) {
	b.expect(ReqGetFeatures, v1, cat())
	b.replyU64(ReqGetFeatures, 1<<30|1<<32)
	b.expect(ReqGetProtocolFeatures, v1, cat())
	b.replyU64(ReqGetProtocolFeatures, offered)
	b.expect(ReqSetProtocolFeatures, v1, le64(offered&SupportedProtocolFeatures))
	b.expect(ReqGetQueueNum, v1, cat())
	b.replyU64(ReqGetQueueNum, uint64(nq))
	b.expect(ReqGetMaxMemSlots, v1, cat())
	b.replyU64(ReqGetMaxMemSlots, 32)
	m := b.expect(ReqSetBackendReqFD, v1|FlagNeedReply, cat())
	if len(m.fds) != 1 {
		t.Errorf("SET_BACKEND_REQ_FD carried %d fds", len(m.fds))
		chOut <- nil
		return
	}
	file := os.NewFile(uintptr(m.fds[0]), "backend-end")
	nc, err := net.FileConn(file)
	file.Close()
	if err != nil {
		t.Error(err)
	}
	b.replyU64(ReqSetBackendReqFD, 0)
	b.expect(ReqSetOwner, v1, cat())
	b.expect(ReqGetFeatures, v1, cat())
	b.replyU64(ReqGetFeatures, 1<<30|1<<32)
	for i := range nq {
		closeFDs(b.expect(ReqSetVringCall, v1, le64(uint64(i))).fds)
		closeFDs(b.expect(ReqSetVringErr, v1, le64(uint64(i))).fds)
	}
	b.expect(ReqGetShmemConfig, v1, cat())
	b.reply(ReqGetShmemConfig, shmemConfig(map[int]uint64{0: shmSize}))
	chOut <- nc.(*net.UnixConn)
}

func TestInitOrder(t *testing.T) {
	ctx := context.Background()
	f, be := newTestPair(t, Options{NumQueues: 2, RequireConfig: true})
	// Offer everything, including bits 20 and 21 (not SHMEM) and 2 (RARP).
	offered := uint64(1<<23 - 1)
	chc := make(chan *net.UnixConn, 1)
	be.run(func(b *fakeBackend) { initScript(t, b, offered, 2, 4*guestmem.PageSize(), chc) }, func() {
		if err := f.Init(ctx); err != nil {
			t.Fatal(err)
		}
	})
	if ch := <-chc; ch != nil {
		ch.Close()
	}
	want := []Request{ReqGetFeatures, ReqGetProtocolFeatures, ReqSetProtocolFeatures, ReqGetQueueNum,
		ReqGetMaxMemSlots, ReqSetBackendReqFD, ReqSetOwner, ReqGetFeatures,
		ReqSetVringCall, ReqSetVringErr, ReqSetVringCall, ReqSetVringErr, ReqGetShmemConfig}
	if got := f.Trace(); !slices.Equal(got, want) {
		t.Errorf("init order\n got %v\nwant %v", got, want)
	}
	if f.ProtocolFeatures() != SupportedProtocolFeatures || f.HasProtocol(20) || f.HasProtocol(21) {
		t.Errorf("negotiated %#x", f.ProtocolFeatures())
	}
	if f.QueueNum() != 2 || f.MaxMemSlots() != 32 {
		t.Errorf("queues %d slots %d", f.QueueNum(), f.MaxMemSlots())
	}
}

func TestInitTooFewQueues(t *testing.T) {
	f, be := newTestPair(t, Options{NumQueues: 4})
	be.run(func(b *fakeBackend) {
		b.expect(ReqGetFeatures, v1, nil)
		b.replyU64(ReqGetFeatures, 1<<30)
		b.expect(ReqGetProtocolFeatures, v1, nil)
		b.replyU64(ReqGetProtocolFeatures, 1<<ProtoMQ)
		b.expect(ReqSetProtocolFeatures, v1, le64(1<<ProtoMQ))
		b.expect(ReqGetQueueNum, v1, nil)
		b.replyU64(ReqGetQueueNum, 2)
	}, func() {
		if err := f.Init(context.Background()); err == nil {
			t.Error("Init accepted a back-end with too few queues")
		}
	})
}

// backendCall sends one back-end request on ch and returns the ack.
func backendCall(t *testing.T, ch *net.UnixConn, req BackendRequest, payload []byte, fds ...int) uint64 {
	t.Helper()
	if err := writeRaw(ch, uint32(req), Version|FlagNeedReply, payload, fds); err != nil {
		t.Fatal(err)
	}
	m, err := readRaw(t, ch)
	if err != nil {
		t.Fatal(err)
	}
	if BackendRequest(m.req) != req || m.flags != Version|FlagReply || m.size != 8 {
		t.Fatalf("reply to %v: req %d flags %#x size %d", req, m.req, m.flags, m.size)
	}
	closeFDs(m.fds)
	return ne.Uint64(m.payload)
}

func TestBackendChannelShmem(t *testing.T) {
	ctx := context.Background()
	ps := guestmem.PageSize()
	f, be := newTestPair(t, Options{NumQueues: 1})
	chc := make(chan *net.UnixConn, 1)
	be.run(func(b *fakeBackend) { initScript(t, b, SupportedProtocolFeatures, 1, 4*ps, chc) }, func() {
		if err := f.Init(ctx); err != nil {
			t.Fatal(err)
		}
	})
	ch := <-chc
	if ch == nil {
		t.FailNow()
	}
	defer ch.Close()

	// The back-end's doorbell memfd, and its own view of it.
	mfd, err := unix.MemfdCreate("doorbells", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(mfd)
	if err := unix.Ftruncate(mfd, int64(2*ps)); err != nil {
		t.Fatal(err)
	}
	host, err := guestmem.MapOwn(mfd, 0, 2*ps)
	if err != nil {
		t.Fatal(err)
	}
	defer host.Unmap()

	before := countFDs(t)
	// Map file page 1 at region page 2, read-write.
	m := ShmemMapping{ShmID: 0, FdOffset: ps, ShmOffset: 2 * ps, Len: ps, Flags: ShmemMapRW}
	if ack := backendCall(t, ch, BackendShmemMap, m.Encode(), mfd); ack != 0 {
		t.Fatalf("SHMEM_MAP ack %d", ack)
	}
	// The space keeps one descriptor of the file, for the VMM to report
	// the mapping as memory.
	if after := countFDs(t); after != before+1 {
		t.Errorf("fds %d -> %d: want the SHMEM_MAP fd kept once", before, after)
	}
	if fs := f.Shmem().Files(); len(fs) != 1 || fs[0].ShmemMapping != m || !sameFile(t, fs[0].FD, mfd) {
		t.Errorf("files %+v, want the mapping of the memfd", fs)
	}
	guest, err := f.Shmem().Mapped(0, 2*ps, ps)
	if err != nil {
		t.Fatal(err)
	}
	// The back-end writes; the guest sees it, and the other way round.
	host.View().PutUint64(ps+64, 0x1122334455667788)
	if got := guest.LoadUint64Acquire(64); got != 0x1122334455667788 {
		t.Errorf("guest reads %#x", got)
	}
	guest.StoreUint32Release(128, 7)
	if got := host.View().Uint32(ps + 128); got != 7 {
		t.Errorf("back-end reads %d", got)
	}
	if _, err := f.Shmem().Mapped(0, ps, 2*ps); err == nil {
		t.Error("partly unmapped range reported as mapped")
	}

	// Refusals: overlap, out of range, unaligned, unknown region, bad
	// flags, no fd, short payload.
	for _, c := range []struct {
		name string
		m    ShmemMapping
		fds  []int
		raw  []byte
	}{
		{"overlap", ShmemMapping{ShmOffset: 2 * ps, Len: ps}, []int{mfd}, nil},
		{"overlap partial", ShmemMapping{ShmOffset: ps, Len: 2 * ps}, []int{mfd}, nil},
		{"out of range", ShmemMapping{ShmOffset: 3 * ps, Len: 2 * ps}, []int{mfd}, nil},
		{"wrapping", ShmemMapping{ShmOffset: ^uint64(0) &^ (ps - 1), Len: 2 * ps}, []int{mfd}, nil},
		{"unaligned offset", ShmemMapping{ShmOffset: 8, Len: ps}, []int{mfd}, nil},
		{"unaligned len", ShmemMapping{ShmOffset: 0, Len: 100}, []int{mfd}, nil},
		{"unaligned fd offset", ShmemMapping{ShmOffset: 0, Len: ps, FdOffset: 12}, []int{mfd}, nil},
		{"empty", ShmemMapping{ShmOffset: 0, Len: 0}, []int{mfd}, nil},
		{"no region", ShmemMapping{ShmID: 1, ShmOffset: 0, Len: ps}, []int{mfd}, nil},
		{"bad flags", ShmemMapping{ShmOffset: 0, Len: ps, Flags: 6}, []int{mfd}, nil},
		{"no fd", ShmemMapping{ShmOffset: 0, Len: ps}, nil, nil},
		{"short payload", ShmemMapping{}, []int{mfd}, make([]byte, 32)},
	} {
		p := c.raw
		if p == nil {
			p = c.m.Encode()
		}
		if ack := backendCall(t, ch, BackendShmemMap, p, c.fds...); ack == 0 {
			t.Errorf("SHMEM_MAP %s accepted", c.name)
		}
	}
	if got := f.Shmem().Mappings(0); len(got) != 1 {
		t.Errorf("mappings after refusals: %+v", got)
	}
	if after := countFDs(t); after != before+1 {
		t.Errorf("fds %d -> %d after refused maps", before, after)
	}

	// UNMAP must name exactly one mapping.
	if ack := backendCall(t, ch, BackendShmemUnmap, ShmemMapping{ShmOffset: 2 * ps, Len: 2 * ps}.Encode()); ack == 0 {
		t.Error("SHMEM_UNMAP of a larger range accepted")
	}
	if ack := backendCall(t, ch, BackendShmemUnmap, ShmemMapping{ShmOffset: 0, Len: ps}.Encode()); ack == 0 {
		t.Error("SHMEM_UNMAP of nothing accepted")
	}
	if ack := backendCall(t, ch, BackendShmemUnmap, m.Encode()); ack != 0 {
		t.Errorf("SHMEM_UNMAP ack %d", ack)
	}
	if _, err := f.Shmem().Mapped(0, 2*ps, ps); err == nil {
		t.Error("range still mapped after SHMEM_UNMAP")
	}
	if after := countFDs(t); after != before {
		t.Errorf("fds %d -> %d after SHMEM_UNMAP", before, after)
	}
	// The range can be mapped again, read-only this time. SET_STATUS 0
	// leaves it (QEMU's mappings go with its own reset of the device);
	// DropMappings drops it.
	m.Flags = 0
	if ack := backendCall(t, ch, BackendShmemMap, m.Encode(), mfd); ack != 0 {
		t.Fatalf("SHMEM_MAP again: ack %d", ack)
	}
	if v, err := f.Shmem().Mapped(0, 2*ps, ps); err != nil || v.Uint32(128) != 7 {
		t.Errorf("read-only remap: %v", err)
	}
	be.run(func(b *fakeBackend) { b.expect(ReqSetStatus, v1, le64(0)) }, func() {
		if err := f.SetStatus(ctx, 0); err != nil {
			t.Error(err)
		}
	})
	if got := f.Shmem().Mappings(0); len(got) != 1 {
		t.Errorf("mappings after SET_STATUS 0: %+v", got)
	}
	f.Shmem().DropMappings()
	if got := f.Shmem().Mappings(0); len(got) != 0 {
		t.Errorf("mappings survived DropMappings: %+v", got)
	}
	if after := countFDs(t); after != before {
		t.Errorf("fds %d -> %d after DropMappings", before, after)
	}

	// Config change notifications, unknown requests, no-reply requests.
	if ack := backendCall(t, ch, BackendConfigChange, nil); ack != 0 {
		t.Errorf("CONFIG_CHANGE ack %d", ack)
	}
	select {
	case <-f.ConfigChanges():
	case <-time.After(time.Second):
		t.Error("no config change notification")
	}
	if ack := backendCall(t, ch, BackendIOTLBMsg, make([]byte, 32)); ack == 0 {
		t.Error("unsupported IOTLB_MSG acked with 0")
	}
	if ack := backendCall(t, ch, 77, nil); ack == 0 {
		t.Error("unknown request acked with 0")
	}
	if err := writeRaw(ch, uint32(BackendConfigChange), Version, nil, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case <-f.ConfigChanges():
	case <-time.After(time.Second):
		t.Error("no config change notification without NEED_REPLY")
	}
	// A header with reserved flag bits ends the channel.
	if err := writeRaw(ch, uint32(BackendConfigChange), Version|0x100, nil, nil); err != nil {
		t.Fatal(err)
	}
	ch.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := readRaw(t, ch); err == nil {
		t.Error("channel survived a bad header")
	}
}

// sameFile reports whether two descriptors are of the same file.
func sameFile(t *testing.T, a, b int) bool {
	t.Helper()
	var sa, sb unix.Stat_t
	if err := unix.Fstat(a, &sa); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fstat(b, &sb); err != nil {
		t.Fatal(err)
	}
	return sa.Dev == sb.Dev && sa.Ino == sb.Ino
}

// A Frontend on a VMM's shared memory space leaves the mappings to the
// space: they are the device's, across connections.
func TestCloseKeepsSharedSpace(t *testing.T) {
	ctx := context.Background()
	ps := guestmem.PageSize()
	space := NewShmemSpace()
	defer space.Close()
	a, b := socketPair(t)
	defer b.Close()
	f := New(a, Options{NumQueues: 1, Shmem: space})
	be := &fakeBackend{t: t, c: b}
	chc := make(chan *net.UnixConn, 1)
	be.run(func(b *fakeBackend) { initScript(t, b, SupportedProtocolFeatures, 1, ps, chc) }, func() {
		if err := f.Init(ctx); err != nil {
			t.Fatal(err)
		}
	})
	ch := <-chc
	defer ch.Close()
	mfd, _ := unix.MemfdCreate("x", unix.MFD_CLOEXEC)
	defer unix.Close(mfd)
	unix.Ftruncate(mfd, int64(ps))
	if ack := backendCall(t, ch, BackendShmemMap, ShmemMapping{Len: ps, Flags: ShmemMapRW}.Encode(), mfd); ack != 0 {
		t.Fatal("map failed")
	}
	f.Close()
	if _, err := space.Mapped(0, 0, ps); err != nil {
		t.Errorf("mapping went with the connection: %v", err)
	}
	// A new connection's GET_SHMEM_CONFIG of the same sizes keeps it.
	if err := space.Configure([]uint64{ps}); err != nil {
		t.Fatal(err)
	}
	if len(space.Files()) != 1 {
		t.Error("Configure with the same sizes dropped the mapping")
	}
}

func TestCloseDropsEverything(t *testing.T) {
	ctx := context.Background()
	ps := guestmem.PageSize()
	before := countFDs(t)
	a, b := socketPair(t)
	f := New(a, Options{NumQueues: 2})
	be := &fakeBackend{t: t, c: b}
	chc := make(chan *net.UnixConn, 1)
	be.run(func(b *fakeBackend) { initScript(t, b, SupportedProtocolFeatures, 2, ps, chc) }, func() {
		if err := f.Init(ctx); err != nil {
			t.Fatal(err)
		}
	})
	ch := <-chc
	mfd, _ := unix.MemfdCreate("x", unix.MFD_CLOEXEC)
	unix.Ftruncate(mfd, int64(ps))
	if ack := backendCall(t, ch, BackendShmemMap, ShmemMapping{Len: ps, Flags: ShmemMapRW}.Encode(), mfd); ack != 0 {
		t.Fatal("map failed")
	}
	unix.Close(mfd)
	f.Close()
	if _, ok := f.Shmem().View(0); ok {
		t.Error("region survived Close")
	}
	// The back-end sees its channel close.
	ch.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := readRaw(t, ch); err == nil {
		t.Error("back-end channel still open")
	}
	ch.Close()
	b.Close()
	if after := countFDs(t); after != before {
		t.Errorf("fd leak: %d -> %d", before, after)
	}
}

// A back-end request is served between two front-end requests, never
// while one waits for its reply (QEMU's main loop): a back-end that waits
// for its acknowledgement before it replies would deadlock.
func TestBackendRequestWaitsForReply(t *testing.T) {
	ctx := context.Background()
	f, be := newTestPair(t, Options{NumQueues: 1})
	chc := make(chan *net.UnixConn, 1)
	be.run(func(b *fakeBackend) { initScript(t, b, SupportedProtocolFeatures, 1, guestmem.PageSize(), chc) }, func() {
		if err := f.Init(ctx); err != nil {
			t.Fatal(err)
		}
	})
	ch := <-chc
	if ch == nil {
		t.FailNow()
	}
	defer ch.Close()
	be.run(func(b *fakeBackend) {
		b.expect(ReqGetConfig, v1, cat(le32(0), le32(4), le32(0), make([]byte, 4)))
		if err := writeRaw(ch, uint32(BackendConfigChange), Version|FlagNeedReply, nil, nil); err != nil {
			t.Error(err)
			return
		}
		if readable(t, ch, 200*time.Millisecond) {
			t.Error("back-end request acknowledged while GET_CONFIG waited")
		}
		b.reply(ReqGetConfig, cat(le32(0), le32(4), le32(0), []byte("abcd")))
		m, err := readRaw(t, ch)
		if err != nil || BackendRequest(m.req) != BackendConfigChange || le64(0)[0] != m.payload[0] {
			t.Errorf("acknowledgement after the reply: %+v %v", m, err)
		}
	}, func() {
		if got, err := f.GetConfig(ctx, 0, 4, 0); err != nil || string(got) != "abcd" {
			t.Errorf("GET_CONFIG: %q %v", got, err)
		}
	})
}

// readable reports whether c has bytes to read after d.
func readable(t *testing.T, c *net.UnixConn, d time.Duration) bool {
	t.Helper()
	time.Sleep(d)
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var n int
	rc.Control(func(fd uintptr) {
		var b [1]byte
		n, _, _ = unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
	})
	return n > 0
}
