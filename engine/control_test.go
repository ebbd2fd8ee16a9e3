package engine_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/vstellar/vstellar/emtt"
	"github.com/vstellar/vstellar/engine"
	"github.com/vstellar/vstellar/fabric"
	"github.com/vstellar/vstellar/guestmem"
	"github.com/vstellar/vstellar/internal/testkit/enginetest"
	"github.com/vstellar/vstellar/virtio/abi"
)

func wantStatus(t *testing.T, what string, err error, st abi.Status) {
	t.Helper()
	if got := abi.StatusFor(err); got != st {
		t.Fatalf("%s: %v (status %v), want %v", what, err, got, st)
	}
}

func TestCreateCQChecks(t *testing.T) {
	g := enginetest.NewGuest(t, fabric.NewLocal(), "g", enginetest.Options{RAM: 1 << 20})
	e := g.Eng
	ring := g.Alloc(4096, 4096)
	io := g.Alloc(8192, 4096)
	if err := g.MTT.ReserveIO(emtt.Span{GPA: io, Len: 8192}); err != nil {
		t.Fatal(err)
	}
	db := enginetest.Limits.MaxQP
	cases := []struct {
		name string
		s    engine.CQSpec
		st   abi.Status
	}{
		{"cqn 0", engine.CQSpec{CQN: 0, Doorbell: db, RingAddr: ring, Entries: 4}, abi.StatusInvalidArgument},
		{"cqn beyond max", engine.CQSpec{CQN: enginetest.Limits.MaxCQ + 1, Doorbell: db, RingAddr: ring, Entries: 4}, abi.StatusInvalidArgument},
		{"entries not a power of two", engine.CQSpec{CQN: 1, Doorbell: db, RingAddr: ring, Entries: 3}, abi.StatusInvalidArgument},
		{"zero entries", engine.CQSpec{CQN: 1, Doorbell: db, RingAddr: ring, Entries: 0}, abi.StatusInvalidArgument},
		{"too many entries", engine.CQSpec{CQN: 1, Doorbell: db, RingAddr: ring, Entries: enginetest.Limits.MaxCQE * 2}, abi.StatusInvalidArgument},
		{"misaligned ring", engine.CQSpec{CQN: 1, Doorbell: db, RingAddr: ring + 16, Entries: 4}, abi.StatusInvalidArgument},
		{"ring outside RAM", engine.CQSpec{CQN: 1, Doorbell: db, RingAddr: 0x4000_0000, Entries: 4}, abi.StatusBadAddress},
		{"ring across RAM's end", engine.CQSpec{CQN: 1, Doorbell: db, RingAddr: enginetest.RAMBase + (1 << 20) - 64, Entries: 4}, abi.StatusBadAddress},
		{"ring wraps", engine.CQSpec{CQN: 1, Doorbell: db, RingAddr: 1<<64 - 64, Entries: 4}, abi.StatusBadAddress},
		{"ring in IO memory", engine.CQSpec{CQN: 1, Doorbell: db, RingAddr: io + 4096 - 64, Entries: 4}, abi.StatusBadAddress},
		{"doorbell outside layout", engine.CQSpec{CQN: 1, Doorbell: 1 << 30, RingAddr: ring, Entries: 4}, abi.StatusInvalidArgument},
	}
	for _, tc := range cases {
		wantStatus(t, tc.name, e.CreateCQ(tc.s), tc.st)
	}
	if err := e.CreateCQ(engine.CQSpec{CQN: 1, Doorbell: db, RingAddr: ring, Entries: 4}); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, "duplicate cqn", e.CreateCQ(engine.CQSpec{CQN: 1, Doorbell: db + 1, RingAddr: ring, Entries: 4}), abi.StatusBusy)
	wantStatus(t, "shared doorbell", e.CreateCQ(engine.CQSpec{CQN: 2, Doorbell: db, RingAddr: ring, Entries: 4}), abi.StatusBusy)
	wantStatus(t, "destroy unknown", e.DestroyCQ(9), abi.StatusNotFound)
	if err := e.DestroyCQ(1); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, "double destroy", e.DestroyCQ(1), abi.StatusNotFound)
	if err := e.CreateCQ(engine.CQSpec{CQN: 2, Doorbell: db, RingAddr: ring, Entries: 4}); err != nil {
		t.Fatalf("doorbell not released by destroy: %v", err)
	}
}

