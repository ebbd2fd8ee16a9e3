// Package enginetest is a small test-side "guest driver" for the engine:
// guest RAM in a real mapping, a doorbell region in another, an MTT, an
// engine joined to a fabric, and helpers that write WQEs into the rings,
// ring doorbells and read CQEs the way a guest driver does (WQE first,
// then the producer index with a release store; CQEs only after loading
// prod with acquire). Tests of engine and fabric share it.
package enginetest

import (
	"encoding/binary"
	"fmt"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vstellar/vstellar/emtt"
	"github.com/vstellar/vstellar/engine"
	"github.com/vstellar/vstellar/fabric"
	"github.com/vstellar/vstellar/guestmem"
	"github.com/vstellar/vstellar/pvdma"
	"github.com/vstellar/vstellar/virtio/abi"
)

// RAMBase is where guest RAM starts in guest physical space (not 0, so
// that a zero address is never valid by accident).
const RAMBase = 0x10_0000

// Limits are small device limits for tests.
var Limits = abi.Limits{MaxQP: 64, MaxCQ: 64, MaxMR: 256, MaxPD: 16, MaxAH: 16, MaxQPWR: 1024,
	MaxCQE: 4096, MaxSGE: 8, MaxInlineData: 128, MaxQPRdAtom: 4, MaxGID: 4, MaxSRQ: 16}.WithDefaults()

// Options configure a guest.
type Options struct {
	RAM       uint64 // bytes of guest RAM (default 16 MiB)
	Memfd     bool   // back RAM with a memfd (so a test can truncate it)
	PinBudget uint64 // bytes the device may pin (0: no limit)
	Tenant    uint32 // the device's tenant (engine.Config.Tenant)
	// QuiesceTimeout is engine.Config.QuiesceTimeout (0: the default).
	QuiesceTimeout time.Duration
}

// Guest is one simulated guest with its device's engine.
type Guest struct {
	T      testing.TB
	Name   string
	GID    abi.GID
	RAM    *guestmem.Mapping
	Mem    *guestmem.Table
	DB     *guestmem.Mapping
	Layout abi.DoorbellLayout
	MTT    *emtt.Table
	Pins   *pvdma.Cache
	Eng    *engine.Engine
	Fd     int // memfd of RAM, or -1

	mu     sync.Mutex
	events []abi.Event
	evCh   chan struct{}

	dbv, ram guestmem.View // cached: Mapping.View takes a lock

	next     uint64
	nextQPN  uint32
	nextCQN  uint32
	nextSRQN uint32
	unreg    func()
}

