package device

import "github.com/vstellar/vstellar/virtio/abi"

// checkAV checks an address vector (CREATE_AH, MODIFY_QP's AV) against
// what the device owns: the port (0 is taken as "the" port, as drivers
// that leave it unset mean) and a live source GID index. The destination
// is anyone's: an unreachable one fails at send time, as on a real
// network.
func (d *Device) checkAV(a *abi.AHAttr) error {
	switch {
	case a.Port != 0 && a.Port != portNum:
		return fail(abi.StatusInvalidArgument, "address vector port %d", a.Port)
	case !d.gids.present(a.SGIDIndex):
		return fail(abi.StatusInvalidArgument, "address vector source GID index %d is empty", a.SGIDIndex)
	case a.DGID == (abi.GID{}):
		return fail(abi.StatusInvalidArgument, "address vector without a destination GID")
	}
	return nil
}

// createAH is CREATE_AH.
func (d *Device) createAH(c *cmd, payload []byte) ([]byte, error) {
	var r abi.CreateAHReq
	if err := decode(payload, &r); err != nil {
		return nil, err
	}
	p, err := d.lookupPD(r.PDN)
	if err != nil {
		return nil, err
	}
	if err := d.checkAV(&r.AH); err != nil {
		return nil, err
	}
	slot, ok := d.o.ahs.add(&ah{pdn: r.PDN, attr: r.AH})
	if !ok {
		return nil, fail(abi.StatusNoResources, "%d AHs", d.limits.MaxAH)
	}
	p.users++
	return c.encode(&abi.HandleResp{Handle: slot + 1}), nil
}

// destroyAH is DESTROY_AH.
func (d *Device) destroyAH(c *cmd, payload []byte) ([]byte, error) {
	var r abi.HandleReq
	if err := decode(payload, &r); err != nil {
		return nil, err
	}
	a := d.o.ah(r.Handle)
	if a == nil {
		return nil, fail(abi.StatusNotFound, "AH %d", r.Handle)
	}
	if p := d.o.pd(a.pdn); p != nil {
		p.users--
	}
	d.o.ahs.remove(ahSlot(r.Handle))
	return c.out, nil
}
