package device

import (
	"testing"

	"github.com/vstellar/vstellar/virtio"
	"github.com/vstellar/vstellar/virtio/abi"
)

// fuzzSeeds is one valid request per opcode, in an order in which most of
// them succeed on a fresh device (PD 1, CQ 1, QP 2, MR key 0x100 and AH 1
// exist when they are named), with rings and buffers inside the fuzz
// guest's 1 MiB of memory.
func fuzzSeeds() []struct {
	op      abi.Opcode
	payload []byte
} {
	p := func(v any) []byte { return abi.EncodePayload(nil, v) }
	var gid abi.GID
	gid[0], gid[15] = 0xfd, 1
	return []struct {
		op      abi.Opcode
		payload []byte
	}{
		{abi.OpQueryDevice, nil},
		{abi.OpQueryPort, p(&abi.QueryPortReq{Port: 1})},
		{abi.OpQueryGID, p(&abi.GIDReq{Port: 1})},
		{abi.OpAddGID, p(&abi.AddGIDReq{Port: 1, Index: 1, GID: gid})},
		{abi.OpDelGID, p(&abi.GIDReq{Port: 1, Index: 1})},
		{abi.OpAllocPD, nil},
		{abi.OpCreateCQ, p(&abi.CreateCQReq{RingAddr: 0x80000, Entries: 16})},
		{abi.OpResizeCQ, p(&abi.ResizeCQReq{CQN: 1, Entries: 32, RingAddr: 0x81000})},
		{abi.OpCreateQP, p(&abi.CreateQPReq{PDN: 1, Type: abi.QPTypeRC, SendCQN: 1, RecvCQN: 1, SQSize: 4, RQSize: 4,
			MaxSendSGE: 1, MaxRecvSGE: 1, SQAddr: 0x82000, RQAddr: 0x83000})},
		{abi.OpModifyQP, p(&abi.ModifyQPReq{QPN: 2, AttrMask: abi.QPAttrState | abi.QPAttrPKeyIndex | abi.QPAttrPort | abi.QPAttrAccessFlags,
			Attr: abi.QPAttr{State: abi.QPStateInit, Port: 1}})},
		{abi.OpQueryQP, p(&abi.HandleReq{Handle: 2})},
		{abi.OpCreateSRQ, p(&abi.CreateSRQReq{PDN: 1, Size: 8, MaxSGE: 1, Limit: 2, RingAddr: 0x85000})},
		{abi.OpModifySRQ, p(&abi.ModifySRQReq{SRQN: 1, AttrMask: abi.SRQAttrLimit, Limit: 4})},
		{abi.OpQuerySRQ, p(&abi.HandleReq{Handle: 1})},
		{abi.OpCreateQP, p(&abi.CreateQPReq{PDN: 1, Type: abi.QPTypeRC, SendCQN: 1, RecvCQN: 1, SQSize: 4, SRQN: 1,
			MaxSendSGE: 1, SQAddr: 0x86000})},
		{abi.OpDestroyQP, p(&abi.HandleReq{Handle: 3})},
		{abi.OpDestroySRQ, p(&abi.HandleReq{Handle: 1})},
		{abi.OpRegMR, p(&abi.RegMRReq{PDN: 1, Access: abi.AccessLocalWrite, IOVA: 0x1000, Length: 4096, Addr: 0x84000})},
		{abi.OpCreateAH, p(&abi.CreateAHReq{PDN: 1, AH: abi.AHAttr{DGID: gid, Port: 1}})},
		{abi.OpDestroyAH, p(&abi.HandleReq{Handle: 1})},
		{abi.OpDeregMR, p(&abi.HandleReq{Handle: 0x100})},
		{abi.OpDestroyQP, p(&abi.HandleReq{Handle: 2})},
		{abi.OpDestroyCQ, p(&abi.HandleReq{Handle: 1})},
		{abi.OpDeallocPD, p(&abi.HandleReq{Handle: 1})},
		{abi.OpSetDoorbellArea, p(&abi.SetDoorbellAreaReq{Addr: 0x90000, Length: 0x40000})},
		{abi.OpResetState, nil},
	}
}