// NewGuest creates a guest, starts its engine and registers it with fab
// under a GID derived from name.
func NewGuest(t testing.TB, fab fabric.Fabric, name string, o Options) *Guest {
	t.Helper()
	if o.RAM == 0 {
		o.RAM = 16 << 20
	}
	g := &Guest{T: t, Name: name, Fd: -1, evCh: make(chan struct{}, 1), next: RAMBase + 4096, nextQPN: 2, nextCQN: 1}
	copy(g.GID[:], "fe80::"+name)
	var err error
	if o.Memfd {
		g.Fd, err = unix.MemfdCreate("guest-"+name, unix.MFD_CLOEXEC)
		if err != nil {
			t.Fatalf("memfd: %v", err)
		}
		if err := unix.Ftruncate(g.Fd, int64(o.RAM)); err != nil {
			t.Fatalf("ftruncate: %v", err)
		}
		g.RAM, err = guestmem.MapOwn(g.Fd, 0, o.RAM)
	} else {
		g.RAM, err = guestmem.MapAnonymous(o.RAM)
	}
	if err != nil {
		t.Fatalf("guest RAM: %v", err)
	}
	g.Mem, err = guestmem.NewTable([]guestmem.Region{{GuestPhys: RAMBase, Size: o.RAM, UserAddr: 0x7000_0000_0000, Mapping: g.RAM}})
	if err != nil {
		t.Fatalf("memory table: %v", err)
	}
	g.Layout, err = abi.NewDoorbellLayout(Limits, guestmem.PageSize())
	if err != nil {
		t.Fatalf("doorbell layout: %v", err)
	}
	g.DB, err = guestmem.MapAnonymous(g.Layout.Size())
	if err != nil {
		t.Fatalf("doorbell region: %v", err)
	}
	g.dbv = g.DB.View()
	g.ram = g.RAM.View()
	// Guest memory is pinned on demand through a cache of its own (a
	// no-op pinner: the bookkeeping is what the engine's tests check).
	g.Pins = pvdma.NewPool(0, pvdma.NopPinner{}).NewCache(pvdma.Options{Name: name, Budget: o.PinBudget})
	if err := g.Pins.SetMemory(g.Mem); err != nil {
		t.Fatalf("pin cache: %v", err)
	}
	g.MTT = emtt.New(Limits.MaxMR, g.Pins)
	g.Eng = engine.New(engine.Config{Name: name, Limits: Limits, MTT: g.MTT, Fabric: fab, GID: g.GID, Tenant: o.Tenant, Events: g.onEvent, QuiesceTimeout: o.QuiesceTimeout})
	if err := g.Eng.Start(g.Mem, g.DB.View(), g.Layout); err != nil {
		t.Fatalf("start: %v", err)
	}
	g.unreg, err = fab.Register(g.GID, g.Eng)
	if err != nil {
		t.Fatalf("register: %v", err)
	}
	t.Cleanup(g.Close)
	return g
}

// Close stops the engine and unmaps everything. Idempotent.
func (g *Guest) Close() {
	if g.unreg != nil {
		g.unreg()
		g.unreg = nil
	}
	if g.Eng != nil {
		g.Eng.Stop()
		g.Eng = nil
		g.Pins.Close()
		g.RAM.Unmap()
		g.DB.Unmap()
		if g.Fd >= 0 {
			unix.Close(g.Fd)
		}
	}
}

func (g *Guest) onEvent(ev abi.Event) {
	g.mu.Lock()
	g.events = append(g.events, ev)
	g.mu.Unlock()
	select {
	case g.evCh <- struct{}{}:
	default:
	}
}

// Events returns the events so far.
func (g *Guest) Events() []abi.Event {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]abi.Event(nil), g.events...)
}

// WaitEvent waits for an event of type t on handle and returns it.
func (g *Guest) WaitEvent(t abi.EventType, handle uint32) abi.Event {
	g.T.Helper()
	deadline := time.After(5 * time.Second)
	for {
		for _, ev := range g.Events() {
			if ev.Type == t && ev.Handle == handle {
				return ev
			}
		}
		select {
		case <-g.evCh:
		case <-deadline:
			g.T.Fatalf("%s: no %v event for %d; events %v", g.Name, t, handle, g.Events())
		}
	}
}

// Alloc returns the guest physical address of n fresh bytes aligned to
// align (a power of two).
func (g *Guest) Alloc(n, align uint64) uint64 {
	g.T.Helper()
	a := (g.next + align - 1) &^ (align - 1)
	if a+n > RAMBase+g.RAM.Size() {
		g.T.Fatalf("%s: guest RAM exhausted", g.Name)
	}
	g.next = a + n
	return a
}

// View returns guest memory [gpa, gpa+n).
func (g *Guest) View(gpa, n uint64) guestmem.View {
	v, err := g.ram.Sub(gpa-RAMBase, n)
	if gpa < RAMBase || err != nil {
		g.T.Fatalf("%s: [%#x, +%#x) outside guest RAM", g.Name, gpa, n)
	}
	return v
}

// Bytes returns guest memory [gpa, gpa+n) as a slice.
func (g *Guest) Bytes(gpa, n uint64) []byte { return g.View(gpa, n).Bytes() }

