package hostnet

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Interface is one network interface and its addresses.
type Interface struct {
	Name  string `json:"name"`
	Index int    `json:"index"`
	MTU   int    `json:"mtu"`
	// Up: administratively up (IFF_UP). Running: the kernel also sees
	// it operational (IFF_RUNNING: carrier, a peer that is up), so
	// traffic can flow now. OperState is the RFC 2863 state as ip(8)
	// names it ("up", "down", "lowerlayerdown", "unknown", ...).
	Up        bool   `json:"up"`
	Running   bool   `json:"running"`
	OperState string `json:"oper_state"`
	// Loopback marks the loopback interface (listed, never chosen).
	Loopback bool `json:"loopback,omitempty"`
	// HardwareAddr is the link-layer address ("02:00:00:00:09:01"), ""
	// if it has none.
	HardwareAddr string `json:"hardware_addr,omitempty"`
	// Kind is the link kind the kernel reports (IFLA_INFO_KIND: "veth",
	// "bond", "bridge", "vlan", "macvlan", "ipoib", ...), "physical"
	// for a device without one (a NIC's own), "loopback" for lo.
	Kind string `json:"kind"`
	// Master is the interface this one is enslaved to (a bond or a
	// bridge), "" if none.
	Master string `json:"master,omitempty"`
	// Addrs are the interface's addresses, in the kernel's order
	// (primary before secondary).
	Addrs []Address `json:"addresses"`
}

// Address is one address of an interface.
type Address struct {
	// Prefix is the address and the length of its subnet.
	Prefix netip.Prefix `json:"prefix"`
	// Scope is the kernel's scope of the address.
	Scope Scope `json:"scope"`
	// Tentative: duplicate address detection has not finished (IPv6),
	// so a socket cannot bind it yet. DADFailed: another host has it.
	// Deprecated: its preferred lifetime is over.
	Tentative  bool `json:"tentative,omitempty"`
	DADFailed  bool `json:"dad_failed,omitempty"`
	Deprecated bool `json:"deprecated,omitempty"`
}

// Scope is an address scope (rtnetlink's RT_SCOPE_*).
type Scope uint8

// Scopes.
const (
	ScopeGlobal Scope = unix.RT_SCOPE_UNIVERSE
	ScopeSite   Scope = unix.RT_SCOPE_SITE
	ScopeLink   Scope = unix.RT_SCOPE_LINK
	ScopeHost   Scope = unix.RT_SCOPE_HOST
)

var scopeNames = map[Scope]string{ScopeGlobal: "global", ScopeSite: "site", ScopeLink: "link", ScopeHost: "host"}

func (s Scope) String() string {
	if n, ok := scopeNames[s]; ok {
		return n
	}
	return strconv.Itoa(int(s))
}

// MarshalText writes the scope's name, or its number if it has none.
func (s Scope) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText reads what MarshalText writes.
func (s *Scope) UnmarshalText(b []byte) error {
	for k, n := range scopeNames {
		if n == string(b) {
			*s = k
			return nil
		}
	}
	v, err := strconv.ParseUint(string(b), 10, 8)
	if err != nil {
		return fmt.Errorf("hostnet: scope %q: want global, site, link, host or 0..255", b)
	}
	*s = Scope(v)
	return nil
}

// Usable reports whether a socket for traffic between hosts can bind a:
// global unicast (not loopback, link-local or multicast), of global
// scope, and past duplicate address detection.
func (a Address) Usable() bool {
	ip := a.Prefix.Addr()
	return a.Prefix.IsValid() && a.Scope == ScopeGlobal && ip.IsGlobalUnicast() && !ip.Is4In6() &&
		!a.Tentative && !a.DADFailed
}

// why says why a is not Usable.
func (a Address) why() string {
	ip := a.Prefix.Addr()
	switch {
	case ip.IsLoopback():
		return "loopback"
	case ip.IsLinkLocalUnicast():
		return "link-local"
	case ip.IsMulticast():
		return "multicast"
	case a.Scope != ScopeGlobal:
		return a.Scope.String() + " scope"
	case !ip.IsGlobalUnicast():
		return "not global unicast"
	case a.Tentative:
		return "tentative: duplicate address detection still running"
	case a.DADFailed:
		return "duplicate address detection failed"
	}
	return "usable"
}

func (a Address) String() string { return a.Prefix.String() }

// Interfaces lists the network interfaces of the calling thread's
// namespace (Host.Interfaces).
func Interfaces(ctx context.Context) ([]Interface, error) { return Host{}.Interfaces(ctx) }

