package abi

import (
	"errors"
	"testing"
)

func TestLimits(t *testing.T) {
	if err := DefaultLimits.Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	if err := CeilingLimits.Validate(); err != nil {
		t.Fatalf("ceilings: %v", err)
	}
	if (Limits{}).WithDefaults() != DefaultLimits {
		t.Fatal("zero limits do not become the defaults")
	}
	l := Limits{MaxQP: 10000}.WithDefaults()
	if l.MaxQP != 10000 || l.MaxCQ != DefaultLimits.MaxCQ {
		t.Fatalf("WithDefaults %+v", l)
	}
	if err := (Limits{}).Validate(); !errors.Is(err, ErrBadValue) {
		t.Fatalf("zero limits validate: %v", err)
	}
	over := DefaultLimits
	over.MaxQP = CeilingLimits.MaxQP + 1
	if err := over.Validate(); err == nil {
		t.Fatal("limit above ceiling validated")
	}
	no4k := DefaultLimits
	no4k.PageSizeCap = 1 << 21
	if err := no4k.Validate(); err == nil {
		t.Fatal("page_size_cap without 4 KiB validated")
	}
}

func TestDoorbellLayout(t *testing.T) {
	d, err := NewDoorbellLayout(DefaultLimits, 4096)
	if err != nil {
		t.Fatal(err)
	}
	// 4096 + 9216 records (QPs, CQs, SRQs) * 64 bytes = 4096 + 589824 =
	// 145 pages, rounded up to a power of two for QEMU's shared-memory BAR.
	want := DoorbellLayout{ShmID: 0, RecordSize: 64, PageSize: 4096, Pages: 256, RecordsOffset: 4096, Records: 9216}
	if d != want || d.Size() != 256*4096 {
		t.Fatalf("layout %+v", d)
	}
	if off, ok := d.RecordOffset(0); !ok || off != 4096 {
		t.Errorf("record 0 at %d %v", off, ok)
	}
	if off, ok := d.RecordOffset(9215); !ok || off+64 > d.Size() {
		t.Errorf("last record at %d %v", off, ok)
	}
	for _, i := range []uint32{9216, 1 << 31, ^uint32(0)} {
		if _, ok := d.RecordOffset(i); ok {
			t.Errorf("record %d accepted", i)
		}
	}
	big, err := NewDoorbellLayout(CeilingLimits, 65536)
	if err != nil {
		t.Fatal(err)
	}
	if big.PageSize != 65536 || big.Pages&(big.Pages-1) != 0 || big.Size() < 65536+(1<<19)*64 {
		t.Errorf("64 KiB pages: %+v", big)
	}
	if _, err := NewDoorbellLayout(DefaultLimits, 12288); err == nil {
		t.Error("non-power-of-two page size accepted")
	}
	if _, err := NewDoorbellLayout(Limits{}, 4096); err == nil {
		t.Error("zero limits accepted")
	}
}

func TestQueueSizeChecks(t *testing.T) {
	l := DefaultLimits
	for _, n := range []uint32{1, 2, 1024, l.MaxCQE} {
		if err := l.CheckCQEntries(n); err != nil {
			t.Errorf("CheckCQEntries(%d): %v", n, err)
		}
	}
	for _, n := range []uint32{0, 3, 1000, l.MaxCQE * 2} {
		if err := l.CheckCQEntries(n); !errors.Is(err, ErrBadValue) || StatusFor(err) != StatusInvalidArgument {
			t.Errorf("CheckCQEntries(%d) = %v", n, err)
		}
	}
	if err := l.CheckQPCaps(16, 1, l.MaxSGE, 0, l.MaxInlineData, false); err != nil {
		t.Errorf("valid caps: %v", err)
	}
	for _, c := range [][5]uint32{
		{0, 16, 1, 1, 0}, {16, 12, 1, 1, 0}, {l.MaxQPWR * 2, 16, 1, 1, 0},
		{16, 16, l.MaxSGE + 1, 1, 0}, {16, 16, 1, l.MaxSGE + 1, 0}, {16, 16, 1, 1, l.MaxInlineData + 1},
	} {
		if err := l.CheckQPCaps(c[0], c[1], c[2], c[3], c[4], false); !errors.Is(err, ErrBadValue) {
			t.Errorf("CheckQPCaps%v = %v", c, err)
		}
	}
	// A QP on an SRQ has no RQ of its own.
	if err := l.CheckQPCaps(16, 0, 1, 0, 0, true); err != nil {
		t.Errorf("QP on an SRQ: %v", err)
	}
	for _, c := range [][2]uint32{{16, 0}, {0, 1}, {1, 1}} {
		if err := l.CheckQPCaps(16, c[0], 1, c[1], 0, true); !errors.Is(err, ErrBadValue) {
			t.Errorf("QP on an SRQ with rq_size %d, max_recv_sge %d: %v", c[0], c[1], err)
		}
	}
}

func TestCheckSRQCaps(t *testing.T) {
	l := DefaultLimits
	for _, c := range [][3]uint32{{1, 0, 0}, {2, 1, 1}, {l.MaxSRQWR, l.MaxSRQSGE, l.MaxSRQWR - 1}} {
		if err := l.CheckSRQCaps(c[0], c[1], c[2]); err != nil {
			t.Errorf("CheckSRQCaps%v: %v", c, err)
		}
	}
	for _, c := range [][3]uint32{{0, 1, 0}, {3, 1, 0}, {l.MaxSRQWR * 2, 1, 0}, {16, l.MaxSRQSGE + 1, 0}, {16, 1, 16}, {16, 1, 1 << 31}} {
		if err := l.CheckSRQCaps(c[0], c[1], c[2]); !errors.Is(err, ErrBadValue) || StatusFor(err) != StatusInvalidArgument {
			t.Errorf("CheckSRQCaps%v = %v", c, err)
		}
	}
}