func TestCreateBeforeMemoryIsRefused(t *testing.T) {
	e := engine.New(engine.Config{Name: "x", Limits: enginetest.Limits, MTT: emtt.New(16, nil), Fabric: fabric.NewLocal()})
	wantStatus(t, "cq without memory", e.CreateCQ(engine.CQSpec{CQN: 1, Doorbell: 64, RingAddr: enginetest.RAMBase, Entries: 4}), abi.StatusBadAddress)
	// After SetMemory (while stopped) creation works, and Start binds the
	// record.
	m, err := guestmem.MapAnonymous(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Unmap()
	mem, err := guestmem.NewTable([]guestmem.Region{{GuestPhys: enginetest.RAMBase, Size: 1 << 20, UserAddr: 1 << 40, Mapping: m}})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.SetMemory(mem); err != nil {
		t.Fatal(err)
	}
	if err := e.CreateCQ(engine.CQSpec{CQN: 1, Doorbell: 64, RingAddr: enginetest.RAMBase, Entries: 4}); err != nil {
		t.Fatal(err)
	}
	layout, _ := abi.NewDoorbellLayout(enginetest.Limits, guestmem.PageSize())
	db, err := guestmem.MapAnonymous(layout.Size())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Unmap()
	off, _ := layout.RecordOffset(64)
	db.View().StoreUint32Release(off, 0xdead) // stale garbage
	wantStatus(t, "short doorbell region", e.Start(mem, guestmem.View{}, layout), abi.StatusBadAddress)
	if err := e.Start(mem, db.View(), layout); err != nil {
		t.Fatal(err)
	}
	defer e.Stop()
	wantStatus(t, "double start", e.Start(mem, db.View(), layout), abi.StatusBadState)
	if got := db.View().LoadUint32Acquire(off); got != 0 {
		t.Fatalf("record of a new CQ not zeroed at Start: %#x", got)
	}
}

func TestCreateQPChecks(t *testing.T) {
	g := enginetest.NewGuest(t, fabric.NewLocal(), "g", enginetest.Options{RAM: 1 << 20})
	e := g.Eng
	cq := g.CreateCQ(16)
	ring := g.Alloc(64<<10, 4096)
	good := engine.QPSpec{QPN: 2, PDN: 1, Type: abi.QPTypeRC, SendCQN: cq.CQN, RecvCQN: cq.CQN, Doorbell: 0,
		SQSize: 4, RQSize: 4, MaxSendSGE: 1, MaxRecvSGE: 1, SQAddr: ring, RQAddr: ring + 4096}
	mod := func(f func(*engine.QPSpec)) engine.QPSpec { s := good; f(&s); return s }
	cases := []struct {
		name string
		s    engine.QPSpec
		st   abi.Status
	}{
		{"qpn 1", mod(func(s *engine.QPSpec) { s.QPN = 1 }), abi.StatusInvalidArgument},
		{"qpn beyond max", mod(func(s *engine.QPSpec) { s.QPN = enginetest.Limits.MaxQP + 2 }), abi.StatusInvalidArgument},
		{"UD", mod(func(s *engine.QPSpec) { s.Type = abi.QPTypeUD }), abi.StatusNotSupported},
		{"type 9", mod(func(s *engine.QPSpec) { s.Type = 9 }), abi.StatusInvalidArgument},
		{"pd 0", mod(func(s *engine.QPSpec) { s.PDN = 0 }), abi.StatusInvalidArgument},
		{"sq size 3", mod(func(s *engine.QPSpec) { s.SQSize = 3 }), abi.StatusInvalidArgument},
		{"rq size 0", mod(func(s *engine.QPSpec) { s.RQSize = 0 }), abi.StatusInvalidArgument},
		{"too many SGEs", mod(func(s *engine.QPSpec) { s.MaxSendSGE = 99 }), abi.StatusInvalidArgument},
		{"too much inline", mod(func(s *engine.QPSpec) { s.MaxInlineData = 4096 }), abi.StatusInvalidArgument},
		{"unknown send cq", mod(func(s *engine.QPSpec) { s.SendCQN = 7 }), abi.StatusNotFound},
		{"unknown recv cq", mod(func(s *engine.QPSpec) { s.RecvCQN = 0 }), abi.StatusNotFound},
		{"doorbell taken by the CQ", mod(func(s *engine.QPSpec) { s.Doorbell = cq.DB }), abi.StatusBusy},
		{"misaligned SQ", mod(func(s *engine.QPSpec) { s.SQAddr = ring + 32 }), abi.StatusInvalidArgument},
		{"RQ outside RAM", mod(func(s *engine.QPSpec) { s.RQAddr = 0x1000 }), abi.StatusBadAddress},
	}
	for _, tc := range cases {
		wantStatus(t, tc.name, e.CreateQP(tc.s), tc.st)
	}
	if err := e.CreateQP(good); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, "duplicate qpn", e.CreateQP(mod(func(s *engine.QPSpec) { s.Doorbell = 1 })), abi.StatusBusy)
	wantStatus(t, "destroy bound cq", e.DestroyCQ(cq.CQN), abi.StatusBusy)
	r, err := e.QueryQP(2)
	if err != nil {
		t.Fatal(err)
	}
	if r.Attr.State != abi.QPStateReset || r.Cap.SQSize != 4 || r.Cap.SendCQN != cq.CQN || r.Cap.PDN != 1 || r.Cap.Type != abi.QPTypeRC {
		t.Fatalf("query %+v", r)
	}
	wantStatus(t, "query unknown", func() error { _, err := e.QueryQP(3); return err }(), abi.StatusNotFound)
	if err := e.DestroyQP(2); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, "double destroy", e.DestroyQP(2), abi.StatusNotFound)
	if err := e.DestroyCQ(cq.CQN); err != nil {
		t.Fatalf("cq still busy after its QP was destroyed: %v", err)
	}
}

