package device

import (
	"fmt"

	"github.com/vstellar/vstellar/engine"
	"github.com/vstellar/vstellar/virtio/abi"
)

// createSRQ is CREATE_SRQ. The device checks the PD, the sizes and the
// limit and hands out the SRQN and doorbell record; the engine checks the
// ring against guest memory.
func (o *objects) createSRQ(c *cmd, payload []byte) ([]byte, error) {
	var r abi.CreateSRQReq
	if err := decode(payload, &r); err != nil {
		return nil, err
	}
	p, err := o.lookupPD(r.PDN)
	if err != nil {
		return nil, err
	}
	if err := o.limits.CheckSRQCaps(r.Size, r.MaxSGE, r.Limit); err != nil {
		return nil, err
	}
	if err := o.dbs.need(); err != nil {
		return nil, err
	}
	slot, ok := o.srqs.add(&srq{pdn: r.PDN})
	if !ok {
		return nil, fail(abi.StatusNoResources, "%d SRQs", o.limits.MaxSRQ)
	}
	srqn := slot + 1
	db := o.srqDoorbell(srqn)
	err = o.eng.CreateSRQ(engine.SRQSpec{
		SRQN: srqn, PDN: r.PDN, Doorbell: db, Size: r.Size, MaxSGE: r.MaxSGE, Limit: r.Limit, RingAddr: r.RingAddr,
	})
	if err != nil {
		o.srqs.remove(slot)
		return nil, fmt.Errorf("SRQ %d: %w", srqn, err)
	}
	p.users++
	return c.encode(&abi.CreateSRQResp{SRQN: srqn, DoorbellIndex: db, Stride: abi.RecvWQEStride(r.MaxSGE)}), nil
}

// lookupSRQ returns the SRQ a command names.
func (o *objects) lookupSRQ(srqn uint32) (*srq, error) {
	s := o.srq(srqn)
	if s == nil {
		return nil, fail(abi.StatusNotFound, "SRQ %d", srqn)
	}
	return s, nil
}

// modifySRQ is MODIFY_SRQ: it arms or disarms the limit. Resizing is not
// offered (no resize capability), so MAX_WR fails the whole command.
func (o *objects) modifySRQ(c *cmd, payload []byte) ([]byte, error) {
	var r abi.ModifySRQReq
	if err := decode(payload, &r); err != nil {
		return nil, err
	}
	if _, err := o.lookupSRQ(r.SRQN); err != nil {
		return nil, err
	}
	if r.AttrMask&abi.SRQAttrMaxWR != 0 {
		return nil, fail(abi.StatusNotSupported, "SRQ %d: resizing", r.SRQN)
	}
	if r.AttrMask&abi.SRQAttrLimit != 0 {
		if err := o.eng.ArmSRQLimit(r.SRQN, r.Limit); err != nil {
			return nil, fmt.Errorf("SRQ %d: %w", r.SRQN, err)
		}
	}
	return c.out, nil
}

// querySRQ is QUERY_SRQ.
func (o *objects) querySRQ(c *cmd, payload []byte) ([]byte, error) {
	var r abi.HandleReq
	if err := decode(payload, &r); err != nil {
		return nil, err
	}
	if _, err := o.lookupSRQ(r.Handle); err != nil {
		return nil, err
	}
	attr, err := o.eng.QuerySRQ(r.Handle)
	if err != nil {
		return nil, fmt.Errorf("SRQ %d: %w", r.Handle, err)
	}
	return c.encode(&attr), nil
}

// destroySRQ is DESTROY_SRQ: refused while a QP takes its receives from
// the SRQ.
func (o *objects) destroySRQ(c *cmd, payload []byte) ([]byte, error) {
	var r abi.HandleReq
	if err := decode(payload, &r); err != nil {
		return nil, err
	}
	s, err := o.lookupSRQ(r.Handle)
	if err != nil {
		return nil, err
	}
	if s.users > 0 {
		return nil, fail(abi.StatusBusy, "SRQ %d is used by %d QPs", r.Handle, s.users)
	}
	if err := o.eng.DestroySRQ(r.Handle); err != nil {
		return nil, fmt.Errorf("SRQ %d: %w", r.Handle, err)
	}
	o.ev.dropSRQEvents(r.Handle)
	o.pd(s.pdn).users--
	o.srqs.remove(srqSlot(r.Handle))
	return c.out, nil
}
