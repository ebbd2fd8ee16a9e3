package engine

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vstellar/vstellar/fabric"
	"github.com/vstellar/vstellar/virtio/abi"
)

// Engine is one device's data path.
//
// Locking. mu serialises the control path (every exported method except
// Respond, Wake and Stats); gate separates the data path (shared) from
// control changes that take guest memory, a ring, a QP or CQ away
// (exclusive, lockQuiet). Lock order: mu, gate, qp.rmu, cq.mu; rmu and
// cq.mu are never held across fabric.Post. Why, and the rules that keep it
// free of deadlock: docs/architecture.md, "### engine".
type Engine struct {
	cfg    Config
	log    *slog.Logger
	limits abi.Limits

	mu   sync.Mutex
	gate sync.RWMutex

	objs objects // QPs, CQs and SRQs by number

	// Run state: written under mu and gate (exclusive); read by the data
	// path under gate (shared).
	running bool
	guest   guest // its memory and the doorbell region (ring.go)

	// connector is cfg.Fabric's Connector, nil if it keeps no connections
	// (connect.go).
	connector fabric.Connector
	// quiesce is cfg.QuiesceTimeout, or its default.
	quiesce time.Duration

	// cores runs the engine's poller (Config.Cores, or a thread of its
	// own); waker is the engine's side of its sleeping and waking.
	cores  *Cores
	waker  waker
	broken atomic.Bool // guest memory faulted: stop touching it until Start/SetMemory/Reset
	// suspending: Stop waits for peers' requests under way; new ones are
	// told to retry (begin).
	suspending atomic.Bool
	epoch      time.Time

	// Test hooks (set under mu by export_test.go only; nil otherwise).
	// beforeStateCAS runs in ModifyQP between the check of the current
	// state and the compare-and-swap to the new one: the window in which
	// the data path may move the QP to ERR. quiet runs when lockQuiet
	// holds the gate with nothing in flight.
	beforeStateCAS func(qpn uint32)
	quiet          func()

	free freeIncomings // streamed requests to reuse (stream.go)

	st stats
}

// stats are the engine's counters, updated with atomics by the engine
// goroutine and by responders.
type stats struct {
	wqes, cqes, errorCQEs    atomic.Uint64
	bytesSent, bytesReceived atomic.Uint64
	wakeups, sleeps          atomic.Uint64
	retries, rnrNaks         atomic.Uint64
	badWQEs, cqOverflows     atomic.Uint64
	abandoned                atomic.Uint64
}

func newEngine(cfg Config) *Engine {
	lim := cfg.Limits.WithDefaults()
	if lim.MaxQP > abi.CeilingLimits.MaxQP {
		lim.MaxQP = abi.CeilingLimits.MaxQP
	}
	if lim.MaxCQ > abi.CeilingLimits.MaxCQ {
		lim.MaxCQ = abi.CeilingLimits.MaxCQ
	}
	if lim.MaxSRQ > abi.CeilingLimits.MaxSRQ {
		lim.MaxSRQ = abi.CeilingLimits.MaxSRQ
	}
	log := cfg.Log
	if log == nil {
		log = slog.Default()
	}
	e := &Engine{
		cfg:    cfg,
		log:    log.With("engine", cfg.Name),
		limits: lim,
		epoch:  time.Now(),
		cores:  cfg.Cores,
	}
	e.guest.mtt = cfg.MTT
	e.connector, _ = cfg.Fabric.(fabric.Connector)
	e.quiesce = cfg.QuiesceTimeout
	if e.quiesce <= 0 {
		e.quiesce = DefaultQuiesceTimeout
	}
	if e.cores == nil {
		e.cores = privateCores(e.log)
	}
	e.objs.init(lim)
	return e
}

// now is the engine's monotonic clock in nanoseconds.
func (e *Engine) now() int64 { return int64(time.Since(e.epoch)) }

// event hands an asynchronous event to the device.
func (e *Engine) event(t abi.EventType, handle, info uint32) {
	if e.cfg.Events != nil {
		e.cfg.Events(abi.Event{Type: t, Handle: handle, Info: info})
	}
}

func (e *Engine) stats() Stats {
	s := &e.st
	return Stats{
		WQEs: s.wqes.Load(), CQEs: s.cqes.Load(), ErrorCQEs: s.errorCQEs.Load(),
		BytesSent: s.bytesSent.Load(), BytesReceived: s.bytesReceived.Load(),
		Wakeups: s.wakeups.Load(), Sleeps: s.sleeps.Load(),
		Retries: s.retries.Load(), RNRNaks: s.rnrNaks.Load(),
		BadWQEs: s.badWQEs.Load(), CQOverflows: s.cqOverflows.Load(),
		Abandoned: s.abandoned.Load(),
		Awake:     time.Duration(e.waker.awake(e.now())),
	}
}

var _ fabric.Completer = (*qp)(nil)
