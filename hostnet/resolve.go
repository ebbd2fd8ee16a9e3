package hostnet

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
)

// Family is the address family Resolve looks for.
type Family uint8

// Families.
const (
	// AnyFamily: an IPv4 address if the interface has one, else IPv6.
	AnyFamily Family = iota
	IPv4
	IPv6
)

func (f Family) String() string {
	switch f {
	case AnyFamily:
		return "IPv4 or IPv6"
	case IPv4:
		return "IPv4"
	case IPv6:
		return "IPv6"
	}
	return fmt.Sprintf("family %d", uint8(f))
}

// FamilyOf is the family of a: IPv4 (an IPv4-mapped IPv6 address
// included) or IPv6; AnyFamily for the zero Addr.
func FamilyOf(a netip.Addr) Family {
	switch {
	case !a.IsValid():
		return AnyFamily
	case a.Unmap().Is4():
		return IPv4
	}
	return IPv6
}

// Resolve is Host.Resolve in the calling thread's namespace.
func Resolve(ctx context.Context, name string, port uint16, fam Family) (netip.AddrPort, Interface, error) {
	return Host{}.Resolve(ctx, name, port, fam)
}

// Resolve returns the address a socket binds to use interface name, with
// port: the interface's first usable address (Address.Usable: global
// unicast, global scope, not tentative) of family fam, IPv4 first for
// AnyFamily; and the interface. The errors wrap ErrBadName, ErrNoInterface,
// ErrInterfaceDown (not administratively up: an interface that is up
// without carrier is returned, Running false, for the caller to warn
// about) or ErrNoAddress, and say what there is instead.
func (h Host) Resolve(ctx context.Context, name string, port uint16, fam Family) (netip.AddrPort, Interface, error) {
	if fam > IPv6 {
		return netip.AddrPort{}, Interface{}, fmt.Errorf("hostnet: resolve %q: unknown %v", name, fam)
	}
	ifc, err := h.InterfaceByName(ctx, name)
	if err != nil {
		return netip.AddrPort{}, Interface{}, err
	}
	if !ifc.Up {
		return netip.AddrPort{}, ifc, fmt.Errorf("hostnet: interface %q: %w (administratively; ip link set %s up)", name, ErrInterfaceDown, name)
	}
	if a, ok := ifc.Pick(fam); ok {
		return netip.AddrPortFrom(a, port), ifc, nil
	}
	var have []string
	for _, a := range ifc.Addrs {
		have = append(have, a.String()+" ("+a.why()+")")
	}
	detail := "it has no address"
	if len(have) > 0 {
		detail = "it has " + strings.Join(have, ", ")
	}
	return netip.AddrPort{}, ifc, fmt.Errorf("hostnet: interface %q: %w of %v (a global unicast one, past duplicate address detection): %s",
		name, ErrNoAddress, fam, detail)
}

// Pick returns the interface's first usable address of family fam (for
// AnyFamily, the first IPv4 one, else the first IPv6 one).
func (i Interface) Pick(fam Family) (netip.Addr, bool) {
	first := func(f Family) (netip.Addr, bool) {
		for _, a := range i.Addrs {
			if a.Usable() && FamilyOf(a.Prefix.Addr()) == f {
				return a.Prefix.Addr(), true
			}
		}
		return netip.Addr{}, false
	}
	if fam != AnyFamily {
		return first(fam)
	}
	if a, ok := first(IPv4); ok {
		return a, true
	}
	return first(IPv6)
}

// Has reports whether a is one of the interface's addresses (a zone,
// which only names the interface, is not compared).
func (i Interface) Has(a netip.Addr) bool {
	a = a.Unmap().WithZone("")
	for _, x := range i.Addrs {
		if x.Prefix.Addr() == a {
			return true
		}
	}
	return false
}
