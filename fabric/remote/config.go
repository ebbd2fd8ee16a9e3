package remote

import (
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"

	"github.com/vstellar/vstellar/transport"
	"github.com/vstellar/vstellar/transport/cc"
	"github.com/vstellar/vstellar/transport/pathsel"
	"github.com/vstellar/vstellar/transport/udp"
	"github.com/vstellar/vstellar/transport/wire"
)

// MinSecret is the shortest Config.Secret accepted.
const MinSecret = 16

// DefaultSocketBuffer is Config.SocketBuffer's default.
const DefaultSocketBuffer = 8 << 20

// maxSocketBuffer bounds Config.SocketBuffer (transport/udp's limit).
const maxSocketBuffer = 1 << 30

// Config configures a Fabric. The zero value of Paths, Transport and Log
// are usable defaults.
type Config struct {
	// Listen is the local UDP address and base port (port 0: any free
	// range, for tests). Path i is port+i (transport/udp). With
	// Interface set, an unspecified address (0.0.0.0 or ::) stands for
	// the interface's own of that family (hostnet.Resolve); otherwise
	// it binds every local address.
	Listen netip.AddrPort
	// Interface, if set, is the network interface the fabric uses: its
	// sockets are bound to it (SO_BINDTODEVICE: packets in and out go
	// through it only), Listen's address, if unspecified, is its first
	// global unicast address of that family (and must otherwise be one
	// of its addresses), and its MTU is the default of MTU. New looks
	// it up; Validate only checks the name.
	Interface string
	// Paths is the number of UDP source ports (default 1), the paths a
	// connection's packets may take through an ECMP network.
	Paths int
	// Spray chooses each connection's path selector (package
	// transport/pathsel): Kind (default Single: one source port per
	// connection, as RoCE's ECMP hashing puts a flow on one path) and its
	// tuning. Paths, Seed and Entropy are set per connection (Paths to
	// the Config's, Seed and Entropy from the connection id).
	Spray pathsel.Config
	// CC chooses each connection's congestion controller (package
	// transport/cc; default a fixed window of Transport.Window).
	CC cc.Config
	// SocketBuffer is the receive and send buffer of each path's socket,
	// in bytes (default DefaultSocketBuffer). With no congestion control
	// yet, a window of packets per connection arrives in bursts; a
	// kernel-default buffer (about 200 KiB) drops much of one.
	SocketBuffer int
	// GIDPrefix holds this host's GIDs: a destination in it is served by
	// the in-process fabric. IPv6 (an IPv4 GID is ::ffff:a.b.c.d).
	GIDPrefix netip.Prefix
	// Peers are the other hosts, each with the GIDs it serves; a
	// destination goes to the peer of the longest matching prefix.
	Peers []Peer
	// Secret is the cluster's key (at least MinSecret bytes) from which
	// both ends derive every connection's ids and tokens (ConnIdentity).
	// All hosts of a cluster must share it.
	Secret []byte
	// MTU is the host network's MTU (default Interface's, or 1500): a
	// DATA packet, with its IP and UDP headers, fits it.
	MTU int
	// Transport is the template of every connection: MaxPayload (if
	// set, a cap below what the MTUs allow), Window, Recovery, RTO,
	// DupThresh, ReorderWindow, BusyTimeout, RetryLimit and RNRRetry
	// (used until a QP's own arrive with Connect). The identity fields
	// are filled per connection; Path and CC must be nil (every
	// connection gets its own policies).
	Transport transport.Config
	// Log receives connection events; nil discards them.
	Log *slog.Logger
}

// Peer is another host: the GIDs it serves and its UDP address. In JSON
// (a daemon config) it is {"gid_prefix": "fd00:0:0:2::/64", "address":
// "10.0.0.2:4791"}; ParsePeer reads the one-line form
// "fd00:0:0:2::/64=10.0.0.2:4791" (a command-line flag).
type Peer struct {
	GIDPrefix netip.Prefix   `json:"gid_prefix"`
	Addr      netip.AddrPort `json:"address"`
}

func (p Peer) String() string { return p.GIDPrefix.String() + "=" + p.Addr.String() }

