package device

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"testing"

	"github.com/vstellar/vstellar/fabric"
	"github.com/vstellar/vstellar/virtio/abi"
)

func TestQueryPort(t *testing.T) {
	d := newDevice(t, Config{Limits: abi.Limits{MaxGID: 8}})
	g := startVM(t, d, vmOpts{})
	var a abi.PortAttr
	g.must(abi.OpQueryPort, &abi.QueryPortReq{Port: 1}, &a)
	want := abi.PortAttr{
		State: abi.PortActive, MaxMTU: abi.MTU4096, ActiveMTU: abi.MTU4096, GIDTableLen: 8,
		MaxMsgSize: 1 << 31, PKeyTableLen: 1, ActiveWidth: 2, ActiveSpeed: 32, PhysState: 5,
		LinkLayer: abi.LinkLayerEthernet,
	}
	if a != want {
		t.Fatalf("port 1\n got %+v\nwant %+v", a, want)
	}
	for _, port := range []uint32{0, 2, 0xffffffff} {
		g.want(abi.StatusInvalidArgument, abi.OpQueryPort, &abi.QueryPortReq{Port: port})
	}
	g.want(abi.StatusInvalidArgument, abi.OpQueryPort, &abi.QueryPortReq{Port: 1, Reserved: 1})
}

// recordingFabric is a fabric.Local that records registrations, so tests
// see what the device put on the fabric and took off it.
type recordingFabric struct {
	*fabric.Local
	mu   sync.Mutex
	live []abi.GID
}

func newRecordingFabric() *recordingFabric { return &recordingFabric{Local: fabric.NewLocal()} }

func (f *recordingFabric) Register(gid abi.GID, r fabric.Responder) (func(), error) {
	unreg, err := f.Local.Register(gid, r)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.live = append(f.live, gid)
	f.mu.Unlock()
	return func() {
		unreg()
		f.mu.Lock()
		f.live = slices.DeleteFunc(f.live, func(g abi.GID) bool { return g == gid })
		f.mu.Unlock()
	}, nil
}

func (f *recordingFabric) registered() []abi.GID {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.live)
}

func gidOf(b byte) abi.GID {
	var g abi.GID
	g[0], g[1], g[15] = 0xfd, 0x00, b
	return g
}

