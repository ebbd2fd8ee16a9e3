package transport

import "testing"

// fixedGap is a Pacer asking gap ns per packet, whatever its size.
type fixedGap int64

func (g fixedGap) PacingGap(int64, int) int64 { return int64(g) }

func TestPacingNoPacerNeverHolds(t *testing.T) {
	var p pacing
	for now := int64(0); now < 10; now++ {
		p.sent(now, 100, 9000)
		if p.hold(now) || p.at != 0 || p.next != 0 {
			t.Fatalf("no pacer: hold at %d (at %d next %d)", now, p.at, p.next)
		}
	}
}

func TestPacingHoldsUntilSlot(t *testing.T) {
	p := pacing{pacer: fixedGap(1000)}
	if p.hold(0) {
		t.Fatal("held the first packet")
	}
	p.sent(0, 0, 100)
	if p.next != 1000 {
		t.Fatalf("next %d, want 1000", p.next)
	}
	if !p.hold(999) || p.at != 1000 {
		t.Fatalf("not held before the slot (at %d)", p.at)
	}
	p.at = 0
	if p.hold(1000) || p.at != 0 {
		t.Fatalf("held at the slot (at %d)", p.at)
	}
	// Late by 5 gaps: only half a gap of credit is kept.
	p.sent(6000, 0, 100)
	if p.next != 6500 {
		t.Fatalf("after a late send next %d, want 6500", p.next)
	}
	// Back to back on time: the slots advance one gap each.
	p.sent(6500, 0, 100)
	if p.next != 7500 {
		t.Fatalf("next %d, want 7500", p.next)
	}
	// A pacer that stops asking for a gap frees the sender at once.
	p.pacer = fixedGap(0)
	p.sent(7500, 0, 100)
	if p.next != 0 || p.hold(7500) {
		t.Fatalf("gap 0: next %d", p.next)
	}
}
