package engine

import (
	"testing"
	"time"

	"github.com/vstellar/vstellar/emtt"
	"github.com/vstellar/vstellar/guestmem"
	"github.com/vstellar/vstellar/virtio/abi"
)

func TestTimers(t *testing.T) {
	cases := []struct {
		t    uint8
		want time.Duration
	}{{0, 100 * time.Millisecond}, {1, time.Millisecond}, {7, time.Millisecond}, {8, 1048576 * time.Nanosecond}, {14, 67108864 * time.Nanosecond}, {20, 4294967296 * time.Nanosecond}}
	for _, c := range cases {
		if got := ackTimeout(c.t); got != c.want {
			t.Errorf("ackTimeout(%d) = %v, want %v", c.t, got, c.want)
		}
	}
	if rnrDelay(0) != 655360*time.Microsecond || rnrDelay(1) != 10*time.Microsecond || rnrDelay(31) != 491520*time.Microsecond {
		t.Error("rnrDelay does not follow RNRTimerMicros")
	}
	// Exact for every finite rnr_retry, then at least rnrSlowFloor.
	for n := uint32(1); n <= 7; n++ {
		if got := rnrWait(1, n); got != 10*time.Microsecond {
			t.Errorf("rnrWait(1, %d) = %v", n, got)
		}
	}
	if got := rnrWait(1, 8); got != rnrSlowFloor {
		t.Errorf("rnrWait(1, 8) = %v", got)
	}
	if got := rnrWait(0, 1000); got != 655360*time.Microsecond {
		t.Errorf("rnrWait(0, 1000) = %v: the floor must not shorten a long timer", got)
	}
}

// TestOpcodeOutsideTheEngine: a send opcode the engine does not carry (an
// ABI newer than the engine) completes with LOC_QP_OP_ERR instead of
// indexing past a table and taking the daemon down; every opcode the ABI
// defines today maps.
func TestOpcodeOutsideTheEngine(t *testing.T) {
	for op := abi.WROpcode(0); op.Valid(); op++ {
		if _, ok := fabricOp(op); !ok {
			t.Errorf("%v has no fabric operation", op)
		}
	}
	e := newEngine(Config{Name: "t"})
	q := &qp{e: e}
	q.attr.Store(&abi.QPAttr{})
	for _, op := range []abi.WROpcode{7, 100, 255} {
		q.wqe = abi.SendWQE{Opcode: op}
		if st := q.buildRequest(); st != abi.WCLocQPOpErr {
			t.Errorf("opcode %d: %v", op, st)
		}
	}
}

// fuzzMTT builds a table with two regions of PD 1 and one of PD 2 over
// real memory, for the fuzzer's SGEs to hit and miss.
func fuzzMTT(t testing.TB) (*emtt.Table, []uint32) {
	m, err := guestmem.MapAnonymous(1 << 16)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Unmap() })
	mem, err := guestmem.NewTable([]guestmem.Region{{GuestPhys: 0x1000, Size: 1 << 16, UserAddr: 1 << 30, Mapping: m}})
	if err != nil {
		t.Fatal(err)
	}
	mtt := emtt.New(16, nil)
	var keys []uint32
	for i, s := range []emtt.Spec{
		{PD: 1, Access: abi.AccessLocalWrite, IOVA: 0x1000, Length: 0x1000, Spans: []emtt.Span{{GPA: 0x1000, Len: 0x1000}}},
		{PD: 1, Access: 0, IOVA: 0x9000_0000, Length: 0x2000, Spans: []emtt.Span{{GPA: 0x3000, Len: 0x1000}, {GPA: 0x8000, Len: 0x1000}}},
		{PD: 2, Access: abi.AccessAll, IOVA: 0x5000, Length: 0x100, Spans: []emtt.Span{{GPA: 0x5000, Len: 0x100}}},
	} {
		r, err := mtt.Insert(mem, s)
		if err != nil {
			t.Fatalf("region %d: %v", i, err)
		}
		keys = append(keys, uint32(r.Key))
	}
	return mtt, keys
}

