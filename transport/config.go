package transport

import (
	"errors"
	"fmt"
	"time"

	"github.com/vstellar/vstellar/transport/wire"
)

// Recovery is how a connection recovers lost packets.
type Recovery uint8

const (
	// Selective is selective repeat: the receiver keeps out-of-order
	// packets and reports them in the SACK bitmap; the sender resends
	// only what is lost (after DupThresh later packets were acknowledged,
	// or a reordering time, or the RTO).
	Selective Recovery = iota
	// GoBackN is what hardware RNICs do: the receiver drops every packet
	// that is not the next in sequence, and the sender, told so, resends
	// everything from the first unacknowledged packet. The baseline.
	GoBackN
)

func (r Recovery) String() string {
	switch r {
	case Selective:
		return "selective"
	case GoBackN:
		return "go-back-n"
	}
	return fmt.Sprintf("Recovery(%d)", uint8(r))
}

// Config configures one connection. Zero fields take the defaults.
type Config struct {
	// Identity: the tenant, the two ends' connection ids and the two
	// packet streams' tokens. LocalConn is the id the peer puts in every
	// packet it sends us, RemoteConn the one we put in ours. A token
	// belongs to a stream, not to a direction (docs/wire.md, section 9):
	// LocalToken is the peer's stream's (its DATA packets, and the ACKs
	// we send for them), RemoteToken ours (our DATA, the peer's ACKs).
	Tenant      uint32
	LocalConn   uint32
	LocalToken  uint64
	RemoteConn  uint32
	RemoteToken uint64

	// RecvPSN and SendPSN are the first PSNs of the peer's stream and of
	// ours: an RC QP's rq_psn and sq_psn, as in IB. A fabric that mixes
	// them into the tokens makes each incarnation of a QP pair a
	// connection of its own.
	RecvPSN, SendPSN uint32
	// SendLater: our stream has no PSN and token yet (an RC QP in RTR
	// knows its peer's stream, rq_psn, but not yet its own, sq_psn, which
	// comes at RTS). The connection takes the peer's messages and
	// acknowledges them, but Post fails and nothing of ours leaves until
	// StartSend. SendPSN and RemoteToken are ignored.
	SendLater bool
	// StreamToken, with SendLater, is our stream's token if it starts
	// at psn. With it, the peer's first READ or atomic (whose response
	// needs our stream) starts our stream before StartSend, at the psn
	// the request names (wire.Data.RespPSN: the peer's RecvPSN) and with
	// StreamToken of it: an RC QP in RTR answers at once, as on IB.
	// Without it, a response waits for StartSend.
	StreamToken func(psn uint32) uint64

	// MaxPayload is the payload bytes per packet (MTU minus IP, UDP and
	// the transport's headers; see docs/wire.md). Default 1392 (MTU 1500).
	MaxPayload int
	// Window bounds the packets in flight (and so the receiver's
	// reordering buffer): at most 256, what one SACK bitmap describes.
	Window int
	// Recovery is selective repeat (default) or go-back-N.
	Recovery Recovery
	// DupThresh: a first transmission with this many later packets
	// acknowledged is lost (selective repeat). Well above TCP's 3,
	// because spraying over paths of different delay reorders; with
	// ReorderAdaptive it is a floor, raised past the reordering seen.
	// Default 16.
	DupThresh int
	// Reordering time: an unacknowledged packet is also lost once a packet
	// sent after it is acknowledged and it is this much older than the
	// smoothed RTT (RACK). With ReorderAdaptive, older than the longest a
	// packet recently took to be acknowledged (at least the smoothed RTT)
	// plus this window, which grows while losses prove spurious
	// (reorder.go). Default 250 µs.
	ReorderWindow time.Duration
	// Reordering: ReorderAdaptive (default) learns the reordering the
	// connection sees; ReorderFixed keeps DupThresh and ReorderWindow
	// as they are. Go-back-N ignores it.
	Reordering ReorderMode
	// NoDupReports: the connection neither reports the DATA packets it
	// receives twice in its ACKs (wire.FlagDup) nor uses the peer's
	// reports, so it finds spurious retransmissions by their echoed
	// timestamps alone: the baseline duplicate reports are measured
	// against. Go-back-N neither sends nor uses them either way.
	NoDupReports bool
	// UndoCuts: when every loss of a congestion event proves spurious
	// (selective repeat), a CC that is an Undoer takes its cut back
	// (undo.go). Off by default: on the leaf-spine testbed, where the
	// sprayers' reordering is the spine queues' delay spread, those
	// cuts are what keeps the queues short; undoing them saved nothing
	// for the sprayers and cost bestrtt a tenth of its goodput in drops
	// (docs/multipath.md, "Undo").
	UndoCuts bool
	// RTO bounds and the initial value. Defaults 1 ms, 200 µs, 100 ms.
	RTOInit, RTOMin, RTOMax time.Duration
	// RetryLimit: consecutive timeouts without progress before the
	// connection fails (IB retry_cnt). Default 7.
	RetryLimit int
	// RNRRetry: receiver-not-ready retries per message; 7 means for ever
	// (IB rnr_retry). Default 7.
	RNRRetry int
	// BusyTimeout: how long the peer may stay busy (BUSY NAKs: its
	// device is in a control change, which may take seconds) before
	// that costs one retry against RetryLimit; a shorter busy spell
	// costs none, and RNRRetry is never used. A peer busy for good
	// fails the connection after about (RetryLimit+1) x BusyTimeout.
	// Default 1 s.
	BusyTimeout time.Duration

	// Path picks each packet's path; default SinglePath{}.
	Path PathSelector
	// CC bounds what is in flight; default a FixedWindow of Window
	// (transport/cc builds Swift and CUBIC). A CC that is also a Pacer
	// spaces the data packets.
	CC CongestionControl
}

