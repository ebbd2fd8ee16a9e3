package fabric_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/vstellar/vstellar/fabric"
	"github.com/vstellar/vstellar/transport/wire"
	"github.com/vstellar/vstellar/virtio/abi"
)

// recorder is a Responder that answers with a fixed outcome and can hold
// a call in flight.
type recorder struct {
	mu    sync.Mutex
	calls []fabric.Request
	out   fabric.Outcome
	hold  chan struct{} // if set, Respond blocks on it
	in    chan struct{}
}

func (r *recorder) Respond(req *fabric.Request) fabric.Outcome {
	r.mu.Lock()
	r.calls = append(r.calls, *req)
	hold, in := r.hold, r.in
	r.mu.Unlock()
	if hold != nil {
		select {
		case in <- struct{}{}:
		default:
		}
		<-hold
	}
	return r.out
}

type completer struct {
	n   int
	got []fabric.Outcome
}

func (c *completer) Complete(_ *fabric.Request, o fabric.Outcome) { c.n++; c.got = append(c.got, o) }

func gid(b byte) abi.GID { return abi.GID{0: 0xfe, 1: 0x80, 15: b} }

func TestLocalRoutesByGIDAndCompletesOnce(t *testing.T) {
	l := fabric.NewLocal()
	r1, r2 := &recorder{out: fabric.OutcomeOK}, &recorder{out: fabric.OutcomeRNR}
	if _, err := l.Register(gid(1), r1); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Register(gid(2), r2); err != nil {
		t.Fatal(err)
	}
	c := &completer{}
	l.Post(&fabric.Request{Op: fabric.OpWrite, Dst: fabric.Addr{GID: gid(2), QPN: 5}}, c)
	l.Post(&fabric.Request{Op: fabric.OpSend, Dst: fabric.Addr{GID: gid(1), QPN: 6}}, c)
	l.Post(&fabric.Request{Op: fabric.OpRead, Dst: fabric.Addr{GID: gid(3)}}, c)
	if c.n != 3 || c.got[0] != fabric.OutcomeRNR || c.got[1] != fabric.OutcomeOK || c.got[2] != fabric.OutcomeUnreachable {
		t.Fatalf("completions %v", c.got)
	}
	if len(r1.calls) != 1 || r1.calls[0].Dst.QPN != 6 || len(r2.calls) != 1 || r2.calls[0].Op != fabric.OpWrite {
		t.Fatalf("routing: r1 %v r2 %v", r1.calls, r2.calls)
	}
}

func TestLocalRefusesTakenGID(t *testing.T) {
	l := fabric.NewLocal()
	unreg, err := l.Register(gid(1), &recorder{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Register(gid(1), &recorder{}); !errors.Is(err, fabric.ErrGIDInUse) {
		t.Fatalf("second register: %v", err)
	}
	unreg()
	if _, err := l.Register(gid(1), &recorder{}); err != nil {
		t.Fatalf("register after unregister: %v", err)
	}
}

// TestLocalUnregisterWaitsForCallsInFlight: unregister returns only after
// a call in flight has left the responder; meanwhile new requests are
// answered RETRY (not blocked), and afterwards UNREACHABLE.
func TestLocalUnregisterWaitsForCallsInFlight(t *testing.T) {
	l := fabric.NewLocal()
	r := &recorder{out: fabric.OutcomeOK, hold: make(chan struct{}), in: make(chan struct{}, 1)}
	unreg, err := l.Register(gid(1), r)
	if err != nil {
		t.Fatal(err)
	}
	go l.Post(&fabric.Request{Dst: fabric.Addr{GID: gid(1)}}, &completer{})
	<-r.in
	done := make(chan struct{})
	go func() { unreg(); close(done) }()
	select {
	case <-done:
		t.Fatal("unregister returned while a call was in flight")
	case <-time.After(20 * time.Millisecond):
	}
	// The entry is already out of the map or its lock is pending: either
	// way a new request does not block.
	c := &completer{}
	l.Post(&fabric.Request{Dst: fabric.Addr{GID: gid(1)}}, c)
	if c.n != 1 || (c.got[0] != fabric.OutcomeRetry && c.got[0] != fabric.OutcomeUnreachable) {
		t.Fatalf("during unregister: %v", c.got)
	}
	close(r.hold) // releases the held call (later calls pass straight through)
	<-done
	c = &completer{}
	l.Post(&fabric.Request{Dst: fabric.Addr{GID: gid(1)}}, c)
	if c.got[0] != fabric.OutcomeUnreachable {
		t.Fatalf("after unregister: %v", c.got)
	}
}

func TestOutcomeAndOpNames(t *testing.T) {
	if fabric.OutcomeRNR.String() != "RNR" || fabric.Outcome(99).String() != "Outcome(99)" ||
		fabric.OpFetchAdd.String() != "FETCH_ADD" || fabric.Op(0).String() != "Op(0)" {
		t.Fatal("names")
	}
	a := fabric.Addr{GID: gid(1), QPN: 7}
	if a.String() == "" {
		t.Fatal("addr string")
	}
}

// TestOpWireRoundTrip: every Op has a wire op that maps back to it, the
// kinds agree with the wire's, and responses and unknown ops are no
// request.
func TestOpWireRoundTrip(t *testing.T) {
	for o := fabric.OpWrite; o <= fabric.OpFetchAdd; o++ {
		w := o.Wire()
		if back, ok := fabric.OpFromWire(w); !ok || back != o {
			t.Errorf("%v -> %v -> %v, %v", o, w, back, ok)
		}
		if o.IsAtomic() != (o == fabric.OpCmpSwap || o == fabric.OpFetchAdd) ||
			o.ConsumesRecv() != (o == fabric.OpSend || o == fabric.OpSendImm || o == fabric.OpWriteImm) ||
			o.HasResponse() != (o == fabric.OpRead || o.IsAtomic()) {
			t.Errorf("%v: kinds", o)
		}
	}
	for _, w := range []wire.Op{0, wire.OpReadResp, wire.OpAtomicResp, 200} {
		if o, ok := fabric.OpFromWire(w); ok {
			t.Errorf("%v is request %v", w, o)
		}
	}
	if fabric.Op(0).Wire() != 0 || fabric.Op(99).Wire() != 0 || fabric.Op(0).IsAtomic() {
		t.Error("unknown op has a wire op")
	}
}