// Interfaces lists every network interface, loopback and those that are
// down included, by index.
func (h Host) Interfaces(ctx context.Context) ([]Interface, error) {
	nh := h.handle()
	links, err := dump(ctx, "list links", nh.LinkList)
	if err != nil {
		return nil, fmt.Errorf("hostnet: list links: %w", err)
	}
	addrs, err := h.addrs(ctx, nh, nil)
	if err != nil {
		return nil, err
	}
	names := make(map[int]string, len(links))
	for _, l := range links {
		names[l.Attrs().Index] = l.Attrs().Name
	}
	out := make([]Interface, 0, len(links))
	for _, l := range links {
		ifc := fromLink(l, names)
		ifc.Addrs = addrs[ifc.Index]
		out = append(out, ifc)
	}
	slices.SortFunc(out, func(a, b Interface) int { return cmp.Compare(a.Index, b.Index) })
	return out, nil
}

// InterfaceByName is the interface name in the calling thread's
// namespace (Host.InterfaceByName).
func InterfaceByName(ctx context.Context, name string) (Interface, error) {
	return Host{}.InterfaceByName(ctx, name)
}

// InterfaceByName returns the interface called name (or having it as
// an alternative name). The error wraps ErrNoInterface if there is none,
// ErrBadName if name cannot be one.
func (h Host) InterfaceByName(ctx context.Context, name string) (Interface, error) {
	if err := ValidateName(name); err != nil {
		return Interface{}, err
	}
	nh := h.handle()
	l, err := nh.LinkByName(name)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) || errors.Is(err, unix.ENODEV) {
			return Interface{}, fmt.Errorf("hostnet: interface %q: %w%s", name, ErrNoInterface, h.have(ctx))
		}
		return Interface{}, fmt.Errorf("hostnet: interface %q: %w", name, err)
	}
	names := map[int]string{}
	if m := l.Attrs().MasterIndex; m != 0 {
		if ml, err := nh.LinkByIndex(m); err == nil {
			names[m] = ml.Attrs().Name
		}
	}
	ifc := fromLink(l, names)
	addrs, err := h.addrs(ctx, nh, l)
	if err != nil {
		return Interface{}, err
	}
	ifc.Addrs = addrs[ifc.Index]
	return ifc, nil
}

// have lists the interfaces there are, for an error about a missing one.
func (h Host) have(ctx context.Context) string {
	ifcs, err := h.Interfaces(ctx)
	if err != nil || len(ifcs) == 0 {
		return ""
	}
	s := " (there are:"
	for _, i := range ifcs {
		s += " " + i.Name
	}
	return s + ")"
}

// addrs dumps the addresses (of link, or all if nil), by interface
// index.
func (h Host) addrs(ctx context.Context, nh *netlink.Handle, link netlink.Link) (map[int][]Address, error) {
	list, err := dump(ctx, "list addresses", func() ([]netlink.Addr, error) { return nh.AddrList(link, netlink.FAMILY_ALL) })
	if err != nil {
		return nil, fmt.Errorf("hostnet: list addresses: %w", err)
	}
	out := map[int][]Address{}
	for _, a := range list {
		if a.IPNet == nil {
			continue
		}
		ones, bits := a.Mask.Size()
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok || bits == 0 {
			continue
		}
		if bits == 32 {
			ip = ip.Unmap() // an IPv4 address in a 16-byte slice
		}
		out[a.LinkIndex] = append(out[a.LinkIndex], Address{
			Prefix:     netip.PrefixFrom(ip, ones),
			Scope:      Scope(a.Scope),
			Tentative:  a.Flags&unix.IFA_F_TENTATIVE != 0,
			DADFailed:  a.Flags&unix.IFA_F_DADFAILED != 0,
			Deprecated: a.Flags&unix.IFA_F_DEPRECATED != 0,
		})
	}
	return out, nil
}

// fromLink describes l; names maps indexes to names (for the master).
func fromLink(l netlink.Link, names map[int]string) Interface {
	a := l.Attrs()
	ifc := Interface{
		Name: a.Name, Index: a.Index, MTU: a.MTU,
		Up:           a.RawFlags&unix.IFF_UP != 0,
		Running:      a.RawFlags&unix.IFF_RUNNING != 0,
		OperState:    operState(a.OperState),
		Loopback:     a.RawFlags&unix.IFF_LOOPBACK != 0,
		HardwareAddr: a.HardwareAddr.String(),
		Kind:         l.Type(),
		Master:       names[a.MasterIndex],
	}
	switch {
	case ifc.Loopback:
		ifc.Kind = "loopback"
	case ifc.Kind == "device":
		// netlink's name for a link with no IFLA_INFO_KIND: a driver's
		// own device, not a software link.
		ifc.Kind = "physical"
	}
	return ifc
}

// operState names an RFC 2863 state as ip(8) and sysfs's operstate do.
func operState(s netlink.LinkOperState) string {
	switch s {
	case netlink.OperUnknown:
		return "unknown"
	case netlink.OperNotPresent:
		return "notpresent"
	case netlink.OperDown:
		return "down"
	case netlink.OperLowerLayerDown:
		return "lowerlayerdown"
	case netlink.OperTesting:
		return "testing"
	case netlink.OperDormant:
		return "dormant"
	case netlink.OperUp:
		return "up"
	}
	return fmt.Sprintf("state %d", uint8(s))
}