// RegMR registers [gpa, gpa+n) (IOVA = gpa) and returns its key.
func (g *Guest) RegMR(pd uint32, access abi.Access, gpa, n uint64) uint32 {
	g.T.Helper()
	r, err := g.MTT.Insert(g.Mem, emtt.Spec{PD: pd, Access: access, IOVA: gpa, Length: n, Spans: []emtt.Span{{GPA: gpa, Len: n}}})
	if err != nil {
		g.T.Fatalf("%s: reg mr: %v", g.Name, err)
	}
	return uint32(r.Key)
}

// Buf is a registered buffer.
type Buf struct {
	GPA uint64
	Len uint64
	Key uint32
	g   *Guest
}

// NewBuf allocates and registers a buffer of n bytes.
func (g *Guest) NewBuf(pd uint32, access abi.Access, n uint64) Buf {
	g.T.Helper()
	gpa := g.Alloc(n, 64)
	return Buf{GPA: gpa, Len: n, Key: g.RegMR(pd, access, gpa, n), g: g}
}

// Bytes is the buffer's memory.
func (b Buf) Bytes() []byte { return b.g.Bytes(b.GPA, b.Len) }

// SGE is an SGE for [off, off+n) of the buffer.
func (b Buf) SGE(off, n uint64) abi.SGE {
	return abi.SGE{Addr: b.GPA + off, Length: uint32(n), LKey: b.Key}
}

// record returns doorbell record idx.
func (g *Guest) record(idx uint32) guestmem.View {
	off, ok := g.Layout.RecordOffset(idx)
	if !ok {
		g.T.Fatalf("record %d", idx)
	}
	v, _ := g.dbv.Sub(off, uint64(g.Layout.RecordSize))
	return v
}

// EngineFlags is the device page's engine_flags word.
func (g *Guest) EngineFlags() uint32 {
	return g.dbv.LoadUint32Acquire(abi.DevPageOffEngineFlags)
}

// Ring implements the driver's half of the wake-up protocol after a
// producer index store: kick if the engine said it sleeps.
func (g *Guest) Ring() {
	if g.EngineFlags()&abi.EngineIdle != 0 {
		g.Eng.Wake()
	}
}

// CQ is the driver's view of a CQ.
type CQ struct {
	g       *Guest
	rec     guestmem.View
	CQN     uint32
	DB      uint32
	Ring    uint64
	Entries uint32
	cons    uint32
	armSN   uint32
}

// CreateCQ creates a CQ of n entries.
func (g *Guest) CreateCQ(n uint32) *CQ {
	g.T.Helper()
	c := &CQ{g: g, CQN: g.nextCQN, Entries: n}
	g.nextCQN++
	c.DB = Limits.MaxQP + c.CQN - 1
	c.Ring = g.Alloc(uint64(n)*abi.CQESize, abi.CQESize)
	if err := g.Eng.CreateCQ(engine.CQSpec{CQN: c.CQN, Doorbell: c.DB, RingAddr: c.Ring, Entries: n}); err != nil {
		g.T.Fatalf("%s: create cq: %v", g.Name, err)
	}
	c.rec = g.record(c.DB)
	return c
}

// Prod is the CQ's producer index.
func (c *CQ) Prod() uint32 { return c.rec.LoadUint32Acquire(abi.CQDoorbellOffProd) }

// Poll returns the next CQE, if any, and consumes it.
func (c *CQ) Poll() (abi.CQE, bool) {
	rec := c.rec
	if rec.LoadUint32Acquire(abi.CQDoorbellOffProd) == c.cons {
		return abi.CQE{}, false
	}
	off := uint64(c.cons&(c.Entries-1)) * abi.CQESize
	cqe := abi.DecodeCQE(c.g.Bytes(c.Ring+off, abi.CQESize))
	c.cons++
	rec.StoreUint32Release(abi.CQDoorbellOffCons, c.cons)
	return cqe, true
}