func TestGIDTable(t *testing.T) {
	fab := newRecordingFabric()
	d := newDevice(t, Config{Name: "gids", Limits: abi.Limits{MaxGID: 4}, Fabric: fab})
	g := startVM(t, d, vmOpts{})

	// Index 0: the device's GID, fe80:: + node GUID, on the fabric from New.
	var e abi.GIDEntry
	g.must(abi.OpQueryGID, &abi.GIDReq{Port: 1, Index: 0}, &e)
	if e.GID[0] != 0xfe || e.GID[1] != 0x80 || binary.BigEndian.Uint64(e.GID[8:]) != d.NodeGUID() ||
		e.Type != abi.GIDTypeRoCE2 || e.Flags != abi.GIDFlagDevice || e.GID != d.GID() {
		t.Fatalf("GID 0: %+v", e)
	}
	if got := fab.registered(); !slices.Equal(got, []abi.GID{d.GID()}) {
		t.Fatalf("registered %x", got)
	}
	// Empty entries read as type NONE; out-of-table indices and ports are
	// invalid.
	g.must(abi.OpQueryGID, &abi.GIDReq{Port: 1, Index: 3}, &e)
	if e != (abi.GIDEntry{}) {
		t.Fatalf("empty entry %+v", e)
	}
	g.want(abi.StatusInvalidArgument, abi.OpQueryGID, &abi.GIDReq{Port: 1, Index: 4})
	g.want(abi.StatusInvalidArgument, abi.OpQueryGID, &abi.GIDReq{Port: 2, Index: 0})

	// ADD_GID.
	g.want(abi.StatusPermission, abi.OpAddGID, &abi.AddGIDReq{Port: 1, Index: 0, GID: gidOf(1)})
	g.want(abi.StatusInvalidArgument, abi.OpAddGID, &abi.AddGIDReq{Port: 1, Index: 4, GID: gidOf(1)})
	g.want(abi.StatusInvalidArgument, abi.OpAddGID, &abi.AddGIDReq{Port: 0, Index: 1, GID: gidOf(1)})
	g.want(abi.StatusInvalidArgument, abi.OpAddGID, &abi.AddGIDReq{Port: 1, Index: 1})
	g.must(abi.OpAddGID, &abi.AddGIDReq{Port: 1, Index: 1, GID: gidOf(1)}, nil)
	g.must(abi.OpQueryGID, &abi.GIDReq{Port: 1, Index: 1}, &e)
	if e.GID != gidOf(1) || e.Type != abi.GIDTypeRoCE2 || e.Flags != abi.GIDFlagGuest {
		t.Fatalf("added entry %+v", e)
	}
	g.want(abi.StatusBusy, abi.OpAddGID, &abi.AddGIDReq{Port: 1, Index: 1, GID: gidOf(2)})      // slot taken
	g.want(abi.StatusBusy, abi.OpAddGID, &abi.AddGIDReq{Port: 1, Index: 2, GID: gidOf(1)})      // GID held (by us)
	g.want(abi.StatusPermission, abi.OpAddGID, &abi.AddGIDReq{Port: 1, Index: 2, GID: d.GID()}) // the device's own
	g.must(abi.OpAddGID, &abi.AddGIDReq{Port: 1, Index: 3, GID: gidOf(3)}, nil)
	if got := fab.registered(); !slices.Equal(got, []abi.GID{d.GID(), gidOf(1), gidOf(3)}) {
		t.Fatalf("registered %x", got)
	}
	if d.Objects().GIDs != 3 {
		t.Fatalf("objects %+v", d.Objects())
	}

	// DEL_GID.
	g.want(abi.StatusPermission, abi.OpDelGID, &abi.GIDReq{Port: 1, Index: 0})
	g.want(abi.StatusNotFound, abi.OpDelGID, &abi.GIDReq{Port: 1, Index: 2})
	g.want(abi.StatusInvalidArgument, abi.OpDelGID, &abi.GIDReq{Port: 1, Index: 9})
	g.must(abi.OpDelGID, &abi.GIDReq{Port: 1, Index: 1}, nil)
	g.want(abi.StatusNotFound, abi.OpDelGID, &abi.GIDReq{Port: 1, Index: 1})
	if got := fab.registered(); !slices.Equal(got, []abi.GID{d.GID(), gidOf(3)}) {
		t.Fatalf("registered after DEL_GID %x", got)
	}
	// The freed GID can be added again, at another index.
	g.must(abi.OpAddGID, &abi.AddGIDReq{Port: 1, Index: 2, GID: gidOf(1)}, nil)

	// RESET_STATE takes the guest's GIDs off the fabric, keeps index 0.
	g.must(abi.OpResetState, nil, nil)
	if got := fab.registered(); !slices.Equal(got, []abi.GID{d.GID()}) {
		t.Fatalf("registered after RESET_STATE %x", got)
	}
	g.must(abi.OpQueryGID, &abi.GIDReq{Port: 1, Index: 2}, &e)
	if e.Type != abi.GIDTypeNone {
		t.Fatalf("entry 2 after reset %+v", e)
	}
	// Close takes index 0 off too.
	g.must(abi.OpAddGID, &abi.AddGIDReq{Port: 1, Index: 1, GID: gidOf(7)}, nil)
	g.vm.Close()
	d.Close()
	if got := fab.registered(); len(got) != 0 {
		t.Fatalf("registered after Close %x", got)
	}
}

// TestGIDsAcrossDevices: a GID another device on the fabric holds cannot
// be added (so no GID routes to two devices), and is free again once that
// device lets it go.
func TestGIDsAcrossDevices(t *testing.T) {
	fab := fabric.NewLocal()
	a := newDevice(t, Config{Name: "a", Fabric: fab})
	b := newDevice(t, Config{Name: "b", Fabric: fab})
	ga, gb := startVM(t, a, vmOpts{}), startVM(t, b, vmOpts{})
	gb.want(abi.StatusPermission, abi.OpAddGID, &abi.AddGIDReq{Port: 1, Index: 1, GID: a.GID()})
	ga.must(abi.OpAddGID, &abi.AddGIDReq{Port: 1, Index: 1, GID: gidOf(9)}, nil)
	gb.want(abi.StatusBusy, abi.OpAddGID, &abi.AddGIDReq{Port: 1, Index: 1, GID: gidOf(9)})
	ga.must(abi.OpDelGID, &abi.GIDReq{Port: 1, Index: 1}, nil)
	gb.must(abi.OpAddGID, &abi.AddGIDReq{Port: 1, Index: 1, GID: gidOf(9)}, nil)

	// A device whose name (and so GID) another device on the fabric has
	// cannot be created.
	if d, err := New(Config{Name: "a", Fabric: fab}, quietLog()); !errors.Is(err, ErrGIDInUse) {
		if d != nil {
			d.Close()
		}
		t.Fatalf("second device named a: %v", err)
	}
}

