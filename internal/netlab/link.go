//go:build linux

package netlab

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// port is one end of a link: a network device inside a namespace, plus what
// the bed configured on it (routes to restore, shaping, loss).
type port struct {
	ns     *namespace
	name   string
	index  int
	mtu    int
	prefix netip.Prefix // address/len assigned by the bed, if any
	routes []netlink.Route
	shape  shaping
	loss   *lossFilter
	delay  *delayLine
	clsact bool  // we added a clsact qdisc (loss and delay filters hang off it)
	peer   *port // other end of the link
	up     bool  // administrative state set by the bed
}

// addVethPair creates a veth pair directly across two namespaces, so no
// device ever exists, even briefly, in the caller's namespace. Deleting
// either end deletes both.
func addVethPair(a *namespace, aName string, b *namespace, bName string, mtu int) (*port, *port, error) {
	attrs := netlink.NewLinkAttrs()
	attrs.Name = aName
	attrs.MTU = mtu
	veth := &netlink.Veth{
		LinkAttrs:     attrs,
		PeerName:      bName,
		PeerNamespace: netlink.NsFd(int(b.handle)),
		PeerMTU:       uint32(mtu),
	}
	if err := a.nl.LinkAdd(veth); err != nil {
		return nil, nil, fmt.Errorf("netlab: add veth %s/%s <-> %s/%s: %w", a.name, aName, b.name, bName, err)
	}
	pa, errA := lookupPort(a, aName)
	pb, errB := lookupPort(b, bName)
	if err := errors.Join(errA, errB); err != nil {
		delErr := a.nl.LinkDel(veth)
		return nil, nil, errors.Join(err, delErr)
	}
	pa.peer, pb.peer = pb, pa
	return pa, pb, nil
}

func lookupPort(ns *namespace, name string) (*port, error) {
	l, err := ns.nl.LinkByName(name)
	if err != nil {
		return nil, fmt.Errorf("netlab: %s: find %s: %w", ns.name, name, err)
	}
	return &port{ns: ns, name: name, index: l.Attrs().Index, mtu: l.Attrs().MTU}, nil
}

func (p *port) link() netlink.Link {
	attrs := netlink.NewLinkAttrs()
	attrs.Name = p.name
	attrs.Index = p.index
	return &netlink.Device{LinkAttrs: attrs}
}

func (p *port) String() string { return p.ns.name + "/" + p.name }

// addAddr assigns pfx (host address and subnet length) to the device.
func (p *port) addAddr(pfx netip.Prefix) error {
	a := &netlink.Addr{IPNet: &net.IPNet{
		IP:   pfx.Addr().AsSlice(),
		Mask: net.CIDRMask(pfx.Bits(), pfx.Addr().BitLen()),
	}}
	if err := p.ns.nl.AddrAdd(p.link(), a); err != nil {
		return fmt.Errorf("netlab: %s: add address %s: %w", p, pfx, err)
	}
	p.prefix = pfx
	return nil
}

// setUp sets the administrative state. Linux IPv4 flushes routes through a
// device when it goes down, so bringing it back up re-installs the routes
// the bed added (connected routes come back by themselves).
func (p *port) setUp(up bool) error {
	if !up {
		if err := p.ns.nl.LinkSetDown(p.link()); err != nil {
			return fmt.Errorf("netlab: %s: set down: %w", p, err)
		}
		p.up = false
		return nil
	}
	if err := p.ns.nl.LinkSetUp(p.link()); err != nil {
		return fmt.Errorf("netlab: %s: set up: %w", p, err)
	}
	p.up = true
	for i := range p.routes {
		r := p.routes[i]
		if err := p.ns.nl.RouteReplace(&r); err != nil {
			return fmt.Errorf("netlab: %s: restore route %s: %w", p, r.Dst, err)
		}
	}
	return nil
}

// operUpTimeout bounds the wait for the kernel to report a link running.
const operUpTimeout = 5 * time.Second

