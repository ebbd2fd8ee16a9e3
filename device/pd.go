package device

import "github.com/vstellar/vstellar/virtio/abi"

// allocPD is ALLOC_PD.
func (o *objects) allocPD(c *cmd, payload []byte) ([]byte, error) {
	slot, ok := o.pds.add(&pd{})
	if !ok {
		return nil, fail(abi.StatusNoResources, "%d PDs", o.limits.MaxPD)
	}
	return c.encode(&abi.HandleResp{Handle: slot + 1}), nil
}

// deallocPD is DEALLOC_PD: refused while a QP, MR or AH is in the PD.
func (o *objects) deallocPD(c *cmd, payload []byte) ([]byte, error) {
	var r abi.HandleReq
	if err := decode(payload, &r); err != nil {
		return nil, err
	}
	p := o.pd(r.Handle)
	switch {
	case p == nil:
		return nil, fail(abi.StatusNotFound, "PD %d", r.Handle)
	case p.users > 0:
		return nil, fail(abi.StatusBusy, "PD %d has %d QPs, MRs and AHs", r.Handle, p.users)
	}
	o.pds.remove(pdSlot(r.Handle))
	return c.out, nil
}

// lookupPD returns the PD a create command names.
func (o *objects) lookupPD(pdn uint32) (*pd, error) {
	p := o.pd(pdn)
	if p == nil {
		return nil, fail(abi.StatusNotFound, "PD %d", pdn)
	}
	return p, nil
}