// TestLinkLocalGIDsAreTheDevices: a device's GID is fe80:: + a GUID
// hashed from its name, so anyone can compute it. No guest may add a
// link-local GID: not one of a device that exists (which would take its
// traffic once that device is away), not one of a device yet to be
// created (whose creation would then fail), not any other in fe80::/10.
// Routable GIDs are added as before.
func TestLinkLocalGIDsAreTheDevices(t *testing.T) {
	fab := fabric.NewLocal()
	a := newDevice(t, Config{Name: "squatter", Fabric: fab})
	b := newDevice(t, Config{Name: "victim", Fabric: fab})
	ga := startVM(t, a, vmOpts{})
	later := deviceGID(linkLocalPrefix, nodeGUID("not-yet-created"))
	for _, gid := range []abi.GID{
		b.GID(), later,
		{0xfe, 0x80, 15: 1},             // fe80::1
		{0xfe, 0xbf, 0xff, 0xff, 15: 9}, // the top of fe80::/10
	} {
		ga.want(abi.StatusPermission, abi.OpAddGID, &abi.AddGIDReq{Port: 1, Index: 1, GID: gid})
	}
	if n := a.Objects().GIDs; n != 1 {
		t.Fatalf("%d GIDs after refused ADD_GIDs", n)
	}
	// The victim's GID still routes to the victim, and the device the
	// squatter aimed at can still be created.
	if _, err := fab.Register(b.GID(), nil); !errors.Is(err, fabric.ErrGIDInUse) {
		t.Fatalf("victim's GID: %v", err)
	}
	newDevice(t, Config{Name: "not-yet-created", Fabric: fab})
	// Next to fe80::/10 on either side, and routable addresses: fine.
	for i, gid := range []abi.GID{
		{0xfe, 0x7f, 15: 1},                 // below fe80::/10
		{0xfe, 0xc0, 15: 1},                 // fec0::, above it
		{0x20, 0x01, 0x0d, 0xb8, 15: 1},     // 2001:db8::1
		{10: 0xff, 11: 0xff, 12: 10, 15: 1}, // ::ffff:10.0.0.1
	} {
		ga.must(abi.OpAddGID, &abi.AddGIDReq{Port: 1, Index: uint32(i + 1), GID: gid}, nil)
	}
}

// reservingFabric is a fabric.Local that, like the cross-host fabric,
// refuses GIDs of another host's prefix.
type reservingFabric struct {
	*fabric.Local
	other netip.Prefix
}

func (f reservingFabric) Register(gid abi.GID, r fabric.Responder) (func(), error) {
	if f.other.Contains(netip.AddrFrom16(gid)) {
		return nil, fmt.Errorf("gid %x: %w", gid[:], fabric.ErrGIDReserved)
	}
	return f.Local.Register(gid, r)
}

// TestHostGIDPrefix: with a host prefix, GID index 0 is the prefix and
// the GUID, so other hosts route to it; the prefix is the devices' own,
// as fe80:: is; a GID another host owns cannot be added; a prefix that
// is not an IPv6 /64 is refused.
func TestHostGIDPrefix(t *testing.T) {
	host := netip.MustParsePrefix("fd00:0:0:1::/64")
	fab := reservingFabric{Local: fabric.NewLocal(), other: netip.MustParsePrefix("fd00:0:0:2::/64")}
	a := newDevice(t, Config{Name: "a", Fabric: fab, GIDPrefix: host})
	g := a.GID()
	if !host.Contains(netip.AddrFrom16(g)) || binary.BigEndian.Uint64(g[8:]) != a.NodeGUID() {
		t.Fatalf("GID %x: want %v + GUID %x", g[:], host, a.NodeGUID())
	}
	ga := startVM(t, a, vmOpts{})
	ga.want(abi.StatusPermission, abi.OpAddGID, &abi.AddGIDReq{Port: 1, Index: 1, GID: abi.GID(netip.MustParseAddr("fd00:0:0:1::7").As16())})
	ga.want(abi.StatusPermission, abi.OpAddGID, &abi.AddGIDReq{Port: 1, Index: 1, GID: abi.GID(netip.MustParseAddr("fd00:0:0:2::7").As16())})
	ga.must(abi.OpAddGID, &abi.AddGIDReq{Port: 1, Index: 1, GID: abi.GID(netip.MustParseAddr("fd00:0:0:3::7").As16())}, nil)
	for _, p := range []string{"10.0.0.0/8", "fd00::/48", "fd00:0:0:1::/96", "fd00::1/64", "::ffff:0:0/96"} {
		if d, err := New(Config{Name: "bad", GIDPrefix: netip.MustParsePrefix(p)}, quietLog()); err == nil {
			d.Close()
			t.Fatalf("GID prefix %s accepted", p)
		}
	}
}