func TestModifyQPChecks(t *testing.T) {
	g := enginetest.NewGuest(t, fabric.NewLocal(), "g", enginetest.Options{})
	cq := g.CreateCQ(16)
	q := g.CreateQP(pd, cq, cq, enginetest.QPOpts{})
	e := g.Eng
	init := abi.QPAttrState | abi.QPAttrPKeyIndex | abi.QPAttrPort | abi.QPAttrAccessFlags
	wantStatus(t, "unknown qp", e.ModifyQP(99, init, &abi.QPAttr{State: abi.QPStateInit, Port: 1}), abi.StatusNotFound)
	wantStatus(t, "nil attr", e.ModifyQP(q.QPN, init, nil), abi.StatusInvalidArgument)
	wantStatus(t, "RESET to RTS", e.ModifyQP(q.QPN, abi.QPAttrState, &abi.QPAttr{State: abi.QPStateRTS}), abi.StatusBadState)
	wantStatus(t, "missing attributes", e.ModifyQP(q.QPN, abi.QPAttrState, &abi.QPAttr{State: abi.QPStateInit}), abi.StatusInvalidArgument)
	wantStatus(t, "port 2", e.ModifyQP(q.QPN, init, &abi.QPAttr{State: abi.QPStateInit, Port: 2}), abi.StatusInvalidArgument)
	wantStatus(t, "undefined access", e.ModifyQP(q.QPN, init, &abi.QPAttr{State: abi.QPStateInit, Port: 1, AccessFlags: 1 << 9}), abi.StatusInvalidArgument)
	if err := e.ModifyQP(q.QPN, init, &abi.QPAttr{State: abi.QPStateInit, Port: 1, AccessFlags: abi.AccessRemoteWrite}); err != nil {
		t.Fatal(err)
	}
	rtr := abi.QPAttrState | abi.QPAttrAV | abi.QPAttrPathMTU | abi.QPAttrDestQPN | abi.QPAttrRQPSN | abi.QPAttrMaxDestRdAtomic | abi.QPAttrMinRNRTimer
	base := abi.QPAttr{State: abi.QPStateRTR, PathMTU: abi.MTU1024, DestQPN: 5, AH: abi.AHAttr{Port: 1}}
	bad := []struct {
		name string
		f    func(a *abi.QPAttr)
	}{
		{"mtu 0", func(a *abi.QPAttr) { a.PathMTU = 0 }},
		{"mtu 6", func(a *abi.QPAttr) { a.PathMTU = 6 }},
		{"dest qpn 25 bits", func(a *abi.QPAttr) { a.DestQPN = 1 << 24 }},
		{"rq psn 25 bits", func(a *abi.QPAttr) { a.RQPSN = 1 << 24 }},
		{"max_dest_rd_atomic", func(a *abi.QPAttr) { a.MaxDestRdAtomic = uint8(enginetest.Limits.MaxQPRdAtom + 1) }},
		{"min_rnr_timer 32", func(a *abi.QPAttr) { a.MinRNRTimer = 32 }},
		{"ah port 3", func(a *abi.QPAttr) { a.AH.Port = 3 }},
		{"sgid index", func(a *abi.QPAttr) { a.AH.SGIDIndex = uint8(enginetest.Limits.MaxGID) }},
	}
	for _, b := range bad {
		a := base
		b.f(&a)
		wantStatus(t, b.name, e.ModifyQP(q.QPN, rtr, &a), abi.StatusInvalidArgument)
	}
	if st := q.State(); st != abi.QPStateInit {
		t.Fatalf("a refused modify changed the state to %v", st)
	}
	if err := e.ModifyQP(q.QPN, rtr, &base); err != nil {
		t.Fatal(err)
	}
	rts := abi.QPAttrState | abi.QPAttrSQPSN | abi.QPAttrMaxQPRdAtomic | abi.QPAttrRetryCnt | abi.QPAttrRNRRetry | abi.QPAttrTimeout
	for name, a := range map[string]abi.QPAttr{
		"retry_cnt 8":   {State: abi.QPStateRTS, RetryCnt: 8},
		"rnr_retry 8":   {State: abi.QPStateRTS, RNRRetry: 8},
		"max_rd_atomic": {State: abi.QPStateRTS, MaxRdAtomic: 200},
		"timeout 32":    {State: abi.QPStateRTS, Timeout: 32},
	} {
		wantStatus(t, name, e.ModifyQP(q.QPN, rts, &a), abi.StatusInvalidArgument)
	}
	if err := e.ModifyQP(q.QPN, rts, &abi.QPAttr{State: abi.QPStateRTS, RetryCnt: 7, RNRRetry: 7, Timeout: 14, MaxRdAtomic: 2}); err != nil {
		t.Fatal(err)
	}
	r, err := e.QueryQP(q.QPN)
	if err != nil {
		t.Fatal(err)
	}
	if r.Attr.State != abi.QPStateRTS || r.Attr.DestQPN != 5 || r.Attr.PathMTU != abi.MTU1024 || r.Attr.Timeout != 14 ||
		r.Attr.AccessFlags != abi.AccessRemoteWrite || r.Attr.RetryCnt != 7 {
		t.Fatalf("query %+v", r.Attr)
	}
	// SQD with notification, and back.
	if err := e.ModifyQP(q.QPN, abi.QPAttrState|abi.QPAttrEnSQDAsyncNotif, &abi.QPAttr{State: abi.QPStateSQD}); err != nil {
		t.Fatal(err)
	}
	g.WaitEvent(abi.EventSQDrained, q.QPN)
	if err := e.ModifyQP(q.QPN, abi.QPAttrState, &abi.QPAttr{State: abi.QPStateRTS}); err != nil {
		t.Fatal(err)
	}
	var st abi.Status
	if err := e.ModifyQP(q.QPN, abi.QPAttrState, &abi.QPAttr{State: abi.QPStateInit}); !errors.As(err, &st) || st != abi.StatusBadState {
		t.Fatalf("RTS to INIT: %v", err)
	}
}

