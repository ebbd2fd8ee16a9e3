package guestdriver

import (
	"context"
	"encoding/binary"

	"github.com/vstellar/vstellar/virtio/abi"
)

// Port is the device's only port. vStellar devices have exactly one.
const Port = 1

// QueryPort returns the attributes of port (QUERY_PORT); the device has
// port Port only.
func (d *Device) QueryPort(ctx context.Context, port uint32) (abi.PortAttr, error) {
	var a abi.PortAttr
	err := d.call(ctx, abi.OpQueryPort, &abi.QueryPortReq{Port: port}, &a)
	return a, err
}

// QueryGID returns GID table entry index of port Port (QUERY_GID). An
// empty entry has Type abi.GIDTypeNone.
func (d *Device) QueryGID(ctx context.Context, index uint32) (abi.GIDEntry, error) {
	var e abi.GIDEntry
	err := d.call(ctx, abi.OpQueryGID, &abi.GIDReq{Port: Port, Index: index}, &e)
	return e, err
}

// AddGID installs gid at index (1..max_gid-1) of port Port's GID table
// (ADD_GID): one of the guest's routable addresses, as RoCEv2 GIDs are IP
// addresses. The device registers it on the fabric, so traffic to it
// reaches this device; a GID another device holds is refused
// (abi.StatusBusy), and so is a link-local one (fe80::/10, the devices'
// own: abi.StatusPermission).
func (d *Device) AddGID(ctx context.Context, index uint32, gid abi.GID) error {
	return d.call(ctx, abi.OpAddGID, &abi.AddGIDReq{Port: Port, Index: index, GID: gid}, nil)
}

// DelGID removes the guest-owned GID at index (DEL_GID).
func (d *Device) DelGID(ctx context.Context, index uint32) error {
	return d.call(ctx, abi.OpDelGID, &abi.GIDReq{Port: Port, Index: index}, nil)
}

// GID is the device's own GID, GID table index 0, as read at Open: its
// host's GID prefix (fe80::/64, link-local, without a cross-host fabric)
// followed by the node GUID, big-endian.
func (d *Device) GID() abi.GID { return d.gid0 }

// NodeGID is the link-local index-0 GID of a device with node GUID guid
// (on a host without a cross-host fabric).
func NodeGID(guid uint64) abi.GID {
	var g abi.GID
	g[0], g[1] = 0xfe, 0x80
	binary.BigEndian.PutUint64(g[8:], guid)
	return g
}
