package remote_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/vstellar/vstellar/fabric"
	"github.com/vstellar/vstellar/fabric/remote"
	"github.com/vstellar/vstellar/internal/testkit/enginetest"
	"github.com/vstellar/vstellar/transport/wire"
	"github.com/vstellar/vstellar/virtio/abi"
)

// fuzzRig is FuzzFabricDatagram's world: two cross-host fabrics on
// loopback, a real engine on each (guests "a" and "b" of enginetest,
// tenant 5), an RC QP pair between them, and a UDP socket that sends
// straight to b's fabric. b's memory, in order: lo (unregistered), mr
// (every remote access), ro (registered, no remote access), recv (the
// receive buffers), hi (unregistered). Only mr and recv may change.
type fuzzRig struct {
	fb             *remote.Fabric
	a, b           *enginetest.Guest
	qa, qb         *enginetest.QP
	cqb            *enginetest.CQ
	mr, ro, recv   enginetest.Buf
	lo, hi         uint64 // GPAs of 4 KiB each
	canary         map[uint64][]byte
	sock           *net.UDPConn
	bID            uint32
	dataTok, ackTk uint64
}

const fuzzPD = 1

func fuzzPrefix(c string) netip.Prefix {
	var g [16]byte
	copy(g[:], "fe80::"+c)
	return netip.PrefixFrom(netip.AddrFrom16(g), 56)
}

func newFuzzRig(tb testing.TB) *fuzzRig {
	tb.Helper()
	fs := make([]*remote.Fabric, 2)
	for i, c := range []string{"a", "b"} {
		f, err := remote.New(tb.Context(), remote.Config{Listen: netip.MustParseAddrPort("127.0.0.1:0"), GIDPrefix: fuzzPrefix(c), Secret: secret})
		if err != nil {
			tb.Fatal(err)
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			f.Run(context.Background())
		}()
		tb.Cleanup(func() {
			f.Close()
			<-done
		})
		fs[i] = f
	}
	for i, c := range []string{"b", "a"} {
		if err := fs[i].SetPeers([]remote.Peer{{GIDPrefix: fuzzPrefix(c), Addr: fs[1-i].Addr()}}); err != nil {
			tb.Fatal(err)
		}
	}
	r := &fuzzRig{fb: fs[1], canary: map[uint64][]byte{}}
	r.a = enginetest.NewGuest(tb, fs[0], "a", enginetest.Options{RAM: 4 << 20, Tenant: tenant})
	r.b = enginetest.NewGuest(tb, fs[1], "b", enginetest.Options{RAM: 4 << 20, Tenant: tenant})
	cqa := r.a.CreateCQ(64)
	r.cqb = r.b.CreateCQ(64)
	r.qa = r.a.CreateQP(fuzzPD, cqa, cqa, enginetest.QPOpts{SQSize: 4, RQSize: 4})
	r.qb = r.b.CreateQP(fuzzPD, r.cqb, r.cqb, enginetest.QPOpts{SQSize: 4, RQSize: 4})
	r.lo = r.b.Alloc(4096, 4096)
	r.mr = r.b.NewBuf(fuzzPD, abi.AccessAll, 64<<10)
	r.ro = r.b.NewBuf(fuzzPD, abi.AccessLocalWrite, 4096)
	r.recv = r.b.NewBuf(fuzzPD, abi.AccessLocalWrite, 2048)
	r.hi = r.b.Alloc(4096, 4096)
	for i, gpa := range []uint64{r.lo, r.ro.GPA, r.hi} {
		b := r.b.Bytes(gpa, 4096)
		for j := range b {
			b[j] = byte(j*13) ^ byte(i)
		}
		r.canary[gpa] = bytes.Clone(b)
	}
	from, to := fabric.Addr{GID: r.a.GID, QPN: r.qa.QPN}, fabric.Addr{GID: r.b.GID, QPN: r.qb.QPN}
	// enginetest connects with both PSNs 0.
	r.bID, r.dataTok = remote.ConnIdentity(secret, tenant, from, to, 0)
	_, r.ackTk = remote.ConnIdentity(secret, tenant, to, from, 0)
	var err error
	if r.sock, err = net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(r.fb.Addr())); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { r.sock.Close() })
	return r
}