func TestResizeCQKeepsUnconsumedCQEs(t *testing.T) {
	p := newPair(t, enginetest.DefaultConn, enginetest.QPOpts{})
	src := p.a.NewBuf(pd, 0, 8)
	dst := p.b.NewBuf(pd, abi.AccessAll, 8)
	for i := range 5 {
		p.qa.PostSend(abi.SendWQE{WRID: uint64(i), Opcode: abi.WRRDMAWrite, Flags: abi.SendSignaled, RemoteAddr: dst.GPA, RKey: dst.Key}, []abi.SGE{src.SGE(0, 8)}, nil)
	}
	for p.ca.Prod() != 5 {
	}
	p.ca.Poll() // consume one: four remain
	wantStatus(t, "too small", p.a.Eng.ResizeCQ(p.ca.CQN, 2, p.a.Alloc(64, 64)), abi.StatusInvalidArgument)
	wantStatus(t, "unknown", p.a.Eng.ResizeCQ(99, 8, p.a.Alloc(256, 256)), abi.StatusNotFound)
	ring := p.a.Alloc(8*abi.CQESize, abi.CQESize)
	if err := p.a.Eng.ResizeCQ(p.ca.CQN, 8, ring); err != nil {
		t.Fatal(err)
	}
	p.ca.Ring, p.ca.Entries = ring, 8
	for i := 1; i < 5; i++ {
		expect(t, p.ca.Wait(), uint64(i), abi.WCSuccess, abi.WCRDMAWrite)
	}
	p.qa.PostSend(abi.SendWQE{WRID: 9, Opcode: abi.WRRDMAWrite, Flags: abi.SendSignaled, RemoteAddr: dst.GPA, RKey: dst.Key}, []abi.SGE{src.SGE(0, 8)}, nil)
	expect(t, p.ca.Wait(), 9, abi.WCSuccess, abi.WCRDMAWrite)
}

