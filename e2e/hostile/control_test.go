package hostile

import (
	"errors"
	"testing"
	"time"

	guestdriver "github.com/vstellar/vstellar/guest-driver"
	"github.com/vstellar/vstellar/virtio/abi"
)

// Control commands on the control virtqueue (docs/spec.md §7-8), written
// into the attacker's RAM: every bad command gets a status and changes
// nothing; every table stops at its limit.

func TestControl(t *testing.T) {
	runCases(t, controlCases)
}

var controlCases = []hostileCase{
	{"unknown opcodes", func(t *testing.T, e *env) {
		s := newSession(t, e.d.socket(victim))
		for _, op := range []abi.Opcode{0, 25, 26, 255, 1 << 16, 1 << 31, ^abi.Opcode(0)} {
			s.wantStatus(op, nil, abi.StatusInvalidOpcode)
		}
		s.mustCommand(abi.OpQueryDevice, nil)
	}},
	{"wrong lengths and flags", func(t *testing.T, e *env) {
		s := newSession(t, e.d.socket(victim))
		s.wantStatus(abi.OpQueryDevice, make([]byte, 8), abi.StatusInvalidArgument)
		s.wantStatus(abi.OpQueryPort, make([]byte, 4), abi.StatusInvalidArgument)
		s.wantStatus(abi.OpQueryPort, make([]byte, 16), abi.StatusInvalidArgument)
		s.wantStatus(abi.OpAllocPD, make([]byte, 1), abi.StatusInvalidArgument)
		s.wantStatus(abi.OpCreateQP, make([]byte, 55), abi.StatusInvalidArgument)
		s.wantStatus(abi.OpRegMR, make([]byte, 4000), abi.StatusInvalidArgument)
		req := abi.AppendRequest(nil, abi.OpQueryDevice, nil)
		le.PutUint32(req[4:], 1) // flags must be 0
		sts, _, err := s.commands(req)
		if err != nil || sts[0] != abi.StatusInvalidArgument {
			t.Errorf("QUERY_DEVICE with flags: %v %v", sts, err)
		}
		sts, _, err = s.commands([]byte{1, 0, 0}) // short header
		if err != nil || sts[0] != abi.StatusInvalidArgument {
			t.Errorf("3-byte request: %v %v", sts, err)
		}
		s.mustCommand(abi.OpQueryDevice, nil)
	}},
	{"oversized request and short responses", func(t *testing.T, e *env) {
		s := newSession(t, e.d.socket(victim))
		// 8 KiB readable: above MaxRequestSize.
		if used, st := s.rawCommand(abi.AppendRequest(nil, abi.OpQueryDevice, make([]byte, 8184)), 4096); used != 8 || st != abi.StatusInvalidArgument {
			t.Errorf("8 KiB request: used %d status %v", used, st)
		}
		if used, st := s.rawCommand(abi.AppendRequest(nil, abi.OpQueryDevice, nil), 8); used != 8 || st != abi.StatusResponseTooSmall {
			t.Errorf("QUERY_DEVICE with 8 writable bytes: used %d status %v", used, st)
		}
		if used, _ := s.rawCommand(abi.AppendRequest(nil, abi.OpAllocPD, nil), 4); used != 0 {
			t.Errorf("ALLOC_PD with 4 writable bytes: used %d, want 0", used)
		}
		if used, _ := s.rawCommand(abi.AppendRequest(nil, abi.OpAllocPD, nil), 0); used != 0 {
			t.Errorf("ALLOC_PD with no writable part: used %d, want 0", used)
		}
		s.mustCommand(abi.OpQueryDevice, nil)
	}},
	{"out-of-range and stale handles", func(t *testing.T, e *env) {
		s := newSession(t, e.d.socket(victim))
		s.mustCommand(abi.OpResetState, nil)
		for _, h := range []uint32{0, 1, 2, 63, 64, 65, 1 << 24, ^uint32(0)} {
			for _, op := range []abi.Opcode{abi.OpDeallocPD, abi.OpDestroyCQ, abi.OpDestroyQP, abi.OpQueryQP, abi.OpDeregMR, abi.OpDestroyAH} {
				st, _, err := s.command(op, enc(&abi.HandleReq{Handle: h}))
				if err != nil || st != abi.StatusNotFound {
					t.Errorf("%v of handle %#x: %v %v, want NOT_FOUND", op, h, st, err)
				}
			}
		}
		pd := s.mustCommand(abi.OpAllocPD, nil)
		s.mustCommand(abi.OpDeallocPD, pd)
		s.wantStatus(abi.OpDeallocPD, pd, abi.StatusNotFound)
	}},
	{"CREATE storms up to the limits", func(t *testing.T, e *env) {
		s := newSession(t, e.d.socket(victim))
		s.mustCommand(abi.OpResetState, nil)
		pdn := storm(t, s, "PD", victimLimits["max_pd"], func(int) []byte { return abi.AppendRequest(nil, abi.OpAllocPD, nil) })
		area := uint64(0x200000)
		s.doorbellArea(area)
		storm(t, s, "CQ", victimLimits["max_cq"], func(k int) []byte {
			return abi.AppendRequest(nil, abi.OpCreateCQ, enc(&abi.CreateCQReq{RingAddr: 0x300000 + uint64(k)*0x1000, Entries: 4}))
		})
		storm(t, s, "MR", victimLimits["max_mr"], func(k int) []byte {
			return abi.AppendRequest(nil, abi.OpRegMR, enc(&abi.RegMRReq{PDN: pdn, Access: abi.AccessLocalWrite,
				IOVA: uint64(k) << 20, Length: 4096, Addr: 0x380000}))
		})
		storm(t, s, "SRQ", victimLimits["max_srq"], func(k int) []byte {
			return abi.AppendRequest(nil, abi.OpCreateSRQ, enc(&abi.CreateSRQReq{PDN: pdn, Size: 4, RingAddr: 0x3c0000 + uint64(k)*0x1000}))
		})
		storm(t, s, "AH", victimLimits["max_ah"], func(int) []byte {
			return abi.AppendRequest(nil, abi.OpCreateAH, enc(&abi.CreateAHReq{PDN: pdn,
				AH: abi.AHAttr{DGID: abi.GID{0xfe, 0x80, 15: 1}, HopLimit: 1, Port: 1}}))
		})
		// Everything dropped at once, then the tables fill again.
		s.mustCommand(abi.OpResetState, nil)
		storm(t, s, "PD after RESET_STATE", victimLimits["max_pd"], func(int) []byte { return abi.AppendRequest(nil, abi.OpAllocPD, nil) })
	}},
	{"SRQ sizes, handles and ownership", func(t *testing.T, e *env) {
		s := newSession(t, e.d.socket(victim))
		s.mustCommand(abi.OpResetState, nil)
		s.doorbellArea(0x200000)
		pd1 := le.Uint32(s.mustCommand(abi.OpAllocPD, nil))
		pd2 := le.Uint32(s.mustCommand(abi.OpAllocPD, nil))
		cqn := le.Uint32(s.mustCommand(abi.OpCreateCQ, enc(&abi.CreateCQReq{RingAddr: 0x300000, Entries: 16})))
		srq := func(r abi.CreateSRQReq) []byte { return enc(&r) }
		for _, r := range []abi.CreateSRQReq{
			{PDN: pd1, Size: 0, RingAddr: 0x310000}, {PDN: pd1, Size: 3, RingAddr: 0x310000},
			{PDN: pd1, Size: 1 << 31, RingAddr: 0x310000}, {PDN: pd1, Size: 4, MaxSGE: 1 << 20, RingAddr: 0x310000},
			{PDN: pd1, Size: 4, Limit: 4, RingAddr: 0x310000}, {PDN: pd1, Size: 4, Limit: ^uint32(0), RingAddr: 0x310000},
			{PDN: pd1, Size: 4, RingAddr: 0x310008},
		} {
			s.wantStatus(abi.OpCreateSRQ, srq(r), abi.StatusInvalidArgument)
		}
		s.wantStatus(abi.OpCreateSRQ, srq(abi.CreateSRQReq{PDN: 99, Size: 4, RingAddr: 0x310000}), abi.StatusNotFound)
		s.wantStatus(abi.OpCreateSRQ, srq(abi.CreateSRQReq{PDN: pd1, Size: 4, RingAddr: ramSize - 32}), abi.StatusBadAddress)
		s.wantStatus(abi.OpCreateSRQ, srq(abi.CreateSRQReq{PDN: pd1, Size: 4, RingAddr: 0x200000}), abi.StatusBadAddress) // the doorbell area
		srqn := le.Uint32(s.mustCommand(abi.OpCreateSRQ, srq(abi.CreateSRQReq{PDN: pd1, Size: 4, RingAddr: 0x310000})))
		qp := func(pdn, srqn uint32, rqSize uint32) []byte {
			return enc(&abi.CreateQPReq{PDN: pdn, Type: abi.QPTypeRC, SendCQN: cqn, RecvCQN: cqn, SRQN: srqn,
				SQSize: 4, RQSize: rqSize, MaxSendSGE: 1, SQAddr: 0x320000})
		}
		s.wantStatus(abi.OpCreateQP, qp(pd2, srqn, 0), abi.StatusPermission)
		s.wantStatus(abi.OpCreateQP, qp(pd1, srqn+1, 0), abi.StatusNotFound)
		s.wantStatus(abi.OpCreateQP, qp(pd1, ^uint32(0), 0), abi.StatusNotFound)
		s.wantStatus(abi.OpCreateQP, qp(pd1, srqn, 4), abi.StatusInvalidArgument)
		qpn := le.Uint32(s.mustCommand(abi.OpCreateQP, qp(pd1, srqn, 0)))
		s.wantStatus(abi.OpDestroySRQ, enc(&abi.HandleReq{Handle: srqn}), abi.StatusBusy)
		s.wantStatus(abi.OpDeallocPD, enc(&abi.HandleReq{Handle: pd1}), abi.StatusBusy)
		s.wantStatus(abi.OpModifySRQ, enc(&abi.ModifySRQReq{SRQN: srqn, AttrMask: abi.SRQAttrMaxWR, MaxWR: 1 << 30}), abi.StatusNotSupported)
		s.wantStatus(abi.OpModifySRQ, enc(&abi.ModifySRQReq{SRQN: srqn, AttrMask: ^abi.SRQAttrMask(0)}), abi.StatusInvalidArgument)
		s.mustCommand(abi.OpDestroyQP, enc(&abi.HandleReq{Handle: qpn}))
		s.mustCommand(abi.OpDestroySRQ, enc(&abi.HandleReq{Handle: srqn}))
		s.wantStatus(abi.OpDestroySRQ, enc(&abi.HandleReq{Handle: srqn}), abi.StatusNotFound)
		s.wantStatus(abi.OpQuerySRQ, enc(&abi.HandleReq{Handle: srqn}), abi.StatusNotFound)
		// The bystander's SRQ numbers are not the victim's to name.
		ctx := t.Context()
		bpd, err := e.by.AllocPD(ctx)
		if err != nil {
			t.Fatal(err)
		}
		bsrq, err := bpd.CreateSRQ(ctx, guestdriver.SRQInit{MaxWR: 4, MaxSGE: 1})
		if err != nil {
			t.Fatal(err)
		}
		s.wantStatus(abi.OpQuerySRQ, enc(&abi.HandleReq{Handle: bsrq.Num()}), abi.StatusNotFound)
		s.wantStatus(abi.OpCreateQP, qp(pd1, bsrq.Num(), 0), abi.StatusNotFound)
		if _, err := bsrq.Query(ctx); err != nil {
			t.Errorf("the bystander's SRQ: %v", err)
		}
		if err := errors.Join(bsrq.Destroy(ctx), bpd.Dealloc(ctx)); err != nil {
			t.Fatal(err)
		}
	}},
	{"RESET_STATE storm", func(t *testing.T, e *env) {
		s := newSession(t, e.d.socket(victim))
		for range 4 {
			reqs := make([][]byte, maxBatch)
			for k := range reqs {
				reqs[k] = abi.AppendRequest(nil, abi.OpResetState, nil)
			}
			sts, _, err := s.commands(reqs...)
			if err != nil {
				t.Fatal(err)
			}
			for k, st := range sts {
				if st != abi.StatusOK {
					t.Fatalf("RESET_STATE %d: %v", k, st)
				}
			}
		}
	}},
	{"doorbell area over the virtqueue rings", func(t *testing.T, e *env) {
		s := newSession(t, e.d.socket(victim))
		s.mustCommand(abi.OpResetState, nil)
		n := s.cfg.Doorbell.Size()
		for q := range numQueues {
			s.wantStatus(abi.OpSetDoorbellArea, enc(&abi.SetDoorbellAreaReq{Addr: ringBase(q), Length: n}), abi.StatusBadAddress)
		}
		// The control queue still works: nothing zeroed its rings.
		s.mustCommand(abi.OpQueryDevice, nil)
	}},
	{"doorbell area bad ranges", func(t *testing.T, e *env) {
		s := newSession(t, e.d.socket(victim))
		s.mustCommand(abi.OpResetState, nil)
		n := s.cfg.Doorbell.Size()
		s.wantStatus(abi.OpSetDoorbellArea, enc(&abi.SetDoorbellAreaReq{Addr: 0x200001, Length: n}), abi.StatusInvalidArgument)
		s.wantStatus(abi.OpSetDoorbellArea, enc(&abi.SetDoorbellAreaReq{Addr: 0x200000, Length: 1}), abi.StatusInvalidArgument)
		s.wantStatus(abi.OpSetDoorbellArea, enc(&abi.SetDoorbellAreaReq{Addr: ramSize, Length: n}), abi.StatusBadAddress)
		s.wantStatus(abi.OpSetDoorbellArea, enc(&abi.SetDoorbellAreaReq{Addr: 1 << 50, Length: n}), abi.StatusBadAddress)
		s.wantStatus(abi.OpSetDoorbellArea, enc(&abi.SetDoorbellAreaReq{Addr: ramSize - 0x1000, Length: 1 << 62}), abi.StatusBadAddress)
		// A registered MR keeps the area off it, and the area keeps MRs off.
		pdn := le.Uint32(s.mustCommand(abi.OpAllocPD, nil))
		s.mustCommand(abi.OpRegMR, enc(&abi.RegMRReq{PDN: pdn, Access: abi.AccessLocalWrite, Length: 4096, Addr: 0x200000}))
		s.wantStatus(abi.OpSetDoorbellArea, enc(&abi.SetDoorbellAreaReq{Addr: 0x200000, Length: n}), abi.StatusBadAddress)
		s.doorbellArea(0x280000)
		s.wantStatus(abi.OpRegMR, enc(&abi.RegMRReq{PDN: pdn, Access: abi.AccessLocalWrite, Length: 4096, Addr: 0x280000}), abi.StatusBadAddress)
		s.wantStatus(abi.OpSetDoorbellArea, enc(&abi.SetDoorbellAreaReq{Addr: 0x300000, Length: n}), abi.StatusBadState)
	}},
	{"rings and MRs outside RAM", func(t *testing.T, e *env) {
		s := newSession(t, e.d.socket(victim))
		s.mustCommand(abi.OpResetState, nil)
		s.doorbellArea(0x200000)
		pdn := le.Uint32(s.mustCommand(abi.OpAllocPD, nil))
		s.wantStatus(abi.OpCreateCQ, enc(&abi.CreateCQReq{RingAddr: ramSize - 32, Entries: 4}), abi.StatusBadAddress)
		s.wantStatus(abi.OpCreateCQ, enc(&abi.CreateCQReq{RingAddr: 1 << 62, Entries: 1}), abi.StatusBadAddress)
		s.wantStatus(abi.OpRegMR, enc(&abi.RegMRReq{PDN: pdn, Access: abi.AccessLocalWrite, Length: 1 << 30, Addr: 0}), abi.StatusBadAddress)
		s.wantStatus(abi.OpRegMR, enc(&abi.RegMRReq{PDN: pdn, Access: abi.AccessLocalWrite, Length: 4096, Addr: ^uint64(0) - 4095}), abi.StatusBadAddress)
		// A page list naming pages outside RAM.
		list := cmdReq(100)
		le.PutUint64(s.ram.mem[list:], 1<<40)
		s.wantStatus(abi.OpRegMR, enc(&abi.RegMRReq{PDN: pdn, Access: abi.AccessLocalWrite, Length: 4096, Addr: list, PageShift: 12, NPages: 1}), abi.StatusBadAddress)
		// A page list itself outside RAM.
		s.wantStatus(abi.OpRegMR, enc(&abi.RegMRReq{PDN: pdn, Access: abi.AccessLocalWrite, Length: 1 << 20, Addr: ramSize - 8, PageShift: 12, NPages: 256}), abi.StatusBadAddress)
	}},
	{"control-queue flood", func(t *testing.T, e *env) {
		s := newSession(t, e.d.socket(victim))
		start := time.Now()
		for range 20 {
			reqs := make([][]byte, maxBatch)
			for k := range reqs {
				reqs[k] = abi.AppendRequest(nil, abi.Opcode(k%25), nil)
			}
			if _, _, err := s.commands(reqs...); err != nil {
				t.Fatal(err)
			}
		}
		t.Logf("%d commands in %v", 20*maxBatch, time.Since(start))
	}},
}

