package hostnet

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// RDMALink is an RDMA device the kernel knows (`rdma dev show`), with
// what sysfs says of its ports.
type RDMALink struct {
	Index           uint32 `json:"index"`
	Name            string `json:"name"`
	NodeGUID        GUID   `json:"node_guid"`
	SysImageGUID    GUID   `json:"sys_image_guid"`
	FirmwareVersion string `json:"firmware_version,omitempty"`
	// Ports are the device's ports, 1 to the number it has.
	Ports []RDMAPort `json:"ports"`
	// NetDevs are the network interfaces the device is bound to: its
	// ports' (a RoCE or Soft-RoCE port's GIDs belong to one), else the
	// ones of its PCI function (an IPoIB interface, a NIC's); sorted.
	// Empty if sysfs does not tell.
	NetDevs []string `json:"net_devs,omitempty"`
}

// RDMAPort is one port of an RDMA device, as sysfs describes it
// (fields "" where it does not).
type RDMAPort struct {
	Port int `json:"port"`
	// State is the port's state: "ACTIVE", "DOWN", "INIT", ...
	State string `json:"state,omitempty"`
	// LinkLayer is "Ethernet" (RoCE) or "InfiniBand".
	LinkLayer string `json:"link_layer,omitempty"`
	// NetDev is the network interface the port's GIDs come from.
	NetDev string `json:"net_dev,omitempty"`
}

// GUID is a 64-bit InfiniBand GUID.
type GUID uint64

// String formats g as the rdma tool and sysfs do: "0002:c903:00a1:b2c3".
func (g GUID) String() string {
	return fmt.Sprintf("%04x:%04x:%04x:%04x", uint16(g>>48), uint16(g>>32), uint16(g>>16), uint16(g))
}

// MarshalText writes String's form.
func (g GUID) MarshalText() ([]byte, error) { return []byte(g.String()), nil }

// UnmarshalText reads String's form.
func (g *GUID) UnmarshalText(b []byte) error {
	v, err := ParseGUID(string(b))
	if err != nil {
		return err
	}
	*g = v
	return nil
}

// ParseGUID reads a GUID as String writes it: four groups of four hex
// digits, colon-separated.
func ParseGUID(s string) (GUID, error) {
	if len(s) != 19 || s[4] != ':' || s[9] != ':' || s[14] != ':' {
		return 0, fmt.Errorf("hostnet: GUID %q: want xxxx:xxxx:xxxx:xxxx", s)
	}
	v, err := strconv.ParseUint(s[0:4]+s[5:9]+s[10:14]+s[15:19], 16, 64)
	if err != nil {
		return 0, fmt.Errorf("hostnet: GUID %q: want xxxx:xxxx:xxxx:xxxx in hex", s)
	}
	return GUID(v), nil
}

// parseNetlinkGUID reads a GUID as vishvananda/netlink formats it: the
// value's bytes least significant first, colon-separated.
func parseNetlinkGUID(s string) (GUID, error) {
	b, err := net.ParseMAC(s)
	if err != nil || len(b) != 8 {
		return 0, fmt.Errorf("hostnet: GUID %q: want 8 colon-separated bytes", s)
	}
	return GUID(binary.LittleEndian.Uint64(b)), nil
}

// RDMALinks is Host.RDMALinks in the calling thread's namespace.
func RDMALinks(ctx context.Context) ([]RDMALink, error) { return Host{}.RDMALinks(ctx) }

// RDMALinks lists the RDMA devices, by index. A kernel without RDMA
// netlink support (built without CONFIG_INFINIBAND, or ib_core not
// loaded) is an error wrapping ErrNoRDMA; a kernel with it and no
// device returns an empty list and no error.
func (h Host) RDMALinks(ctx context.Context) ([]RDMALink, error) {
	nh := h.handle()
	links, err := dump(ctx, "list RDMA devices", nh.RdmaLinkList)
	if err != nil {
		if errors.Is(err, unix.EPROTONOSUPPORT) {
			return nil, fmt.Errorf("hostnet: %w: %w", ErrNoRDMA, err)
		}
		return nil, fmt.Errorf("hostnet: list RDMA devices: %w", err)
	}
	out := make([]RDMALink, 0, len(links))
	for _, l := range links {
		a := l.Attrs
		r := RDMALink{Index: a.Index, Name: a.Name, FirmwareVersion: a.FirmwareVersion}
		if r.NodeGUID, err = parseNetlinkGUID(a.NodeGuid); err != nil && a.NodeGuid != "" {
			return nil, fmt.Errorf("hostnet: RDMA device %s: node %w", a.Name, err)
		}
		if r.SysImageGUID, err = parseNetlinkGUID(a.SysImageGuid); err != nil && a.SysImageGuid != "" {
			return nil, fmt.Errorf("hostnet: RDMA device %s: system image %w", a.Name, err)
		}
		r.Ports, r.NetDevs = h.rdmaPorts(a.Name, int(a.NumPorts))
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b RDMALink) int { return cmp.Compare(a.Index, b.Index) })
	return out, nil
}

// rdmaPorts reads ports 1..n of device dev from sysfs, and the network
// interfaces it is bound to. What sysfs lacks stays empty: these are
// details, the device is listed anyway.
func (h Host) rdmaPorts(dev string, n int) ([]RDMAPort, []string) {
	if dev == "" || strings.ContainsAny(dev, "/\x00") || dev == "." || dev == ".." {
		return nil, nil
	}
	base := filepath.Join(h.sysfs(), "class", "infiniband", dev)
	ports := make([]RDMAPort, 0, n)
	var devs []string
	for p := 1; p <= n; p++ {
		dir := filepath.Join(base, "ports", strconv.Itoa(p))
		port := RDMAPort{Port: p, State: portState(readLine(filepath.Join(dir, "state"))),
			LinkLayer: readLine(filepath.Join(dir, "link_layer")), NetDev: firstNDev(filepath.Join(dir, "gid_attrs", "ndevs"))}
		if port.NetDev != "" {
			devs = append(devs, port.NetDev)
		}
		ports = append(ports, port)
	}
	if len(devs) == 0 {
		// No GID names a network interface (InfiniBand, or an old
		// kernel): the PCI function's interfaces, if any.
		if ents, err := os.ReadDir(filepath.Join(base, "device", "net")); err == nil {
			for _, e := range ents {
				devs = append(devs, e.Name())
			}
		}
	}
	slices.Sort(devs)
	return ports, slices.Compact(devs)
}

// portState reads sysfs's "4: ACTIVE" as "ACTIVE".
func portState(s string) string {
	if _, st, ok := strings.Cut(s, ":"); ok {
		return strings.TrimSpace(st)
	}
	return s
}

// firstNDev returns the network interface of the lowest GID index that
// has one: reading an unused entry of gid_attrs/ndevs fails (EINVAL).
func firstNDev(dir string) string {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return ""
	}
	idx := make([]int, 0, len(ents))
	for _, e := range ents {
		if i, err := strconv.Atoi(e.Name()); err == nil && i >= 0 {
			idx = append(idx, i)
		}
	}
	slices.Sort(idx)
	for _, i := range idx {
		if s := readLine(filepath.Join(dir, strconv.Itoa(i))); s != "" {
			return s
		}
	}
	return ""
}

// readLine returns a sysfs file's first line, trimmed ("" if unreadable).
func readLine(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	line, _, _ := strings.Cut(string(b), "\n")
	return strings.TrimSpace(line)
}
