package device

import (
	"fmt"

	"github.com/vstellar/vstellar/engine"
	"github.com/vstellar/vstellar/virtio/abi"
)

// createQP is CREATE_QP. The device checks the PD, the CQs, the sizes and
// the limit and hands out the QPN and doorbell record; the engine checks
// the rings against guest memory.
func (o *objects) createQP(c *cmd, payload []byte) ([]byte, error) {
	var r abi.CreateQPReq
	if err := decode(payload, &r); err != nil {
		return nil, err
	}
	if r.Type != abi.QPTypeRC {
		return nil, fail(abi.StatusNotSupported, "%v QPs", r.Type)
	}
	p, err := o.lookupPD(r.PDN)
	if err != nil {
		return nil, err
	}
	scq, rcq := o.cq(r.SendCQN), o.cq(r.RecvCQN)
	switch {
	case scq == nil:
		return nil, fail(abi.StatusNotFound, "send CQ %d", r.SendCQN)
	case rcq == nil:
		return nil, fail(abi.StatusNotFound, "receive CQ %d", r.RecvCQN)
	}
	var s *srq
	if r.SRQN != 0 {
		if s, err = o.lookupSRQ(r.SRQN); err != nil {
			return nil, err
		}
		if s.pdn != r.PDN {
			return nil, fail(abi.StatusPermission, "SRQ %d is in PD %d, the QP in PD %d", r.SRQN, s.pdn, r.PDN)
		}
		if r.RQAddr != 0 {
			return nil, fail(abi.StatusInvalidArgument, "QP on SRQ %d with an RQ address", r.SRQN)
		}
	}
	// Checked before a QPN is handed out (the engine checks again).
	if err := o.limits.CheckQPCaps(r.SQSize, r.RQSize, r.MaxSendSGE, r.MaxRecvSGE, r.MaxInlineData, r.SRQN != 0); err != nil {
		return nil, err
	}
	if err := o.dbs.need(); err != nil {
		return nil, err
	}
	slot, ok := o.qps.add(&qp{pdn: r.PDN, sendCQN: r.SendCQN, recvCQN: r.RecvCQN, srqn: r.SRQN})
	if !ok {
		return nil, fail(abi.StatusNoResources, "%d QPs", o.limits.MaxQP)
	}
	qpn := slot + 2
	db := qpDoorbell(qpn)
	err = o.eng.CreateQP(engine.QPSpec{
		QPN: qpn, PDN: r.PDN, Type: r.Type, SigAll: r.SigAll != 0,
		SendCQN: r.SendCQN, RecvCQN: r.RecvCQN, SRQN: r.SRQN, Doorbell: db,
		SQSize: r.SQSize, RQSize: r.RQSize,
		MaxSendSGE: r.MaxSendSGE, MaxRecvSGE: r.MaxRecvSGE, MaxInlineData: r.MaxInlineData,
		SQAddr: r.SQAddr, RQAddr: r.RQAddr,
	})
	if err != nil {
		o.qps.remove(slot)
		return nil, fmt.Errorf("QP %d: %w", qpn, err)
	}
	p.users++
	scq.users++
	rcq.users++
	resp := abi.CreateQPResp{QPN: qpn, DoorbellIndex: db, SQStride: abi.SendWQEStride(r.MaxSendSGE, r.MaxInlineData)}
	if s != nil {
		s.users++
	} else {
		resp.RQStride = abi.RecvWQEStride(r.MaxRecvSGE)
	}
	return c.encode(&resp), nil
}

// lookupQP returns the QP a command names.
func (o *objects) lookupQP(qpn uint32) (*qp, error) {
	q := o.qp(qpn)
	if q == nil {
		return nil, fail(abi.StatusNotFound, "QP %d", qpn)
	}
	return q, nil
}

// modifyQP is MODIFY_QP. The device checks what it owns (the port, the
// P_Key table, the GID table an address vector points into); the engine
// checks the transition (abi.CheckModify) and the other values.
func (o *objects) modifyQP(c *cmd, payload []byte) ([]byte, error) {
	var r abi.ModifyQPReq
	if err := decode(payload, &r); err != nil {
		return nil, err
	}
	if _, err := o.lookupQP(r.QPN); err != nil {
		return nil, err
	}
	a := &r.Attr
	if r.AttrMask&abi.QPAttrPort != 0 && a.Port != portNum {
		return nil, fail(abi.StatusInvalidArgument, "QP %d: port %d", r.QPN, a.Port)
	}
	if r.AttrMask&abi.QPAttrPKeyIndex != 0 && a.PKeyIndex != 0 {
		return nil, fail(abi.StatusInvalidArgument, "QP %d: P_Key index %d (table of 1)", r.QPN, a.PKeyIndex)
	}
	if r.AttrMask&abi.QPAttrAV != 0 {
		if err := o.gids.checkAV(&a.AH); err != nil {
			return nil, fmt.Errorf("QP %d: %w", r.QPN, err)
		}
	}
	if err := o.eng.ModifyQP(r.QPN, r.AttrMask, a); err != nil {
		return nil, fmt.Errorf("QP %d: %w", r.QPN, err)
	}
	return c.out, nil
}

// queryQP is QUERY_QP.
func (o *objects) queryQP(c *cmd, payload []byte) ([]byte, error) {
	var r abi.HandleReq
	if err := decode(payload, &r); err != nil {
		return nil, err
	}
	if _, err := o.lookupQP(r.Handle); err != nil {
		return nil, err
	}
	resp, err := o.eng.QueryQP(r.Handle)
	if err != nil {
		return nil, fmt.Errorf("QP %d: %w", r.Handle, err)
	}
	return c.encode(&resp), nil
}

// destroyQP is DESTROY_QP.
func (o *objects) destroyQP(c *cmd, payload []byte) ([]byte, error) {
	var r abi.HandleReq
	if err := decode(payload, &r); err != nil {
		return nil, err
	}
	q, err := o.lookupQP(r.Handle)
	if err != nil {
		return nil, err
	}
	if err := o.eng.DestroyQP(r.Handle); err != nil {
		return nil, fmt.Errorf("QP %d: %w", r.Handle, err)
	}
	// As for a CQ: its pending events name nothing any more.
	o.ev.dropQPEvents(r.Handle)
	o.pd(q.pdn).users--
	o.cq(q.sendCQN).users--
	o.cq(q.recvCQN).users--
	if q.srqn != 0 {
		o.srq(q.srqn).users--
	}
	o.qps.remove(qpSlot(r.Handle))
	return c.out, nil
}
