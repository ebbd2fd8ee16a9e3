package twolevel

import (
	"errors"
	"math/rand/v2"
	"testing"
)

// Random page mappings all walk back to their host pages; everything
// else faults; the tables are exactly the ones the mapped pages need.
func TestDomainMapAndWalk(t *testing.T) {
	d := &Domain{tables: make([]pageTable, 1)}
	rng := rand.New(rand.NewPCG(4, 2))
	want := map[uint64]uint64{} // gfn -> hfn
	leaves, mids, tops := map[uint64]bool{}, map[uint64]bool{}, map[uint64]bool{}
	for range 2000 {
		gfn := rng.Uint64N(1 << (AddrBits - PageShift))
		hfn := 1 + rng.Uint64N(1<<30)
		if err := d.Map(gfn<<PageShift, hfn<<PageShift, PageSize, true); err != nil {
			t.Fatal(err)
		}
		want[gfn] = hfn
		leaves[gfn>>levelBits], mids[gfn>>(2*levelBits)], tops[gfn>>(3*levelBits)] = true, true, true
	}
	if d.Pages() != uint64(len(want)) {
		t.Errorf("%d pages mapped, want %d", d.Pages(), len(want))
	}
	if n := 1 + len(tops) + len(mids) + len(leaves); d.Tables() != n {
		t.Errorf("%d tables, want %d", d.Tables(), n)
	}
	for gfn, hfn := range want {
		off := rng.Uint64N(PageSize)
		hpa, err := d.Walk(gfn<<PageShift|off, true)
		if err != nil || hpa != hfn<<PageShift|off {
			t.Fatalf("walk %#x = %#x, %v; want %#x", gfn<<PageShift|off, hpa, err, hfn<<PageShift|off)
		}
		if _, mapped := want[gfn^1]; !mapped {
			if _, err := d.Walk((gfn^1)<<PageShift, false); !errors.Is(err, ErrFault) {
				t.Fatalf("walk of unmapped %#x: %v, want ErrFault", (gfn^1)<<PageShift, err)
			}
		}
	}
	if _, err := d.Walk(1<<AddrBits, false); !errors.Is(err, ErrFault) {
		t.Errorf("walk beyond %d bits: %v", AddrBits, err)
	}
}

// A 1 GiB range costs the root, one table at each middle level and 512
// leaves; read-only pages refuse writes; misaligned and oversized
// mappings are refused.
func TestDomainRanges(t *testing.T) {
	d := &Domain{tables: make([]pageTable, 1)}
	if err := d.Map(1<<30, 5<<30, 1<<30, true); err != nil {
		t.Fatal(err)
	}
	if d.Tables() != 1+1+1+512 || d.Pages() != 1<<18 {
		t.Errorf("1 GiB: %d tables, %d pages", d.Tables(), d.Pages())
	}
	if hpa, err := d.Walk(1<<30+0x12345678, true); err != nil || hpa != 5<<30+0x12345678 {
		t.Errorf("walk = %#x, %v", hpa, err)
	}
	if err := d.Map(1<<30, 9<<30, PageSize, false); err != nil { // remap read-only
		t.Fatal(err)
	}
	if d.Pages() != 1<<18 {
		t.Errorf("remap changed the page count to %d", d.Pages())
	}
	if hpa, err := d.Walk(1<<30+8, false); err != nil || hpa != 9<<30+8 {
		t.Errorf("read of remapped page = %#x, %v", hpa, err)
	}
	if _, err := d.Walk(1<<30+8, true); !errors.Is(err, ErrFault) {
		t.Errorf("write to read-only page: %v", err)
	}
	for _, c := range []struct {
		gpa, hpa, n uint64
		want        error
	}{
		{0x800, 0, PageSize, ErrUnaligned},
		{0, 0x10, PageSize, ErrUnaligned},
		{1<<AddrBits - PageSize, 0, 2 * PageSize, ErrFault},
		{0, 1 << 52, PageSize, ErrFault},
	} {
		if err := d.Map(c.gpa, c.hpa, c.n, true); !errors.Is(err, c.want) {
			t.Errorf("Map(%#x, %#x, %#x) = %v, want %v", c.gpa, c.hpa, c.n, err, c.want)
		}
	}
}
