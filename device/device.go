package device

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/vstellar/vstellar/emtt"
	"github.com/vstellar/vstellar/engine"
	"github.com/vstellar/vstellar/fabric"
	"github.com/vstellar/vstellar/guestmem"
	"github.com/vstellar/vstellar/pvdma"
	"github.com/vstellar/vstellar/shmregion"
	"github.com/vstellar/vstellar/vhost"
	"github.com/vstellar/vstellar/virtio"
	"github.com/vstellar/vstellar/virtio/abi"
)

// Config configures one device.
type Config struct {
	// Name identifies the device in logs, metrics and its memfd name. It
	// also seeds the node GUID, so a device keeps its GUID across daemon
	// restarts. Required.
	Name string
	// Limits are the advertised and enforced resource limits; zero fields
	// take abi.DefaultLimits.
	Limits abi.Limits
	// Fabric carries the device's RDMA traffic to the devices that own
	// the destination GIDs. Devices that should reach each other share
	// one; nil gives the device a private fabric.Local of its own.
	Fabric fabric.Fabric
	// Pins is the host's pinned-memory pool, shared by its devices; nil
	// gives the device a private pool with pvdma.DefaultLimit.
	Pins *pvdma.Pool
	// PinMode says when guest memory is pinned (default on demand).
	PinMode pvdma.Mode
	// PinBudget bounds what this device pins on demand (0: only the
	// pool's limit).
	PinBudget uint64
	// GIDPrefix is the host's GID prefix, a /64 of IPv6: GID index 0 is
	// the prefix followed by the node GUID, so other hosts can route to
	// the device by prefix. The zero Prefix is fe80::/64, link-local,
	// which reaches only the devices of this host.
	GIDPrefix netip.Prefix
	// Tenant is the device's tenant on the cross-host fabric: QPs connect
	// only to QPs of the same tenant.
	Tenant uint32
	// Cores are the data-path threads the device's engine is polled
	// from, shared by a daemon's devices; nil gives it one of its own.
	Cores *engine.Cores
}

// maxNameLen keeps the memfd name ("vstellar:" + name + "-doorbells")
// within the kernel's 249-byte limit.
const maxNameLen = 200

// physPorts is the number of ports the device has. One: the multipath
// transport spreads traffic below the verbs layer, not over ports.
const physPorts = 1

// fwVersion is reported by QUERY_DEVICE.
var fwVersion = abi.FWVersion(0, 1, 0)

// Errors the device returns to its host (never to the guest, which gets
// statuses).
var (
	ErrReadOnlyConfig = errors.New("device: config space is read-only")
	ErrAlreadyActive  = errors.New("device: already active")
	ErrClosed         = errors.New("device: closed")
	ErrNoSuchQueue    = errors.New("device: no such queue")
	ErrGIDInUse       = errors.New("device: GID already on the fabric")
)

// Device is one vStellar device. Create it with New, hand it to a
// vhost.Backend, and Close it when the device is destroyed.
type Device struct {
	name   string
	log    *slog.Logger
	limits abi.Limits
	guid   uint64
	gid0   abi.GID
	db     *shmregion.Region
	layout abi.DoorbellLayout
	// attr is the QUERY_DEVICE response payload; fixed at New.
	attr []byte

	pins *pvdma.Cache
	mtt  *emtt.Table
	eng  *engine.Engine

	// status is the config space status word (abi.ConfigStatus* bits).
	status atomic.Uint32
	// active is set between Activate and Deactivate; ProcessQueue does
	// nothing while it is clear.
	active atomic.Bool
	// events is set while the driver acked FeatureEventQueue.
	events atomic.Bool
	// env is the connection the device is active on, for Schedule; nil
	// while inactive.
	env atomic.Pointer[vhost.Env]

	// run is held shared by ProcessQueue and exclusively by Deactivate and
	// Close, so that neither returns while a queue is being processed.
	run sync.RWMutex
	// mu serialises the lifecycle (Activate, Deactivate, Close).
	mu     sync.Mutex
	closed bool

	ctl control

	// omu guards o, gids (but the snapshot the engine reads), dbs and
	// mem. Lock order: mu, then run, then ctl, then omu.
	omu  sync.Mutex
	o    objects
	gids gidTable
	dbs  doorbells
	// mem is the guest memory the MRs are bound to (and the engine runs
	// on).
	mem *guestmem.Table

	ev eventQueue

	stats stats
}

