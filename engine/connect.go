package engine

import (
	"errors"
	"fmt"

	"github.com/vstellar/vstellar/fabric"
	"github.com/vstellar/vstellar/virtio/abi"
)

// Connections: a fabric that keeps state per connected QP pair (the
// cross-host transport) implements fabric.Connector. The engine tells it
// of a QP's peer when the QP enters RTR (receive side: rq_psn), again
// when it enters RTS (send side: sq_psn, retry limits), and when a
// connection attribute changes; and it ends the connection when the QP
// goes back to RESET, is destroyed, or the engine is reset. Connect and
// Disconnect run with mu held and never with the gate: Disconnect waits
// for the fabric's loop to leave the QP's connection, and then for the
// gate to release what its Incomings pinned.

// connAttrs are the attributes a Connection is made of whose change,
// while the QP serves, the fabric hears of. The PSNs are not among them:
// they name where the connection's packet streams start, which is
// decided when it is made (rq_psn at RTR, sq_psn at RTS).
const connAttrs = abi.QPAttrAV | abi.QPAttrDestQPN | abi.QPAttrRetryCnt | abi.QPAttrRNRRetry

// connection returns the Connection a MODIFY_QP of q from cur to next with
// the merged attributes a must make, and whether it must make one: when
// the QP enters RTR or RTS, or a connection attribute changes while it
// serves. Caller holds mu.
func (q *qp) connection(cur, next abi.QPState, mask abi.QPAttrMask, a *abi.QPAttr) (fabric.Connection, bool, error) {
	e := q.e
	if e.connector == nil {
		return fabric.Connection{}, false, nil
	}
	switch next {
	case abi.QPStateRTR, abi.QPStateRTS, abi.QPStateSQD:
	default:
		return fabric.Connection{}, false, nil
	}
	entering := cur != next && next != abi.QPStateSQD
	if !entering && mask&connAttrs == 0 {
		return fabric.Connection{}, false, nil
	}
	gid, ok := e.sourceGID(a.AH.SGIDIndex)
	if !ok {
		// The fabric needs our address now, not at the first send.
		return fabric.Connection{}, false, statusErr(abi.StatusNotFound, "qp %d: sgid_index %d names no GID", q.qpn, a.AH.SGIDIndex)
	}
	c := fabric.Connection{
		Local:  fabric.Addr{GID: gid, QPN: q.qpn},
		Remote: fabric.Addr{GID: a.AH.DGID, QPN: a.DestQPN},
		Tenant: e.cfg.Tenant,
		Send:   next != abi.QPStateRTR,
		RQPSN:  a.RQPSN,
	}
	if c.Send {
		c.SQPSN, c.RetryCnt, c.RNRRetry = a.SQPSN, a.RetryCnt, a.RNRRetry
	}
	return c, true, nil
}

// connect makes (or updates) c, q's connection, with the fabric. A
// refusal is the MODIFY_QP's error: the status the fabric's error wraps
// if it wraps one, else StatusInvalidArgument (the attributes name a peer
// the fabric cannot reach). Caller holds mu, not the gate.
func (q *qp) connect(c fabric.Connection) error {
	if err := q.e.connector.Connect(c); err != nil {
		st := abi.StatusInvalidArgument
		var s abi.Status
		if errors.As(err, &s) && s != abi.StatusOK {
			st = s
		}
		return fmt.Errorf("engine: qp %d: connect %v: %w: %w", c.Local.QPN, c, err, st)
	}
	return nil
}

// setConnection records that q's connection is now c once the MODIFY_QP that
// made it has taken effect; a connection under another local address (the
// GID at sgid_index changed) replaces the old one, which ends. Caller
// holds mu.
func (q *qp) setConnection(c fabric.Connection) {
	if q.connected && q.conn.Local != c.Local {
		q.e.connector.Disconnect(q.conn.Local)
	}
	q.conn, q.connected = c, true
}

// unconnect undoes connect for a MODIFY_QP that failed after it: a
// connection q did not have before ends; an update of q's connection is
// left (the QP has gone to ERR, and RESET or destroy ends it). Caller
// holds mu.
func (q *qp) unconnect(c fabric.Connection) {
	if !q.connected || q.conn.Local != c.Local {
		q.e.connector.Disconnect(c.Local)
	}
}

// disconnect ends the connections of qs (those that have one) before a
// reset, destroy or engine Reset takes the gate for them. Their passes
// stop first (closing, then a pass barrier on the gate: a pass that began
// before closing was set ends before Disconnect, so none posts for them
// afterwards), so the requests Disconnect flushes are dropped with the
// queues instead of completing in error. Taking the gate for the barrier
// waits only for passes and Incoming methods, never for the fabric.
// Disconnect then waits for the fabric's loop and completes every request
// of theirs, so lockQuiet does not wait a retry timeout for a dead peer.
// Caller holds mu, not the gate.
func (e *Engine) disconnect(qs []*qp) {
	if e.connector == nil {
		return
	}
	some := false
	for _, q := range qs {
		if q.connected {
			q.closing.Store(true)
			some = true
		}
	}
	if some {
		e.endConnections(qs)
	}
}

// endConnections ends the connections of qs that have one, after a pass
// barrier on the gate: a pass that was posting for them finishes first,
// and the flushed requests Disconnect completes are its last. Caller
// holds mu, not the gate, and has made sure no new pass posts for qs
// (closing, or a state that posts nothing).
func (e *Engine) endConnections(qs []*qp) {
	cn := e.connector
	e.gate.Lock() // the barrier: nothing to do inside
	e.gate.Unlock()
	for _, q := range qs {
		if q.connected {
			cn.Disconnect(q.conn.Local)
			q.connected = false
		}
	}
}
