package engine

import (
	"sync"

	"github.com/vstellar/vstellar/fabric"
	"github.com/vstellar/vstellar/guestmem"
	"github.com/vstellar/vstellar/pvdma"
)

// The streaming responder (fabric.StreamResponder): a request from another
// host arrives in packets, so it is taken in the responder's steps
// (responder.go) one call at a time. Begin checks it and translates its
// target; Place copies each piece straight into guest memory; Commit makes
// it take effect (a receive CQE, an atomic); ReadAt serves a READ's
// response; Release drops the pins.
//
// Every step runs with the gate held shared by the caller (TryEnter or
// Enter; why: docs/architecture.md, "### engine"). Between steps the gate
// may be let go, so each step checks the generations Begin saw (memory,
// bumped whenever the views of guest memory may die; the QP's, bumped
// when it is reset or destroyed) and refuses when either moved.

// maxFreeIncomings bounds the engine's free list of Incomings.
const maxFreeIncomings = 256

// incoming is one request between begin and release: a streamed one
// (fabric.Incoming), whose methods are called from the fabric's loop
// goroutine only, one at a time, or a local one, served within one call
// of respond. Its own fields need no lock; the links into its QP's open
// list are guarded by the QP's rmu (or the gate held exclusively).
type incoming struct {
	e *Engine
	q *qp
	// wqe: on a QP with an SRQ the WQE is taken at Begin, and this is its
	// copy (see srqTaken).
	wqe []byte
	// views are the target (the MR range of WRITE*, READ and atomics, the
	// receive buffers of SEND*), pinned by hold until Release.
	views []guestmem.View
	hold  pvdma.Hold

	prev, next *incoming // in q.open, while listed

	// The rest holds no pointer, so that clearing it between requests is
	// a few stores (recycle).
	inState
}

// inState is an incoming's own state, cleared whole between requests.
type inState struct {
	// gen and qgen are guest.gen and qp.gen at Begin.
	gen, qgen uint64
	// local: from the in-process fabric, served whole by respond. It is
	// then its QP's own incoming and holds the QP's rmu (see begin).
	local bool

	op        fabric.Op
	len       uint64
	srcQPN    uint32
	imm       uint32
	solicited bool
	compare   uint64
	swapAdd   uint64
	// recvIdx and wrid name the receive WQE a SEND, SEND_IMM or
	// WRITE_IMM consumes at Commit.
	recvIdx uint32
	wrid    uint64
	// srqTaken says the request still owns the WQE it took from the SRQ
	// (given back at Release unless committed or flushed). It is guarded
	// by the QP's rmu once in is listed: a flush of the QP may take the
	// WQE over.
	srqTaken bool

	// cur caches where the last copy ended, so in-order pieces find
	// their view at once.
	cur guestmem.Cursor

	placed    uint64
	value     uint64
	dead      bool // a Place failed: nothing more may be placed or committed
	committed bool
	// responding: a committed READ whose response the requester may
	// still need (until Finish), counted in its QP's responses.
	responding bool
	released   bool
	listed     bool // in q.open
}

var _ fabric.Incoming = (*incoming)(nil)

// freeIncomings is a free list of Incomings, so that steady traffic
// allocates none. It holds at most maxFreeIncomings: more than that many
// open at once (a deep transport window) allocate, and the surplus is
// left to the garbage collector when released.
type freeIncomings struct {
	mu   sync.Mutex
	list []*incoming
}

// get takes an Incoming from the list (or makes one).
func (f *freeIncomings) get() *incoming {
	f.mu.Lock()
	n := len(f.list)
	if n > 0 {
		in := f.list[n-1]
		f.list[n-1] = nil
		f.list = f.list[:n-1]
		f.mu.Unlock()
		return in
	}
	f.mu.Unlock()
	return &incoming{views: make([]guestmem.View, 0, 4)}
}

// put returns in, cleared, to the list.
func (f *freeIncomings) put(in *incoming) {
	f.mu.Lock()
	if len(f.list) < maxFreeIncomings {
		f.list = append(f.list, in)
	}
	f.mu.Unlock()
}

