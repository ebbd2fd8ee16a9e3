//go:build linux

package netlab

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/netip"
	"os"
	"sync"
	"time"
)

// ErrClosed is returned by operations on a closed Bed or its hosts.
var ErrClosed = errors.New("netlab: bed is closed")

// Options configures a testbed. The zero value is a 1500-byte-MTU link
// without impairments in DefaultSubnet.
type Options struct {
	// Prefix starts every namespace name (default DefaultPrefix). Use a
	// distinct one per test suite so Cleanup only touches its own leftovers.
	Prefix string
	// Subnet is the IPv4 link subnet (default DefaultSubnet). /30 or
	// shorter: hosts get the first two usable addresses; /31: both.
	Subnet netip.Prefix
	// MTU of both link ends (default 1500; 68..65535, e.g. 9000).
	MTU int
	// Rate limits each direction to this many bits/s of L2 frames via tbf
	// (0 = unlimited, otherwise >= MinRate).
	Rate uint64
	// Loss is the drop probability of each direction, in [0, 1].
	Loss float64
	// LossCorrelation in [0, 1) makes losses bursty at the same average
	// rate (see loss.go); it also applies to later SetLoss calls.
	LossCorrelation float64
	// Delay is added one way to each direction, 0..MaxDelay. It is done
	// by a delay line (delay.go: BPF redirect into a tap, held in user
	// space, no netem or fq needed), which costs a thread per direction
	// and a few system calls per packet. Bed.SetDelay changes it.
	Delay time.Duration
	// Logger receives construction and teardown events (default: discard).
	Logger *slog.Logger

	// testHook, if set, is called after each construction step; an error
	// aborts construction there (tests use it to inject failures).
	testHook func(step string) error
}

// DefaultSubnet is the link subnet used when Options.Subnet is unset. It is
// in 198.18.0.0/15, reserved for network benchmarking (RFC 2544), so it
// does not collide with real networks; bed traffic never leaves its
// namespaces anyway.
const DefaultSubnet = "198.18.0.0/30"

