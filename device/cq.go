package device

import (
	"fmt"

	"github.com/vstellar/vstellar/engine"
	"github.com/vstellar/vstellar/virtio/abi"
)

// createCQ is CREATE_CQ. The device checks the size and the limit and
// hands out the CQN and doorbell record; the engine checks the ring
// against guest memory.
func (o *objects) createCQ(c *cmd, payload []byte) ([]byte, error) {
	var r abi.CreateCQReq
	if err := decode(payload, &r); err != nil {
		return nil, err
	}
	if err := o.limits.CheckCQEntries(r.Entries); err != nil {
		return nil, err
	}
	if err := o.dbs.need(); err != nil {
		return nil, err
	}
	slot, ok := o.cqs.add(&cq{})
	if !ok {
		return nil, fail(abi.StatusNoResources, "%d CQs", o.limits.MaxCQ)
	}
	cqn := slot + 1
	db := o.cqDoorbell(cqn)
	err := o.eng.CreateCQ(engine.CQSpec{CQN: cqn, Doorbell: db, RingAddr: r.RingAddr, Entries: r.Entries})
	if err != nil {
		o.cqs.remove(slot)
		return nil, fmt.Errorf("CQ %d: %w", cqn, err)
	}
	return c.encode(&abi.CreateCQResp{CQN: cqn, DoorbellIndex: db}), nil
}

// resizeCQ is RESIZE_CQ.
func (o *objects) resizeCQ(c *cmd, payload []byte) ([]byte, error) {
	var r abi.ResizeCQReq
	if err := decode(payload, &r); err != nil {
		return nil, err
	}
	if o.cq(r.CQN) == nil {
		return nil, fail(abi.StatusNotFound, "CQ %d", r.CQN)
	}
	if err := o.limits.CheckCQEntries(r.Entries); err != nil {
		return nil, err
	}
	if err := o.eng.ResizeCQ(r.CQN, r.Entries, r.RingAddr); err != nil {
		return nil, fmt.Errorf("CQ %d: %w", r.CQN, err)
	}
	return c.out, nil
}

// destroyCQ is DESTROY_CQ: refused while a QP uses the CQ.
func (o *objects) destroyCQ(c *cmd, payload []byte) ([]byte, error) {
	var r abi.HandleReq
	if err := decode(payload, &r); err != nil {
		return nil, err
	}
	q := o.cq(r.Handle)
	switch {
	case q == nil:
		return nil, fail(abi.StatusNotFound, "CQ %d", r.Handle)
	case q.users > 0:
		return nil, fail(abi.StatusBusy, "CQ %d is bound to QPs (%d uses)", r.Handle, q.users)
	}
	if err := o.eng.DestroyCQ(r.Handle); err != nil {
		return nil, fmt.Errorf("CQ %d: %w", r.Handle, err)
	}
	// The engine reports nothing more for it; what it reported before
	// and the driver has not received yet goes too.
	o.ev.dropCQEvents(r.Handle)
	o.cqs.remove(cqSlot(r.Handle))
	return c.out, nil
}
