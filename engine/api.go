package engine

import (
	"log/slog"
	"time"

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
	// GID is the device's GID at index 0.
	GID abi.GID
	// Tenant is the device's tenant, handed to a fabric.Connector with
	// every connection (both ends of a connection must agree on it).
	Tenant uint32
	// SourceGID returns the GID at index of the device's GID table, which
	// a QP's address vector names (sgid_index) as the source of its
	// requests. It is called for every request, so it must be cheap and
	// must not block. Reading the table at send time, not at MODIFY_QP,
	// means a QP can only ever send from a GID its device holds right
	// now, and the fabric gives each GID to one device: no QP can claim
	// another tenant's address. Nil means only index 0 (GID) exists.
	SourceGID func(index uint8) (abi.GID, bool)
	// Events receives asynchronous events (CQ notifications, CQ overflow,
	// QP fatal). It may be called from any goroutine and must not block.
	Events func(abi.Event)
	// QuiesceTimeout bounds how long a control change that must see no
	// request in flight (SetMemory, Stop, a QP's RESET or destroy) waits
	// for one on an asynchronous fabric (default DefaultQuiesceTimeout).
	// A QP whose request is still out then (a dead peer within its retry
	// limit, or a SEND waiting with rnr_retry 7 for a receive its peer
	// never posts) goes to ERR with a QP_FATAL event, its connection is
	// closed, and the request completes WR_FLUSH_ERR.
	QuiesceTimeout time.Duration
	// Cores are the data-path threads the engine is polled from, shared
	// by a daemon's devices. Nil gives the engine a thread of its own
	// that yields between polls (tests, a program with one device).
	Cores *Cores
}

// DefaultQuiesceTimeout is Config.QuiesceTimeout's default: longer than
// a transport's whole retry budget on a healthy network, short enough
// that a VMM's stop or memory change does not hang on a dead peer.
const DefaultQuiesceTimeout = 2 * time.Second

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
	SRQN          uint32 // 0: the QP has its own RQ (RQSize, MaxRecvSGE, RQAddr); else they are 0
	SQAddr        uint64
	RQAddr        uint64
}

// SRQSpec describes a shared receive queue to create.
type SRQSpec struct {
	SRQN     uint32
	PDN      uint32
	Doorbell uint32
	Size     uint32 // power of two
	MaxSGE   uint32
	Limit    uint32 // armed at once when non-zero
	RingAddr uint64
}

// Stats are the engine's counters. Sleeps counts the times the engine
// goroutine blocked (a retry timer or idle poll that finds nothing to do
// blocks it again without waking it), Wakeups the times it left the idle
// state. CQOverflows counts CQs that overflowed (not those that lost their
// ring or record, which also raise CQ_ERR).
type Stats struct {
	WQEs, CQEs, ErrorCQEs    uint64
	BytesSent, BytesReceived uint64
	Wakeups, Sleeps          uint64
	Retries, RNRNaks         uint64
	BadWQEs, CQOverflows     uint64
	// Abandoned counts QPs put in error because a request in flight
	// outlived Config.QuiesceTimeout.
	Abandoned uint64
	// Awake is the time a data-path thread spent polling the engine
	// (working, or spinning for more before it sleeps).
	Awake time.Duration
}

// QPInfo is what an operator sees of a QP: its numbers, state and peer,
// never its rings or the guest's data.
type QPInfo struct {
	QPN, PDN         uint32
	SendCQN, RecvCQN uint32
	SQSize, RQSize   uint32
	State            abi.QPState
	// DestQPN and DestGID are the connected peer (set at RTR).
	DestQPN uint32
	DestGID abi.GID
	PathMTU abi.MTU
}

var _ fabric.StreamResponder = (*Engine)(nil)

// The methods below return errors that wrap an abi.Status (so that
// abi.StatusFor gives the status the control path answers with):
// StatusNotFound for an unknown CQN/QPN, StatusBusy for a CQ still bound
// to a QP (or a number or doorbell record already in use),
// StatusBadAddress for a ring outside guest RAM (or overlapping IO
// memory), StatusInvalidArgument for a bad size or attribute value,
// StatusBadState for an illegal transition, StatusNotSupported for a UD
// QP.
//
// Guest memory. The engine always has one current memory table: the one
// given to the last Start or SetMemory. CreateCQ, CreateQP and ResizeCQ
// check their rings against it (and fail with StatusBadAddress before any
// table was given), so the device calls SetMemory (allowed while stopped)
// or Start before it creates objects. Rings keep their guest physical
// addresses: Start and SetMemory translate every ring again, and rebind
// the MTT (cfg.MTT.Rebind) while the data path is quiesced, so the device
// may unmap the old table as soon as the call returns.
//
// Doorbell records. CreateCQ/CreateQP on a running engine zero the
// object's record; an object created while stopped gets its record zeroed
// at the next Start. After a Stop/Start cycle the records keep their
// counters (the device-owned ones are rewritten from the engine's copy).
// MODIFY_QP to RESET zeroes the QP's record: the driver restarts its
// producer counters at 0.

// New creates a stopped engine with no QPs or CQs. Zero fields of
// cfg.Limits take abi.DefaultLimits.
func New(cfg Config) *Engine { return newEngine(cfg) }

// Start starts the engine goroutine on guest memory mem with the doorbell
// region (shared memory or the guest-RAM fallback area) as doorbells. The
// region must be at least layout.Size() bytes and 64-byte aligned.
func (e *Engine) Start(mem *guestmem.Table, doorbells guestmem.View, layout abi.DoorbellLayout) error {
	return e.start(mem, doorbells, layout)
}

