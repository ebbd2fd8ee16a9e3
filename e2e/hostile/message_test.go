package hostile

import (
	"errors"
	"math/rand/v2"
	"testing"
	"time"
)

// Message framing: headers, sizes and descriptors that break the
// protocol. A stream that can no longer be trusted to be at a message
// boundary is dropped; a well-framed bad request gets a failed REPLY_ACK
// and the connection goes on.

func TestMessage(t *testing.T) {
	runCases(t, messageCases)
}

var messageCases = []hostileCase{
	{"version 0", func(t *testing.T, e *env) { wantDropped(t, e, header(reqGetFeatures, 0, 0)) }},
	{"version 2", func(t *testing.T, e *env) { wantDropped(t, e, header(reqGetFeatures, 2, 0)) }},
	{"version 3", func(t *testing.T, e *env) { wantDropped(t, e, header(reqGetFeatures, 3, 0)) }},
	{"reserved flag bits", func(t *testing.T, e *env) { wantDropped(t, e, header(reqGetFeatures, flagV1|0x100, 0)) }},
	{"all flag bits", func(t *testing.T, e *env) { wantDropped(t, e, header(reqGetFeatures, ^uint32(0), 0)) }},
	{"size past the maximum", func(t *testing.T, e *env) { wantDropped(t, e, header(reqSetMemTable, flagV1, 1<<31)) }},
	{"size 4 GiB - 1", func(t *testing.T, e *env) { wantDropped(t, e, header(reqSetMemTable, flagV1, ^uint32(0))) }},
	{"truncated header", func(t *testing.T, e *env) { wantDroppedAfterEOF(t, e, header(reqGetFeatures, flagV1, 0)[:5]) }},
	{"truncated payload", func(t *testing.T, e *env) {
		wantDroppedAfterEOF(t, e, append(header(reqSetVringNum, flagV1, 8), 0, 0, 0))
	}},
	{"header then silence then close", func(t *testing.T, e *env) {
		wantDroppedAfterEOF(t, e, header(reqSetMemTable, flagV1, 264))
	}},
	{"garbage stream", func(t *testing.T, e *env) {
		b := make([]byte, 64<<10)
		r := rand.New(rand.NewPCG(1, 2))
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		f := dialFrontEnd(t, e.d.socket(victim))
		f.sendRaw(b) // the daemon may hang up mid-write
		if !f.hungUp(5 * time.Second) {
			t.Error("the daemon kept a connection sending garbage")
		}
	}},
	{"unknown request codes", func(t *testing.T, e *env) {
		f := ownedFrontEnd(t, e)
		for _, req := range []uint32{0, 45, 46, 99, 1000, 1 << 31, ^uint32(0)} {
			if err := f.ask(req, u64(0)); !errors.Is(err, errNack) {
				t.Errorf("request %d: %v, want a failed REPLY_ACK", req, err)
			}
		}
		wantAlive(t, f)
	}},
	{"requests we do not serve", func(t *testing.T, e *env) {
		f := ownedFrontEnd(t, e)
		// SET_LOG_BASE, SET_LOG_FD, SEND_RARP, NET_SET_MTU,
		// SET_VRING_ENDIAN, GPU_SET_SOCKET, POSTCOPY_LISTEN.
		for _, req := range []uint32{6, 7, 19, 20, 23, 33, 29} {
			if err := f.ask(req, u64(0)); !errors.Is(err, errNack) {
				t.Errorf("request %d: %v, want a failed REPLY_ACK", req, err)
			}
		}
		// IOTLB_MSG, CREATE_CRYPTO_SESSION, POSTCOPY_ADVISE, POSTCOPY_END,
		// GET_SHARED_OBJECT, SET_DEVICE_STATE_FD, CHECK_DEVICE_STATE
		// promise a reply body: an error value, not silence.
		for _, req := range []uint32{22, 26, 28, 30, 41, 42, 43} {
			body, err := f.get(req, u64(0))
			if err != nil || len(body) != 8 || le.Uint64(body) == 0 {
				t.Errorf("request %d: reply %x, %v; want a u64 error", req, body, err)
			}
		}
		wantAlive(t, f)
	}},
	{"payload larger than the request", func(t *testing.T, e *env) {
		f := ownedFrontEnd(t, e)
		wantNack(t, f, reqSetVringNum, make([]byte, 16))
		wantNack(t, f, reqSetFeatures, make([]byte, 12))
		wantNack(t, f, reqSetVringAddr, make([]byte, 48))
		wantNack(t, f, reqSetMemTable, append(memTable(region{0, 4096, userAddrBase, 0}), 0), newEventFD(t))
		wantAlive(t, f)
	}},
	{"payload smaller than the request", func(t *testing.T, e *env) {
		f := ownedFrontEnd(t, e)
		wantNack(t, f, reqSetVringNum, make([]byte, 4))
		wantNack(t, f, reqSetFeatures, nil)
		wantNack(t, f, reqSetVringAddr, make([]byte, 39))
		wantNack(t, f, reqSetMemTable, memTable(region{0, 4096, userAddrBase, 0})[:20], newEventFD(t))
		// A request with a reply body of its own answers a failure with an
		// empty body rather than a REPLY_ACK.
		if body, err := f.get(reqGetConfig, make([]byte, 11)); err != nil || len(body) != 0 {
			t.Errorf("GET_CONFIG of 11 bytes: reply of %d bytes, %v; want an empty reply", len(body), err)
		}
		wantAlive(t, f)
	}},
	{"too many descriptors", func(t *testing.T, e *env) {
		f := ownedFrontEnd(t, e)
		fds := make([]int, 64)
		for i := range fds {
			fds[i] = newEventFD(t)
		}
		f.send(reqSetVringKick, flagV1|flagNeedReply, u64(0), fds...)
		if !f.hungUp(5 * time.Second) {
			t.Error("the daemon kept a connection that sent 64 descriptors in one message")
		}
	}},
	{"nine descriptors on SET_MEM_TABLE", func(t *testing.T, e *env) {
		f := ownedFrontEnd(t, e)
		ram := newGuestRAM(t, 1<<20)
		fds := make([]int, 9)
		rs := make([]region, 9)
		for i := range fds {
			fds[i] = ram.fd
			rs[i] = region{uint64(i) << 20, 1 << 20, userAddrBase + uint64(i)<<20, 0}
		}
		f.send(reqSetMemTable, flagV1|flagNeedReply, memTable(rs...), fds...)
		if err := f.ack(reqSetMemTable); err == nil {
			t.Error("SET_MEM_TABLE with 9 regions and 9 descriptors succeeded")
		}
	}},
	{"too few descriptors", func(t *testing.T, e *env) {
		f := ownedFrontEnd(t, e)
		ram := newGuestRAM(t, 2<<20)
		wantNack(t, f, reqSetMemTable, memTable(ram.region()))
		wantNack(t, f, reqSetMemTable, memTable(ram.region(), region{4 << 20, 1 << 20, userAddrBase + 4<<20, 0}), ram.fd)
		wantNack(t, f, reqAddMemReg, memReg(ram.region()))
		wantNack(t, f, reqSetVringKick, u64(0))
		wantNack(t, f, reqSetVringCall, u64(1))
		wantAlive(t, f)
	}},
	{"descriptors where none belong", func(t *testing.T, e *env) {
		f := ownedFrontEnd(t, e)
		a, b := newEventFD(t), newEventFD(t)
		wantNack(t, f, reqSetVringNum, vringState(0, 256), a, b)
		wantNack(t, f, reqSetVringKick, u64(vringNoFD), a)
		wantNack(t, f, reqSetOwner, nil, a)
		f.send(reqGetFeatures, flagV1, nil, a, b)
		if _, _, _, err := f.recv(); err != nil {
			t.Errorf("GET_FEATURES with descriptors: %v", err)
		}
		wantAlive(t, f)
	}},
	{"reply bit set by the front-end", func(t *testing.T, e *env) {
		f := ownedFrontEnd(t, e)
		// A "reply" from the front-end is no request the back-end owes an
		// answer to beyond the ack asked for; it must not confuse it.
		f.send(reqSetVringNum, flagV1|flagReply|flagNeedReply, vringState(0, 64))
		f.send(reqGetFeatures, flagV1|flagReply, nil)
		syncReplies(t, f)
		wantAlive(t, f)
	}},
	{"NEED_REPLY on everything", func(t *testing.T, e *env) {
		f := ownedFrontEnd(t, e)
		for req := uint32(0); req <= 50; req++ {
			if req == reqResetOwner || req == reqGetFeatures {
				continue // drops the owner; the marker itself
			}
			for _, p := range [][]byte{nil, u64(0), make([]byte, 40)} {
				if err := f.send(req, flagV1|flagNeedReply, p); err != nil {
					t.Fatalf("request %d: %v", req, err)
				}
				syncReplies(t, f)
			}
		}
		wantAlive(t, f)
	}},
	{"requests before SET_OWNER", func(t *testing.T, e *env) {
		f := dialFrontEnd(t, e.d.socket(victim))
		pf, err := f.get(reqGetProtocolFeatures, nil)
		if err != nil {
			t.Fatal(err)
		}
		f.send(reqSetProtocolFeatures, flagV1, u64(le.Uint64(pf)&(protoReplyAck|protoMemSlots)))
		ram := newGuestRAM(t, 1<<20)
		wantNack(t, f, reqSetMemTable, memTable(ram.region()), ram.fd)
		wantNack(t, f, reqSetVringNum, vringState(0, 64))
		wantNack(t, f, reqSetFeatures, u64(featVersion1))
		wantNack(t, f, reqAddMemReg, memReg(ram.region()), ram.fd)
		wantAlive(t, f)
	}},
}