// Wait polls until a CQE arrives (or fails the test after 5 s).
func (c *CQ) Wait() abi.CQE {
	c.g.T.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if cqe, ok := c.Poll(); ok {
			return cqe
		}
		if time.Now().After(deadline) {
			c.g.T.Fatalf("%s: cq %d: no completion (events %v)", c.g.Name, c.CQN, c.g.Events())
		}
		time.Sleep(20 * time.Microsecond)
	}
}

// ExpectNone checks that no CQE arrives within d.
func (c *CQ) ExpectNone(d time.Duration) {
	c.g.T.Helper()
	time.Sleep(d)
	if cqe, ok := c.Poll(); ok {
		c.g.T.Fatalf("%s: cq %d: unexpected completion %+v", c.g.Name, c.CQN, cqe)
	}
}

// Arm arms the CQ for one event with flags.
func (c *CQ) Arm(flags uint32) {
	c.armSN++
	c.rec.StoreUint32Release(abi.CQDoorbellOffArm, abi.CQArmWord(c.armSN, flags))
}

// QPOpts shape a QP.
type QPOpts struct {
	SQSize, RQSize, MaxSendSGE, MaxRecvSGE, MaxInline uint32
	SigAll                                            bool
	// SRQ, if set, is where the QP's receives come from (it has no RQ).
	SRQ *SRQ
}

// SRQ is the driver's view of a shared receive queue.
type SRQ struct {
	g            *Guest
	rec          guestmem.View
	SRQN, PD, DB uint32
	Ring         uint64
	Size, MaxSGE uint32
	Stride       uint32
	Prod         uint32
}

// CreateSRQ creates an SRQ of size WQEs of maxSGE SGEs with limit armed
// (0: none).
func (g *Guest) CreateSRQ(pd, size, maxSGE, limit uint32) *SRQ {
	g.T.Helper()
	if g.nextSRQN == 0 {
		g.nextSRQN = 1
	}
	s := &SRQ{g: g, SRQN: g.nextSRQN, PD: pd, Size: size, MaxSGE: maxSGE, Stride: abi.RecvWQEStride(maxSGE)}
	g.nextSRQN++
	s.DB = Limits.MaxQP + Limits.MaxCQ + s.SRQN - 1
	s.Ring = g.Alloc(uint64(size)*uint64(s.Stride), uint64(s.Stride))
	err := g.Eng.CreateSRQ(engine.SRQSpec{SRQN: s.SRQN, PDN: pd, Doorbell: s.DB, Size: size, MaxSGE: maxSGE, Limit: limit, RingAddr: s.Ring})
	if err != nil {
		g.T.Fatalf("%s: create srq: %v", g.Name, err)
	}
	s.rec = g.record(s.DB)
	return s
}

// PostRecv posts a receive WQE with sges to the SRQ. Posting needs no
// kick (spec §6.7).
func (s *SRQ) PostRecv(wrid uint64, sges ...abi.SGE) {
	slot := s.g.Bytes(s.Ring+uint64(s.Prod&(s.Size-1))*uint64(s.Stride), uint64(s.Stride))
	clear(slot)
	abi.RecvWQE{WRID: wrid, NumSGE: uint16(len(sges))}.Put(slot)
	for i, sge := range sges {
		sge.Put(slot[abi.RecvWQEHeaderSize+i*abi.SGESize:])
	}
	s.Prod++
	s.rec.StoreUint32Release(abi.SRQDoorbellOffProd, s.Prod)
}

// RawSlot is the SRQ's next slot, for writing a malformed WQE; Commit
// posts it.
func (s *SRQ) RawSlot() []byte {
	return s.g.Bytes(s.Ring+uint64(s.Prod&(s.Size-1))*uint64(s.Stride), uint64(s.Stride))
}

// Commit posts what RawSlot's caller wrote.
func (s *SRQ) Commit() {
	s.Prod++
	s.rec.StoreUint32Release(abi.SRQDoorbellOffProd, s.Prod)
}

// SetProd stores a raw producer index (to simulate a buggy driver).
func (s *SRQ) SetProd(p uint32) { s.rec.StoreUint32Release(abi.SRQDoorbellOffProd, p) }

