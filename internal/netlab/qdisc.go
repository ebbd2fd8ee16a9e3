//go:build linux

package netlab

import (
	"errors"
	"fmt"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Rate limiting uses tbf rather than htb: a bed needs one rate per link
// direction, which tbf expresses as a single root qdisc that can be replaced
// in place at run time. htb would need a qdisc, a class and a default-class
// mapping per device for the same effect; its strength (sharing among
// classes) is not needed here.

const (
	// ethHeader is counted by tbf (it shapes L2 frames, no preamble/FCS).
	ethHeader = 14
	// tbfBurstTime sizes the token bucket: 4 ms worth of tokens (the old
	// HZ=250 rule of thumb), at least two full frames so a jumbo frame
	// always fits.
	tbfBurstTime = 4 * time.Millisecond
	// tbfLatency bounds queueing delay in the limiter; beyond it packets
	// are dropped, like a shallow router buffer.
	tbfLatency = 25 * time.Millisecond
	// MinRate is the lowest accepted rate limit in bits/s; below it the
	// token bucket times overflow tc's 32-bit tick fields.
	MinRate = 64_000
)

// shaping is the desired rate limit of a port. Loss and delay are done by
// BPF filters and the delay line (loss.go, delay.go), not by the root
// qdisc, so they work without netem.
type shaping struct {
	rate      uint64 // bits/s, 0 = unlimited
	installed string // kind of root qdisc we installed, "" if none
}

// applyShaping makes the root qdisc match p.shape: tbf for a rate, the
// device default otherwise. Replace changes a tbf in place, so run-time
// changes never leave the device unshaped in between.
func (p *port) applyShaping() error {
	if p.shape.rate == 0 {
		return p.clearShaping()
	}
	attrs := netlink.QdiscAttrs{LinkIndex: p.index, Handle: netlink.MakeHandle(1, 0), Parent: netlink.HANDLE_ROOT}
	q := tbfFor(attrs, p.shape.rate, p.mtu)
	if err := p.ns.nl.QdiscReplace(q); err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EOPNOTSUPP) {
			return fmt.Errorf("netlab: %s: tbf qdisc not available in this kernel (CONFIG_NET_SCH_TBF): %w: %w",
				p, errors.ErrUnsupported, err)
		}
		return fmt.Errorf("netlab: %s: install %s qdisc: %w", p, q.Type(), err)
	}
	p.shape.installed = q.Type()
	return nil
}

// tbfFor builds a token bucket for rate bits/s on a device with this MTU.
func tbfFor(attrs netlink.QdiscAttrs, rate uint64, mtu int) *netlink.Tbf {
	bytesPerSec := rate / 8
	burst := bytesPerSec * uint64(tbfBurstTime) / uint64(time.Second)
	if minBurst := 2 * uint64(mtu+ethHeader); burst < minBurst {
		burst = minBurst
	}
	limit := burst + bytesPerSec*uint64(tbfLatency)/uint64(time.Second)
	return &netlink.Tbf{
		QdiscAttrs: attrs,
		Rate:       bytesPerSec,
		Limit:      uint32(min(limit, 1<<31)),
		// Buffer is the bucket size expressed as transmit time in
		// psched ticks, as tc computes it.
		Buffer: netlink.Xmittime(bytesPerSec, uint32(min(burst, 1<<31))),
	}
}

// clearShaping removes the root qdisc we installed, if any, restoring the
// device default.
func (p *port) clearShaping() error {
	if p.shape.installed == "" {
		return nil
	}
	q := &netlink.GenericQdisc{
		QdiscAttrs: netlink.QdiscAttrs{LinkIndex: p.index, Handle: netlink.MakeHandle(1, 0), Parent: netlink.HANDLE_ROOT},
		QdiscType:  p.shape.installed,
	}
	if err := p.ns.nl.QdiscDel(q); err != nil {
		return fmt.Errorf("netlab: %s: delete %s qdisc: %w", p, p.shape.installed, err)
	}
	p.shape.installed = ""
	return nil
}
