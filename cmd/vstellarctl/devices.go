package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/vstellar/vstellar/daemon"
)

// devices runs "devices SUBCOMMAND ...".
func (c *cli) devices(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("%w: devices: want list, show, qps, mrs, create or destroy", errUsage)
	}
	sub, rest := args[0], args[1:]
	switch sub {
	case "list", "ls":
		fs := flag.NewFlagSet("devices list", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		fs.BoolVar(&c.json, "json", c.json, "print JSON")
		if err := fs.Parse(rest); err != nil || fs.NArg() != 0 {
			return fmt.Errorf("%w: devices list takes no arguments but --json", errUsage)
		}
		return c.list(ctx)
	case "show", "create", "destroy", "qps", "mrs":
	default:
		return fmt.Errorf("%w: devices: unknown subcommand %q", errUsage, sub)
	}
	fs := flag.NewFlagSet("devices "+sub, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var (
		limits, pinMode string
		pinBudget       uint64
		tenant          uint
		limit           int
	)
	switch sub {
	case "create":
		fs.StringVar(&limits, "limits", "", "device limits, a JSON object")
		fs.StringVar(&pinMode, "pin", "", "pin mode: on-demand, at-reg-mr or all")
		fs.Uint64Var(&pinBudget, "pin-budget", 0, "bytes the device may pin on demand")
		fs.UintVar(&tenant, "tenant", 0, "the device's tenant on the cross-host fabric")
	case "qps", "mrs":
		fs.IntVar(&limit, "limit", 0, "list at most this many")
	}
	fs.BoolVar(&c.json, "json", c.json, "print JSON")
	name, err := oneName(fs, rest, "devices "+sub)
	if err != nil {
		return err
	}
	switch sub {
	case "show":
		return c.show(ctx, name)
	case "qps":
		return c.qps(ctx, name, limit)
	case "mrs":
		return c.mrs(ctx, name, limit)
	case "create":
		spec := daemon.DeviceSpec{Name: name}
		if limits != "" {
			if !json.Valid([]byte(limits)) {
				return fmt.Errorf("%w: --limits is not valid JSON", errUsage)
			}
			spec.Limits = json.RawMessage(limits)
		}
		if pinMode != "" || pinBudget != 0 {
			spec.Pin = &daemon.PinSpec{Mode: pinMode, Budget: pinBudget}
		}
		if tenant > 1<<32-1 {
			return fmt.Errorf("%w: --tenant %d does not fit 32 bits", errUsage, tenant)
		}
		spec.Tenant = uint32(tenant)
		return c.create(ctx, spec)
	default:
		return c.destroy(ctx, name)
	}
}

// oneName parses fs's flags before or after exactly one NAME.
func oneName(fs *flag.FlagSet, args []string, what string) (string, error) {
	var names []string
	for {
		if err := fs.Parse(args); err != nil {
			return "", fmt.Errorf("%w: %s: %v", errUsage, what, err)
		}
		if fs.NArg() == 0 {
			break
		}
		names, args = append(names, fs.Arg(0)), fs.Args()[1:]
	}
	if len(names) != 1 {
		return "", fmt.Errorf("%w: %s takes one device NAME", errUsage, what)
	}
	return names[0], nil
}

func (c *cli) list(ctx context.Context) error {
	devs, err := c.client.Devices(ctx)
	if err != nil {
		return err
	}
	if c.json {
		return c.printJSON(daemon.DeviceList{Devices: devs})
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
		kv.add("gid", s.GID)
		kv.add("doorbells", s.Doorbells)
		o := s.Objects
		kv.add("objects", fmt.Sprintf("%d PDs, %d CQs, %d QPs, %d MRs, %d AHs, %d GIDs", o.PDs, o.CQs, o.QPs, o.MRs, o.AHs, o.GIDs))
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
		t.row(q.QPN, q.State, q.PDN, q.SendCQN, q.RecvCQN, q.SQSize, q.RQSize, q.DestQPN, dash(q.DestGID), q.PathMTU)
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

func (c *cli) create(ctx context.Context, spec daemon.DeviceSpec) error {
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