// FuzzControlCommand drives hostile requests through the whole control
// path (chain copy-out, decoding, response sizing, every command's
// handler and the engine behind it) over a real split queue, on one
// long-lived device whose state the inputs build up and tear down. Every
// chain must come back exactly once with a header-only error, an OK with
// exactly the opcode's response size, or nothing when there is no room;
// objects never exceed the limits.
func FuzzControlCommand(f *testing.F) {
	for _, s := range fuzzSeeds() {
		n, _ := s.op.ResponseSize()
		f.Add(uint32(s.op), s.payload, uint16(abi.ResponseHeaderSize+n), uint8(0))
	}
	// Framing: reserved flags, a short header, no room for a status.
	f.Add(uint32(0), []byte{1, 0, 0, 0, 1, 0, 0, 0}, uint16(64), uint8(0x80))
	f.Add(uint32(0), []byte{1, 0, 0}, uint16(64), uint8(0x81))
	f.Add(uint32(abi.OpCreateQP), []byte{1, 2, 3}, uint16(8), uint8(1))
	f.Add(uint32(abi.OpQueryDevice), []byte(nil), uint16(7), uint8(2))
	f.Add(uint32(99), []byte(nil), uint16(64), uint8(3))

	limits := abi.Limits{MaxQP: 8, MaxCQ: 8, MaxMR: 8, MaxPD: 8, MaxAH: 8, MaxGID: 4, MaxQPWR: 64, MaxCQE: 256, MaxSRQ: 4, MaxSRQWR: 64}
	d := newDevice(f, Config{Name: "fuzz", Limits: limits})
	g := newGuest(f, false)
	activateOn(f, d, allFeatures(d), g.mem)
	f.Fuzz(func(t *testing.T, op uint32, payload []byte, respLen uint16, split uint8) {
		if len(payload) > 2*abi.MaxRequestSize {
			return
		}
		g.reset(t, split&1 != 0)
		// Bit 7: payload is the whole request, framing included.
		req := payload
		if split&0x80 == 0 {
			req = abi.AppendRequest(nil, abi.Opcode(op), payload)
		}
		var readable []virtio.Buffer
		if len(req) > 0 {
			// Split the request at a fuzzer-chosen point.
			at := int(split&0x7e) % (len(req) + 1)
			if at > 0 {
				readable = append(readable, g.put(req[:at]))
			}
			if at < len(req) {
				readable = append(readable, g.put(req[at:]))
			}
		}
		var writable []virtio.Buffer
		if respLen > 0 {
			writable = []virtio.Buffer{g.alloc(uint32(respLen))}
		}
		if len(readable)+len(writable) == 0 {
			return
		}
		g.submit(readable, writable)
		if err := g.process(d); err != nil {
			t.Fatal(err)
		}
		_, n := g.used()
		if _, _, ok := g.drv.GetUsed(); ok {
			t.Fatal("a chain came back twice")
		}
		if n == 0 {
			if respLen >= abi.ResponseHeaderSize {
				t.Fatalf("no response in %d bytes", respLen)
			}
			return
		}
		st, body, err := abi.DecodeResponse(g.bytes(writable[0].Addr, uint64(n)))
		if err != nil || !st.Known() {
			t.Fatalf("response %v %v", st, err)
		}
		if st != abi.StatusOK {
			if len(body) != 0 {
				t.Fatalf("status %v with %d payload bytes", st, len(body))
			}
		} else {
			hdr, err := abi.DecodeRequest(req)
			if err != nil {
				t.Fatalf("OK for an undecodable request: %v", err)
			}
			if want, _ := hdr.Header.Opcode.ResponseSize(); len(body) != want {
				t.Fatalf("%v: OK with %d payload bytes, want %d", hdr.Header.Opcode, len(body), want)
			}
		}
		o := d.Objects()
		if o.PDs > 8 || o.CQs > 8 || o.QPs > 8 || o.MRs > 8 || o.AHs > 8 || o.GIDs > 4 || o.SRQs > 4 {
			t.Fatalf("objects %+v beyond the limits", o)
		}
	})
}

// TestFuzzSeedsAreValid: the seeds are valid requests (so the fuzzer
// starts from commands that reach every handler's success path): run in
// order on a fresh device, each succeeds, except SET_DOORBELL_AREA, which
// is refused in shared-memory mode.
func TestFuzzSeedsAreValid(t *testing.T) {
	d := newDevice(t, Config{})
	g := newGuest(t, false)
	activateOn(t, d, allFeatures(d), g.mem)
	for _, s := range fuzzSeeds() {
		n, _ := s.op.ResponseSize()
		resp := g.command(d, abi.AppendRequest(nil, s.op, s.payload), uint32(abi.ResponseHeaderSize+n))
		st, body, err := abi.DecodeResponse(resp)
		want := abi.StatusOK
		if s.op == abi.OpSetDoorbellArea {
			want = abi.StatusBadState
		}
		if err != nil || st != want || (st == abi.StatusOK && len(body) != n) {
			t.Errorf("%v: %v (%d bytes) %v, want %v", s.op, st, len(body), err, want)
		}
	}
	if o := d.Objects(); o != (Objects{GIDs: 1}) {
		t.Errorf("objects after the seeds: %+v", o)
	}
}
