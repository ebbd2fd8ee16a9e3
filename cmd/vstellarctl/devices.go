package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"strings"

	"github.com/vstellar/vstellar/api"
	"github.com/vstellar/vstellar/internal/confcheck"
	"github.com/vstellar/vstellar/internal/units"
)

// devices runs "devices SUBCOMMAND ...".
func (c *cli) devices(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("%w: devices: want list, show, qps, mrs, create or destroy", errUsage)
	}
	sub, rest := args[0], args[1:]
	switch sub {
	case "list", "ls", "show", "create", "destroy", "qps", "mrs":
	default:
		return fmt.Errorf("%w: devices: unknown subcommand %q", errUsage, sub)
	}
	fs := flag.NewFlagSet("devices "+sub, flag.ContinueOnError)
	var (
		limits, pinMode string
		pinBudget       units.Size
		tenant          uint
		limit           int
	)
	switch sub {
	case "create":
		fs.StringVar(&limits, "limits", "", "device limits, a JSON object")
		fs.StringVar(&pinMode, "pin", "", "pin mode: on-demand, at-reg-mr or all")
		fs.Var(&pinBudget, "pin-budget", "bytes the device may pin on demand, with K, M, G or T")
		fs.UintVar(&tenant, "tenant", 0, "the device's tenant on the cross-host fabric")
	case "qps", "mrs":
		fs.IntVar(&limit, "limit", 0, "list at most this many")
	}
	names, err := c.parseArgs(fs, rest)
	if err != nil {
		return err
	}
	if sub == "list" || sub == "ls" {
		if len(names) != 0 {
			return fmt.Errorf("%w: devices list takes no arguments but --json", errUsage)
		}
		return c.list(ctx)
	}
	if len(names) != 1 {
		return fmt.Errorf("%w: devices %s takes one device NAME", errUsage, sub)
	}
	name := names[0]
	switch sub {
	case "show":
		return c.show(ctx, name)
	case "qps":
		return c.qps(ctx, name, limit)
	case "mrs":
		return c.mrs(ctx, name, limit)
	case "create":
		spec := api.DeviceSpec{Name: name}
		if limits != "" {
			spec.Limits = json.RawMessage(limits)
		}
		if pinMode != "" || pinBudget != 0 {
			spec.Pin = &api.PinSpec{Mode: pinMode, Budget: uint64(pinBudget)}
		}
		if tenant > 1<<32-1 {
			return fmt.Errorf("%w: devices create: --tenant: %d does not fit 32 bits", errUsage, tenant)
		}
		spec.Tenant = uint32(tenant)
		// The daemon checks the spec too; checked here, a mistake names
		// the flag it came from.
		if err := confcheck.ValidateSpec(spec); err != nil {
			return fmt.Errorf("%w: devices create: %w", errUsage, blameFlag(err, limits))
		}
		return c.create(ctx, spec)
	default:
		return c.destroy(ctx, name)
	}
}

// specFlags are the flags that set each part of a DeviceSpec.
var specFlags = []struct{ path, flag string }{
	{"limits", "--limits"}, {"pin.mode", "--pin"}, {"pin.budget_bytes", "--pin-budget"}, {"name", ""},
}

// blameFlag rewrites a spec error to name the flag that set the value
// and, for --limits, the column in it.
func blameFlag(err error, limits string) error {
	var ce *confcheck.ConfigError
	if !errors.As(err, &ce) {
		return err
	}
	for _, f := range specFlags {
		rest, ok := strings.CutPrefix(ce.Path, f.path)
		if !ok || (rest != "" && rest[0] != '.') || f.flag == "" {
			continue
		}
		out := &confcheck.ConfigError{Source: f.flag, Err: ce.Err}
		if f.flag == "--limits" {
			out = ce.Locate(f.flag, []byte(limits))
		}
		out.Path = strings.TrimPrefix(rest, ".")
		return out
	}
	return err
}

func (c *cli) list(ctx context.Context) error {
	devs, err := c.client.Devices(ctx)
	if err != nil {
		return err
	}
	if c.json {
		return c.printJSON(api.DeviceList{Devices: devs})
	}
	t := c.table("NAME", "CONNECTED", "CONNECTIONS", "REFUSED", "TENANT", "CREATED", "SOCKET", "LAST ERROR")
	for _, d := range devs {
		t.row(d.Name, yesNo(d.Connected), d.Connections, d.Refused, d.Tenant, localTime(d.Created), d.Socket, oneLine(d.LastError))
	}
	return t.flush()
}

