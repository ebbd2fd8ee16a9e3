package engine

import (
	"sync/atomic"

	"github.com/vstellar/vstellar/virtio/abi"
)

// objects are an engine's QP, CQ and SRQ tables, indexed by qpn-2, cqn-1
// and srqn-1. Writers hold Engine.mu; the data path loads without locks,
// so an object is complete before it is published and stays valid for a
// pass or responder that still holds it after it is removed (removal
// takes the gate). Two objects never share a doorbell record: put claims
// it, drop frees it.
type objects struct {
	qps  []atomic.Pointer[qp]
	cqs  []atomic.Pointer[cq]
	srqs []atomic.Pointer[srq]
	// scan is every QP, in QPN order, for the data path's passes: a
	// fresh copy on every change (Engine.mu), never written in place.
	scan atomic.Pointer[[]*qp]
	// records are the doorbell record indices in use (Engine.mu).
	records map[uint32]bool
}

func (o *objects) init(lim abi.Limits) {
	o.qps = make([]atomic.Pointer[qp], lim.MaxQP)
	o.cqs = make([]atomic.Pointer[cq], lim.MaxCQ)
	o.srqs = make([]atomic.Pointer[srq], lim.MaxSRQ)
	o.records = map[uint32]bool{}
	o.scan.Store(&[]*qp{})
}

// qp returns the QP numbered qpn, or nil. qpn may be hostile.
func (o *objects) qp(qpn uint32) *qp {
	i := uint64(qpn) - 2
	if qpn < 2 || i >= uint64(len(o.qps)) {
		return nil
	}
	return o.qps[i].Load()
}

// cq returns the CQ numbered cqn, or nil.
func (o *objects) cq(cqn uint32) *cq {
	i := uint64(cqn) - 1
	if cqn < 1 || i >= uint64(len(o.cqs)) {
		return nil
	}
	return o.cqs[i].Load()
}

// srq returns the SRQ numbered srqn, or nil.
func (o *objects) srq(srqn uint32) *srq {
	i := uint64(srqn) - 1
	if srqn < 1 || i >= uint64(len(o.srqs)) {
		return nil
	}
	return o.srqs[i].Load()
}

// live returns every QP, in QPN order. The slice is never changed.
func (o *objects) live() []*qp { return *o.scan.Load() }

// recordUsed reports whether an object owns doorbell record idx.
func (o *objects) recordUsed(idx uint32) bool { return o.records[idx] }

// putQP publishes q, complete, under its number.
func (o *objects) putQP(q *qp) {
	o.records[q.dbIndex] = true
	o.qps[q.qpn-2].Store(q)
	o.publish()
}

// dropQP removes q. Caller holds the gate exclusively.
func (o *objects) dropQP(q *qp) {
	o.qps[q.qpn-2].Store(nil)
	o.publish()
	delete(o.records, q.dbIndex)
}

func (o *objects) putCQ(c *cq) {
	o.records[c.dbIndex] = true
	o.cqs[c.cqn-1].Store(c)
}

func (o *objects) dropCQ(c *cq) {
	o.cqs[c.cqn-1].Store(nil)
	delete(o.records, c.dbIndex)
}

func (o *objects) putSRQ(s *srq) {
	o.records[s.dbIndex] = true
	o.srqs[s.srqn-1].Store(s)
}

func (o *objects) dropSRQ(s *srq) {
	o.srqs[s.srqn-1].Store(nil)
	delete(o.records, s.dbIndex)
}

// clear removes every object. Caller holds the gate exclusively.
func (o *objects) clear() {
	for i := range o.qps {
		o.qps[i].Store(nil)
	}
	for i := range o.cqs {
		o.cqs[i].Store(nil)
	}
	for i := range o.srqs {
		o.srqs[i].Store(nil)
	}
	o.publish()
	clear(o.records)
}

// publish rebuilds the scan list from the QP table.
func (o *objects) publish() {
	l := make([]*qp, 0, len(o.live())+1)
	for i := range o.qps {
		if q := o.qps[i].Load(); q != nil {
			l = append(l, q)
		}
	}
	o.scan.Store(&l)
}

func (o *objects) forEachCQ(fn func(*cq)) {
	for i := range o.cqs {
		if c := o.cqs[i].Load(); c != nil {
			fn(c)
		}
	}
}

func (o *objects) forEachSRQ(fn func(*srq)) {
	for i := range o.srqs {
		if s := o.srqs[i].Load(); s != nil {
			fn(s)
		}
	}
}