// wantDropped sends b on a new connection and expects the daemon to hang up.
func wantDropped(t *testing.T, e *env, b []byte) {
	t.Helper()
	f := dialFrontEnd(t, e.d.socket(victim))
	if err := f.sendRaw(b); err != nil {
		t.Fatal(err)
	}
	if !f.hungUp(5 * time.Second) {
		t.Errorf("the daemon kept the connection after % x", b)
	}
}

// wantDroppedAfterEOF sends b, ends the stream and expects a hang-up
// without any answer.
func wantDroppedAfterEOF(t *testing.T, e *env, b []byte) {
	t.Helper()
	f := dialFrontEnd(t, e.d.socket(victim))
	if err := f.sendRaw(b); err != nil {
		t.Fatal(err)
	}
	f.c.CloseWrite()
	f.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var one [1]byte
	if n, err := f.c.Read(one[:]); n != 0 || err == nil {
		t.Errorf("the daemon answered a truncated message (%d bytes, %v)", n, err)
	}
}

// ownedFrontEnd is a connection that negotiated REPLY_ACK and owns the device.
func ownedFrontEnd(t *testing.T, e *env) *frontEnd {
	t.Helper()
	f := dialFrontEnd(t, e.d.socket(victim))
	negotiate(t, f)
	return f
}

func wantNack(t *testing.T, f *frontEnd, req uint32, payload []byte, fds ...int) {
	t.Helper()
	if err := f.ask(req, payload, fds...); !errors.Is(err, errNack) {
		t.Errorf("request %d with %d bytes and %d fds: %v, want a failed REPLY_ACK", req, len(payload), len(fds), err)
	}
}

func wantAlive(t *testing.T, f *frontEnd) {
	t.Helper()
	if !f.alive() {
		t.Error("the connection no longer answers a well-formed GET_FEATURES")
	}
}

// syncReplies reads whatever the back-end answered until the reply to a
// GET_FEATURES sent as a marker: the requests before it are done.
func syncReplies(t *testing.T, f *frontEnd) {
	t.Helper()
	if err := f.send(reqGetFeatures, flagV1, nil); err != nil {
		t.Fatalf("marker: %v", err)
	}
	for range 8 {
		req, _, body, err := f.recv()
		if err != nil {
			t.Fatalf("waiting for the marker: %v", err)
		}
		if req == reqGetFeatures && len(body) == 8 {
			return
		}
	}
	t.Fatal("more than 7 replies to one request")
}