func (c *cli) show(ctx context.Context, name string) error {
	s, err := c.client.DeviceStatus(ctx, name)
	if err != nil {
		return err
	}
	if c.json {
		return c.printJSON(s)
	}
	kv := c.keyValues()
	kv.add("name", s.Name)
	kv.add("socket", s.Socket)
	kv.add("connected", yesNo(s.Connected))
	kv.add("created", localTime(s.Created))
	kv.add("connections", fmt.Sprintf("%d (%d refused)", s.Connections, s.Refused))
	if s.LastError != "" {
		kv.add("last error", oneLine(s.LastError))
	}
	kv.add("tenant", s.Tenant)
	if s.Objects != nil {
		kv.add("node guid", s.NodeGUID)
		kv.add("gid", gidIB(s.GID))
		kv.add("doorbells", s.Doorbells)
		o := s.Objects
		kv.add("objects", fmt.Sprintf("%d PDs, %d CQs, %d QPs, %d SRQs, %d MRs, %d AHs, %d GIDs", o.PDs, o.CQs, o.QPs, o.SRQs, o.MRs, o.AHs, o.GIDs))
		m := s.Memory
		budget := "host's only"
		if m.BudgetBytes != 0 {
			budget = bytesIEC(m.BudgetBytes)
		}
		kv.add("pinned", fmt.Sprintf("%s (mode %s, budget %s)", bytesIEC(m.PinnedBytes), m.PinMode, budget))
		kv.add("pins", fmt.Sprintf("%d pinned, %d unpinned, %d evicted, %d failed; pin p50 <= %v, p99 <= %v",
			m.Pins, m.Unpins, m.Evictions, m.PinFailures, m.PinP50, m.PinP99))
		kv.add("translation misses", m.TranslationMisses)
		tr := s.Traffic
		kv.add("traffic", fmt.Sprintf("%s sent, %s received", bytesIEC(tr.BytesSent), bytesIEC(tr.BytesReceived)))
		kv.add("work requests", fmt.Sprintf("%d (%d completions, %d with errors, %d retries, %d RNR NAKs)",
			tr.WQEs, tr.CQEs, tr.ErrorCQEs, tr.Retries, tr.RNRNaks))
		kv.add("doorbell wake-ups", tr.Wakeups)
		ct := s.Control
		kv.add("control commands", fmt.Sprintf("%d (%d failed, %d malformed)", ct.Commands, ct.Failed, ct.Malformed))
	}
	if l := s.Limits; l != nil {
		kv.add("limits", fmt.Sprintf("%d QPs, %d CQs, %d SRQs, %d MRs, %d PDs, %d AHs, %d GIDs", l.MaxQP, l.MaxCQ, l.MaxSRQ, l.MaxMR, l.MaxPD, l.MaxAH, l.MaxGID))
		kv.add("queue limits", fmt.Sprintf("%d WRs per queue, %d CQEs per CQ, %d SGEs, %d bytes inline, %d RDMA reads/atomics in flight",
			l.MaxQPWR, l.MaxCQE, l.MaxSGE, l.MaxInlineData, l.MaxQPRdAtom))
		kv.add("MR limits", fmt.Sprintf("%s per MR, page sizes %s", bytesIEC(l.MaxMRSize), pageSizes(l.PageSizeCap)))
	}
	kv.add("vhost-user messages", fmt.Sprintf("%d (%d failed, %d kicks)", s.Vhost.Messages, s.Vhost.FailedMessages, s.Vhost.Kicks))
	return kv.flush()
}

func (c *cli) qps(ctx context.Context, name string, limit int) error {
	l, err := c.client.QPs(ctx, name, limit)
	if err != nil {
		return err
	}
	if c.json {
		return c.printJSON(l)
	}
	t := c.table("QPN", "STATE", "PD", "SEND CQ", "RECV CQ", "SQ", "RQ", "DEST QPN", "DEST GID", "MTU")
	for _, q := range l.QPs {
		t.row(q.QPN, q.State, q.PDN, q.SendCQN, q.RecvCQN, q.SQSize, q.RQSize, q.DestQPN, dash(gidIB(q.DestGID)), q.PathMTU)
	}
	return c.flushListing(t, len(l.QPs), l.Total, "QPs")
}

func (c *cli) mrs(ctx context.Context, name string, limit int) error {
	l, err := c.client.MRs(ctx, name, limit)
	if err != nil {
		return err
	}
	if c.json {
		return c.printJSON(l)
	}
	t := c.table("KEY", "PD", "IOVA", "LENGTH", "ACCESS", "TYPE", "VALID")
	for _, m := range l.MRs {
		t.row(m.Key, m.PDN, m.IOVA, bytesIEC(m.Length), m.Access, m.Type, yesNo(m.Valid))
	}
	return c.flushListing(t, len(l.MRs), l.Total, "MRs")
}

// flushListing prints a listing and, when it was cut, how much.
func (c *cli) flushListing(t *table, shown, total int, what string) error {
	if err := t.flush(); err != nil {
		return err
	}
	if shown < total {
		_, err := fmt.Fprintf(c.stdout, "(%d of %d %s shown; --limit N for more)\n", shown, total, what)
		return err
	}
	return nil
}

func (c *cli) create(ctx context.Context, spec api.DeviceSpec) error {
	d, err := c.client.CreateDevice(ctx, spec)
	if err != nil {
		return err
	}
	if c.json {
		return c.printJSON(d)
	}
	fmt.Fprintf(c.stdout, "created %s\nsocket: %s\n", d.Name, d.Socket)
	return nil
}

func (c *cli) destroy(ctx context.Context, name string) error {
	if err := c.client.DestroyDevice(ctx, name); err != nil {
		return err
	}
	if c.json {
		return c.printJSON(map[string]string{"destroyed": name})
	}
	fmt.Fprintf(c.stdout, "destroyed %s\n", name)
	return nil
}

func dash(s string) string {
	if strings.TrimSpace(s) == "" {
		return "-"
	}
	return s
}
