package device

import (
	"sync/atomic"
	"time"

	"github.com/vstellar/vstellar/latency"
	"github.com/vstellar/vstellar/virtio/abi"
)

// Stats are the device's counters, for metrics. Counters only grow.
type Stats struct {
	// Commands is the number of control chains answered (each pushed
	// back to the driver exactly once).
	Commands uint64
	// Failed is the number answered with a status other than OK.
	Failed uint64
	// Malformed is the number whose framing was wrong (short, oversized,
	// reserved bits, unknown opcode); a subset of Failed.
	Malformed uint64
	// Dropped is the number pushed with written=0 because the chain had no
	// room for a response header; not counted in Failed.
	Dropped uint64
	// BadChains is the number of times the control queue was found broken
	// (a Pop error that made the Backend stop the queue).
	BadChains uint64
	// ByOpcode counts answered commands per defined opcode (any status);
	// ByStatus counts them per status. Opcode 0 stands for an unknown or
	// unreadable opcode. Only non-zero entries are present.
	ByOpcode map[abi.Opcode]uint64
	ByStatus map[abi.Status]uint64
	// Latency is the time each answered command took, per opcode as
	// ByOpcode, from reading the request to writing the response.
	Latency map[abi.Opcode]latency.Histogram
	// Activations, Resets and ConfigWrites count lifecycle events.
	Activations  uint64
	Resets       uint64
	ConfigWrites uint64
	// EventsQueued counts asynchronous events the engine reported,
	// EventsDelivered those written into driver buffers, EventsDropped
	// those lost to a full queue, ShortEventBuffers event buffers given
	// back unused because they could not hold an event. EventsPending is
	// the current queue length.
	EventsQueued, EventsDelivered, EventsDropped, ShortEventBuffers uint64
	EventsPending                                                   int
}

// maxStatus bounds the per-status array; larger (undefined) statuses are
// never produced by the device.
const maxStatus = 64

// stats are the device's queue, lifecycle and event counters; the
// control commands' own are controlStats.
type stats struct {
	badChains                         atomic.Uint64 // either queue
	activations, resets, configWrites atomic.Uint64
	eventsQueued, eventsDelivered     atomic.Uint64
	eventsDropped, shortEventBuffers  atomic.Uint64
}

// controlStats are the control commands' counters.
type controlStats struct {
	commands, malformed, dropped atomic.Uint64
	byOpcode                     []atomic.Uint64 // index = opcode; 0 = unknown
	latency                      []latency.Recorder
	byStatus                     [maxStatus]atomic.Uint64
}

func (s *controlStats) init() {
	ops := abi.Opcodes()
	s.byOpcode = make([]atomic.Uint64, int(ops[len(ops)-1])+1)
	s.latency = make([]latency.Recorder, len(s.byOpcode))
}

func (s *controlStats) count(op abi.Opcode, st abi.Status, took time.Duration) {
	if !op.Known() {
		op = 0
	}
	s.byOpcode[op].Add(1)
	s.latency[op].Observe(took)
	if uint32(st) < maxStatus {
		s.byStatus[st].Add(1)
	}
}

// Stats returns a snapshot of the counters.
func (d *Device) Stats() Stats {
	s, cs := &d.stats, &d.ctl.stats
	out := Stats{
		Commands:          cs.commands.Load(),
		Malformed:         cs.malformed.Load(),
		Dropped:           cs.dropped.Load(),
		BadChains:         s.badChains.Load(),
		Activations:       s.activations.Load(),
		Resets:            s.resets.Load(),
		ConfigWrites:      s.configWrites.Load(),
		EventsQueued:      s.eventsQueued.Load(),
		EventsDelivered:   s.eventsDelivered.Load(),
		EventsDropped:     s.eventsDropped.Load(),
		ShortEventBuffers: s.shortEventBuffers.Load(),
		EventsPending:     d.ev.len(),
		ByOpcode:          map[abi.Opcode]uint64{},
		ByStatus:          map[abi.Status]uint64{},
		Latency:           map[abi.Opcode]latency.Histogram{},
	}
	for i := range cs.byOpcode {
		if n := cs.byOpcode[i].Load(); n != 0 {
			out.ByOpcode[abi.Opcode(i)] = n
			out.Latency[abi.Opcode(i)] = cs.latency[i].Snapshot()
		}
	}
	for i := range cs.byStatus {
		n := cs.byStatus[i].Load()
		if n == 0 {
			continue
		}
		out.ByStatus[abi.Status(i)] = n
		if abi.Status(i) != abi.StatusOK {
			out.Failed += n
		}
	}
	return out
}