// Cons is the device's consumer index: WQEs taken.
func (s *SRQ) Cons() uint32 { return s.rec.LoadUint32Acquire(abi.SRQDoorbellOffCons) }

// QP is the driver's view of a QP.
type QP struct {
	g                  *Guest
	rec                guestmem.View
	QPN, PD, DB        uint32
	SQ, RQ             uint64
	O                  QPOpts
	SQStride, RQStride uint32
	SCQ, RCQ           *CQ
	SQProd, RQProd     uint32
}

// CreateQP creates a QP in RESET (defaults: 64-entry queues, 4 SGEs, 64
// inline bytes).
func (g *Guest) CreateQP(pd uint32, scq, rcq *CQ, o QPOpts) *QP {
	g.T.Helper()
	if o.SQSize == 0 {
		o.SQSize = 64
	}
	if o.RQSize == 0 {
		o.RQSize = 64
	}
	if o.MaxSendSGE == 0 {
		o.MaxSendSGE = 4
	}
	if o.MaxRecvSGE == 0 {
		o.MaxRecvSGE = 4
	}
	if o.MaxInline == 0 {
		o.MaxInline = 64
	}
	var srqn uint32
	if o.SRQ != nil {
		o.RQSize, o.MaxRecvSGE, srqn = 0, 0, o.SRQ.SRQN
	}
	q := &QP{g: g, QPN: g.nextQPN, PD: pd, O: o, SCQ: scq, RCQ: rcq}
	g.nextQPN++
	q.DB = q.QPN - 2
	q.SQStride = abi.SendWQEStride(o.MaxSendSGE, o.MaxInline)
	q.SQ = g.Alloc(uint64(o.SQSize)*uint64(q.SQStride), uint64(q.SQStride))
	if o.SRQ == nil {
		q.RQStride = abi.RecvWQEStride(o.MaxRecvSGE)
		q.RQ = g.Alloc(uint64(o.RQSize)*uint64(q.RQStride), uint64(q.RQStride))
	}
	err := g.Eng.CreateQP(engine.QPSpec{QPN: q.QPN, PDN: pd, Type: abi.QPTypeRC, SigAll: o.SigAll,
		SendCQN: scq.CQN, RecvCQN: rcq.CQN, SRQN: srqn, Doorbell: q.DB, SQSize: o.SQSize, RQSize: o.RQSize,
		MaxSendSGE: o.MaxSendSGE, MaxRecvSGE: o.MaxRecvSGE, MaxInlineData: o.MaxInline, SQAddr: q.SQ, RQAddr: q.RQ})
	if err != nil {
		g.T.Fatalf("%s: create qp: %v", g.Name, err)
	}
	q.rec = g.record(q.DB)
	return q
}

// ConnOpts are the connection attributes Connect uses.
type ConnOpts struct {
	Access      abi.Access
	RetryCnt    uint8
	RNRRetry    uint8
	MinRNRTimer uint8
	Timeout     uint8
}

// DefaultConn grants every remote access and retries quickly.
var DefaultConn = ConnOpts{Access: abi.AccessAll, RetryCnt: 3, RNRRetry: 3, MinRNRTimer: 1, Timeout: 1}

// ToRTS drives q through INIT and RTR to RTS, connected to peer (GID,
// QPN).
func (q *QP) ToRTS(peer abi.GID, peerQPN uint32, o ConnOpts) {
	q.g.T.Helper()
	e := q.g.Eng
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
		if err := e.ModifyQP(q.QPN, s.mask, &s.attr); err != nil {
			q.g.T.Fatalf("%s: qp %d to %v: %v", q.g.Name, q.QPN, s.attr.State, err)
		}
	}
}

// Connect connects a and b to each other with o.
func Connect(a, b *QP, o ConnOpts) {
	a.ToRTS(b.g.GID, b.QPN, o)
	b.ToRTS(a.g.GID, a.QPN, o)
}