const maxWindow = wire.SACKBits

// withDefaults fills zero fields and validates.
func (c Config) withDefaults() (Config, error) {
	if c.MaxPayload == 0 {
		c.MaxPayload = 1392
	}
	if c.Window == 0 {
		c.Window = maxWindow
	}
	if c.DupThresh == 0 {
		c.DupThresh = 16
	}
	if c.ReorderWindow == 0 {
		c.ReorderWindow = 250 * time.Microsecond
	}
	if c.RTOInit == 0 {
		c.RTOInit = time.Millisecond
	}
	if c.RTOMin == 0 {
		c.RTOMin = 200 * time.Microsecond
	}
	if c.RTOMax == 0 {
		c.RTOMax = 100 * time.Millisecond
	}
	if c.RetryLimit == 0 {
		c.RetryLimit = 7
	}
	if c.RNRRetry == 0 {
		c.RNRRetry = 7
	}
	if c.BusyTimeout == 0 {
		c.BusyTimeout = time.Second
	}
	if c.Path == nil {
		c.Path = SinglePath{}
	}
	if c.CC == nil {
		c.CC = NewFixedWindow(c.Window)
	}
	switch {
	case c.MaxPayload < 64 || c.MaxPayload > 65535:
		return c, fmt.Errorf("transport: max payload %d outside 64..65535: %w", c.MaxPayload, ErrConfig)
	case c.Window < 1 || c.Window > maxWindow:
		return c, fmt.Errorf("transport: window %d outside 1..%d: %w", c.Window, maxWindow, ErrConfig)
	case c.DupThresh < 1:
		return c, fmt.Errorf("transport: dup threshold %d: %w", c.DupThresh, ErrConfig)
	case c.RTOMin <= 0 || c.RTOMin > c.RTOMax || c.RTOInit < c.RTOMin || c.RTOInit > c.RTOMax:
		return c, fmt.Errorf("transport: RTO %v not within [%v, %v]: %w", c.RTOInit, c.RTOMin, c.RTOMax, ErrConfig)
	case c.RetryLimit < 1 || c.RetryLimit > 7 || c.RNRRetry < 1 || c.RNRRetry > 7:
		return c, fmt.Errorf("transport: retry limit %d / rnr retry %d outside 1..7: %w", c.RetryLimit, c.RNRRetry, ErrConfig)
	case c.BusyTimeout < 0:
		return c, fmt.Errorf("transport: busy timeout %v: %w", c.BusyTimeout, ErrConfig)
	case c.Reordering > ReorderFixed:
		return c, fmt.Errorf("transport: reordering mode %d: %w", c.Reordering, ErrConfig)
	case c.Recovery > GoBackN:
		return c, fmt.Errorf("transport: %v: %w", c.Recovery, ErrConfig)
	}
	return c, nil
}

// Errors, wrapped with detail.
var (
	ErrConfig  = errors.New("transport: bad configuration")
	ErrMessage = errors.New("transport: bad message")
	ErrClosed  = errors.New("transport: connection in error")
	ErrFull    = errors.New("transport: too many messages outstanding")
	// ErrForeign and ErrInvalid are wrapped by Handle's errors.
	ErrForeign = errors.New("transport: packet of another tenant or connection")
	ErrInvalid = errors.New("transport: packet contradicts the connection")
	// ErrNotStarted: Post before StartSend on a SendLater connection.
	ErrNotStarted = errors.New("transport: send stream not started")
)