// storm creates objects until the table is full: exactly limit succeed,
// the rest get NO_RESOURCES. It returns the first handle.
func storm(t *testing.T, s *session, what string, limit uint32, req func(k int) []byte) uint32 {
	t.Helper()
	reqs := make([][]byte, limit+4)
	for k := range reqs {
		reqs[k] = req(k)
	}
	var first uint32
	ok := 0
	for off := 0; off < len(reqs); off += maxBatch {
		sts, bodies, err := s.commands(reqs[off:min(off+maxBatch, len(reqs))]...)
		if err != nil {
			t.Fatalf("%s storm: %v", what, err)
		}
		for k, st := range sts {
			switch {
			case st == abi.StatusOK:
				if ok == 0 {
					first = le.Uint32(bodies[k])
				}
				ok++
			case st != abi.StatusNoResources:
				t.Fatalf("%s storm: command %d: %v", what, off+k, st)
			case off+k < int(limit):
				t.Fatalf("%s storm: NO_RESOURCES after %d of %d", what, off+k, limit)
			}
		}
	}
	if ok != int(limit) {
		t.Errorf("%s storm: %d created, limit %d", what, ok, limit)
	}
	return first
}

// rawCommand runs one command with a writable part of respLen bytes (none
// for 0) and returns the used length and the status, if any was written.
func (s *session) rawCommand(req []byte, respLen uint32) (uint32, abi.Status) {
	s.t.Helper()
	q := abi.QueueControl
	copy(s.ram.mem[cmdReq(0):], req)
	clear(s.ram.mem[cmdResp(0) : cmdResp(0)+8])
	if respLen == 0 {
		s.putDesc(q, 0, cmdReq(0), uint32(len(req)), 0, 0)
	} else {
		s.putDesc(q, 0, cmdReq(0), uint32(len(req)), descNext, 1)
		s.putDesc(q, 1, cmdResp(0)+uint64(len(req)), respLen, descWrite, 0)
	}
	used := s.avail[q]
	s.publish(q, 0)
	kick(s.kicks[q])
	if err := s.waitUsed(q, used+1, 5*time.Second); err != nil {
		s.t.Fatal(err)
	}
	elem := s.ram.mem[ringBase(q)+usedOff+4+uint64(used%queueSize)*8:]
	n := le.Uint32(elem[4:])
	if n < 8 || respLen == 0 {
		return n, 0
	}
	return n, abi.Status(le.Uint32(s.ram.mem[cmdResp(0)+uint64(len(req)):]))
}