// Stop stops the engine goroutine and waits until no goroutine (engine or
// responder) touches guest memory. QPs and CQs are kept. Until the next
// Start, responders answer fabric.OutcomeRetry (the peer retries up to
// its retry_cnt).
func (e *Engine) Stop() { e.stop() }

// SetMemory moves the engine onto a new guest memory table; the old one
// stays mapped until SetMemory returns. Rings no longer inside guest RAM
// put their QP (or CQ) in error. It also rebinds cfg.MTT. It may be called
// while stopped.
func (e *Engine) SetMemory(mem *guestmem.Table) error { return e.setMemory(mem) }

// Reset drops every QP and CQ. A running engine keeps running.
func (e *Engine) Reset() { e.reset() }

// SetIdlePoll sets how often a sleeping engine rescans its doorbells on
// its own. Zero (the default) means never: the driver follows the wake-up
// protocol and kicks abi.QueueWakeup. A driver that did not negotiate
// abi.FeatureIdleWakeup never kicks, so the device sets a short period
// for it. The period doubles with every rescan that finds nothing, up to
// 16 times d, so such a guest costs a few wake-ups a second while idle and
// sees at most 16*d of extra latency on its first doorbell after a long
// idle spell (d just after it went quiet).
func (e *Engine) SetIdlePoll(d time.Duration) {
	e.waker.setIdlePoll(d)
}

// Wake is the driver's kick on the wakeup queue. It only signals the
// engine goroutine, which clears abi.EngineIdle when it wakes, so it is
// safe to call at any time (also while stopped).
func (e *Engine) Wake() { e.waker.wake() }

// CreateCQ adds a CQ.
func (e *Engine) CreateCQ(s CQSpec) error { return e.createCQ(s) }

// ResizeCQ moves a CQ to a new ring, copying unconsumed CQEs. The engine
// must be running (the CQEs are in guest memory).
func (e *Engine) ResizeCQ(cqn, entries uint32, ringAddr uint64) error {
	return e.resizeCQ(cqn, entries, ringAddr)
}

// DestroyCQ removes a CQ that no QP uses.
func (e *Engine) DestroyCQ(cqn uint32) error { return e.destroyCQ(cqn) }

// CreateQP adds a QP in RESET.
func (e *Engine) CreateQP(s QPSpec) error { return e.createQP(s) }

// ModifyQP applies a MODIFY_QP, checked with abi.CheckModify and the
// attribute values (path MTU defined, port 1, retry_cnt and rnr_retry at
// most 7, max_rd_atomic and max_dest_rd_atomic within
// Limits.MaxQPRdAtom, defined access flags, 24-bit QPN and PSNs, timers
// below 32, AV port 0 or 1 and sgid_index below MaxGID).
func (e *Engine) ModifyQP(qpn uint32, mask abi.QPAttrMask, attr *abi.QPAttr) error {
	return e.modifyQP(qpn, mask, attr)
}

// QueryQP returns a QP's attributes and capabilities.
func (e *Engine) QueryQP(qpn uint32) (abi.QueryQPResp, error) { return e.queryQP(qpn) }

// CreateSRQ adds a shared receive queue.
func (e *Engine) CreateSRQ(s SRQSpec) error { return e.createSRQ(s) }

// ArmSRQLimit arms an SRQ's limit event at limit (0 disarms it). An SRQ
// already below it gets the event at once.
func (e *Engine) ArmSRQLimit(srqn, limit uint32) error { return e.armSRQLimit(srqn, limit) }

// QuerySRQ returns an SRQ's attributes.
func (e *Engine) QuerySRQ(srqn uint32) (abi.SRQAttr, error) { return e.querySRQ(srqn) }

// DestroySRQ removes an SRQ that no QP uses; the WQEs in its ring are
// dropped without CQEs.
func (e *Engine) DestroySRQ(srqn uint32) error { return e.destroySRQ(srqn) }

// DestroyQP removes a QP; its outstanding WQEs are dropped without CQEs.
// After it returns no goroutine touches the QP's rings again.
func (e *Engine) DestroyQP(qpn uint32) error { return e.destroyQP(qpn) }

// Respond implements fabric.Responder: the request whole, through the
// same steps as a streamed one (see responder.go).
func (e *Engine) Respond(req *fabric.Request) fabric.Outcome { return e.respond(req) }

// TryEnter, Enter and Exit implement fabric.StreamResponder (see
// stream.go): they hold the engine's data-path gate shared around Begin
// and the Incomings' methods. TryEnter fails while a control change
// holds the gate; Enter waits for it, so call it only from a goroutine
// the engine never waits for while it holds the gate.
func (e *Engine) TryEnter() bool { return e.gate.TryRLock() }

// Enter: see TryEnter.
func (e *Engine) Enter() { e.gate.RLock() }

// Exit: see TryEnter.
func (e *Engine) Exit() { e.gate.RUnlock() }

// Begin implements fabric.StreamResponder (see stream.go): it checks a
// request whose payload arrives later, in pieces, and returns the
// Incoming that places it. The caller has entered the data path
// (TryEnter or Enter).
func (e *Engine) Begin(req *fabric.Request) (fabric.Incoming, fabric.Outcome) {
	return e.beginStreamed(req)
}

// Stats returns the engine's counters.
func (e *Engine) Stats() Stats { return e.stats() }

// QPs lists the live QPs in QPN order.
func (e *Engine) QPs() []QPInfo { return e.listQPs() }
