package device

import (
	"net/netip"
	"sync/atomic"

	"github.com/vstellar/vstellar/fabric"
	"github.com/vstellar/vstellar/virtio/abi"
)

// gidTable is the GID table of port 1. Index 0 is the device's own GID
// (derived from the node GUID, read-only to the guest); the guest adds
// its own at 1..MaxGID-1, as a guest kernel does for the IP addresses of
// its interfaces.
//
// Link-local GIDs (fe80::/10), and those in the host's GID prefix
// (Config.GIDPrefix), are the devices' own: every device's index 0 is
// one, and it is predictable from the device's name. A guest that could
// add one could take another device's GID before that device is created
// (so its creation fails) or while it is away, and receive what was
// meant for it. Guests add routable addresses, as RoCEv2 GIDs are their
// IP addresses; ADD_GID of a link-local one is PERMISSION.
//
// Invariants:
//   - Every entry in the table is registered on the fabric, so requests
//     addressed to it reach this device's engine, and only while it is
//     in the table (index 0 from New to Close); a GID another device
//     holds cannot be added.
//   - snap, which the engine reads for every request it sends (source),
//     equals the entries after every change (zero GID = empty entry).
//
// The entries are guarded by Device.omu; source needs no lock.
type gidTable struct {
	entries []gidEntry
	snap    atomic.Pointer[[]abi.GID]
	// prefix is the host's /64: its GIDs are the devices' own, like
	// link-local ones.
	prefix netip.Prefix
	fab    fabric.Fabric
	to     fabric.Responder // the device's engine
}

// gidEntry is one GID table entry; typ GIDTypeNone means empty.
type gidEntry struct {
	gid        abi.GID
	typ, flags uint32
	// unregister takes the GID off the fabric.
	unregister func()
}

// init makes the table of n entries with own at index 0, registered on
// fab for to.
func (t *gidTable) init(n uint32, own abi.GID, prefix netip.Prefix, fab fabric.Fabric, to fabric.Responder) error {
	*t = gidTable{entries: make([]gidEntry, n), prefix: prefix, fab: fab, to: to}
	unreg, err := fab.Register(own, to)
	if err != nil {
		return err
	}
	t.entries[0] = gidEntry{gid: own, typ: abi.GIDTypeRoCE2, flags: abi.GIDFlagDevice, unregister: unreg}
	t.publish()
	return nil
}

// linkLocal reports whether g is in fe80::/10.
func linkLocal(g abi.GID) bool { return g[0] == 0xfe && g[1]&0xc0 == 0x80 }

// check checks a GID request's port and index.
func (t *gidTable) check(port, index uint32) error {
	if err := checkPort(port); err != nil {
		return err
	}
	if index >= uint32(len(t.entries)) {
		return fail(abi.StatusInvalidArgument, "GID index %d (table of %d)", index, len(t.entries))
	}
	return nil
}

// add puts gid at index, a free guest index, on the fabric.
func (t *gidTable) add(index uint32, gid abi.GID) error {
	switch {
	case index == 0:
		return fail(abi.StatusPermission, "GID index 0 is the device's")
	case gid == (abi.GID{}):
		return fail(abi.StatusInvalidArgument, "the zero GID")
	case linkLocal(gid):
		return fail(abi.StatusPermission, "GID %x is link-local: those are the devices' own", gid[:])
	case t.prefix.Contains(netip.AddrFrom16(gid)):
		return fail(abi.StatusPermission, "GID %x is in the host's prefix %v: those are the devices' own", gid[:], t.prefix)
	case t.entries[index].typ != abi.GIDTypeNone:
		return fail(abi.StatusBusy, "GID index %d is in use", index)
	}
	// The fabric refuses a GID anyone holds, this device included (at
	// another index), so one GID never routes to two places.
	unreg, err := t.fab.Register(gid, t.to)
	if err != nil {
		return fabricError(err)
	}
	t.entries[index] = gidEntry{gid: gid, typ: abi.GIDTypeRoCE2, flags: abi.GIDFlagGuest, unregister: unreg}
	t.publish()
	return nil
}