// ParsePeer parses "prefix=address:port", as Peer.String writes it, and
// checks the peer on its own (Config.validate checks it against the
// rest).
func ParsePeer(s string) (Peer, error) {
	pfx, addr, ok := strings.Cut(strings.TrimSpace(s), "=")
	if !ok {
		return Peer{}, fmt.Errorf("remote: peer %q: want gid_prefix=address:port", s)
	}
	var p Peer
	var err error
	if p.GIDPrefix, err = netip.ParsePrefix(strings.TrimSpace(pfx)); err != nil {
		return Peer{}, fmt.Errorf("remote: peer %q: gid prefix: %w", s, err)
	}
	if p.Addr, err = netip.ParseAddrPort(strings.TrimSpace(addr)); err != nil {
		return Peer{}, fmt.Errorf("remote: peer %q: address: %w", s, err)
	}
	if p, err = p.check(); err != nil {
		return Peer{}, fmt.Errorf("remote: peer %q: %w", s, err)
	}
	return p, nil
}

// ParsePeers parses a list of ParsePeer forms separated by commas or
// white space (empty: none).
func ParsePeers(s string) ([]Peer, error) {
	fields := strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' || r == '\n' || r == '\r' })
	var peers []Peer
	for _, f := range fields {
		p, err := ParsePeer(f)
		if err != nil {
			return nil, err
		}
		peers = append(peers, p)
	}
	return peers, nil
}

// checkPrefix normalises a GID prefix: IPv6, host bits cleared.
func checkPrefix(p netip.Prefix) (netip.Prefix, error) {
	switch {
	case !p.IsValid():
		return p, fmt.Errorf("not set (want an IPv6 prefix such as fd00:0:0:1::/64)")
	case !p.Addr().Is6():
		return p, fmt.Errorf("%v is not IPv6: GIDs are 128-bit (an IPv4 GID is ::ffff:a.b.c.d, so ::ffff:%v/%d)", p, p.Addr(), 96+p.Bits())
	case p.Addr().Zone() != "":
		return p, fmt.Errorf("%v has a zone", p)
	}
	return p.Masked(), nil
}

// check validates a peer on its own and normalises it.
func (p Peer) check() (Peer, error) {
	var err error
	if p.GIDPrefix, err = checkPrefix(p.GIDPrefix); err != nil {
		return p, fmt.Errorf("gid prefix: %w", err)
	}
	a := p.Addr
	switch {
	case !a.IsValid():
		return p, fmt.Errorf("address not set (want ip:port)")
	case a.Addr().IsUnspecified() || a.Addr().IsMulticast():
		return p, fmt.Errorf("address %v is not a host's", a)
	case a.Port() == 0:
		return p, fmt.Errorf("address %v has port 0", a)
	}
	p.Addr = netip.AddrPortFrom(a.Addr().Unmap(), a.Port())
	return p, nil
}

