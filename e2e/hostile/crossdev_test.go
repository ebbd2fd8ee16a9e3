package hostile

import (
	"testing"

	"github.com/vstellar/vstellar/virtio/abi"
)

// Cross-device: the attacker names the bystander's objects, keys and GID
// (read from the bystander's guest driver). Each device numbers its own
// objects, so those names find nothing of the bystander's; the health
// check's RDMA WRITE on the bystander's QPs and MRs shows they survived.

func TestCrossDevice(t *testing.T) {
	runCases(t, crossDeviceCases)
}

var crossDeviceCases = []hostileCase{
	{"destroy the bystander's objects", func(t *testing.T, e *env) {
		s := newSession(t, e.d.socket(victim))
		s.mustCommand(abi.OpResetState, nil)
		h := e.loop.handle
		for _, c := range []struct {
			op     abi.Opcode
			handle uint32
		}{
			{abi.OpDestroyQP, h.qpn}, {abi.OpQueryQP, h.qpn}, {abi.OpDestroyQP, e.loop.b.Num()},
			{abi.OpDeregMR, h.lkey}, {abi.OpDeregMR, e.loop.src.LKey()},
			{abi.OpDestroyCQ, h.cqn}, {abi.OpDeallocPD, h.pdn},
		} {
			s.wantStatus(c.op, enc(&abi.HandleReq{Handle: c.handle}), abi.StatusNotFound)
		}
	}},
	{"same numbers, own objects", func(t *testing.T, e *env) {
		// The attacker's first PD very likely gets the bystander's PDN;
		// destroying it destroys the attacker's own.
		s := newSession(t, e.d.socket(victim))
		s.mustCommand(abi.OpResetState, nil)
		pd := s.mustCommand(abi.OpAllocPD, nil)
		if le.Uint32(pd) == e.loop.handle.pdn {
			t.Logf("the attacker's PD has the bystander's number %d", e.loop.handle.pdn)
		}
		s.mustCommand(abi.OpDeallocPD, pd)
		s.wantStatus(abi.OpDeallocPD, enc(&abi.HandleReq{Handle: e.loop.handle.pdn}), abi.StatusNotFound)
	}},
	{"register the bystander's MR range", func(t *testing.T, e *env) {
		// The bystander's IOVA and lkey mean nothing here: the range is
		// the attacker's own RAM (or outside it), never the bystander's.
		s := newSession(t, e.d.socket(victim))
		s.mustCommand(abi.OpResetState, nil)
		pdn := le.Uint32(s.mustCommand(abi.OpAllocPD, nil))
		st, _, err := s.command(abi.OpRegMR, enc(&abi.RegMRReq{PDN: pdn, Access: abi.AccessLocalWrite,
			IOVA: e.loop.dst.IOVA(), Length: 4096, Addr: e.loop.dst.IOVA()}))
		if err != nil || (st != abi.StatusOK && st != abi.StatusBadAddress) {
			t.Errorf("REG_MR at the bystander's address: %v %v", st, err)
		}
		s.wantStatus(abi.OpRegMR, enc(&abi.RegMRReq{PDN: e.loop.handle.pdn + 1, Access: abi.AccessLocalWrite,
			Length: 4096, Addr: 0x300000}), abi.StatusNotFound)
	}},
	{"claim the bystander's GID", func(t *testing.T, e *env) {
		s := newSession(t, e.d.socket(victim))
		s.mustCommand(abi.OpResetState, nil)
		gid := e.by.GID()
		st, _, err := s.command(abi.OpAddGID, enc(&abi.AddGIDReq{Port: 1, Index: 1, GID: gid}))
		if err != nil || st == abi.StatusOK {
			t.Errorf("ADD_GID of the bystander's GID %x: %v %v", gid, st, err)
		}
		s.wantStatus(abi.OpDelGID, enc(&abi.GIDReq{Port: 1, Index: 0}), abi.StatusPermission)
	}},
	{"connect a QP to the bystander's QPN", func(t *testing.T, e *env) {
		// An address handle toward the bystander is legitimate; it names
		// an address, not an object, so it is all the attacker can get.
		s := newSession(t, e.d.socket(victim))
		s.mustCommand(abi.OpResetState, nil)
		pdn := le.Uint32(s.mustCommand(abi.OpAllocPD, nil))
		s.mustCommand(abi.OpCreateAH, enc(&abi.CreateAHReq{PDN: pdn, AH: abi.AHAttr{DGID: e.by.GID(), HopLimit: 1, Port: 1}}))
		s.wantStatus(abi.OpCreateAH, enc(&abi.CreateAHReq{PDN: e.loop.handle.pdn + 7, AH: abi.AHAttr{DGID: e.by.GID(), HopLimit: 1, Port: 1}}), abi.StatusNotFound)
	}},
}