// del takes the guest's GID at index off the table and the fabric.
func (t *gidTable) del(index uint32) error {
	g := &t.entries[index]
	switch {
	case index == 0:
		return fail(abi.StatusPermission, "GID index 0 is the device's")
	case g.typ == abi.GIDTypeNone:
		return fail(abi.StatusNotFound, "GID index %d is empty", index)
	}
	g.unregister()
	*g = gidEntry{}
	t.publish()
	return nil
}

// dropGuests takes every guest GID off the table and the fabric
// (RESET_STATE); withOwn also the device's own (Close).
func (t *gidTable) dropGuests(withOwn bool) {
	for i := range t.entries {
		if g := &t.entries[i]; (i > 0 || withOwn) && g.unregister != nil {
			g.unregister()
			*g = gidEntry{}
		}
	}
	t.publish()
}

// present reports whether index names a live entry (an address vector's
// source GID).
func (t *gidTable) present(index uint8) bool {
	return int(index) < len(t.entries) && t.entries[index].typ != abi.GIDTypeNone
}

// checkAV checks an address vector (CREATE_AH, MODIFY_QP's AV) against
// what the device owns: the port (0 is taken as "the" port, as drivers
// that leave it unset mean) and a live source GID index. The destination
// is anyone's: an unreachable one fails at send time, as on a real
// network.
func (t *gidTable) checkAV(a *abi.AHAttr) error {
	switch {
	case a.Port != 0 && a.Port != portNum:
		return fail(abi.StatusInvalidArgument, "address vector port %d", a.Port)
	case !t.present(a.SGIDIndex):
		return fail(abi.StatusInvalidArgument, "address vector source GID index %d is empty", a.SGIDIndex)
	case a.DGID == (abi.GID{}):
		return fail(abi.StatusInvalidArgument, "address vector without a destination GID")
	}
	return nil
}

// live is the number of live entries, the device's own included.
func (t *gidTable) live() int {
	n := 0
	for _, g := range t.entries {
		if g.typ != abi.GIDTypeNone {
			n++
		}
	}
	return n
}

// publish stores a copy of the entries for source. Called with omu held
// after every change.
func (t *gidTable) publish() {
	snap := make([]abi.GID, len(t.entries))
	for i, g := range t.entries {
		if g.typ != abi.GIDTypeNone {
			snap[i] = g.gid
		}
	}
	t.snap.Store(&snap)
}

// source is the engine's Config.SourceGID: the GID at index now, if any.
// Lock-free: it runs for every request the engine sends.
func (t *gidTable) source(index uint8) (abi.GID, bool) {
	snap := t.snap.Load()
	if snap == nil || int(index) >= len(*snap) || (*snap)[index] == (abi.GID{}) {
		return abi.GID{}, false
	}
	return (*snap)[index], true
}

// queryGID answers QUERY_GID. An empty entry is not an error: it reads as
// the zero GID of type GIDTypeNone, as an unused ibv_query_gid slot does.
func (t *gidTable) queryGID(c *cmd, payload []byte) ([]byte, error) {
	var r abi.GIDReq
	if err := decode(payload, &r); err != nil {
		return nil, err
	}
	if err := t.check(r.Port, r.Index); err != nil {
		return nil, err
	}
	g := t.entries[r.Index]
	return c.encode(&abi.GIDEntry{GID: g.gid, Type: g.typ, Flags: g.flags}), nil
}

// addGID is ADD_GID.
func (t *gidTable) addGID(c *cmd, payload []byte) ([]byte, error) {
	var r abi.AddGIDReq
	if err := decode(payload, &r); err != nil {
		return nil, err
	}
	if err := t.check(r.Port, r.Index); err != nil {
		return nil, err
	}
	if err := t.add(r.Index, r.GID); err != nil {
		return nil, err
	}
	return c.out, nil
}

// delGID is DEL_GID.
func (t *gidTable) delGID(c *cmd, payload []byte) ([]byte, error) {
	var r abi.GIDReq
	if err := decode(payload, &r); err != nil {
		return nil, err
	}
	if err := t.check(r.Port, r.Index); err != nil {
		return nil, err
	}
	if err := t.del(r.Index); err != nil {
		return nil, err
	}
	return c.out, nil
}