// validate checks cfg, fills defaults and returns the config to use,
// with the peers normalised and sorted longest prefix first. Every error
// names its field.
func (cfg Config) validate() (Config, error) {
	if !cfg.Listen.IsValid() {
		return cfg, fmt.Errorf("remote: Listen: not set (want ip:port)")
	}
	cfg.Listen = netip.AddrPortFrom(cfg.Listen.Addr().Unmap(), cfg.Listen.Port())
	if cfg.Interface != "" {
		if err := cfg.checkInterface(); err != nil {
			return cfg, err
		}
	}
	switch {
	case cfg.Paths == 0:
		cfg.Paths = 1
	case cfg.Paths < 0 || cfg.Paths > udp.MaxPaths:
		return cfg, fmt.Errorf("remote: Paths: %d outside 1..%d", cfg.Paths, udp.MaxPaths)
	}
	switch {
	case cfg.SocketBuffer == 0:
		cfg.SocketBuffer = DefaultSocketBuffer
	case cfg.SocketBuffer < 0 || cfg.SocketBuffer > maxSocketBuffer:
		return cfg, fmt.Errorf("remote: SocketBuffer: %d outside 1..%d", cfg.SocketBuffer, maxSocketBuffer)
	}
	var err error
	if cfg.GIDPrefix, err = checkPrefix(cfg.GIDPrefix); err != nil {
		return cfg, fmt.Errorf("remote: GIDPrefix: %w", err)
	}
	if len(cfg.Secret) < MinSecret {
		return cfg, fmt.Errorf("remote: Secret: %d bytes, want at least %d", len(cfg.Secret), MinSecret)
	}
	if cfg.Peers, err = checkPeers(cfg.Peers, cfg.GIDPrefix, cfg.Listen); err != nil {
		return cfg, err
	}
	t := &cfg.Transport
	if t.Path != nil || t.CC != nil {
		return cfg, fmt.Errorf("remote: Transport: Path and CC must be nil (each connection gets its own)")
	}
	t.Tenant, t.LocalConn, t.LocalToken, t.RemoteConn, t.RemoteToken = 0, 0, 0, 0, 0
	oh := overhead(cfg.Listen)
	switch {
	case cfg.MTU == 0:
		cfg.MTU = 1500
	case cfg.MTU < oh+64 || cfg.MTU > 65535:
		return cfg, fmt.Errorf("remote: MTU: %d outside %d..65535 (%d bytes of headers, 64 of payload at least)", cfg.MTU, oh+64, oh)
	}
	if t.MaxPayload == 0 {
		t.MaxPayload = cfg.MTU - oh
	}
	if _, err := cfg.policies(1); err != nil {
		return cfg, err
	}
	if _, err := transport.NewConn(*t, nopSink{}); err != nil {
		return cfg, fmt.Errorf("remote: Transport: %w", err)
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return cfg, nil
}

// policies returns connection id's path selector and congestion
// controller, in a copy of the template.
func (cfg *Config) policies(id uint32) (transport.Config, error) {
	t := cfg.Transport
	sp := cfg.Spray
	sp.Paths, sp.Seed, sp.Entropy = cfg.Paths, uint64(id), uint16(id%uint32(cfg.Paths))
	var err error
	if t.Path, err = pathsel.New(sp); err != nil {
		return t, fmt.Errorf("remote: Spray: %w", err)
	}
	if t.CC, err = cc.New(cfg.CC); err != nil {
		return t, fmt.Errorf("remote: CC: %w", err)
	}
	return t, nil
}

// checkPeers validates peers against the local prefix and the listening
// address's family, and returns them normalised, longest prefix first.
func checkPeers(peers []Peer, local netip.Prefix, listen netip.AddrPort) ([]Peer, error) {
	out := make([]Peer, len(peers))
	for i, p := range peers {
		p, err := p.check()
		if err != nil {
			return nil, fmt.Errorf("remote: Peers[%d]: %w", i, err)
		}
		if p.Addr.Addr().Is4() != listen.Addr().Is4() {
			return nil, fmt.Errorf("remote: Peers[%d]: address %v is not of the family of Listen %v", i, p.Addr, listen)
		}
		if p.GIDPrefix.Overlaps(local) {
			return nil, fmt.Errorf("remote: Peers[%d]: gid prefix %v overlaps GIDPrefix %v", i, p.GIDPrefix, local)
		}
		for j := range i {
			if out[j].GIDPrefix == p.GIDPrefix {
				return nil, fmt.Errorf("remote: Peers[%d]: gid prefix %v is Peers[%d]'s too", i, p.GIDPrefix, j)
			}
		}
		out[i] = p
	}
	slices.SortStableFunc(out, func(a, b Peer) int { return b.GIDPrefix.Bits() - a.GIDPrefix.Bits() })
	return out, nil
}

// overhead is what a DATA packet adds to its payload on the wire: IP,
// UDP, the common header and the DATA part (docs/wire.md section 11).
func overhead(listen netip.AddrPort) int {
	ip := 40
	if listen.Addr().Is4() {
		ip = 20
	}
	return ip + 8 + wire.HeaderLen + wire.DataLen
}

// nopSink lets validate build a connection from the template.
type nopSink struct{}

func (nopSink) Begin(*transport.Inbound) (wire.NAK, uint8)    { return wire.NAKInvalid, 0 }
func (nopSink) Place(*transport.Inbound, uint64, []byte) bool { return false }
func (nopSink) Commit(*transport.Inbound) wire.NAK            { return wire.NAKInvalid }