// recycle clears in (keeping its grown slices) and returns it to the
// free list, or, a local request's, to its QP, letting go of the QP's
// rmu: the next local request may use it from then on. in holds no pins
// and is not listed. It stays marked released, so that a stray call on
// it before it is reused (a caller's bug) is refused rather than
// touching anything.
func (in *incoming) recycle() {
	e, q, local := in.e, in.q, in.local
	clear(in.views) // no view of guest memory outlives the request
	in.q, in.views, in.prev, in.next = nil, in.views[:0], nil, nil
	in.inState = inState{released: true}
	if local {
		q.rmu.Unlock()
		return
	}
	e.free.put(in)
}

// beginStreamed implements Begin.
func (e *Engine) beginStreamed(req *fabric.Request) (fabric.Incoming, fabric.Outcome) {
	var in *incoming
	var o fabric.Outcome
	if err := guestmem.Guard(func() error { in, o = e.begin(req, false); return nil }); err != nil {
		e.log.Error("memory fault while beginning a request", "qpn", req.Dst.QPN, "op", req.Op, "err", err)
		return nil, fabric.OutcomeRemoteOp
	}
	if in == nil {
		return nil, o // not a typed nil in the interface
	}
	return in, o
}

// drop ends an incoming that begin refused (or faulted in): a WQE it took
// from the SRQ given back, its pins dropped, and back where it came from.
// It touches no guest memory, so it may run while a fault unwinds.
func (in *incoming) drop() {
	if in.srqTaken {
		in.q.srq.giveBack(in.wqe)
		in.srqTaken = false
	}
	in.hold.Release()
	in.recycle()
}

// live reports whether in's target is still what Begin translated: the
// engine runs on the same memory and the QP was neither reset nor
// destroyed. Caller holds the gate shared.
func (in *incoming) live() bool {
	e := in.e
	return e.running && !e.broken.Load() && e.guest.gen == in.gen && in.q.gen == in.qgen
}

// guard runs fn, which touches guest memory, and reports false if it
// faulted (see respond).
func (in *incoming) guard(what string, fn func()) bool {
	err := guestmem.Guard(func() error { fn(); return nil })
	if err != nil {
		in.e.log.Error("memory fault on a streamed request", "qpn", in.q.qpn, "op", in.op, "step", what, "err", err)
	}
	return err == nil
}

// Place implements fabric.Incoming.
func (in *incoming) Place(off uint64, b []byte) (ok bool) {
	if !in.placeable(off, uint64(len(b))) {
		return false
	}
	var n uint64
	if !in.guard("place", func() { n = uint64(in.cur.CopyIn(in.views, off, b)) }) {
		in.dead = true
		return false
	}
	return in.landed(n, uint64(len(b)))
}

// placeViews places a local request's whole payload from the requester's
// memory, in one copy. The caller guards guest memory.
func (in *incoming) placeViews(src []guestmem.View) bool {
	if !in.placeable(0, in.len) {
		return false
	}
	// begin checked that src holds in.len bytes; the target holds as many
	// (the rkey range) or more (a receive's buffers).
	return in.landed(guestmem.CopyViews(in.views, src), in.len)
}

// placeable checks a piece of n bytes at offset off before it is placed.
// A refused piece ends the request: nothing more may be placed.
func (in *incoming) placeable(off, n uint64) bool {
	switch {
	case in.released || in.dead || in.committed:
		return false
	case in.op.HasResponse(): // READ and the atomics place nothing
		in.dead = true
		return false
	case off > in.len || n > in.len-off || !in.live():
		in.dead = true
		return false
	}
	return true
}

// landed counts n bytes of a piece of want placed.
func (in *incoming) landed(n, want uint64) bool {
	in.placed += n
	in.e.st.bytesReceived.Add(n)
	if n != want {
		in.dead = true
		return false
	}
	return true
}

// Commit implements fabric.Incoming. A WRITE has taken effect piece by
// piece; Commit checks that all of it was placed. A receive-consuming
// request consumes its WQE, which must be the next one (the fabric
// commits in order), and writes the CQE; an atomic is performed here, on
// a QP still serving. A refusal leaves the receive queue and the word
// untouched.
func (in *incoming) Commit() (out fabric.Outcome) {
	if !in.guard("commit", func() { out = in.commit() }) {
		return fabric.OutcomeRemoteOp
	}
	return out
}

// commit is Commit, inside the caller's guestmem.Guard.
func (in *incoming) commit() fabric.Outcome {
	if in.released || in.dead || in.committed || !in.live() {
		return fabric.OutcomeRemoteOp
	}
	out := in.apply()
	if out == fabric.OutcomeOK {
		in.committed = true
		if in.op == fabric.OpRead && !in.local {
			// Its response may be resent until Finish; Stop waits.
			in.responding = true
			in.q.responses.Add(1)
		}
	}
	return out
}