var _ vhost.Device = (*Device)(nil)
var _ vhost.MemoryWatcher = (*Device)(nil)

// New creates a device: it validates the limits, creates the device's
// doorbell region, translation table and engine, and puts the device's
// own GID (index 0) on the fabric.
func New(cfg Config, log *slog.Logger) (*Device, error) {
	if cfg.Name == "" || len(cfg.Name) > maxNameLen {
		return nil, fmt.Errorf("device: name %q must be 1..%d bytes", cfg.Name, maxNameLen)
	}
	if p := cfg.GIDPrefix; p.IsValid() && (!p.Addr().Is6() || p.Addr().Is4In6() || p.Bits() != 64 || p.Masked() != p) {
		return nil, fmt.Errorf("device %q: GID prefix %v is not an IPv6 /64 prefix", cfg.Name, p)
	}
	if log == nil {
		log = slog.Default()
	}
	limits := cfg.Limits.WithDefaults()
	if err := limits.Validate(); err != nil {
		return nil, fmt.Errorf("device %q: limits: %w", cfg.Name, err)
	}
	layout, err := abi.NewDoorbellLayout(limits, guestmem.PageSize())
	if err != nil {
		return nil, fmt.Errorf("device %q: doorbell layout: %w", cfg.Name, err)
	}
	db, err := shmregion.New(cfg.Name+"-doorbells", layout.Size())
	if err != nil {
		return nil, fmt.Errorf("device %q: %w", cfg.Name, err)
	}
	fab := cfg.Fabric
	if fab == nil {
		fab = fabric.NewLocal()
	}
	pool := cfg.Pins
	if pool == nil {
		pool = pvdma.NewPool(pvdma.DefaultLimit(), nil)
	}
	dlog := log.With("device", cfg.Name)
	pins := pool.NewCache(pvdma.Options{Name: cfg.Name, Mode: cfg.PinMode, Budget: cfg.PinBudget, Log: dlog})
	d := &Device{
		name:   cfg.Name,
		log:    dlog,
		limits: limits,
		guid:   nodeGUID(cfg.Name),
		db:     db,
		layout: layout,
		pins:   pins,
		mtt:    emtt.New(limits.MaxMR, pins),
	}
	prefix := cmp.Or(cfg.GIDPrefix, linkLocalPrefix)
	d.gid0 = deviceGID(prefix, d.guid)
	d.eng = engine.New(engine.Config{
		Name:      cfg.Name,
		Log:       d.log,
		Limits:    limits,
		MTT:       d.mtt,
		Fabric:    fab,
		GID:       d.gid0,
		Tenant:    cfg.Tenant,
		SourceGID: d.gids.source,
		Events:    d.postEvent,
		Cores:     cfg.Cores,
	})
	d.dbs = doorbells{eng: d.eng, layout: layout}
	d.o.init(d)
	err = d.gids.init(limits.MaxGID, d.gid0, prefix, fab, d.eng)
	if err != nil {
		db.Close()
		pins.Close()
		return nil, fmt.Errorf("device %q: GID %x: %w: %w", cfg.Name, d.gid0[:], ErrGIDInUse, err)
	}
	d.attr, _ = d.deviceAttr().MarshalBinary()
	d.ctl.stats.init()
	d.log.Debug("device created", "doorbell_bytes", layout.Size(), "max_qp", limits.MaxQP, "max_cq", limits.MaxCQ)
	return d, nil
}

