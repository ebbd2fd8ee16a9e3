package engine

import (
	"log/slog"

	"github.com/vstellar/vstellar/emtt"
	"github.com/vstellar/vstellar/fabric"
	"github.com/vstellar/vstellar/guestmem"
	"github.com/vstellar/vstellar/virtio/abi"
)

// Config configures an engine.
type Config struct {
	// Name is the device's name, for logs.
	Name string
	Log  *slog.Logger
	// Limits are the device's limits (for attribute checks).
	Limits abi.Limits
	// MTT is the device's translation table; the engine only reads it.
	MTT *emtt.Table
	// Fabric carries requests to peer QPs. The device registers the
	// engine (as a fabric.Responder) under its GIDs.
	Fabric fabric.Fabric
	// GID is the device's GID at index 0: the source address of its
	// requests.
	GID abi.GID
	// Events receives asynchronous events (CQ notifications, CQ overflow,
	// QP fatal). It may be called from any goroutine and must not block.
	Events func(abi.Event)
}

// CQSpec describes a CQ to create.
type CQSpec struct {
	CQN      uint32
	Doorbell uint32 // record index in the doorbell layout
	RingAddr uint64 // guest physical address of the ring
	Entries  uint32 // power of two
}

// QPSpec describes a QP to create. The device has checked the PD and the
// limits; the engine checks the rings against guest memory and the CQs
// against its CQ table.
type QPSpec struct {
	QPN           uint32
	PDN           uint32
	Type          abi.QPType
	SigAll        bool
	SendCQN       uint32
	RecvCQN       uint32
	Doorbell      uint32
	SQSize        uint32 // power of two
	RQSize        uint32 // power of two
	MaxSendSGE    uint32
	MaxRecvSGE    uint32
	MaxInlineData uint32
	SQAddr        uint64
	RQAddr        uint64
}

// Stats are the engine's counters.
type Stats struct {
	WQEs, CQEs, ErrorCQEs    uint64
	BytesSent, BytesReceived uint64
	Wakeups, Sleeps          uint64
	Retries, RNRNaks         uint64
	BadWQEs, CQOverflows     uint64
}

var _ fabric.Responder = (*Engine)(nil)

// The methods below return errors that wrap an abi.Status (so that
// abi.StatusFor gives the status the control path answers with):
// StatusNotFound for an unknown CQN/QPN, StatusBusy for a CQ still bound
// to a QP, StatusBadAddress for a ring outside guest RAM (or overlapping
// IO memory), StatusInvalidArgument for a bad size or attribute value,
// StatusBadState for an illegal transition.
//
// STUB: the bodies below are placeholders for the engine implementation.

// Engine is one device's data path.
type Engine struct{ cfg Config }

// New creates a stopped engine with no QPs or CQs.
func New(cfg Config) *Engine { return &Engine{cfg: cfg} }

// Start starts the engine goroutine on guest memory mem with the doorbell
// region (shared memory or the guest-RAM fallback area) as doorbells.
func (e *Engine) Start(mem *guestmem.Table, doorbells guestmem.View, layout abi.DoorbellLayout) error {
	return nil
}

// Stop stops the engine goroutine and waits until no goroutine (engine or
// responder) touches guest memory. QPs and CQs are kept.
func (e *Engine) Stop() {}

// SetMemory moves the engine onto a new guest memory table; the old one
// stays mapped until SetMemory returns. Rings no longer inside guest RAM
// put their QP (or CQ) in error.
func (e *Engine) SetMemory(mem *guestmem.Table) error { return nil }

// Reset drops every QP and CQ.
func (e *Engine) Reset() {}

// Wake is the driver's kick on the wakeup queue.
func (e *Engine) Wake() {}

// CreateCQ adds a CQ.
func (e *Engine) CreateCQ(s CQSpec) error { return abi.StatusNotSupported }

// ResizeCQ moves a CQ to a new ring, copying unconsumed CQEs.
func (e *Engine) ResizeCQ(cqn, entries uint32, ringAddr uint64) error { return abi.StatusNotSupported }

// DestroyCQ removes a CQ that no QP uses.
func (e *Engine) DestroyCQ(cqn uint32) error { return abi.StatusNotSupported }

// CreateQP adds a QP in RESET.
func (e *Engine) CreateQP(s QPSpec) error { return abi.StatusNotSupported }

// ModifyQP applies a MODIFY_QP, checked with abi.CheckModify and the
// attribute values.
func (e *Engine) ModifyQP(qpn uint32, mask abi.QPAttrMask, attr *abi.QPAttr) error {
	return abi.StatusNotSupported
}

// QueryQP returns a QP's attributes and capabilities.
func (e *Engine) QueryQP(qpn uint32) (abi.QueryQPResp, error) {
	return abi.QueryQPResp{}, abi.StatusNotSupported
}

// DestroyQP removes a QP; its outstanding WQEs are dropped without CQEs.
func (e *Engine) DestroyQP(qpn uint32) error { return abi.StatusNotSupported }

// Respond implements fabric.Responder.
func (e *Engine) Respond(req *fabric.Request) fabric.Outcome { return fabric.OutcomeUnreachable }

// Stats returns the engine's counters.
func (e *Engine) Stats() Stats { return Stats{} }