// reconnect gives each exec a fresh QP pair: both QPs through RESET
// (their connections made anew, doorbell records back to 0) to RTS, and
// two receives posted on b's.
func (r *fuzzRig) reconnect(t *testing.T) {
	t.Helper()
	for _, q := range []*enginetest.QP{r.qa, r.qb} {
		if err := q.Guest().Eng.ModifyQP(q.QPN, abi.QPAttrState, &abi.QPAttr{State: abi.QPStateReset}); err != nil {
			t.Fatalf("reset qp %d: %v", q.QPN, err)
		}
		q.SQProd, q.RQProd = 0, 0
	}
	fuzzToRTS(t, r.qa, r.b.GID, r.qb.QPN)
	fuzzToRTS(t, r.qb, r.a.GID, r.qa.QPN)
	r.qb.PostRecv(1, r.recv.SGE(0, 1024))
	r.qb.PostRecv(2, r.recv.SGE(1024, 1024))
}

// fuzzToRTS is enginetest's ToRTS (PSNs 0, every access), failing t
// rather than the guest's testing.F.
func fuzzToRTS(t *testing.T, q *enginetest.QP, peer abi.GID, peerQPN uint32) {
	t.Helper()
	o := enginetest.DefaultConn
	steps := []struct {
		mask abi.QPAttrMask
		attr abi.QPAttr
	}{
		{abi.QPAttrState | abi.QPAttrPKeyIndex | abi.QPAttrPort | abi.QPAttrAccessFlags,
			abi.QPAttr{State: abi.QPStateInit, Port: 1, AccessFlags: o.Access}},
		{abi.QPAttrState | abi.QPAttrAV | abi.QPAttrPathMTU | abi.QPAttrDestQPN | abi.QPAttrRQPSN | abi.QPAttrMaxDestRdAtomic | abi.QPAttrMinRNRTimer,
			abi.QPAttr{State: abi.QPStateRTR, PathMTU: abi.MTU4096, DestQPN: peerQPN, MaxDestRdAtomic: 1, MinRNRTimer: o.MinRNRTimer,
				AH: abi.AHAttr{DGID: peer, Port: 1}}},
		{abi.QPAttrState | abi.QPAttrSQPSN | abi.QPAttrMaxQPRdAtomic | abi.QPAttrRetryCnt | abi.QPAttrRNRRetry | abi.QPAttrTimeout,
			abi.QPAttr{State: abi.QPStateRTS, MaxRdAtomic: 1, RetryCnt: o.RetryCnt, RNRRetry: o.RNRRetry, Timeout: o.Timeout}},
	}
	for _, s := range steps {
		if err := q.Guest().Eng.ModifyQP(q.QPN, s.mask, &s.attr); err != nil {
			t.Fatalf("qp %d to %v: %v", q.QPN, s.attr.State, err)
		}
	}
}

// addressed reports whether dg names b's connection: tenant, id, and
// the token of a stream of it.
func (r *fuzzRig) addressed(dg []byte) bool {
	if len(dg) < 24 {
		return false
	}
	tok := binary.BigEndian.Uint64(dg[16:])
	return binary.BigEndian.Uint32(dg[8:]) == tenant && binary.BigEndian.Uint32(dg[12:]) == r.bID && (tok == r.dataTok || tok == r.ackTk)
}

