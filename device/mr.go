package device

import (
	"github.com/vstellar/vstellar/emtt"
	"github.com/vstellar/vstellar/guestmem"
	"github.com/vstellar/vstellar/virtio/abi"
)

// regMR is REG_MR. The device checks the PD, the length and the page
// list and turns the request into guest physical spans; the emtt table
// checks that every span is guest RAM outside IO memory and hands out the
// key (lkey == rkey). Nothing is pinned: DMA pins on demand.
func (o *objects) regMR(c *cmd, payload []byte) ([]byte, error) {
	var r abi.RegMRReq
	if err := decode(payload, &r); err != nil {
		return nil, err
	}
	p, err := o.lookupPD(r.PDN)
	if err != nil {
		return nil, err
	}
	switch {
	case r.Length == 0 || r.Length > o.limits.MaxMRSize:
		return nil, fail(abi.StatusInvalidArgument, "MR of %#x bytes (1..%#x)", r.Length, o.limits.MaxMRSize)
	case r.IOVA+r.Length < r.IOVA:
		return nil, fail(abi.StatusInvalidArgument, "MR at IOVA %#x+%#x wraps", r.IOVA, r.Length)
	}
	// Before reading a page list that could be 8 MiB long.
	if uint32(o.mtt.Len()) >= o.limits.MaxMR {
		return nil, fail(abi.StatusNoResources, "%d MRs", o.limits.MaxMR)
	}
	spans, err := o.mrSpans(c.mem, &r)
	if err != nil {
		return nil, err
	}
	reg, err := o.mtt.Insert(c.mem, emtt.Spec{PD: r.PDN, Access: r.Access, IOVA: r.IOVA, Length: r.Length, Spans: spans})
	if err != nil {
		return nil, mttError(err)
	}
	p.users++
	o.mrExtraSpans += extraSpans(reg)
	return c.encode(&abi.RegMRResp{LKey: uint32(reg.Key), RKey: uint32(reg.Key)}), nil
}

// Page-list spans cost the daemon heap (a span and a translation segment
// each) that the guest controls: a list alternating between two pages
// makes one span per entry, so MaxMR lists of 2^20 entries would be
// gigabytes. MaxMR already bounds one span per MR; the spans beyond each
// MR's first, over all live MRs, share a per-device budget of one per
// 4 KiB page of guest RAM (a guest registering all its memory page by
// page in any order fits), and never less than minExtraSpans.
const (
	spanBudgetPage = 4096
	minExtraSpans  = 1 << 16
)

// extraSpans is what an MR takes from the span budget.
func extraSpans(reg *emtt.Region) uint64 { return uint64(len(reg.Spans)) - 1 }

// extraSpanBudget is the span budget on guest memory mem (it follows the
// guest's RAM size; MRs already registered keep their spans if RAM
// shrinks, new ones wait until enough are deregistered).
func extraSpanBudget(mem *guestmem.Table) uint64 {
	return max(mem.Size()/spanBudgetPage, minExtraSpans)
}

// mrSpans turns REG_MR's address or page list into guest physical spans
// covering exactly Length bytes, merging pages that are contiguous. The
// page list is read from guest memory once, entry by entry, and every
// entry is checked after it is read, so a guest rewriting the list
// meanwhile only changes which of its own pages it registers. Reading
// stops with NO_RESOURCES as soon as the spans would overrun the span
// budget, so a hostile list costs at most the budget's worth of heap.
func (o *objects) mrSpans(mem *guestmem.Table, r *abi.RegMRReq) ([]emtt.Span, error) {
	if r.NPages == 0 {
		if r.Addr+r.Length < r.Addr {
			return nil, fail(abi.StatusBadAddress, "MR at %#x+%#x wraps", r.Addr, r.Length)
		}
		return []emtt.Span{{GPA: r.Addr, Len: r.Length}}, nil
	}
	ps := uint64(1) << r.PageShift
	if o.limits.PageSizeCap&ps == 0 {
		return nil, fail(abi.StatusInvalidArgument, "page size %#x (supported: %#x)", ps, o.limits.PageSizeCap)
	}
	off := r.IOVA & (ps - 1)
	if need := (off + r.Length + ps - 1) / ps; uint64(r.NPages) != need {
		return nil, fail(abi.StatusInvalidArgument, "%d pages for %#x bytes at page offset %#x (need %d)", r.NPages, r.Length, off, need)
	}
	list, err := mem.Translate(r.Addr, uint64(r.NPages)*8)
	if err != nil {
		return nil, fail(abi.StatusBadAddress, "page list at %#x (%d entries): %v", r.Addr, r.NPages, err)
	}
	var room uint64 // extra spans this MR may have
	if budget := extraSpanBudget(mem); o.mrExtraSpans < budget {
		room = budget - o.mrExtraSpans
	}
	var spans []emtt.Span
	left := r.Length
	for i := range uint64(r.NPages) {
		pa := list.Uint64(i * 8)
		if pa&(ps-1) != 0 {
			return nil, fail(abi.StatusInvalidArgument, "page %d at %#x is not %#x-aligned", i, pa, ps)
		}
		start, n := pa, ps
		if i == 0 {
			start, n = pa+off, ps-off
		}
		n = min(n, left)
		if start+n < start {
			return nil, fail(abi.StatusBadAddress, "page %d at %#x wraps", i, pa)
		}
		switch k := len(spans) - 1; {
		case k >= 0 && spans[k].GPA+spans[k].Len == start:
			spans[k].Len += n
		case uint64(len(spans)) > room:
			return nil, fail(abi.StatusNoResources, "page %d starts extra span %d; live MRs hold %d of the device's %d",
				i, len(spans), o.mrExtraSpans, extraSpanBudget(mem))
		default:
			spans = append(spans, emtt.Span{GPA: start, Len: n})
		}
		left -= n
	}
	return spans, nil
}

// deregMR is DEREG_MR (Handle = lkey).
func (o *objects) deregMR(c *cmd, payload []byte) ([]byte, error) {
	var r abi.HandleReq
	if err := decode(payload, &r); err != nil {
		return nil, err
	}
	reg, err := o.mtt.Remove(emtt.Key(r.Handle))
	if err != nil {
		return nil, mttError(err)
	}
	if p := o.pd(reg.PD); p != nil {
		p.users--
	}
	o.mrExtraSpans -= extraSpans(reg)
	return c.out, nil
}
