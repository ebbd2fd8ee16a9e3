package device

import "github.com/vstellar/vstellar/virtio/abi"

// createAH is CREATE_AH.
func (o *objects) createAH(c *cmd, payload []byte) ([]byte, error) {
	var r abi.CreateAHReq
	if err := decode(payload, &r); err != nil {
		return nil, err
	}
	p, err := o.lookupPD(r.PDN)
	if err != nil {
		return nil, err
	}
	if err := o.gids.checkAV(&r.AH); err != nil {
		return nil, err
	}
	slot, ok := o.ahs.add(&ah{pdn: r.PDN, attr: r.AH})
	if !ok {
		return nil, fail(abi.StatusNoResources, "%d AHs", o.limits.MaxAH)
	}
	p.users++
	return c.encode(&abi.HandleResp{Handle: slot + 1}), nil
}

// destroyAH is DESTROY_AH.
func (o *objects) destroyAH(c *cmd, payload []byte) ([]byte, error) {
	var r abi.HandleReq
	if err := decode(payload, &r); err != nil {
		return nil, err
	}
	a := o.ah(r.Handle)
	if a == nil {
		return nil, fail(abi.StatusNotFound, "AH %d", r.Handle)
	}
	if p := o.pd(a.pdn); p != nil {
		p.users--
	}
	o.ahs.remove(ahSlot(r.Handle))
	return c.out, nil
}
