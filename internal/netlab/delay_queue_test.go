//go:build linux

package netlab

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

const us = time.Microsecond

func TestFrameQueueFIFOWithFloor(t *testing.T) {
	q := newFrameQueue(1 << 20)
	push := func(now, delay time.Duration, id byte) {
		t.Helper()
		if !q.push(now, delay, []byte{id}) {
			t.Fatalf("push %d refused", id)
		}
	}
	push(0, 5000*us, 1)        // due 5 ms
	push(1000*us, 1000*us, 2)  // would be due 2 ms: held behind 1, due 5 ms
	push(10000*us, 1000*us, 3) // due 11 ms
	if due, ok := q.next(); !ok || due != 5000*us {
		t.Fatalf("next = %v %v, want 5ms", due, ok)
	}
	if _, ok := q.pop(4999 * us); ok {
		t.Fatal("popped a frame before it was due")
	}
	var got []byte
	for _, now := range []time.Duration{5000 * us, 5000 * us, 5000 * us, 10999 * us, 11000 * us} {
		if f, ok := q.pop(now); ok {
			got = append(got, f[0])
		}
	}
	if !bytes.Equal(got, []byte{1, 2, 3}) {
		t.Fatalf("popped %v, want [1 2 3] (frame 3 at 11 ms)", got)
	}
	if q.len() != 0 || q.bytes != 0 {
		t.Fatalf("queue not empty: %d frames, %d bytes", q.len(), q.bytes)
	}
}

func TestFrameQueueLimitAndWrap(t *testing.T) {
	q := newFrameQueue(100)
	if !q.push(0, 0, make([]byte, 60)) || q.push(0, 0, make([]byte, 41)) {
		t.Fatal("byte limit not enforced")
	}
	if !q.push(0, 0, make([]byte, 40)) {
		t.Fatal("frame that fits refused")
	}
	q.pop(0)
	q.pop(0)

	// Many frames through a ring that grows while wrapped: FIFO, no loss,
	// and buffers come back for reuse.
	q = newFrameQueue(1 << 20)
	rng := rand.New(rand.NewPCG(1, 2))
	next, want := uint32(0), uint32(0)
	for round := range 200 {
		for range rng.IntN(50) {
			b := q.buffer(8)
			binary.BigEndian.PutUint32(b, next)
			if !q.push(time.Duration(round), 0, b[:4]) {
				t.Fatal("push refused")
			}
			next++
		}
		for range rng.IntN(50) {
			f, ok := q.pop(time.Duration(round))
			if !ok {
				break
			}
			if got := binary.BigEndian.Uint32(f); got != want {
				t.Fatalf("popped %d, want %d", got, want)
			}
			want++
			q.recycle(f)
		}
	}
	for f, ok := q.pop(1 << 40); ok; f, ok = q.pop(1 << 40) {
		if got := binary.BigEndian.Uint32(f); got != want {
			t.Fatalf("popped %d, want %d", got, want)
		}
		want++
	}
	if want != next || q.bytes != 0 {
		t.Fatalf("popped %d of %d frames, %d bytes left", want, next, q.bytes)
	}
	if len(q.free) == 0 || cap(q.buffer(8)) < 8 {
		t.Fatal("buffers not recycled")
	}
}

func TestDepartureTimer(t *testing.T) {
	var d departureTimer
	// Lateness uniform in 20..120 µs: the lead settles near its top, so
	// most wake-ups come early enough to spin to the exact time.
	rng := rand.New(rand.NewPCG(3, 4))
	var lates []time.Duration
	for range 2000 {
		late := 20*us + time.Duration(rng.Int64N(int64(100*us)))
		lates = append(lates, late)
		d.observe(0, late)
	}
	slices.Sort(lates)
	covered, _ := slices.BinarySearch(lates, d.lead)
	frac := float64(covered) / float64(len(lates))
	t.Logf("lead %v covers %.0f%% of wake-ups", d.lead, 100*frac)
	if frac < 0.7 || d.lead > 125*us {
		t.Fatalf("lead %v covers %.2f of the lateness, want >= 0.7 and lead <= 125µs", d.lead, frac)
	}
	// A stall neither goes negative nor pushes the lead past maxLead.
	for range 100 {
		d.observe(0, time.Second)
		d.observe(10, 0)
	}
	if d.lead < 0 || d.lead > maxLead {
		t.Fatalf("lead %v outside 0..%v", d.lead, maxLead)
	}

	// Spinning is paid from a budget earning 1/spinShare of the time.
	d = departureTimer{lead: 100 * us}
	now := 10 * time.Millisecond
	if w := d.wakeAt(now+time.Millisecond, now); w != now+900*us {
		t.Fatalf("wakeAt = %v, want 100µs early", w)
	}
	if d.budget != maxSpinBudget {
		t.Fatalf("budget %v after a long idle time, want the cap %v", d.budget, maxSpinBudget)
	}
	spun := time.Duration(0)
	for d.spinFor(100*us, now) {
		spun += 100 * us
	}
	if spun != maxSpinBudget {
		t.Fatalf("spun %v on a full budget, want %v", spun, maxSpinBudget)
	}
	if w := d.wakeAt(now+time.Millisecond, now); w != now+time.Millisecond {
		t.Fatalf("wakeAt with no budget = %v, want the due time", w)
	}
	now += 400 * us // earns 100 µs
	if !d.spinFor(100*us, now) || d.spinFor(1, now) {
		t.Fatalf("budget after 400 µs: want exactly 100µs of spinning")
	}
}

