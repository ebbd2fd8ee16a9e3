package remote_test

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/vstellar/vstellar/fabric"
	"github.com/vstellar/vstellar/fabric/remote"
	"github.com/vstellar/vstellar/hostnet"
	"github.com/vstellar/vstellar/internal/netlab"
)

// twoHosts builds two network namespaces joined by a veth (skipping
// outside CI when it cannot, failing under CI=true).
func twoHosts(t *testing.T, o netlab.Options) *netlab.Bed {
	t.Helper()
	if err := netlab.Available(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("network namespaces unavailable under CI=true: %v", err)
		}
		t.Skipf("network namespaces unavailable (run as root): %v", err)
	}
	o.Prefix = "vsremote"
	bed, err := netlab.TwoHost(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := bed.Close(); err != nil {
			t.Error(err)
		}
	})
	return bed
}

// ifaceHost opens a fabric inside h bound to its link by name only.
func ifaceHost(t *testing.T, h *netlab.Host, prefix, gid string) *host {
	t.Helper()
	var f *remote.Fabric
	if err := h.Do(func() error {
		var err error
		f, err = remote.New(t.Context(), remote.Config{
			Listen:    netip.MustParseAddrPort("0.0.0.0:0"),
			Interface: h.Iface(),
			GIDPrefix: netip.MustParsePrefix(prefix),
			Secret:    secret,
		})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return startHost(t, f, gid)
}

// TestInterfaceBinding: two hosts in two namespaces, each fabric given
// only its link's name and a port: each binds the link's address, takes
// its MTU (9000 here, not the 1500 default) and carries a WRITE to the
// other over lossy links (the counters show the retransmissions).
func TestInterfaceBinding(t *testing.T) {
	bed := twoHosts(t, netlab.Options{MTU: 9000, Loss: 0.05})
	ha, hb := bed.Hosts()[0], bed.Hosts()[1]
	a := ifaceHost(t, ha, "fd00:0:0:1::/64", "fd00:0:0:1::10")
	b := ifaceHost(t, hb, "fd00:0:0:2::/64", "fd00:0:0:2::20")
	for _, c := range []struct {
		x *host
		h *netlab.Host
	}{{a, ha}, {b, hb}} {
		if got := c.x.f.Addr().Addr(); got != c.h.Addr() || c.x.f.MTU() != 9000 {
			t.Fatalf("fabric in %s: bound %v, MTU %d; the link has %v, MTU %d", c.h.Name(), got, c.x.f.MTU(), c.h.Addr(), c.h.MTU())
		}
	}
	if err := a.f.SetPeers([]remote.Peer{{GIDPrefix: netip.MustParsePrefix("fd00:0:0:2::/64"), Addr: b.f.Addr()}}); err != nil {
		t.Fatal(err)
	}
	if err := b.f.SetPeers([]remote.Peer{{GIDPrefix: netip.MustParsePrefix("fd00:0:0:1::/64"), Addr: a.f.Addr()}}); err != nil {
		t.Fatal(err)
	}
	connect(t, a, b, 1, 2, 7, 7)
	w := newWaiter()
	const n = 1 << 20
	v, p := buffer(t, n)
	// The loss applies to whole batched (GSO) sends, so one 1 MiB WRITE
	// may lose nothing: WRITE again, fresh bytes each time, until one
	// was resent (each round loses nothing with well under 1% chance).
	var sa, sb remote.Stats
	rounds := 0
	for sa.Retransmits == 0 && rounds < 8 {
		rounds++
		fill(p, byte(10+rounds))
		r := request(a, b, 1, 2, fabric.OpWrite)
		r.Len, r.Local = n, v
		a.f.Post(r, w)
		if res := w.next(t, 15*time.Second); res.o != fabric.OutcomeOK {
			t.Fatal(res.o)
		}
		b.dev.mu.Lock()
		same := bytes.Equal(b.dev.mem[:n], p)
		b.dev.mu.Unlock()
		if !same {
			t.Fatalf("round %d: wrong bytes", rounds)
		}
		sa, sb = a.f.Stats(), b.f.Stats()
	}
	if len(sa.Paths) != 1 {
		t.Fatalf("a's RTT paths: %+v", sa.Paths)
	}
	t.Logf("%d WRITEs of %d bytes; a: %d DATA sent, %d retransmits (%d fast, %d timeouts), %d payload bytes sent; b: %d placed; a's path 0: %d RTT samples, mean %v",
		rounds, n, sa.DataSent, sa.Retransmits, sa.FastRetransmits, sa.Timeouts, sa.BytesSent, sb.BytesPlaced, sa.Paths[0].RTT.Count, sa.Paths[0].RTT.Sum/time.Duration(max(1, sa.Paths[0].RTT.Count)))
	total := uint64(rounds) * n
	if sa.Retransmits == 0 || sa.BytesSent <= total || sb.BytesPlaced != total {
		t.Errorf("with 5%% loss: a %+v, b %+v", sa, sb)
	}
	// 9000-byte packets: about 120 of them per MiB.
	if sa.DataSent > total/8000 {
		t.Errorf("%d DATA packets for %d bytes: not MTU-sized", sa.DataSent, total)
	}
}

// TestInterfaceErrors: what New says, inside a host, for an interface
// that is not there, a Listen address that is not the interface's, an
// interface that is down, and a bad name (which Validate catches too).
func TestInterfaceErrors(t *testing.T) {
	bed := twoHosts(t, netlab.Options{})
	h := bed.Hosts()[0]
	cfg := func(listen, ifc string) remote.Config {
		return remote.Config{Listen: netip.MustParseAddrPort(listen), Interface: ifc,
			GIDPrefix: netip.MustParsePrefix("fd00:0:0:1::/64"), Secret: secret}
	}
	open := func(c remote.Config) error {
		return h.Do(func() error {
			f, err := remote.New(t.Context(), c)
			if err == nil {
				f.Close()
			}
			return err
		})
	}
	if err := open(cfg("0.0.0.0:0", "nosuch0")); !errors.Is(err, hostnet.ErrNoInterface) || !errors.Is(err, remote.ErrInterface) || !strings.Contains(err.Error(), h.Iface()) {
		t.Errorf("missing interface: %v", err)
	}
	if err := open(cfg("10.99.0.1:0", h.Iface())); err == nil || !errors.Is(err, remote.ErrInterface) || !strings.Contains(err.Error(), "is not an address of") {
		t.Errorf("foreign address: %v", err)
	}
	if err := open(cfg("[::]:0", h.Iface())); !errors.Is(err, hostnet.ErrNoAddress) {
		t.Errorf("IPv6 on an IPv4-only link: %v", err)
	}
	if err := open(cfg(h.Addr().String()+":0", h.Iface())); err != nil {
		t.Errorf("the interface's own address: %v", err)
	}
	if err := cfg("0.0.0.0:0", "a/b").Validate(); !errors.Is(err, hostnet.ErrBadName) {
		t.Errorf("bad name: %v", err)
	}
	if err := bed.SetLinkUp(t.Context(), h, false); err != nil {
		t.Fatal(err)
	}
	if err := open(cfg("0.0.0.0:0", h.Iface())); !errors.Is(err, hostnet.ErrInterfaceDown) {
		t.Errorf("down: %v", err)
	}
	if err := open(cfg(h.Addr().String()+":0", h.Iface())); !errors.Is(err, hostnet.ErrInterfaceDown) {
		t.Errorf("down, by address: %v", err)
	}
}