func TestResetDropsEverything(t *testing.T) {
	p := newPair(t, enginetest.DefaultConn, enginetest.QPOpts{})
	p.a.Eng.Reset()
	wantStatus(t, "qp after reset", func() error { _, err := p.a.Eng.QueryQP(p.qa.QPN); return err }(), abi.StatusNotFound)
	wantStatus(t, "cq after reset", p.a.Eng.DestroyCQ(p.ca.CQN), abi.StatusNotFound)
	// The peer's requests now find nothing.
	src := p.b.NewBuf(pd, 0, 8)
	p.qb.PostSend(abi.SendWQE{WRID: 1, Opcode: abi.WRRDMAWrite, RemoteAddr: enginetest.RAMBase, RKey: 0x100}, []abi.SGE{src.SGE(0, 8)}, nil)
	if c := p.cb.Wait(); c.Status != abi.WCRetryExcErr {
		t.Fatalf("status %v", c.Status)
	}
	// And the device works again with new objects.
	cq := p.a.CreateCQ(8)
	q := p.a.CreateQP(pd, cq, cq, enginetest.QPOpts{})
	if q.State() != abi.QPStateReset {
		t.Fatal("new QP not in RESET")
	}
}

// TestSetMemory: moving onto a new table that still holds the rings keeps
// traffic flowing (rings and MRs rebound); a table without them puts the
// CQs in error and the QPs in ERR, without touching the old memory.
func TestSetMemory(t *testing.T) {
	p := newPair(t, enginetest.DefaultConn, enginetest.QPOpts{})
	src := p.a.NewBuf(pd, 0, 64)
	dst := p.b.NewBuf(pd, abi.AccessAll, 64)
	fill(src.Bytes(), 4)
	same, err := guestmem.NewTable([]guestmem.Region{{GuestPhys: enginetest.RAMBase, Size: p.b.RAM.Size(), UserAddr: 0x5000_0000_0000, Mapping: p.b.RAM}})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.b.Eng.SetMemory(same); err != nil {
		t.Fatal(err)
	}
	p.qa.PostSend(abi.SendWQE{WRID: 1, Opcode: abi.WRRDMAWrite, Flags: abi.SendSignaled, RemoteAddr: dst.GPA, RKey: dst.Key}, []abi.SGE{src.SGE(0, 64)}, nil)
	expect(t, p.ca.Wait(), 1, abi.WCSuccess, abi.WCRDMAWrite)

	// Guest RAM moves above the rings: everything is lost.
	m, err := guestmem.MapAnonymous(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Unmap()
	other, err := guestmem.NewTable([]guestmem.Region{{GuestPhys: 1 << 40, Size: 1 << 20, UserAddr: 0x6000_0000_0000, Mapping: m}})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.b.Eng.SetMemory(other); err != nil {
		t.Fatal(err)
	}
	p.b.WaitEvent(abi.EventCQErr, p.cb.CQN)
	p.b.WaitEvent(abi.EventQPFatal, p.qb.QPN)
	if p.qb.State() != abi.QPStateErr {
		t.Fatal("QP whose rings left guest memory is not in ERR")
	}
	wantStatus(t, "modify after rings lost", p.b.Eng.ModifyQP(p.qb.QPN, abi.QPAttrState, &abi.QPAttr{State: abi.QPStateReset}), abi.StatusOK)
	wantStatus(t, "up again without rings", p.b.Eng.ModifyQP(p.qb.QPN, abi.QPAttrState|abi.QPAttrPKeyIndex|abi.QPAttrPort|abi.QPAttrAccessFlags,
		&abi.QPAttr{State: abi.QPStateInit, Port: 1}), abi.StatusBadAddress)
	// The peer's WRITE now fails at the MR (invalidated by the rebind)
	// or the QP: either way an error, and the old memory is untouched.
	before := append([]byte{}, dst.Bytes()...)
	p.qa.PostSend(abi.SendWQE{WRID: 2, Opcode: abi.WRRDMAWrite, Flags: abi.SendSignaled, RemoteAddr: dst.GPA, RKey: dst.Key}, []abi.SGE{src.SGE(0, 64)}, nil)
	if c := p.ca.Wait(); c.Status == abi.WCSuccess {
		t.Fatal("WRITE into a device whose memory is gone succeeded")
	}
	if !bytes.Equal(dst.Bytes(), before) {
		t.Fatal("old memory written after SetMemory")
	}
	wantStatus(t, "nil table", p.b.Eng.SetMemory(nil), abi.StatusBadAddress)
}