func TestReadStamp(t *testing.T) {
	const u = time.Duration(1) << stampShift
	frame := func(tag bool, stamp uint16) []byte {
		b := []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
		if tag {
			b = binary.BigEndian.AppendUint16(b, ethP8021AD)
			b = binary.BigEndian.AppendUint16(b, stamp)
		}
		return append(b, 0x08, 0x00, 0xaa, 0xbb)
	}
	plain := frame(false, 0)
	const offset = int64(5_000_000_000) // CLOCK_MONOTONIC = line clock + 5 s
	now := 100 * time.Millisecond
	nowUnits := uint16((int64(now) + offset) >> stampShift)
	for _, tc := range []struct {
		name    string
		stamp   uint16
		entered time.Duration
	}{
		{"just now", nowUnits, now},
		{"one unit", nowUnits - 1, now},
		{"10 units", nowUnits - 10, now - 9*u},
		{"oldest", nowUnits - 32767, now - 32766*u},
		{"from the future", nowUnits + 5, now},
		{"too old", nowUnits - 32768, now},
	} {
		out, entered := readStamp(frame(true, tc.stamp), now, offset)
		if !bytes.Equal(out, plain) || entered != tc.entered {
			t.Errorf("%s: %x entered %v, want %x entered %v", tc.name, out, entered, plain, tc.entered)
		}
	}
	if out, entered := readStamp(frame(false, 0), now, offset); !bytes.Equal(out, plain) || entered != now {
		t.Errorf("untagged frame changed: %x at %v", out, entered)
	}
}

// FuzzReadStamp: any frame, clock and offset: no panic, the entry time is
// never after now nor more than the stamp's range before it, and the frame
// loses exactly its tag or nothing.
func FuzzReadStamp(f *testing.F) {
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 0x88, 0xa8, 0x12, 0x34, 8, 0}, int64(1e9), int64(5e9))
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 0x88, 0xa8, 0x12}, int64(0), int64(0))
	f.Add([]byte{}, int64(-1), int64(-1))
	f.Fuzz(func(t *testing.T, in []byte, now, offset int64) {
		if now < 0 {
			t.Skip("the line's clock starts at 0")
		}
		orig := slices.Clone(in)
		out, entered := readStamp(in, time.Duration(now), offset)
		if entered > time.Duration(now) || time.Duration(now)-entered > 32768<<stampShift {
			t.Fatalf("entered %v with now %v", entered, now)
		}
		switch len(out) {
		case len(orig):
			if !bytes.Equal(out, orig) {
				t.Fatal("untagged frame changed")
			}
		case len(orig) - 4:
			if !bytes.Equal(out[:12], orig[:12]) || !bytes.Equal(out[12:], orig[16:]) {
				t.Fatal("tag not cut out cleanly")
			}
		default:
			t.Fatalf("frame of %d bytes became %d", len(orig), len(out))
		}
	})
}

// TestProgramJumps checks the hand-assembled programs' jumps land on
// instructions inside the program (not on the second slot of a 64-bit
// load) and each path ends in exit. The verifier rejects worse, but a jump
// that is merely off by one would load and misbehave.
func TestProgramJumps(t *testing.T) {
	for name, prog := range map[string][]bpfInsn{
		"loss":   lossProgram(3),
		"delay":  delayProgram(3, 7),
		"return": delayReturnProgram(7),
	} {
		second := map[int]bool{}
		for i, in := range prog {
			if in.op == opLdImm64 {
				second[i+1] = true
			}
		}
		for i, in := range prog {
			if second[i] {
				continue
			}
			if in.op&0x07 == 0x05 && in.op != opCall && in.op != opExit { // BPF_JMP
				to := i + 1 + int(in.off)
				if to <= i || to >= len(prog) || second[to] {
					t.Errorf("%s: insn %d jumps to %d", name, i, to)
				}
			}
		}
		if prog[len(prog)-1].op != opExit {
			t.Errorf("%s: does not end in exit", name)
		}
	}
	// The delay program's early exits all reach the "go on" return.
	p := delayProgram(3, 7)
	for i, in := range p {
		if in.op == opJeqImm {
			if to := i + 1 + int(in.off); p[to].op != opMov64Imm || p[to].imm != tcActUnspec {
				t.Errorf("delay: insn %d jumps to %d, not to the pass-on return", i, to)
			}
		}
	}
}
