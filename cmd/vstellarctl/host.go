package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
)

// host runs "host [nics | paths]".
func (c *cli) host(ctx context.Context, args []string) error {
	args, err := c.parseArgs(flag.NewFlagSet("host", flag.ContinueOnError), args)
	if err != nil {
		return err
	}
	switch {
	case len(args) == 0:
		return c.hostStatus(ctx)
	case len(args) > 1:
		return fmt.Errorf("%w: host takes at most one subcommand", errUsage)
	case args[0] == "nics":
		return c.nics(ctx)
	case args[0] == "paths":
		return c.paths(ctx)
	}
	return fmt.Errorf("%w: host: unknown subcommand %q (want nics or paths)", errUsage, args[0])
}

func (c *cli) hostStatus(ctx context.Context) error {
	h, err := c.client.Host(ctx)
	if err != nil {
		return err
	}
	if c.json {
		return c.printJSON(h)
	}
	kv := c.keyValues()
	kv.add("devices", h.Devices)
	m := h.Memory
	budget := "none"
	if m.BudgetBytes != 0 {
		budget = bytesIEC(m.BudgetBytes)
	}
	kv.add("pinned", fmt.Sprintf("%s of budget %s (%d pinned, %d unpinned, %d evicted, %d failed; p50 <= %v, p99 <= %v)",
		bytesIEC(m.PinnedBytes), budget, m.Pins, m.Unpins, m.Evictions, m.PinFailures, m.PinP50, m.PinP99))
	f := h.Fabric
	if f == nil {
		kv.add("fabric", "none (devices reach only this daemon's devices)")
		return kv.flush()
	}
	addr := f.Addr.String()
	if f.Interface != "" {
		addr += " on " + f.Interface
	}
	kv.add("fabric", fmt.Sprintf("%s, GID prefix %s, MTU %d, %d paths, spray %s, cc %s", addr, f.GIDPrefix, f.MTU, f.Paths, f.Spray, f.CC))
	peers := make([]string, len(f.Peers))
	for i, p := range f.Peers {
		peers[i] = p.String()
	}
	kv.add("peers", dash(strings.Join(peers, " ")))
	s := f.Stats
	kv.add("connections", s.Connections)
	kv.add("datagrams", fmt.Sprintf("%d sent (%d send errors), %d received", s.Sent, s.SendErrors, s.Received))
	kv.add("payload", fmt.Sprintf("%s sent, %s received, %s placed", bytesIEC(s.BytesSent), bytesIEC(s.BytesReceived), bytesIEC(s.BytesPlaced)))
	kv.add("retransmits", fmt.Sprintf("%d (%d fast, %d timeouts, %d found spurious), %d duplicates received, %d RNR NAKs",
		s.Retransmits, s.FastRetransmits, s.Timeouts, s.Spurious, s.Duplicates, s.RNRNaks))
	kv.add("dropped", fmt.Sprintf("%d malformed, %d unknown connection, %d foreign, %d invalid, %d while the device was busy",
		s.Malformed, s.UnknownConn, s.Foreign, s.Refused-s.Foreign, s.Busy))
	kv.add("busy NAKs", fmt.Sprintf("%d sent, %d received", s.BusyNaksSent, s.BusyNaksReceived))
	return kv.flush()
}

func (c *cli) nics(ctx context.Context) error {
	l, err := c.client.NICs(ctx)
	if err != nil {
		return err
	}
	if c.json {
		return c.printJSON(l)
	}
	t := c.table("INTERFACE", "KIND", "STATE", "MTU", "ADDRESSES")
	for _, i := range l.Interfaces {
		addrs := make([]string, 0, len(i.Addrs))
		for _, a := range i.Addrs {
			addrs = append(addrs, a.String())
		}
		t.row(i.Name, i.Kind, i.OperState, i.MTU, dash(strings.Join(addrs, " ")))
	}
	if err := t.flush(); err != nil {
		return err
	}
	fmt.Fprintln(c.stdout)
	if l.RDMAError != "" {
		_, err := fmt.Fprintf(c.stdout, "RDMA: none: %s\n", l.RDMAError)
		return err
	}
	if len(l.RDMA) == 0 {
		_, err := fmt.Fprintln(c.stdout, "RDMA: no devices")
		return err
	}
	t = c.table("RDMA DEVICE", "NODE GUID", "FIRMWARE", "PORTS", "NET DEVICES")
	for _, r := range l.RDMA {
		ports := make([]string, len(r.Ports))
		for i, p := range r.Ports {
			ports[i] = fmt.Sprintf("%d:%s", p.Port, dash(p.State))
		}
		t.row(r.Name, r.NodeGUID, dash(r.FirmwareVersion), dash(strings.Join(ports, " ")), dash(strings.Join(r.NetDevs, " ")))
	}
	return t.flush()
}

// errNoFabric: host paths on a daemon without a cross-host fabric, which
// the API answers with 404 as if a device were missing.
var errNoFabric = errors.New("host paths: this daemon has no cross-host fabric (see vstellard --fabric-listen)")

func (c *cli) paths(ctx context.Context) error {
	h, err := c.client.Host(ctx)
	if err != nil {
		return err
	}
	if h.Fabric == nil {
		return errNoFabric
	}
	l, err := c.client.Paths(ctx)
	if err != nil {
		return err
	}
	if c.json {
		return c.printJSON(l)
	}
	fmt.Fprintf(c.stdout, "%d paths, spray %s; %d carried traffic\n", l.Paths, l.Spray, len(l.Active))
	t := c.table("PATH", "SOURCE PORT", "RTT SAMPLES", "RTT MEAN", "RTT P50 <=", "RTT P99 <=")
	for _, p := range l.Active {
		t.row(p.Path, p.SourcePort, p.Samples, p.Mean, p.P50, p.P99)
	}
	return t.flush()
}
