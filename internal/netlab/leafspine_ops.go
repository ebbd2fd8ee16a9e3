//go:build linux

package netlab

import (
	"context"
	"errors"
	"fmt"

	"github.com/vishvananda/netlink"
)

// Run-time impairments and counters of a fabric's leaf<->spine links. There
// is no routing protocol: nothing reacts to a lossy, black-holed or downed
// link except the kernel's own handling of a device that is down.

// link runs fn on the uplink (leaf, spine) with the fabric locked, after
// checking the indices and that the fabric is open.
func (f *Fabric) link(leaf, spine int, fn func(u *uplink) error) error {
	if leaf < 0 || leaf >= f.opts.Leaves || spine < 0 || spine >= f.opts.Spines {
		return fmt.Errorf("netlab: no link between leaf %d and spine %d (fabric has %d leaves, %d spines)",
			leaf, spine, f.opts.Leaves, f.opts.Spines)
	}
	f.bed.mu.Lock()
	defer f.bed.mu.Unlock()
	if f.bed.done {
		return ErrClosed
	}
	return fn(f.links[leaf][spine])
}

// applyLoss makes the loss filters match u's settings: the leaf end drops
// everything while black-holed, else with u.loss; the spine end with u.loss.
func (f *Fabric) applyLoss(u *uplink) error {
	up := u.loss
	if u.blackHole {
		up = 1
	}
	return errors.Join(u.lp.setLoss(up, f.opts.LossCorrelation), u.sp.setLoss(u.loss, f.opts.LossCorrelation))
}

// SetLinkLoss makes the link between leaf and spine drop packets with
// probability p in each direction (with LeafSpineOptions.LossCorrelation),
// like a link with a bad optic. 0 restores a clean link.
func (f *Fabric) SetLinkLoss(leaf, spine int, p float64) error {
	if err := validLoss(p, f.opts.LossCorrelation); err != nil {
		return err
	}
	return f.link(leaf, spine, func(u *uplink) error {
		old := u.loss
		u.loss = p
		if err := f.applyLoss(u); err != nil {
			u.loss = old
			return err
		}
		return nil
	})
}

// BlackHole makes leaf silently drop everything it sends to spine (on) or
// stop doing so (off), while its ECMP routes keep using that spine: what a
// failing link looks like to the sending leaf when nothing withdraws the
// route. Flows hashed onto that spine are lost; the others are untouched.
// Traffic from spine to leaf still passes. Losses set by SetLinkLoss come
// back when the black hole is switched off.
func (f *Fabric) BlackHole(leaf, spine int, on bool) error {
	return f.link(leaf, spine, func(u *uplink) error {
		old := u.blackHole
		u.blackHole = on
		if err := f.applyLoss(u); err != nil {
			u.blackHole = old
			return err
		}
		return nil
	})
}

// SetLinkUp sets both ends of the link between leaf and spine
// administratively down or up. While it is down the kernel takes the link's
// nexthop out of the leaf's ECMP routes, so that leaf's flows rehash onto
// the remaining spines; other leaves, having no routing protocol, still
// send to this leaf through that spine, which drops it (no route). Up
// restores the routes and returns once the link runs (or ctx ends).
func (f *Fabric) SetLinkUp(ctx context.Context, leaf, spine int, up bool) error {
	return f.link(leaf, spine, func(u *uplink) error {
		if !up {
			u.up = false
			return errors.Join(u.lp.setUp(false), u.sp.setUp(false))
		}
		// setUp re-installs the spine's route to this leaf's hosts.
		if err := errors.Join(u.lp.setUp(true), u.sp.setUp(true)); err != nil {
			return err
		}
		if err := errors.Join(u.lp.waitRunning(ctx), u.sp.waitRunning(ctx)); err != nil {
			return err
		}
		u.up = true
		// The kernel revives a dead nexthop by itself, but removes a
		// route whose nexthops all died; replacing restores both cases
		// with exactly the links that are up.
		leafNS := f.leaves[leaf]
		for m := range f.leaves {
			if m == leaf {
				continue
			}
			r := f.ecmpRoute(leaf, m)
			if err := leafNS.nl.RouteReplace(&r); err != nil {
				return fmt.Errorf("netlab: %s: restore ECMP route %s: %w", leafNS.name, hostSubnet(m), err)
			}
		}
		return nil
	})
}

