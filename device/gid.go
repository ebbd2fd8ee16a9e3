package device

import (
	"net/netip"

	"github.com/vstellar/vstellar/virtio/abi"
)

// The GID table of port 1. Index 0 is the device's own GID (derived from
// the node GUID, registered on the fabric from New to Close, read-only to
// the guest); the guest adds its own at 1..MaxGID-1, as a guest kernel
// does for the IP addresses of its interfaces. Every GID in the table is
// registered on the fabric, so requests addressed to it reach this
// device's engine; a GID another device holds cannot be added.
//
// Link-local GIDs (fe80::/10), and those in the host's GID prefix
// (Config.GIDPrefix), are the devices' own: every device's index
// 0 is one, and it is predictable from the device's name. A guest that
// could add one could take another device's GID before that device is
// created (so its creation fails) or while it is away, and receive what
// was meant for it. Guests add routable addresses, as RoCEv2 GIDs are
// their IP addresses; ADD_GID of a link-local one is PERMISSION.

// linkLocal reports whether g is in fe80::/10.
func linkLocal(g abi.GID) bool { return g[0] == 0xfe && g[1]&0xc0 == 0x80 }

// gidIndex checks a GID request's port and index.
func (d *Device) gidIndex(port, index uint32) error {
	if err := checkPort(port); err != nil {
		return err
	}
	if index >= uint32(len(d.o.gids)) {
		return fail(abi.StatusInvalidArgument, "GID index %d (table of %d)", index, len(d.o.gids))
	}
	return nil
}

// queryGID answers QUERY_GID. An empty entry is not an error: it reads as
// the zero GID of type GIDTypeNone, as an unused ibv_query_gid slot does.
func (d *Device) queryGID(c *cmd, payload []byte) ([]byte, error) {
	var r abi.GIDReq
	if err := decode(payload, &r); err != nil {
		return nil, err
	}
	if err := d.gidIndex(r.Port, r.Index); err != nil {
		return nil, err
	}
	g := d.o.gids[r.Index]
	return c.encode(&abi.GIDEntry{GID: g.gid, Type: g.typ, Flags: g.flags}), nil
}

// addGID is ADD_GID.
func (d *Device) addGID(c *cmd, payload []byte) ([]byte, error) {
	var r abi.AddGIDReq
	if err := decode(payload, &r); err != nil {
		return nil, err
	}
	if err := d.gidIndex(r.Port, r.Index); err != nil {
		return nil, err
	}
	switch {
	case r.Index == 0:
		return nil, fail(abi.StatusPermission, "GID index 0 is the device's")
	case r.GID == (abi.GID{}):
		return nil, fail(abi.StatusInvalidArgument, "the zero GID")
	case linkLocal(r.GID):
		return nil, fail(abi.StatusPermission, "GID %x is link-local: those are the devices' own", r.GID[:])
	case d.gidPrefix.Contains(netip.AddrFrom16(r.GID)):
		return nil, fail(abi.StatusPermission, "GID %x is in the host's prefix %v: those are the devices' own", r.GID[:], d.gidPrefix)
	case d.o.gids[r.Index].typ != abi.GIDTypeNone:
		return nil, fail(abi.StatusBusy, "GID index %d is in use", r.Index)
	}
	// The fabric refuses a GID anyone holds, this device included (at
	// another index), so one GID never routes to two places.
	unreg, err := d.fab.Register(r.GID, d.eng)
	if err != nil {
		return nil, fabricError(err)
	}
	d.o.gids[r.Index] = gidEntry{gid: r.GID, typ: abi.GIDTypeRoCE2, flags: abi.GIDFlagGuest, unregister: unreg}
	d.publishGIDs()
	return c.out, nil
}

// delGID is DEL_GID.
func (d *Device) delGID(c *cmd, payload []byte) ([]byte, error) {
	var r abi.GIDReq
	if err := decode(payload, &r); err != nil {
		return nil, err
	}
	if err := d.gidIndex(r.Port, r.Index); err != nil {
		return nil, err
	}
	g := &d.o.gids[r.Index]
	switch {
	case r.Index == 0:
		return nil, fail(abi.StatusPermission, "GID index 0 is the device's")
	case g.typ == abi.GIDTypeNone:
		return nil, fail(abi.StatusNotFound, "GID index %d is empty", r.Index)
	}
	g.unregister()
	*g = gidEntry{}
	d.publishGIDs()
	return c.out, nil
}

// gidPresent reports whether index names a live GID entry (an address
// vector's source GID).
func (d *Device) gidPresent(index uint8) bool {
	return int(index) < len(d.o.gids) && d.o.gids[index].typ != abi.GIDTypeNone
}
