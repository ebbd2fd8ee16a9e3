package device

import (
	"testing"
	"time"

	"github.com/vstellar/vstellar/internal/sim/vmsim"
	"github.com/vstellar/vstellar/virtio/abi"
)

// readEvent decodes the event the device wrote into buffer addr.
func (g *vmGuest) readEvent(addr uint64, u usedEvent) abi.Event {
	g.t.Helper()
	if u.written != abi.EventSize {
		g.t.Fatalf("event buffer: %d bytes written", u.written)
	}
	e, err := abi.DecodeEvent(g.bytes(addr, abi.EventSize))
	if err != nil {
		g.t.Fatal(err)
	}
	return e
}

// TestEventDelivery: an event the engine reports between kicks reaches a
// buffer the driver posted earlier, with an interrupt, without any kick.
func TestEventDelivery(t *testing.T) {
	d := newDevice(t, Config{})
	g := startVM(t, d, vmOpts{})
	bufs := g.postEventBuffers(2, 64)
	// Posted buffers stay posted while nothing happens.
	if got, _ := g.waitEvents(1, 50*time.Millisecond); len(got) != 0 {
		t.Fatalf("used %v with no event", got)
	}
	d.postEvent(abi.Event{Type: abi.EventQPFatal, Handle: 7, Info: uint32(abi.WCLocQPOpErr)})
	got, err := g.waitEvents(1, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if e := g.readEvent(bufs[got[0].head], got[0]); e != (abi.Event{Type: abi.EventQPFatal, Handle: 7, Info: uint32(abi.WCLocQPOpErr)}) {
		t.Fatalf("event %+v", e)
	}
	d.postEvent(abi.Event{Type: abi.EventCQErr, Handle: 3})
	got, err = g.waitEvents(1, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if e := g.readEvent(bufs[got[0].head], got[0]); e.Type != abi.EventCQErr || e.Handle != 3 {
		t.Fatalf("event %+v", e)
	}
	if s := d.Stats(); s.EventsQueued != 2 || s.EventsDelivered != 2 || s.EventsPending != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// TestEventOverflow: events that find no buffer wait in a bounded queue;
// the oldest are dropped and the next delivered event says how many.
// Buffers too small for an event come back empty and the event waits.
func TestEventOverflow(t *testing.T) {
	d := newDevice(t, Config{})
	g := startVM(t, d, vmOpts{})
	const extra = 6
	for i := range eventQueueLen + extra {
		d.postEvent(abi.Event{Type: abi.EventCQComp, Handle: uint32(i)})
	}
	if s := d.Stats(); s.EventsPending != eventQueueLen || s.EventsDropped != extra {
		t.Fatalf("stats %+v", s)
	}
	// One buffer too small, then one that fits.
	small := g.postEventBuffers(1, abi.EventSize-1)
	got, err := g.waitEvents(1, 5*time.Second)
	if err != nil || got[0].written != 0 {
		t.Fatalf("short buffer: %v %v", got, err)
	}
	_ = small
	bufs := g.postEventBuffers(2, abi.EventSize)
	got, err = g.waitEvents(2, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	first, second := g.readEvent(bufs[0], got[0]), g.readEvent(bufs[1], got[1])
	if got[0].head > got[1].head {
		first, second = second, first
	}
	if first != (abi.Event{Type: abi.EventCQComp, Handle: extra, Dropped: extra}) {
		t.Fatalf("first event after overflow %+v", first)
	}
	if second != (abi.Event{Type: abi.EventCQComp, Handle: extra + 1}) {
		t.Fatalf("second event %+v", second)
	}
	if s := d.Stats(); s.ShortEventBuffers != 1 || s.EventsDelivered != 2 || s.EventsPending != eventQueueLen-2 {
		t.Fatalf("stats %+v", s)
	}
	// A reset drops pending events.
	g.must(abi.OpResetState, nil, nil)
	if n := d.Stats().EventsPending; n != 0 {
		t.Fatalf("%d events pending after RESET_STATE", n)
	}
}

// TestEventsNeedTheFeature: a driver that did not ack EVENT_QUEUE gets no
// events; its buffers stay posted.
func TestEventsNeedTheFeature(t *testing.T) {
	d := newDevice(t, Config{})
	g := startVM(t, d, vmOpts{driverFeatures: vmsim.DefaultDriverFeatures &^ abi.FeatureEventQueue.Mask()})
	g.postEventBuffers(1, 64)
	d.postEvent(abi.Event{Type: abi.EventPortActive, Handle: 1})
	if got, _ := g.waitEvents(1, 100*time.Millisecond); len(got) != 0 {
		t.Fatalf("event delivered without EVENT_QUEUE: %v", got)
	}
}

// TestEngineEventsReachTheGuest: an event the engine raises on its own
// arrives on the event queue: a QP whose send queue was in guest memory
// that went away (a DIMM unplugged) goes to ERR with QP_FATAL.
func TestEngineEventsReachTheGuest(t *testing.T) {
	d := newDevice(t, Config{})
	// 2.5 GiB: the high region can go away under a QP's rings.
	g := startVM(t, d, vmOpts{memSize: 5 << 29})
	bufs := g.postEventBuffers(4, abi.EventSize)
	pdn := g.allocPD()
	cq := g.createCQ(4)
	req := g.qpReq(pdn, cq.CQN, cq.CQN)
	const highGPA = 4 << 30
	req.SQAddr = highGPA
	var q abi.CreateQPResp
	g.must(abi.OpCreateQP, req, &q)
	// A QP in RESET has nothing to fail; INIT does.
	g.must(abi.OpModifyQP, &abi.ModifyQPReq{QPN: q.QPN, AttrMask: abi.QPAttrState | abi.QPAttrPKeyIndex | abi.QPAttrPort | abi.QPAttrAccessFlags,
		Attr: abi.QPAttr{State: abi.QPStateInit, Port: 1}}, nil)
	regs := g.vm.Regions()
	if err := g.vm.Frontend().RemMemReg(g.ctx, regs[1]); err != nil {
		t.Fatal(err)
	}
	got, err := g.waitEvents(1, 5*time.Second)
	if err != nil {
		t.Fatalf("no event after the QP's SQ left guest memory: %v", err)
	}
	if e := g.readEvent(bufs[got[0].head], got[0]); e.Type != abi.EventQPFatal || e.Handle != q.QPN {
		t.Fatalf("event %+v", e)
	}
	var qr abi.QueryQPResp
	g.must(abi.OpQueryQP, &abi.HandleReq{Handle: q.QPN}, &qr)
	if qr.Attr.State != abi.QPStateErr {
		t.Fatalf("QP state %v", qr.Attr.State)
	}
}

// TestDestroyDropsPendingEvents: events waiting for a driver buffer that
// name a CQ or QP are dropped when it is destroyed (its number may name a
// new object later); the others wait on, in order and not counted lost.
func TestDestroyDropsPendingEvents(t *testing.T) {
	d := newDevice(t, Config{})
	g := startVM(t, d, vmOpts{})
	pdn := g.allocPD()
	c1, c2 := g.createCQ(4), g.createCQ(4)
	q := g.createQP(pdn, c2.CQN, c2.CQN)
	for _, e := range []abi.Event{
		{Type: abi.EventCQComp, Handle: c1.CQN},
		{Type: abi.EventQPFatal, Handle: q.QPN, Info: uint32(abi.WCLocQPOpErr)},
		{Type: abi.EventCQComp, Handle: c2.CQN},
		{Type: abi.EventPortActive, Handle: c1.CQN}, // port 1, not CQ 1
		{Type: abi.EventCQErr, Handle: c1.CQN},
		{Type: abi.EventSQDrained, Handle: q.QPN},
	} {
		d.postEvent(e)
	}
	g.must(abi.OpDestroyCQ, &abi.HandleReq{Handle: c1.CQN}, nil)
	g.must(abi.OpDestroyQP, &abi.HandleReq{Handle: q.QPN}, nil)
	if s := d.Stats(); s.EventsPending != 2 || s.EventsDropped != 0 {
		t.Fatalf("stats %+v", s)
	}
	bufs := g.postEventBuffers(4, abi.EventSize)
	got, err := g.waitEvents(2, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []abi.Event{{Type: abi.EventCQComp, Handle: c2.CQN}, {Type: abi.EventPortActive, Handle: c1.CQN}} {
		if e := g.readEvent(bufs[got[i].head], got[i]); e != want {
			t.Fatalf("event %d: %+v, want %+v", i, e, want)
		}
	}
	if more, _ := g.waitEvents(1, 50*time.Millisecond); len(more) != 0 {
		t.Fatalf("more events: %v", more)
	}
}