// deviceGID is GID index 0: the host's /64 prefix (link-local fe80::
// by default) followed by the node GUID, big-endian (the modified EUI-64
// interface identifier).
func deviceGID(prefix netip.Prefix, guid uint64) abi.GID {
	g := abi.GID(prefix.Addr().As16())
	binary.BigEndian.PutUint64(g[8:], guid)
	return g
}

// linkLocalPrefix is the GID prefix of a host without a cross-host
// fabric.
var linkLocalPrefix = netip.MustParsePrefix("fe80::/64")

// nodeGUID derives a stable EUI-64 from the device name: FNV-1a, with the
// locally-administered bit set and the group bit clear, so it can never
// collide with a vendor-assigned GUID.
func nodeGUID(name string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	return h.Sum64()&^(0x01<<56) | 0x02<<56
}

// Name is the device's name.
func (d *Device) Name() string { return d.name }

// Limits are the device's effective limits (defaults filled in).
func (d *Device) Limits() abi.Limits { return d.limits }

// NodeGUID is the device's node GUID.
func (d *Device) NodeGUID() uint64 { return d.guid }

// GID is the device's own GID (index 0), its address on the fabric.
func (d *Device) GID() abi.GID { return d.gid0 }

// Close deactivates the device, drops its state, takes its GIDs off the
// fabric and releases its doorbell region. A front-end's mapping of the
// region stays valid until it unmaps it; the memory goes with the last
// reference. Close is idempotent.
func (d *Device) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil
	}
	d.stopLocked()
	d.omu.Lock()
	d.dbs.stop()
	d.resetObjectsLocked()
	d.gids.dropGuests(true)
	d.o.closed = true
	d.pins.Close() // unpins what is left before the memory goes
	d.omu.Unlock()
	d.closed = true
	if err := d.db.Close(); err != nil {
		return fmt.Errorf("device %q: %w", d.name, err)
	}
	d.log.Debug("device closed")
	return nil
}

// NumQueues implements vhost.Device.
func (d *Device) NumQueues() int { return abi.NumQueues }

// MaxQueueSize implements vhost.Device.
func (d *Device) MaxQueueSize() uint16 { return abi.MaxQueueSize }

// offeredDeviceFeatures are the device-specific bits this device
// implements. UD is not among them: CREATE_QP answers NOT_SUPPORTED for
// UD QPs.
var offeredDeviceFeatures = abi.FeatureMask(abi.FeatureShmemDoorbell, abi.FeatureEventQueue,
	abi.FeatureRC, abi.FeatureAtomic, abi.FeatureInline, abi.FeatureIdleWakeup, abi.FeatureCQNotify,
	abi.FeatureResizeCQ)

// Features implements vhost.Device: VERSION_1, EVENT_IDX and INDIRECT_DESC
// (the control queue works with any of them) and the device bits above.
func (d *Device) Features() uint64 {
	return virtio.FeatureMask(virtio.FeatureVersion1, virtio.FeatureEventIdx, virtio.FeatureIndirectDesc) |
		offeredDeviceFeatures
}

// ShmemRegions implements vhost.Device: shmid 0 is the doorbell region.
func (d *Device) ShmemRegions() []uint64 {
	r := make([]uint64, abi.DoorbellShmID+1)
	r[abi.DoorbellShmID] = d.layout.Size()
	return r
}

// ShmemFiles implements vhost.ShmemFiler: the doorbell region's memfd.
func (d *Device) ShmemFiles() []int { return []int{d.db.Fd()} }

// DoorbellRegion is the device's doorbell region (for the data-path engine
// and tests).
func (d *Device) DoorbellRegion() *shmregion.Region { return d.db }

// DoorbellLayout is the geometry config space advertises.
func (d *Device) DoorbellLayout() abi.DoorbellLayout { return d.layout }
