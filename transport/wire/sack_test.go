package wire

import (
	"math"
	"testing"
)

func TestSeqLess(t *testing.T) {
	const half = 1 << 31
	for _, c := range []struct {
		a, b uint32
		want bool
	}{
		{0, 1, true},
		{1, 0, false},
		{5, 5, false},
		{math.MaxUint32, 0, true}, // wrap: 2^32-1 is just before 0
		{0, math.MaxUint32, false},
		{math.MaxUint32 - 10, 10, true},
		{10, math.MaxUint32 - 10, false},
		{0, half - 1, true}, // the farthest "ahead" still ordered
		{half - 1, 0, false},
		{0, half, false}, // exactly 2^31 apart: unordered both ways
		{half, 0, false},
		{0, half + 1, false}, // beyond half: b is behind a
		{half + 1, 0, true},
		{math.MaxUint32, half - 1, false}, // exactly 2^31 apart across the wrap
		{half - 1, math.MaxUint32, false},
	} {
		if got := SeqLess(c.a, c.b); got != c.want {
			t.Errorf("SeqLess(%#x, %#x) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
	// Antisymmetry over a sweep including the wrap.
	for _, a := range []uint32{0, 1, half - 1, half, half + 1, math.MaxUint32} {
		for _, d := range []uint32{0, 1, 2, half - 1, half, half + 1, math.MaxUint32} {
			b := a + d
			if SeqLess(a, b) && SeqLess(b, a) {
				t.Errorf("SeqLess(%#x, %#x) both ways", a, b)
			}
		}
	}
}

func TestAckHasSetEdges(t *testing.T) {
	for _, cum := range []uint32{0, 1000, math.MaxUint32 - 300, math.MaxUint32 - 255, math.MaxUint32 - 1, math.MaxUint32} {
		a := Ack{Cum: cum}
		// Cum itself is the next expected PSN: never covered, no bit.
		if a.Has(cum) {
			t.Errorf("cum %#x: Has(Cum) with an empty bitmap", cum)
		}
		if a.Set(cum) {
			t.Errorf("cum %#x: Set(Cum) fit", cum)
		}
		if !a.Has(cum-1) || !a.Has(cum-1000) {
			t.Errorf("cum %#x: PSNs before Cum not covered", cum)
		}
		if a.Set(cum - 1) {
			t.Errorf("cum %#x: Set(Cum-1) fit", cum)
		}
		if a.Has(cum+1) || a.Has(cum+256) {
			t.Errorf("cum %#x: empty bitmap reports a PSN", cum)
		}
		// Cum+1 is bit 0; Cum+256 is bit 255, the last; Cum+257 does not fit.
		if !a.Set(cum + 1) {
			t.Errorf("cum %#x: Set(Cum+1) did not fit", cum)
		}
		if a.SACK != [4]uint64{1, 0, 0, 0} {
			t.Errorf("cum %#x: Set(Cum+1) gave %x", cum, a.SACK)
		}
		if !a.Set(cum + 256) {
			t.Errorf("cum %#x: Set(Cum+256) did not fit", cum)
		}
		if a.SACK != [4]uint64{1, 0, 0, 1 << 63} {
			t.Errorf("cum %#x: Set(Cum+256) gave %x", cum, a.SACK)
		}
		if a.Set(cum + 257) {
			t.Errorf("cum %#x: Set(Cum+257) fit", cum)
		}
		if a.Set(cum + 1<<31) {
			t.Errorf("cum %#x: Set(Cum+2^31) fit", cum)
		}
		if a.SACK != [4]uint64{1, 0, 0, 1 << 63} {
			t.Errorf("cum %#x: a Set that did not fit changed the bitmap: %x", cum, a.SACK)
		}
		if !a.Has(cum+1) || !a.Has(cum+256) || a.Has(cum+2) || a.Has(cum+255) || a.Has(cum+257) || a.Has(cum) {
			t.Errorf("cum %#x: Has disagrees with the bits set: %x", cum, a.SACK)
		}
		// Far ahead (more than 2^31) counts as behind, so covered.
		if !a.Has(cum + 1<<31 + 1) {
			t.Errorf("cum %#x: PSN 2^31+1 ahead (serially behind) not covered", cum)
		}
		// Word boundaries: bits 63/64, 127/128, 191/192.
		for _, i := range []uint32{63, 64, 127, 128, 191, 192} {
			b := Ack{Cum: cum}
			b.Set(cum + 1 + i)
			if b.SACK[i/64] != 1<<(i%64) || !b.Has(cum+1+i) || b.Has(cum+i) || b.Has(cum+2+i) {
				t.Errorf("cum %#x bit %d: %x", cum, i, b.SACK)
			}
		}
	}
}

// Has and Set agree with a straightforward model for every offset around
// the window, across the wrap at 2^32.
func TestAckHasSetModel(t *testing.T) {
	for _, cum := range []uint32{0, 7, math.MaxUint32 - 128, math.MaxUint32} {
		a := Ack{Cum: cum}
		set := map[uint32]bool{}
		for i := uint32(0); i < 300; i += 3 {
			psn := cum + i
			fits := i >= 1 && i <= SACKBits
			if got := a.Set(psn); got != fits {
				t.Errorf("cum %#x: Set(cum+%d) = %v, want %v", cum, i, got, fits)
			}
			if fits {
				set[psn] = true
			}
		}
		for i := int64(-300); i < 600; i++ {
			psn := cum + uint32(i)
			want := i < 0 || set[psn]
			if got := a.Has(psn); got != want {
				t.Errorf("cum %#x: Has(cum%+d) = %v, want %v", cum, i, got, want)
			}
		}
	}
}
