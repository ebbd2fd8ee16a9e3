package pathsel

import "time"

// maxRTT caps RTT samples: longer than any real RTT, short enough that
// the arithmetic on RTTs (percentages, weights) cannot overflow.
const maxRTT = int64(1) << 40

// lossOne is 1 in the fixed-point loss EWMA.
const lossOne = 1024

// pathState is what a selector knows of one path; every kind keeps the
// same, in one array indexed by path.
type pathState struct {
	srtt     int64 // EWMA of RTT samples, alpha 1/8 (ns); 0: unmeasured
	minRTT   int64 // smallest sample (ns); 0: unmeasured
	lastAck  int64 // time of the last ACK (valid when acks > 0)
	probeAt  int64 // down: the next probe may go at this time
	probeGap int64 // down: the wait after the next probe
	acks     uint64
	losses   uint64
	// lossRate is an EWMA (gain 1/16) of "this report was a loss", in
	// 1/lossOne.
	lossRate uint16
	consec   uint16 // losses since the last ACK (saturating)
	down     bool
}

func (p *pathState) ack(now, rtt int64) {
	p.acks++
	p.lastAck = now
	p.consec = 0
	p.lossRate -= p.lossRate >> 4
	if rtt <= 0 {
		return
	}
	rtt = min(rtt, maxRTT)
	if p.srtt == 0 {
		p.srtt = rtt
	} else {
		p.srtt += (rtt - p.srtt) / 8
	}
	if p.minRTT == 0 || rtt < p.minRTT {
		p.minRTT = rtt
	}
}

func (p *pathState) loss() {
	p.losses++
	if p.consec < 0xffff {
		p.consec++
	}
	p.lossRate += (lossOne - p.lossRate) >> 4
}

// PathStats is a snapshot of one path as a selector sees it.
type PathStats struct {
	// SRTT is the smoothed RTT (alpha 1/8) and MinRTT the smallest
	// sample; both 0 until the path is measured.
	SRTT, MinRTT time.Duration
	// LastAck is the time of the last ACK on the path (ns; valid when
	// Acks > 0).
	LastAck int64
	// Acks and Losses count the reports.
	Acks, Losses uint64
	// LossRate is the recent fraction of reports that were losses.
	LossRate float64
	// Down: losses in a row made the path avoided, but for probes.
	Down bool
}

func (p *pathState) stats() PathStats {
	return PathStats{SRTT: time.Duration(p.srtt), MinRTT: time.Duration(p.minRTT), LastAck: p.lastAck,
		Acks: p.acks, Losses: p.losses, LossRate: float64(p.lossRate) / lossOne, Down: p.down}
}
