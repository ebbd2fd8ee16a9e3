//go:build linux

package netlab

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Random loss is done by a tiny eBPF classifier on the device's clsact
// egress hook instead of netem: netem is often compiled out (it is on the
// kernel this was written on), while cls_bpf + clsact are standard. The
// program draws bpf_get_prandom_u32() per packet and drops it below a
// threshold kept in a one-entry array map, so changing the loss at run time
// is a map update with no filter churn.
//
// Loss is a two-state Markov chain: with probability p and correlation c,
//
//	P(drop | previous passed)  = p(1-c)
//	P(drop | previous dropped) = p + c(1-p)
//
// whose stationary drop rate is p and whose lag-1 correlation is c, so c
// lengthens loss bursts (mean burst 1/((1-p)(1-c))) without changing the
// average. The previous outcome is shared by all CPUs; concurrent senders
// see each other's state, which is fine for a test impairment.

// lossValue layout (all u64, native endian = little on supported arches).
const (
	lossOffThreshPass = 0  // threshold after a passed packet, in 2^-32 units
	lossOffThreshDrop = 8  // threshold after a dropped packet
	lossOffLast       = 16 // 1 if the previous packet was dropped
	lossOffDropped    = 24 // packets dropped (counter)
	lossOffPassed     = 32 // packets passed (counter)
	lossValueSize     = 40
)

// lossFilter is an attached loss program and its parameter map.
type lossFilter struct {
	mapFd int
}

// lossProgram assembles the classifier for the map mapFd.
func lossProgram(mapFd int) []bpfInsn {
	const r0, r1, r2, r6, r7, r8, r10 = 0, 1, 2, 6, 7, 8, 10
	return []bpfInsn{
		// key = 0 on the stack; r0 = map_lookup_elem(map, &key)
		{op: opStW, dst: r10, off: -4, imm: 0},
		{op: opLdImm64, dst: r1, src: pseudoMapFd, imm: int32(mapFd)},
		{},
		{op: opMov64Reg, dst: r2, src: r10},
		{op: opAdd64Imm, dst: r2, imm: -4},
		{op: opCall, imm: fnMapLookup},
		{op: opJeqImm, dst: r0, imm: 0, off: 10}, // no value: pass (-> 17)
		{op: opMov64Reg, dst: r6, src: r0},
		// r7 = threshold chosen by the previous outcome
		{op: opLdxDW, dst: r7, src: r6, off: lossOffThreshPass},
		{op: opLdxDW, dst: r8, src: r6, off: lossOffLast},
		{op: opJeqImm, dst: r8, imm: 0, off: 1},
		{op: opLdxDW, dst: r7, src: r6, off: lossOffThreshDrop},
		{op: opCall, imm: fnPrandomU32},
		{op: opMov64Imm, dst: r1, imm: 1},
		{op: opJltReg, dst: r0, src: r7, off: 4}, // rand < threshold: drop (-> 19)
		// pass
		{op: opStDW, dst: r6, off: lossOffLast, imm: 0},
		{op: opAtomicAdd, dst: r6, src: r1, off: lossOffPassed},
		{op: opMov64Imm, dst: r0, imm: tcActOK}, // 17
		{op: opExit},
		// drop
		{op: opStDW, dst: r6, off: lossOffLast, imm: 1},
		{op: opAtomicAdd, dst: r6, src: r1, off: lossOffDropped},
		{op: opMov64Imm, dst: r0, imm: tcActShot},
		{op: opExit},
	}
}

// lossThresholds converts (p, c) to the two 2^-32-scaled thresholds.
func lossThresholds(p, c float64) (afterPass, afterDrop uint64) {
	scale := func(x float64) uint64 {
		x = math.Max(0, math.Min(1, x))
		return uint64(math.Round(x * (1 << 32)))
	}
	return scale(p * (1 - c)), scale(p + c*(1-p))
}

func validLoss(p, c float64) error {
	if math.IsNaN(p) || p < 0 || p > 1 {
		return fmt.Errorf("netlab: loss probability %v outside [0, 1]", p)
	}
	if math.IsNaN(c) || c < 0 || c >= 1 {
		return fmt.Errorf("netlab: loss correlation %v outside [0, 1)", c)
	}
	return nil
}

// lossPriority orders the loss filter after the delay line's redirect
// (delayPriority), so a delayed packet meets it once, on its way out of
// the line.
const lossPriority = 2

// attachLoss installs the loss program on p's clsact egress hook. On error
// no fd is leaked; a clsact qdisc it added stays until the port is removed.
func attachLoss(p *port) (_ *lossFilter, err error) {
	mapFd, err := bpfArrayMap(lossValueSize, 1)
	if err != nil {
		return nil, fmt.Errorf("netlab: %s: loss filter: %w", p, err)
	}
	lf := &lossFilter{mapFd: mapFd}
	defer func() {
		if err != nil {
			err = errors.Join(err, lf.close())
		}
	}()
	// Zero thresholds: pass everything until set is called.
	if err := bpfMapUpdate(mapFd, 0, make([]byte, lossValueSize)); err != nil {
		return nil, err
	}
	progFd, err := bpfLoadSchedCls("netlab_loss", lossProgram(mapFd))
	if err != nil {
		return nil, fmt.Errorf("netlab: %s: loss filter: %w", p, err)
	}
	// The filter holds its own reference to the program (and it to the map).
	defer unix.Close(progFd)
	if err := p.ensureClsact(); err != nil {
		return nil, err
	}
	if err := p.ns.nl.FilterAdd(bpfFilter(p.index, netlink.HANDLE_MIN_EGRESS, lossPriority, progFd, "netlab_loss")); err != nil {
		return nil, fmt.Errorf("netlab: %s: attach loss filter: %w", p, err)
	}
	return lf, nil
}

// set changes drop probability and correlation, keeping the counters.
func (lf *lossFilter) set(p, c float64) error {
	v := make([]byte, lossValueSize)
	if err := bpfMapLookup(lf.mapFd, 0, v); err != nil {
		return err
	}
	pass, drop := lossThresholds(p, c)
	binary.LittleEndian.PutUint64(v[lossOffThreshPass:], pass)
	binary.LittleEndian.PutUint64(v[lossOffThreshDrop:], drop)
	return bpfMapUpdate(lf.mapFd, 0, v)
}

// counters returns how many packets the filter dropped and passed.
func (lf *lossFilter) counters() (dropped, passed uint64, err error) {
	v := make([]byte, lossValueSize)
	if err := bpfMapLookup(lf.mapFd, 0, v); err != nil {
		return 0, 0, err
	}
	return binary.LittleEndian.Uint64(v[lossOffDropped:]), binary.LittleEndian.Uint64(v[lossOffPassed:]), nil
}

// close releases the map. The filter (holding the program, which holds
// the map) goes with the port's clsact qdisc.
func (lf *lossFilter) close() error {
	if lf.mapFd < 0 {
		return nil
	}
	err := unix.Close(lf.mapFd)
	lf.mapFd = -1
	if err != nil {
		return fmt.Errorf("netlab: close loss map: %w", err)
	}
	return nil
}