// Guest returns the QP's guest.
func (q *QP) Guest() *Guest { return q.g }

// WriteSend writes a send WQE into the next SQ slot without ringing.
func (q *QP) WriteSend(w abi.SendWQE, sges []abi.SGE, inline []byte) {
	slot := q.g.Bytes(q.SQ+uint64(q.SQProd&(q.O.SQSize-1))*uint64(q.SQStride), uint64(q.SQStride))
	clear(slot)
	if inline != nil {
		w.Flags |= abi.SendInline
		w.InlineLen = uint32(len(inline))
		copy(slot[abi.SendWQEHeaderSize:], inline)
	} else {
		w.NumSGE = uint16(len(sges))
		for i, s := range sges {
			s.Put(slot[abi.SendWQEHeaderSize+i*abi.SGESize:])
		}
	}
	w.Put(slot)
	q.SQProd++
}

// RawSlot returns the next SQ slot for hand-written WQEs; call Commit
// after filling it.
func (q *QP) RawSlot() []byte {
	return q.g.Bytes(q.SQ+uint64(q.SQProd&(q.O.SQSize-1))*uint64(q.SQStride), uint64(q.SQStride))
}

// Commit counts a hand-written WQE.
func (q *QP) Commit() { q.SQProd++ }

// RingSQ publishes SQProd and kicks the engine if it sleeps.
func (q *QP) RingSQ() {
	q.rec.StoreUint32Release(abi.QPDoorbellOffSQProd, q.SQProd)
	q.g.Ring()
}

// PostSend writes one send WQE and rings the doorbell.
func (q *QP) PostSend(w abi.SendWQE, sges []abi.SGE, inline []byte) {
	q.WriteSend(w, sges, inline)
	q.RingSQ()
}

// PostRecv posts a receive WQE with sges.
func (q *QP) PostRecv(wrid uint64, sges ...abi.SGE) {
	slot := q.g.Bytes(q.RQ+uint64(q.RQProd&(q.O.RQSize-1))*uint64(q.RQStride), uint64(q.RQStride))
	clear(slot)
	abi.RecvWQE{WRID: wrid, NumSGE: uint16(len(sges))}.Put(slot)
	for i, s := range sges {
		s.Put(slot[abi.RecvWQEHeaderSize+i*abi.SGESize:])
	}
	q.RQProd++
	q.rec.StoreUint32Release(abi.QPDoorbellOffRQProd, q.RQProd)
	q.g.Ring()
}

// SetProd stores raw producer indices (to simulate a buggy driver).
func (q *QP) SetProd(sq, rq uint32) {
	rec := q.rec
	rec.StoreUint32Release(abi.QPDoorbellOffSQProd, sq)
	rec.StoreUint32Release(abi.QPDoorbellOffRQProd, rq)
	q.g.Ring()
}

// SQCons and RQCons are the device's consumer indices.
func (q *QP) SQCons() uint32 { return q.rec.LoadUint32Acquire(abi.QPDoorbellOffSQCons) }
func (q *QP) RQCons() uint32 { return q.rec.LoadUint32Acquire(abi.QPDoorbellOffRQCons) }

// State queries the QP's state.
func (q *QP) State() abi.QPState {
	r, err := q.g.Eng.QueryQP(q.QPN)
	if err != nil {
		q.g.T.Fatalf("query qp %d: %v", q.QPN, err)
	}
	return r.Attr.State
}

// WaitState waits until the QP reaches st.
func (q *QP) WaitState(st abi.QPState) {
	q.g.T.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for q.State() != st {
		if time.Now().After(deadline) {
			q.g.T.Fatalf("qp %d: state %v, want %v", q.QPN, q.State(), st)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// U64 reads a little-endian word of guest memory.
func (g *Guest) U64(gpa uint64) uint64 { return binary.LittleEndian.Uint64(g.Bytes(gpa, 8)) }

// String names the guest.
func (g *Guest) String() string { return fmt.Sprintf("guest %s", g.Name) }