// LinkCounters are cumulative counters of one leaf<->spine link, seen at
// the leaf's port toward the spine.
type LinkCounters struct {
	// TxPackets and TxBytes count leaf->spine frames that went onto the
	// link (after loss, black hole and rate limit).
	TxPackets, TxBytes uint64
	// RxPackets and RxBytes count spine->leaf frames the leaf received.
	RxPackets, RxBytes uint64
	// LossDropped counts leaf->spine frames dropped by SetLinkLoss or
	// BlackHole.
	LossDropped uint64
	// RateDropped counts leaf->spine frames dropped by the rate limiter
	// because its queue was full.
	RateDropped uint64
}

// Routed is how many frames the leaf sent toward the spine, delivered or
// not: what its ECMP hashing put on this link.
func (c LinkCounters) Routed() uint64 { return c.TxPackets + c.LossDropped + c.RateDropped }

// Sub returns the counters accumulated since earlier.
func (c LinkCounters) Sub(earlier LinkCounters) LinkCounters {
	return LinkCounters{
		TxPackets:   c.TxPackets - earlier.TxPackets,
		TxBytes:     c.TxBytes - earlier.TxBytes,
		RxPackets:   c.RxPackets - earlier.RxPackets,
		RxBytes:     c.RxBytes - earlier.RxBytes,
		LossDropped: c.LossDropped - earlier.LossDropped,
		RateDropped: c.RateDropped - earlier.RateDropped,
	}
}

// LinkCounters reads the counters of the link between leaf and spine.
func (f *Fabric) LinkCounters(leaf, spine int) (LinkCounters, error) {
	var c LinkCounters
	err := f.link(leaf, spine, func(u *uplink) error {
		var err error
		c, err = u.lp.counters()
		return err
	})
	return c, err
}

// LeafCounters reads the counters of all of leaf's links, indexed by
// spine: how the leaf spread its traffic.
func (f *Fabric) LeafCounters(leaf int) ([]LinkCounters, error) {
	cs := make([]LinkCounters, f.opts.Spines)
	for s := range cs {
		c, err := f.LinkCounters(leaf, s)
		if err != nil {
			return nil, err
		}
		cs[s] = c
	}
	return cs, nil
}

// counters reads the device statistics, the loss filter's drops and the
// root qdisc's drops of p.
func (p *port) counters() (LinkCounters, error) {
	var c LinkCounters
	l, err := p.ns.nl.LinkByIndex(p.index)
	if err != nil {
		return c, fmt.Errorf("netlab: %s: read link statistics: %w", p, err)
	}
	if st := l.Attrs().Statistics; st != nil {
		c.TxPackets, c.TxBytes = st.TxPackets, st.TxBytes
		c.RxPackets, c.RxBytes = st.RxPackets, st.RxBytes
	}
	if p.loss != nil {
		dropped, _, err := p.loss.counters()
		if err != nil {
			return c, fmt.Errorf("netlab: %s: read loss counters: %w", p, err)
		}
		c.LossDropped = dropped
	}
	if p.shape.installed != "" {
		qs, err := p.ns.nl.QdiscList(l)
		if err != nil {
			return c, fmt.Errorf("netlab: %s: read qdisc statistics: %w", p, err)
		}
		for _, q := range qs {
			a := q.Attrs()
			if a.Parent == netlink.HANDLE_ROOT && a.Statistics != nil && a.Statistics.Queue != nil {
				c.RateDropped = uint64(a.Statistics.Queue.Drops)
			}
		}
	}
	return c, nil
}
