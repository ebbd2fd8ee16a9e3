package guestdriver

import (
	"context"
	"fmt"

	"github.com/vstellar/vstellar/virtio/abi"
)

// Endpoint is what two RC QPs exchange out of band before they connect
// (over TCP, a job launcher, a shared file: the application's choice), as
// libibverbs applications exchange LID/GID, QPN and PSN: the device's GID,
// the QP's number and its first send PSN.
type Endpoint struct {
	GID abi.GID
	QPN uint32
	PSN uint32
}

// Endpoint is this QP's end of a connection, named by the device's GID
// (index 0).
func (qp *QP) Endpoint() Endpoint {
	return Endpoint{GID: qp.pd.d.GID(), QPN: qp.qpn, PSN: qp.psn}
}

// RCConnect is the far end of an RC connection and the parameters of the
// path to it: what Connect puts into the three MODIFY_QPs. Start from
// QP.DefaultRCConnect.
type RCConnect struct {
	// GID and QPN name the peer QP.
	GID abi.GID
	QPN uint32
	// SGIDIndex is the local GID table entry to send from.
	SGIDIndex uint8
	// MTU is the path MTU.
	MTU abi.MTU
	// Access is what the peer may do to this QP's memory (remote
	// read/write/atomic), checked on top of each MR's own flags.
	Access abi.Access
	// SQPSN is this QP's first send PSN; RQPSN the first PSN expected
	// from the peer (its SQPSN).
	SQPSN, RQPSN uint32
	// MaxRdAtomic and MaxDestRdAtomic bound outstanding READs/atomics as
	// initiator and as responder.
	MaxRdAtomic, MaxDestRdAtomic uint8
	// Timeout is the local ACK timeout exponent (4.096 us * 2^Timeout).
	Timeout uint8
	// RetryCnt and RNRRetry are the transport and RNR retry counts (RNR
	// 7 = retry forever). MinRNRTimer is the RNR NAK delay index
	// (abi.RNRTimerMicros).
	RetryCnt, RNRRetry, MinRNRTimer uint8
}

// DefaultRCConnect returns the usual parameters for connecting qp to
// peer: the QP's own PSN and the peer's, MTU 4096, every remote access,
// 16 outstanding READs/atomics, timeout 14 (67 ms), 7 retries, infinite
// RNR retry with a 640 us RNR timer.
func (qp *QP) DefaultRCConnect(peer Endpoint) RCConnect {
	return RCConnect{
		GID: peer.GID, QPN: peer.QPN, MTU: abi.MTU4096,
		Access: abi.AccessLocalWrite | abi.AccessRemoteWrite | abi.AccessRemoteRead | abi.AccessRemoteAtomic,
		SQPSN:  qp.psn, RQPSN: peer.PSN,
		MaxRdAtomic: 16, MaxDestRdAtomic: 16,
		Timeout: 14, RetryCnt: 7, RNRRetry: 7, MinRNRTimer: 12,
	}
}

// ConnectTo brings an RC QP in RESET to RTS against peer, with
// DefaultRCConnect's parameters.
func (qp *QP) ConnectTo(ctx context.Context, peer Endpoint) error {
	return qp.Connect(ctx, qp.DefaultRCConnect(peer))
}

// Connect brings an RC QP in RESET through INIT and RTR to RTS against
// the peer c describes. Read/atomic depths are capped at the device's
// max_qp_rd_atom.
func (qp *QP) Connect(ctx context.Context, c RCConnect) error {
	lim := qp.pd.d.Limits()
	capRd := func(v uint8) uint8 {
		if uint32(v) > lim.MaxQPRdAtom {
			return uint8(min(lim.MaxQPRdAtom, 255))
		}
		return v
	}
	steps := []struct {
		mask abi.QPAttrMask
		attr abi.QPAttr
	}{
		{abi.QPAttrState | abi.QPAttrPKeyIndex | abi.QPAttrPort | abi.QPAttrAccessFlags,
			abi.QPAttr{State: abi.QPStateInit, Port: Port, AccessFlags: c.Access}},
		{abi.QPAttrState | abi.QPAttrAV | abi.QPAttrPathMTU | abi.QPAttrDestQPN | abi.QPAttrRQPSN |
			abi.QPAttrMaxDestRdAtomic | abi.QPAttrMinRNRTimer,
			abi.QPAttr{State: abi.QPStateRTR, PathMTU: c.MTU, DestQPN: c.QPN, RQPSN: c.RQPSN,
				MaxDestRdAtomic: capRd(c.MaxDestRdAtomic), MinRNRTimer: c.MinRNRTimer,
				AH: abi.AHAttr{DGID: c.GID, SGIDIndex: c.SGIDIndex, HopLimit: 64, Port: Port}}},
		{abi.QPAttrState | abi.QPAttrSQPSN | abi.QPAttrMaxQPRdAtomic | abi.QPAttrRetryCnt |
			abi.QPAttrRNRRetry | abi.QPAttrTimeout,
			abi.QPAttr{State: abi.QPStateRTS, SQPSN: c.SQPSN, MaxRdAtomic: capRd(c.MaxRdAtomic),
				RetryCnt: c.RetryCnt, RNRRetry: c.RNRRetry, Timeout: c.Timeout}},
	}
	for _, s := range steps {
		if err := qp.Modify(ctx, s.mask, s.attr); err != nil {
			return fmt.Errorf("guestdriver: QP %d to %v: %w", qp.qpn, s.attr.State, err)
		}
	}
	return nil
}