func (o Options) withDefaults() (Options, error) {
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if err := validatePrefix(o.Prefix); err != nil {
		return o, err
	}
	if !o.Subnet.IsValid() {
		o.Subnet = netip.MustParsePrefix(DefaultSubnet)
	}
	if !o.Subnet.Addr().Is4() {
		return o, fmt.Errorf("netlab: subnet %s: only IPv4 is supported", o.Subnet)
	}
	if o.Subnet.Bits() > 31 {
		return o, fmt.Errorf("netlab: subnet %s too small for two hosts", o.Subnet)
	}
	o.Subnet = o.Subnet.Masked()
	if o.MTU == 0 {
		o.MTU = 1500
	}
	if o.MTU < 68 || o.MTU > 65535 {
		return o, fmt.Errorf("netlab: MTU %d outside 68..65535", o.MTU)
	}
	if err := validRate(o.Rate); err != nil {
		return o, err
	}
	if err := validLoss(o.Loss, o.LossCorrelation); err != nil {
		return o, err
	}
	if err := validDelay(o.Delay); err != nil {
		return o, err
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o, nil
}

func validRate(r uint64) error {
	if r != 0 && r < MinRate {
		return fmt.Errorf("netlab: rate %d bit/s below minimum %d", r, MinRate)
	}
	if r > math.MaxUint64/2 {
		return fmt.Errorf("netlab: rate %d bit/s too large", r)
	}
	return nil
}

// hostAddrs returns the two host addresses of subnet.
func hostAddrs(subnet netip.Prefix) (a, b netip.Prefix) {
	first := subnet.Addr()
	if subnet.Bits() <= 30 {
		first = first.Next() // skip the network address
	}
	second := first.Next()
	return netip.PrefixFrom(first, subnet.Bits()), netip.PrefixFrom(second, subnet.Bits())
}

// Bed is a running testbed. Its methods are safe for concurrent use.
type Bed struct {
	log   *slog.Logger
	opts  Options
	mu    sync.RWMutex // guards everything below; Do holds it shared while entering
	done  bool
	hosts []*Host
	undo  undoStack
}

// Host is one network namespace of a bed.
type Host struct {
	bed  *Bed
	name string
	ns   *namespace
	port *port // the host's interface on the link
}

// Name is the host's name within its bed ("a" or "b" for TwoHost,
// "h<leaf>-<i>" for LeafSpine).
func (h *Host) Name() string { return h.name }

// Namespace is the namespace name under /run/netns (usable with `ip netns`).
func (h *Host) Namespace() string { return h.ns.name }

// Addr is the host's IPv4 address on the link.
func (h *Host) Addr() netip.Addr { return h.port.prefix.Addr() }

// Prefix is the host's address with the link's prefix length.
func (h *Host) Prefix() netip.Prefix { return h.port.prefix }

// Iface is the name of the host's link interface (inside its namespace).
func (h *Host) Iface() string { return h.port.name }

// MTU is the MTU of the host's link interface.
func (h *Host) MTU() int { return h.port.mtu }

// Do runs fn on a goroutine whose OS thread is locked into the host's
// network namespace and waits for it. Sockets fn opens belong to the host's
// namespace and stay there after Do returns; they can be used from any
// goroutine. The thread is moved back before it is released (or discarded if
// that fails). A panic in fn is re-raised in the caller.
func (h *Host) Do(fn func() error) error {
	return onThread(func() error {
		h.bed.mu.RLock()
		defer h.bed.mu.RUnlock()
		if h.bed.done {
			return ErrClosed
		}
		return h.ns.enter()
	}, fn)
}

// TwoHost builds two hosts, "a" and "b", each in its own namespace, joined by
// a veth pair with an address from opts.Subnet on each end, default routes
// pointing at each other, and the requested impairments (rate, loss, delay)
// on both directions.
// If anything fails, everything built so far is removed before returning.
func TwoHost(ctx context.Context, opts Options) (_ *Bed, err error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	b := &Bed{log: o.Logger, opts: o}
	defer b.undo.unwindOnError(&err, b.log)
	step := stepper(ctx, b.log, o.testHook)
	nonce, err := newNonce()
	if err != nil {
		return nil, err
	}
	if err := step("start"); err != nil {
		return nil, err
	}

	names := [2]string{"a", "b"}
	var nss [2]*namespace
	for i, hn := range names {
		ns, err := createNamespace(nsName(o.Prefix, os.Getpid(), nonce, hn))
		if err != nil {
			return nil, err
		}
		nss[i] = ns
		b.undo.push("namespace "+ns.name, ns.close)
		if err := step("namespace " + hn); err != nil {
			return nil, err
		}
	}

	pa, pb, err := addVethPair(nss[0], "eth0", nss[1], "eth0", o.MTU)
	if err != nil {
		return nil, err
	}
	// Remove both ends explicitly (qdiscs, loss maps, device) rather than
	// relying on namespace destruction, which a socket the caller opened
	// inside a host could postpone.
	b.undo.push("link "+pb.String(), pb.remove)
	b.undo.push("link "+pa.String(), pa.remove)
	ports := [2]*port{pa, pb}
	for i, hn := range names {
		b.hosts = append(b.hosts, &Host{bed: b, name: hn, ns: nss[i], port: ports[i]})
	}
	if err := step("veth"); err != nil {
		return nil, err
	}

	addrA, addrB := hostAddrs(o.Subnet)
	if err := errors.Join(pa.addAddr(addrA), pb.addAddr(addrB)); err != nil {
		return nil, err
	}
	if err := step("address"); err != nil {
		return nil, err
	}
	if err := errors.Join(pa.setUp(true), pb.setUp(true)); err != nil {
		return nil, err
	}
	if err := errors.Join(pa.waitRunning(ctx), pb.waitRunning(ctx)); err != nil {
		return nil, err
	}
	if err := step("up"); err != nil {
		return nil, err
	}
	// A default route through the peer lets a host reach any address over
	// its only link, like a host behind a gateway.
	defRoute := netip.MustParsePrefix("0.0.0.0/0")
	if err := errors.Join(pa.addRoute(defRoute, addrB.Addr()), pb.addRoute(defRoute, addrA.Addr()),
		pa.addNeighbour(addrB.Addr()), pb.addNeighbour(addrA.Addr())); err != nil {
		return nil, err
	}
	if err := step("route"); err != nil {
		return nil, err
	}
	for _, p := range ports {
		p.shape = shaping{rate: o.Rate}
		if o.Rate > 0 {
			if err := p.applyShaping(); err != nil {
				return nil, err
			}
		}
	}
	if err := step("shaping"); err != nil {
		return nil, err
	}
	if o.Loss > 0 {
		for _, p := range ports {
			if err := p.setLoss(o.Loss, o.LossCorrelation); err != nil {
				return nil, err
			}
		}
	}
	if err := step("loss"); err != nil {
		return nil, err
	}
	if o.Delay > 0 {
		for _, p := range ports {
			if err := p.setDelay(o.Delay, b.log); err != nil {
				return nil, err
			}
		}
	}
	if err := step("delay"); err != nil {
		return nil, err
	}
	b.log.Info("netlab: two-host bed up", "a", nss[0].name, "b", nss[1].name,
		"mtu", o.MTU, "rate", o.Rate, "loss", o.Loss, "delay", o.Delay)
	return b, nil
}

// setLoss attaches the loss filter on first use and sets its parameters.
func (p *port) setLoss(prob, corr float64) error {
	if p.loss == nil {
		if prob == 0 {
			return nil // nothing attached, nothing to drop
		}
		lf, err := attachLoss(p)
		if err != nil {
			return err
		}
		p.loss = lf
	}
	if err := p.loss.set(prob, corr); err != nil {
		return fmt.Errorf("netlab: %s: set loss: %w", p, err)
	}
	return nil
}

// Hosts returns the bed's hosts in creation order.
func (b *Bed) Hosts() []*Host {
	return append([]*Host(nil), b.hosts...)
}

// Host returns the host with this name, or nil.
func (b *Bed) Host(name string) *Host {
	for _, h := range b.hosts {
		if h.name == name {
			return h
		}
	}
	return nil
}

// modify runs fn on h's port with the bed locked, after checking that h
// belongs to this open bed.
func (b *Bed) modify(h *Host, fn func(p *port) error) error {
	if h == nil || h.bed != b {
		return errors.New("netlab: host does not belong to this bed")
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done {
		return ErrClosed
	}
	return fn(h.port)
}

// SetLinkUp sets h's link interface administratively up or down. Down drops
// all traffic in both directions (the peer loses carrier); up restores it,
// including the routes the bed installed, and returns once the link runs
// (or ctx ends).
func (b *Bed) SetLinkUp(ctx context.Context, h *Host, up bool) error {
	return b.modify(h, func(p *port) error {
		if err := p.setUp(up); err != nil {
			return err
		}
		return errors.Join(p.waitRunning(ctx), p.peer.waitRunning(ctx))
	})
}

// SetLoss sets the drop probability of traffic leaving h, keeping
// Options.LossCorrelation.
func (b *Bed) SetLoss(h *Host, prob float64) error {
	if err := validLoss(prob, b.opts.LossCorrelation); err != nil {
		return err
	}
	return b.modify(h, func(p *port) error { return p.setLoss(prob, b.opts.LossCorrelation) })
}

// SetRate limits traffic leaving h to bitsPerSec (0 removes the limit).
func (b *Bed) SetRate(h *Host, bitsPerSec uint64) error {
	if err := validRate(bitsPerSec); err != nil {
		return err
	}
	return b.modify(h, func(p *port) error {
		old := p.shape
		p.shape.rate = bitsPerSec
		if err := p.applyShaping(); err != nil {
			p.shape.rate = old.rate
			return err
		}
		if p.delay != nil {
			return p.delay.setRate(bitsPerSec)
		}
		return nil
	})
}

// SetDelay sets the one-way delay of traffic leaving h (0..MaxDelay; 0
// removes it). The new delay applies to packets sent from now on; packets
// already delayed keep their departure time, and a shorter delay does not
// let new packets overtake them (except when it is removed altogether,
// when new packets bypass the line while the last delayed ones drain).
func (b *Bed) SetDelay(h *Host, d time.Duration) error {
	if err := validDelay(d); err != nil {
		return err
	}
	return b.modify(h, func(p *port) error { return p.setDelay(d, b.log) })
}

// delayCounters reports the delay line's counters for traffic leaving h
// (zero if it never had a delay).
func (b *Bed) delayCounters(h *Host) (forwarded, dropped uint64, err error) {
	err = b.modify(h, func(p *port) error {
		if p.delay != nil {
			forwarded, dropped = p.delay.counters()
		}
		return nil
	})
	return forwarded, dropped, err
}

// lossCounters reports the loss filter's counters for traffic leaving h.
func (b *Bed) lossCounters(h *Host) (dropped, passed uint64, err error) {
	err = b.modify(h, func(p *port) error {
		if p.loss == nil {
			return nil
		}
		dropped, passed, err = p.loss.counters()
		return err
	})
	return dropped, passed, err
}

// Close removes everything the bed made: qdiscs, loss filters and their
// maps, delay lines (threads, tap devices, filters, maps), the veth pair and
// the namespaces. It is idempotent; later calls return nil. Sockets opened
// inside hosts are not closed (they are the caller's), but they keep only
// an empty namespace alive.
func (b *Bed) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done {
		return nil
	}
	b.done = true
	err := b.undo.run()
	if err != nil {
		b.log.Warn("netlab: teardown incomplete", "err", err)
		return fmt.Errorf("netlab: close: %w", err)
	}
	b.log.Info("netlab: bed removed")
	return nil
}