// seeds are genuine packets of a's stream to b, and ACKs of b's.
func (r *fuzzRig) seeds() [][]byte {
	h := func(flags uint8, psn uint32) *wire.Header {
		return &wire.Header{Flags: flags, Tenant: tenant, Conn: r.bID, Token: r.dataTok, PSN: psn, TS: 1000}
	}
	fl := wire.FlagFirst | wire.FlagLast | wire.FlagAckReq
	p100 := bytes.Repeat([]byte{0xab}, 100)
	var add [8]byte
	binary.BigEndian.PutUint64(add[:], 3)
	var cs [16]byte
	binary.BigEndian.PutUint64(cs[8:], 9)
	out := [][]byte{
		wire.AppendData(nil, h(fl, 0), &wire.Data{Op: wire.OpWrite, MsgLen: 100, RKey: r.mr.Key, RAddr: r.mr.GPA + 100}, p100),
		wire.AppendData(nil, h(wire.FlagFirst, 0), &wire.Data{Op: wire.OpWrite, MsgLen: 200, RKey: r.mr.Key, RAddr: r.mr.GPA + 4000}, p100),
		wire.AppendData(nil, h(fl, 0), &wire.Data{Op: wire.OpWriteImm, MsgLen: 100, RKey: r.mr.Key, RAddr: r.mr.GPA, Imm: 7}, p100),
		wire.AppendData(nil, h(fl|wire.FlagSolicited, 0), &wire.Data{Op: wire.OpSend, MsgLen: 100}, p100),
		wire.AppendData(nil, h(fl, 0), &wire.Data{Op: wire.OpSendImm, MsgLen: 100, Imm: 9}, p100),
		wire.AppendData(nil, h(fl, 0), &wire.Data{Op: wire.OpReadReq, MsgLen: 512, RKey: r.mr.Key, RAddr: r.mr.GPA}, nil),
		wire.AppendData(nil, h(fl, 0), &wire.Data{Op: wire.OpFetchAdd, MsgLen: 8, RKey: r.mr.Key, RAddr: r.mr.GPA + 64}, add[:]),
		wire.AppendData(nil, h(fl, 0), &wire.Data{Op: wire.OpCmpSwap, MsgLen: 16, RKey: r.mr.Key, RAddr: r.mr.GPA + 64}, cs[:]),
		// Aimed at the canaries: the no-remote-access MR's key, and mr's
		// key past its end.
		wire.AppendData(nil, h(fl, 0), &wire.Data{Op: wire.OpWrite, MsgLen: 100, RKey: r.ro.Key, RAddr: r.ro.GPA}, p100),
		wire.AppendData(nil, h(fl, 0), &wire.Data{Op: wire.OpWrite, MsgLen: 100, RKey: r.mr.Key, RAddr: r.mr.GPA + r.mr.Len - 50}, p100),
	}
	ack := func(flags uint8, a *wire.Ack) []byte {
		return wire.AppendAck(nil, &wire.Header{Flags: flags, Tenant: tenant, Conn: r.bID, Token: r.ackTk}, a)
	}
	out = append(out, ack(0, &wire.Ack{Cum: 0}), ack(0, &wire.Ack{NAK: wire.NAKRNR, RNRTimer: 3}),
		ack(0, &wire.Ack{NAK: wire.NAKBusy, EchoTS: 5}), ack(wire.FlagAckReq, &wire.Ack{Cum: 1, MSN: 1, NAK: wire.NAKAccess}))
	return out
}

// FuzzFabricDatagram sends arbitrary datagrams to a cross-host fabric's
// UDP port, past the demultiplexer, the tenant/connection/token check,
// the connection and the StreamResponder into a real engine's guest
// memory. With stamp bit 0 the datagram's header gets the live
// connection's tenant, id and token (bit 1: its ACK token rather than
// its DATA token), as a peer that sniffed them would send; bit 2 sends
// it twice. Each exec has a fresh QP pair (reconnect). It must never
// panic or stop the fabric's loop, never change b's memory outside the
// MR with remote access and the receive buffers, and keep the counters
// consistent.
func FuzzFabricDatagram(f *testing.F) {
	r := newFuzzRig(f)
	for _, s := range r.seeds() {
		f.Add(s, uint8(0))
		f.Add(s, uint8(4))
	}
	f.Add([]byte("VS\x04"), uint8(1))
	f.Fuzz(func(t *testing.T, b []byte, stamp uint8) {
		r.reconnect(t)
		dg := bytes.Clone(b)
		if stamp&1 != 0 && len(dg) >= 24 {
			tok := r.dataTok
			if stamp&2 != 0 {
				tok = r.ackTk
			}
			binary.BigEndian.PutUint32(dg[8:], tenant)
			binary.BigEndian.PutUint32(dg[12:], r.bID)
			binary.BigEndian.PutUint64(dg[16:], tok)
		}
		n := 1 + int(stamp>>2&1)
		before := r.fb.Stats()
		for range n {
			if _, err := r.sock.Write(dg); err != nil {
				t.Fatalf("send %d bytes: %v", len(dg), err)
			}
		}
		// Handle runs under the lock Stats takes, in the same pass as
		// the count: once counted, a datagram has had its effect.
		var st remote.Stats
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Microsecond) {
			if st = r.fb.Stats(); st.Received >= before.Received+uint64(n) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the fabric's loop took %d of %d datagrams in 5 s", st.Received-before.Received, n)
			}
		}
		if st.Malformed+st.UnknownConn+st.Refused > st.Received || st.Foreign > st.Refused || st.BytesPlaced > st.BytesReceived {
			t.Fatalf("counters inconsistent: %+v", st)
		}
		if !r.addressed(dg) && st.DataReceived > before.DataReceived {
			t.Fatalf("a datagram without the connection's tenant, id and token was taken: %+v", st)
		}
		for gpa, want := range r.canary {
			if got := r.b.Bytes(gpa, 4096); !bytes.Equal(got, want) {
				t.Fatalf("b's memory at %#x changed outside every remotely writable MR", gpa)
			}
		}
		for _, ok := r.cqb.Poll(); ok; _, ok = r.cqb.Poll() {
		}
	})
}