// FuzzSendWQE drives the send-WQE parsing path: the header decode with a
// QP's limits, then the SGE translation through a real MTT. Whatever the
// bytes, it must not panic, and a WQE it accepts must translate only to
// memory inside regions of the QP's PD, with lengths that add up.
func FuzzSendWQE(f *testing.F) {
	mtt, keys := fuzzMTT(f)
	seed := func(w abi.SendWQE, sges ...abi.SGE) []byte {
		b := make([]byte, abi.SendWQEStride(4, 64))
		w.NumSGE = uint16(len(sges))
		w.Put(b)
		for i, s := range sges {
			s.Put(b[abi.SendWQEHeaderSize+i*abi.SGESize:])
		}
		return b
	}
	f.Add(seed(abi.SendWQE{WRID: 1, Opcode: abi.WRSend, Flags: abi.SendSignaled}, abi.SGE{Addr: 0x1000, Length: 64, LKey: keys[0]}), uint8(0))
	f.Add(seed(abi.SendWQE{Opcode: abi.WRRDMAWrite}, abi.SGE{Addr: 0x9000_0ff0, Length: 0x20, LKey: keys[1]}, abi.SGE{Addr: 0x1100, LKey: 7}), uint8(0))
	f.Add(seed(abi.SendWQE{Opcode: abi.WRRDMARead}, abi.SGE{Addr: 0x9000_0000, Length: 8, LKey: keys[1]}), uint8(0))
	f.Add(seed(abi.SendWQE{Opcode: abi.WRAtomicCmpSwap}, abi.SGE{Addr: 0x1008, Length: 8, LKey: keys[0]}), uint8(0))
	f.Add(seed(abi.SendWQE{Opcode: abi.WRSend}, abi.SGE{Addr: 0x5000, Length: 8, LKey: keys[2]}), uint8(1))
	f.Add(seed(abi.SendWQE{Opcode: abi.WRSend, Flags: abi.SendInline, InlineLen: 64}), uint8(0))
	f.Add(seed(abi.SendWQE{Opcode: 0xff, NumSGE: 0xffff}), uint8(0))
	f.Add(make([]byte, 10), uint8(0))
	f.Fuzz(func(t *testing.T, b []byte, pdSel uint8) {
		pdn := uint32(pdSel%2) + 1
		w, err := abi.DecodeSendWQE(b, 4, 64)
		if err != nil {
			return
		}
		if w.Flags&abi.SendInline != 0 {
			if uint64(w.InlineLen) > 64 || abi.SendWQEHeaderSize+uint64(w.InlineLen) > uint64(len(b)) {
				t.Fatalf("accepted inline of %d bytes in a %d-byte slot", w.InlineLen, len(b))
			}
			return
		}
		var need abi.Access
		if w.Opcode == abi.WRRDMARead || w.Opcode.IsAtomic() {
			need = abi.AccessLocalWrite
		}
		views, total, st := gatherSGEs(mtt, nil, nil, b[abi.SendWQEHeaderSize:], int(w.NumSGE), pdn, need)
		if st != abi.WCSuccess {
			if st != abi.WCLocProtErr {
				t.Fatalf("status %v", st)
			}
			return
		}
		var sum uint64
		for i := range int(w.NumSGE) {
			s := abi.DecodeSGE(b[abi.SendWQEHeaderSize+i*abi.SGESize:])
			sum += uint64(s.Length)
			if s.Length == 0 {
				continue
			}
			r, err := mtt.Lookup(emtt.Key(s.LKey))
			if err != nil || r.PD != pdn || r.Access&need != need || s.Addr < r.IOVA || s.Addr+uint64(s.Length) > r.IOVA+r.Length {
				t.Fatalf("accepted SGE %+v (region %+v, err %v)", s, r, err)
			}
		}
		if sum != total || guestmem.ViewsLen(views) != total {
			t.Fatalf("total %d, SGEs %d, views %d", total, sum, guestmem.ViewsLen(views))
		}
	})
}