// waitRunning waits until the link is operationally up, so that the first
// packet sent on a fresh or re-enabled link is not lost. Carrier and qdisc
// activation happen asynchronously (linkwatch) after the link is set up;
// until then the device drops everything, and an ARP request lost that way
// costs a one-second retransmit. Without its peer up a veth never runs, so
// then there is nothing to wait for.
func (p *port) waitRunning(ctx context.Context) error {
	if !p.up || p.peer == nil || !p.peer.up {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, operUpTimeout)
	defer cancel()
	for {
		l, err := p.ns.nl.LinkByIndex(p.index)
		if err != nil {
			return fmt.Errorf("netlab: %s: read link state: %w", p, err)
		}
		if l.Attrs().OperState == netlink.OperUp {
			// linkwatch sets the oper state and activates the qdisc in
			// one step under RTNL; an RTNL-taking request (a no-op set
			// up) therefore returns only after activation is complete.
			if err := p.ns.nl.LinkSetUp(p.link()); err != nil {
				return fmt.Errorf("netlab: %s: set up: %w", p, err)
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("netlab: %s: link not running (state %s): %w", p, l.Attrs().OperState, ctx.Err())
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// addRoute routes dst through this device, via gateway gw if valid (else
// on-link). The route is remembered so setUp(true) can restore it.
func (p *port) addRoute(dst netip.Prefix, gw netip.Addr) error {
	r := netlink.Route{
		LinkIndex: p.index,
		Dst: &net.IPNet{
			IP:   dst.Masked().Addr().AsSlice(),
			Mask: net.CIDRMask(dst.Bits(), dst.Addr().BitLen()),
		},
		Scope: unix.RT_SCOPE_LINK,
	}
	if gw.IsValid() {
		r.Gw = gw.AsSlice()
		r.Scope = unix.RT_SCOPE_UNIVERSE
	}
	if err := p.ns.nl.RouteAdd(&r); err != nil {
		return fmt.Errorf("netlab: %s: add route %s via %s: %w", p, dst, gw, err)
	}
	p.routes = append(p.routes, r)
	return nil
}

// addNeighbour records the peer end's address and MAC as a permanent
// neighbour, so the link needs no ARP: on a lossy link a lost ARP
// exchange would otherwise stall the first datagrams for a second or more
// (the kernel's retransmit time), and an address change never happens in
// a bed.
func (p *port) addNeighbour(ip netip.Addr) error {
	peer, err := p.peer.ns.nl.LinkByIndex(p.peer.index)
	if err != nil {
		return fmt.Errorf("netlab: %s: peer link: %w", p, err)
	}
	n := netlink.Neigh{LinkIndex: p.index, State: netlink.NUD_PERMANENT, IP: ip.AsSlice(), HardwareAddr: peer.Attrs().HardwareAddr}
	if err := p.ns.nl.NeighSet(&n); err != nil {
		return fmt.Errorf("netlab: %s: neighbour %s: %w", p, ip, err)
	}
	return nil
}

// remove takes down what the bed put on the device (root qdisc, the clsact
// qdisc with the loss and delay filters, their BPF maps, the delay line's
// tap device and thread) and deletes the device. A link already gone, e.g.
// because its peer was deleted first, is not an error.
func (p *port) remove() error {
	var errs []error
	if err := p.clearShaping(); err != nil && !isGone(err) {
		errs = append(errs, err)
	}
	if p.clsact {
		if err := p.ns.nl.QdiscDel(clsactOf(p.index)); err != nil && !isGone(err) {
			errs = append(errs, fmt.Errorf("netlab: %s: delete clsact qdisc: %w", p, err))
		}
		p.clsact = false
	}
	if p.delay != nil {
		errs = append(errs, p.delay.close())
		p.delay = nil
	}
	if p.loss != nil {
		errs = append(errs, p.loss.close())
		p.loss = nil
	}
	if err := p.ns.nl.LinkDel(p.link()); err != nil && !isGone(err) {
		errs = append(errs, fmt.Errorf("netlab: %s: delete link: %w", p, err))
	}
	return errors.Join(errs...)
}

// ensureClsact adds the clsact qdisc that loss and delay filters attach to,
// once per port.
func (p *port) ensureClsact() error {
	if p.clsact {
		return nil
	}
	if err := p.ns.nl.QdiscAdd(clsactOf(p.index)); err != nil {
		return fmt.Errorf("netlab: %s: add clsact qdisc: %w", p, err)
	}
	p.clsact = true
	return nil
}

func clsactOf(index int) *netlink.Clsact {
	return &netlink.Clsact{QdiscAttrs: netlink.QdiscAttrs{
		LinkIndex: index,
		Handle:    netlink.MakeHandle(0xffff, 0),
		Parent:    netlink.HANDLE_CLSACT,
	}}
}

// bpfFilter is a direct-action cls_bpf filter for program fd on the clsact
// hook parent (netlink.HANDLE_MIN_EGRESS or HANDLE_MIN_INGRESS) of a
// device; lower prio runs first.
func bpfFilter(index int, parent uint32, prio uint16, fd int, name string) *netlink.BpfFilter {
	return &netlink.BpfFilter{
		FilterAttrs: netlink.FilterAttrs{
			LinkIndex: index,
			Parent:    parent,
			Handle:    netlink.MakeHandle(0, 1),
			Protocol:  unix.ETH_P_ALL,
			Priority:  prio,
		},
		Fd:           fd,
		Name:         name,
		DirectAction: true,
	}
}

// isGone reports errors meaning "the device or qdisc is not there".
func isGone(err error) bool {
	return errors.Is(err, unix.ENODEV) || errors.Is(err, unix.ENOENT)
}
