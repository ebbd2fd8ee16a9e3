package hostsim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"

	"github.com/vstellar/vstellar/daemon"
	"github.com/vstellar/vstellar/internal/netlab"
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
// (internal/netlab) where the machine allows, else loopback. Host i owns
// the GID prefix fec0:0:i+1:i+1::/64 and knows the other as its peer; both
// share a cluster secret made for the pair.
type Pair struct {
	Hosts [2]*Host
	// Bed is the namespace testbed (nil on loopback): its SetLoss,
	// SetRate and SetLinkUp change the link under running traffic.
	Bed *netlab.Bed
	// Where says which network joins the hosts, for reports.
	Where string
	group hostGroup
}

// NewPair builds the network and starts both hosts.
func NewPair(ctx context.Context, o PairOptions) (_ *Pair, err error) {
	p := &Pair{}
	defer func() {
		if err != nil {
			p.Close()
		}
	}()
	nets := make([]hostNet, 2)
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
		for i := range nets {
			if nets[i].addr, err = freeUDPPort(); err != nil {
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
			nets[i] = hostNet{addr: netip.AddrPortFrom(h.Addr(), FabricPort), listenIn: h.Do}
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
	err = p.group.start(ctx, nets, daemon.FabricSpec{MTU: mtu, Recovery: o.Recovery}, o.Log)
	copy(p.Hosts[:], p.group.hosts)
	if err != nil {
		return nil, err
	}
	return p, nil
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
	err := p.group.close()
	if p.Bed != nil {
		err = errors.Join(err, p.Bed.Close())
	}
	return err
}