// apply makes a committed request take effect on guest memory.
func (in *incoming) apply() fabric.Outcome {
	e, q := in.e, in.q
	switch in.op {
	case fabric.OpWrite, fabric.OpWriteImm, fabric.OpSend, fabric.OpSendImm:
		if in.placed != in.len {
			e.log.Warn("streamed request committed before all of it was placed", "qpn", q.qpn, "op", in.op, "placed", in.placed, "len", in.len)
			return fabric.OutcomeRemoteOp
		}
		if in.op == fabric.OpWrite {
			return fabric.OutcomeOK
		}
		return in.commitRecv()
	case fabric.OpCmpSwap, fabric.OpFetchAdd:
		if !q.state.serving() {
			return fabric.OutcomeRemoteOp
		}
		if in.op == fabric.OpCmpSwap {
			in.value = in.views[0].CompareAndSwapUint64(0, in.compare, in.swapAdd)
		} else {
			in.value = in.views[0].AddUint64(0, in.swapAdd)
		}
	}
	return fabric.OutcomeOK
}

// Value implements fabric.Incoming.
func (in *incoming) Value() uint64 { return in.value }

// ReadAt implements fabric.Incoming: valid for a committed READ, also
// after Release, until Finish or until the memory or the QP goes away.
func (in *incoming) ReadAt(p []byte, off uint64) (ok bool) {
	e := in.e
	if in.op != fabric.OpRead || !in.committed || off > in.len || uint64(len(p)) > in.len-off || !in.live() {
		return false
	}
	var n uint64
	if !in.guard("read", func() { n = uint64(in.cur.CopyOut(p, in.views, off)) }) {
		return false
	}
	e.st.bytesSent.Add(n)
	return n == uint64(len(p))
}

// Release implements fabric.Incoming. The Incoming goes back to the
// engine's free list, so a later call on it is the caller's bug; a
// committed READ goes there at Finish instead, because its ReadAt stays
// valid until then.
func (in *incoming) Release() { in.release(!in.responding) }

// Finish implements fabric.Incoming.
func (in *incoming) Finish() {
	if !in.responding {
		return
	}
	in.responding = false
	in.q.responses.Add(-1)
	if in.released {
		in.recycle()
	}
}

// release ends in: off its QP's open list, a WQE it still holds given back
// to the SRQ, its pins dropped, and (recycle) onto the free list. A local
// request recycles even a READ, whose answer is copied by then.
func (in *incoming) release(recycle bool) {
	if in.released {
		return
	}
	in.released = true
	if in.listed {
		q := in.q
		q.rmu.Lock()
		q.unlink(in)
		if in.srqTaken {
			// Uncommitted: the WQE goes back for the next request.
			q.srq.giveBack(in.wqe)
			in.srqTaken = false
		}
		q.rmu.Unlock()
	} else if in.srqTaken {
		// A local request, never listed (see begin): the WQE goes back.
		in.q.srq.giveBack(in.wqe)
		in.srqTaken = false
	}
	in.hold.Release()
	if recycle {
		in.recycle()
	}
}

// link adds in to the open Incomings. Caller holds rmu.
func (r *recvState) link(in *incoming) {
	in.prev, in.next, in.listed = nil, r.open, true
	if r.open != nil {
		r.open.prev = in
	}
	r.open = in
}

// unlink removes in from the open Incomings. Caller holds rmu.
func (r *recvState) unlink(in *incoming) {
	if in.prev != nil {
		in.prev.next = in.next
	} else {
		r.open = in.next
	}
	if in.next != nil {
		in.next.prev = in.prev
	}
	in.prev, in.next, in.listed = nil, nil, false
}

// dropIncomings releases the pins of q's open Incomings, which the
// fabric may never release now that their QP is reset or destroyed (the
// generation check refuses every later step of theirs). Caller holds the
// gate exclusively, so no Incoming method runs.
func (q *qp) dropIncomings() {
	for in := q.open; in != nil; {
		next := in.next
		if in.srqTaken {
			q.srq.giveBack(in.wqe)
			in.srqTaken = false
		}
		in.hold.Release()
		in.prev, in.next, in.listed = nil, nil, false
		in = next
	}
	q.open = nil
}
