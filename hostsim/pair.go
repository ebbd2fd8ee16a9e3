package hostsim

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/vstellar/vstellar/daemon"
	"github.com/vstellar/vstellar/fabric/remote"
	"github.com/vstellar/vstellar/transport/netlab"
)

// FabricPort is the UDP port each host of a Pair listens on inside its
// namespace.
const FabricPort = 4791

// PairOptions configure NewPair.
type PairOptions struct {
	// Net is the link between the hosts (MTU, rate, loss). Its Prefix
	// names the namespaces (default "vshost").
	Net netlab.Options
	// Recovery is the transport's loss recovery, "selective" (default)
	// or "go-back-n".
	Recovery string
	// Loopback makes the hosts share the loopback interface instead of
	// two network namespaces; NewPair falls back to it by itself when
	// namespaces cannot be made (not root).
	Loopback bool
	Log      *slog.Logger
}

// Pair is two hosts, each an in-process vstellard with its own
// cross-host fabric, joined by a network: two namespaces and a veth
// (transport/netlab) where the machine allows, else loopback. Host i owns
// the GID prefix fd00:0:0:i+1::/64 and knows the other as its peer; both
// share a cluster secret made for the pair.
type Pair struct {
	Hosts [2]*Host
	// Bed is the namespace testbed (nil on loopback): its SetLoss,
	// SetRate and SetLinkUp change the link under running traffic.
	Bed *netlab.Bed
	// Where says which network joins the hosts, for reports.
	Where  string
	secret string
}

// NewPair builds the network and starts both hosts.
func NewPair(ctx context.Context, o PairOptions) (_ *Pair, err error) {
	p := &Pair{}
	defer func() {
		if err != nil {
			p.Close()
		}
	}()
	f, err := os.CreateTemp("", "vstellar-fabric-*.key")
	if err != nil {
		return nil, err
	}
	p.secret = f.Name()
	_, err = f.WriteString(rand.Text())
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("hostsim: fabric secret: %w", err)
	}

	var addrs [2]netip.AddrPort
	var listenIn [2]func(func() error) error
	if !o.Loopback {
		if aerr := netlab.Available(); aerr != nil {
			o.Loopback = true
			p.Where = "loopback (no network namespaces: " + aerr.Error() + ")"
		}
	}
	if o.Loopback {
		if p.Where == "" {
			p.Where = "loopback"
		}
		for i := range addrs {
			if addrs[i], err = freeUDPPort(); err != nil {
				return nil, err
			}
		}
	} else {
		n := o.Net
		if n.Prefix == "" {
			n.Prefix = "vshost"
		}
		if p.Bed, err = netlab.TwoHost(ctx, n); err != nil {
			return nil, fmt.Errorf("hostsim: network: %w", err)
		}
		hs := p.Bed.Hosts()
		for i, h := range hs {
			addrs[i] = netip.AddrPortFrom(h.Addr(), FabricPort)
			listenIn[i] = h.Do
		}
		p.Where = fmt.Sprintf("two network namespaces joined by a veth, MTU %d", hs[0].MTU())
		if n.Rate > 0 {
			p.Where += fmt.Sprintf(", %.1f Gb/s", float64(n.Rate)/1e9)
		}
	}
	mtu := 1500
	if o.Net.MTU > 0 && !o.Loopback {
		mtu = o.Net.MTU
	}
	for i := range p.Hosts {
		spec := &daemon.FabricSpec{
			Listen:     addrs[i],
			GIDPrefix:  hostPrefix(i),
			Peers:      []remote.Peer{{GIDPrefix: hostPrefix(1 - i), Addr: addrs[1-i]}},
			SecretFile: p.secret,
			MTU:        mtu,
			Recovery:   o.Recovery,
		}
		log := o.Log
		if log != nil {
			log = log.With("host", i+1)
		}
		if p.Hosts[i], err = New(ctx, Options{Log: log, Fabric: spec, ListenIn: listenIn[i]}); err != nil {
			return nil, fmt.Errorf("hostsim: host %d: %w", i+1, err)
		}
	}
	return p, nil
}

// hostPrefix is host i's GID prefix.
func hostPrefix(i int) netip.Prefix {
	return netip.PrefixFrom(netip.AddrFrom16([16]byte{0xfd, 7: byte(i + 1)}), 64)
}

// freeUDPPort finds a free port on 127.0.0.1 (the fallback cannot use one
// fixed port for both hosts, and each host must know the other's before
// it starts).
func freeUDPPort() (netip.AddrPort, error) {
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("hostsim: loopback port: %w", err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).AddrPort(), nil
}

// Close stops both hosts (their VMs first) and tears the network down.
func (p *Pair) Close() error {
	var errs []error
	for _, h := range p.Hosts {
		if h != nil {
			errs = append(errs, h.Close())
		}
	}
	if p.Bed != nil {
		errs = append(errs, p.Bed.Close())
	}
	if p.secret != "" {
		errs = append(errs, os.Remove(filepath.Clean(p.secret)))
	}
	return errors.Join(errs...)
}
