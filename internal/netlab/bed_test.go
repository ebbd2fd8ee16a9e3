//go:build linux

package netlab

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

func TestTwoHostUDPBothWays(t *testing.T) {
	bed := newBed(t, Options{})
	a, b := bed.Host("a"), bed.Host("b")
	if a == nil || b == nil || len(bed.Hosts()) != 2 {
		t.Fatalf("hosts: %v", bed.Hosts())
	}
	want := hostsOf(t, DefaultSubnet)
	if a.Prefix() != want[0] || b.Prefix() != want[1] {
		t.Fatalf("addresses %v %v, want %v", a.Prefix(), b.Prefix(), want)
	}
	if a.Namespace() == b.Namespace() || a.Iface() == "" || a.MTU() != 1500 {
		t.Fatalf("namespace/iface/mtu: %q %q %q %d", a.Namespace(), b.Namespace(), a.Iface(), a.MTU())
	}

	ca, cb := listenUDP(t, a, 4000), listenUDP(t, b, 4000)
	for i := range 5 {
		msg := []byte(fmt.Sprintf("a->b %d", i))
		if _, err := ca.WriteToUDPAddrPort(msg, addrPort(cb)); err != nil {
			t.Fatal(err)
		}
		got, from, err := recvOne(cb, 2*time.Second)
		if err != nil || !bytes.Equal(got, msg) || from != addrPort(ca) {
			t.Fatalf("b got %q from %v (%v), want %q from %v", got, from, err, msg, addrPort(ca))
		}
		reply := []byte(fmt.Sprintf("b->a %d", i))
		if _, err := cb.WriteToUDPAddrPort(reply, from); err != nil {
			t.Fatal(err)
		}
		got, from, err = recvOne(ca, 2*time.Second)
		if err != nil || !bytes.Equal(got, reply) || from != addrPort(cb) {
			t.Fatalf("a got %q from %v (%v), want %q", got, from, err, reply)
		}
	}

	// The socket opened inside a stays there: its namespace is a's, and
	// the caller's namespace has no such address.
	var inside, outside uint64
	if err := a.Do(func() error {
		inside = nsInode(t, "/proc/thread-self/ns/net")
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	outside = homeNS(t)
	if inside != nsInode(t, nsDir+"/"+a.Namespace()) || inside == outside {
		t.Fatalf("Do ran in ns inode %d; host ns %d; caller ns %d", inside, nsInode(t, nsDir+"/"+a.Namespace()), outside)
	}
	if _, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(a.Addr(), 0))); err == nil {
		t.Fatalf("host address %v is bindable in the caller's namespace; bed leaked into it", a.Addr())
	}
}

func hostsOf(t *testing.T, subnet string) [2]netip.Prefix {
	a, b := hostAddrs(netip.MustParsePrefix(subnet))
	return [2]netip.Prefix{a, b}
}

func TestCustomSubnet(t *testing.T) {
	bed := newBed(t, Options{Subnet: netip.MustParsePrefix("198.19.7.9/31")})
	a, b := bed.Host("a"), bed.Host("b")
	if a.Prefix().String() != "198.19.7.8/31" || b.Prefix().String() != "198.19.7.9/31" {
		t.Fatalf("/31 addresses %v %v", a.Prefix(), b.Prefix())
	}
	ca, cb := listenUDP(t, a, 4001), listenUDP(t, b, 4001)
	warmUp(t, ca, cb)
	warmUp(t, cb, ca)
}

func TestMTU(t *testing.T) {
	for _, tc := range []struct {
		mtu     int
		maxUDP  int // largest payload that fits unfragmented
		jumboOK bool
	}{
		{mtu: 1500, maxUDP: 1472},
		{mtu: 9000, maxUDP: 8972, jumboOK: true},
	} {
		t.Run(fmt.Sprint(tc.mtu), func(t *testing.T) {
			bed := newBed(t, Options{MTU: tc.mtu})
			a, b := bed.Host("a"), bed.Host("b")
			if err := a.Do(func() error {
				l, err := netlink.LinkByName(a.Iface())
				if err != nil {
					return err
				}
				if l.Attrs().MTU != tc.mtu {
					return fmt.Errorf("kernel MTU %d, want %d", l.Attrs().MTU, tc.mtu)
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			ca, cb := listenUDP(t, a, 4100), listenUDP(t, b, 4100)
			setDF(t, ca)
			warmUp(t, ca, cb)

			// The largest payload crosses whole, with DF set: no
			// fragmentation happened.
			big := bytes.Repeat([]byte{0xA5}, tc.maxUDP)
			if _, err := ca.WriteToUDPAddrPort(big, addrPort(cb)); err != nil {
				t.Fatalf("send %d bytes with DF: %v", len(big), err)
			}
			got, _, err := recvOne(cb, 2*time.Second)
			if err != nil || !bytes.Equal(got, big) {
				t.Fatalf("received %d bytes (%v), want %d", len(got), err, len(big))
			}
			// One byte more does not fit; with DF the kernel refuses.
			_, err = ca.WriteToUDPAddrPort(make([]byte, tc.maxUDP+1), addrPort(cb))
			if !errors.Is(err, unix.EMSGSIZE) {
				t.Fatalf("send %d bytes with DF over MTU %d: err %v, want EMSGSIZE", tc.maxUDP+1, tc.mtu, err)
			}
			// The jumbo payload of the 9000 bed.
			_, err = ca.WriteToUDPAddrPort(make([]byte, 8972), addrPort(cb))
			if tc.jumboOK != (err == nil) {
				t.Fatalf("8972-byte payload on MTU %d: err %v", tc.mtu, err)
			}
			if tc.jumboOK {
				if got, _, err := recvOne(cb, 2*time.Second); err != nil || len(got) != 8972 {
					t.Fatalf("jumbo: received %d bytes (%v)", len(got), err)
				}
			}
			expectSilence(t, cb, 50*time.Millisecond, "only the sends that fit")
		})
	}
}

func TestLinkDownUp(t *testing.T) {
	bed := newBed(t, Options{})
	a, b := bed.Host("a"), bed.Host("b")
	ca, cb := listenUDP(t, a, 4200), listenUDP(t, b, 4200)
	warmUp(t, ca, cb)
	warmUp(t, cb, ca)

	if err := bed.SetLinkUp(t.Context(), a, false); err != nil {
		t.Fatal(err)
	}
	// Sends may fail (ENETUNREACH/ENETDOWN) or be dropped silently;
	// either way nothing may arrive in either direction.
	for range 20 {
		ca.WriteToUDPAddrPort([]byte("down a->b"), addrPort(cb))
		cb.WriteToUDPAddrPort([]byte("down b->a"), addrPort(ca))
	}
	expectSilence(t, cb, 300*time.Millisecond, "a->b with a's link down")
	expectSilence(t, ca, 50*time.Millisecond, "b->a with a's link down")

	if err := bed.SetLinkUp(t.Context(), a, true); err != nil {
		t.Fatal(err)
	}
	warmUp(t, ca, cb)
	warmUp(t, cb, ca)
	// IPv4 flushed a's default route on down; up must have restored it.
	if err := a.Do(func() error {
		routes, err := netlink.RouteList(nil, netlink.FAMILY_V4)
		if err != nil {
			return err
		}
		for _, r := range routes {
			if (r.Dst == nil || r.Dst.IP.IsUnspecified()) && r.Gw.Equal(b.Addr().AsSlice()) {
				return nil
			}
		}
		return fmt.Errorf("no default route via %v after link up: %v", b.Addr(), routes)
	}); err != nil {
		t.Fatal(err)
	}
}
