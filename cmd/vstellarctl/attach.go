package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/vstellar/vstellar/api"
	"github.com/vstellar/vstellar/hotplug"
	"github.com/vstellar/vstellar/internal/units"
)

// idPrefix makes a QEMU id of a device name, which may start with a
// digit where a QEMU id may not.
const idPrefix = "vst-"

// hotplugFlags are the flags attach and qemu-args share.
type hotplugFlags struct {
	qmp, id, bus, socketPath string
	reconnect                time.Duration
}

func (h *hotplugFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&h.id, "id", "", "QEMU device `id` (default vst-DEVICE_NAME)")
	fs.StringVar(&h.bus, "bus", "", "bus `id` to plug into, e.g. a free pcie-root-port on q35")
	fs.StringVar(&h.socketPath, "socket-path", "", "the device's vhost-user socket `path`, instead of asking vstellard")
	fs.DurationVar(&h.reconnect, "reconnect", 0, "QEMU's reconnect interval to vstellard (0: none; stock QEMU 10.2 and 11.1 abort on a reconnect, see docs/attach.md)")
}

// parseArgs parses flags before or after positional arguments. Every
// command takes --json and --version, as vstellarctl itself does.
func (c *cli) parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	fs.SetOutput(io.Discard)
	fs.BoolVar(&c.json, "json", c.json, "print JSON")
	fs.BoolVar(&c.version, "version", c.version, "print the version and exit")
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, fmt.Errorf("%w: %s: %s", errUsage, fs.Name(), flagError(err))
		}
		if fs.NArg() == 0 {
			if c.version {
				return nil, errVersion
			}
			return pos, nil
		}
		pos, args = append(pos, fs.Arg(0)), fs.Args()[1:]
	}
}

// spec builds the Spec of device name (or of --socket-path alone).
func (c *cli) spec(ctx context.Context, cmd string, h hotplugFlags, name, runDir string) (hotplug.Spec, error) {
	s := hotplug.Spec{ID: h.id, Bus: h.bus, Socket: h.socketPath, Reconnect: h.reconnect}
	switch {
	case s.Socket != "":
	case runDir != "":
		if err := api.ValidateName(name); err != nil {
			return s, fmt.Errorf("%w: %s: %w", errUsage, cmd, err)
		}
		s.Socket = filepath.Join(runDir, name+".sock")
	default:
		d, err := c.client.Device(ctx, name)
		if err != nil {
			return s, fmt.Errorf("%s: device %s: %w", cmd, name, err)
		}
		s.Socket = d.Socket
	}
	if s.ID == "" {
		if name == "" {
			name = strings.TrimSuffix(filepath.Base(s.Socket), ".sock")
		}
		s.ID = idPrefix + name
		if hotplug.ValidateID("id", s.ID) != nil {
			return s, fmt.Errorf("%w: %s: cannot make a QEMU id of %q: give --id", errUsage, cmd, name)
		}
	}
	if err := s.Validate(); err != nil {
		return s, fmt.Errorf("%w: %s: %w", errUsage, cmd, err)
	}
	return s, nil
}

func (c *cli) attach(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("attach", flag.ContinueOnError)
	var h hotplugFlags
	fs.StringVar(&h.qmp, "qmp", "", "QEMU's QMP socket `path`")
	h.register(fs)
	pos, err := c.parseArgs(fs, args)
	if err != nil {
		return err
	}
	switch {
	case h.qmp == "":
		return fmt.Errorf("%w: attach needs --qmp", errUsage)
	case len(pos) > 1:
		return fmt.Errorf("%w: attach takes one DEVICE_NAME", errUsage)
	case (len(pos) == 1) == (h.socketPath != ""):
		return fmt.Errorf("%w: attach takes a DEVICE_NAME or --socket-path, not both", errUsage)
	}
	name := ""
	if len(pos) == 1 {
		name = pos[0]
	}
	spec, err := c.spec(ctx, "attach", h, name, "")
	if err != nil {
		return err
	}
	qc, err := hotplug.Dial(ctx, h.qmp, hotplug.Options{})
	if err != nil {
		return err
	}
	defer qc.Close()
	a, err := qc.Attach(ctx, spec)
	if err != nil {
		return err
	}
	if c.json {
		return c.printJSON(a)
	}
	kv := c.keyValues()
	kv.add("attached", a.ID)
	kv.add("qemu", qc.Version())
	kv.add("driver", a.Driver)
	kv.add("chardev", a.Chardev)
	kv.add("socket", a.Socket)
	if a.Bus != "" {
		kv.add("bus", a.Bus)
	}
	if a.PCI != nil {
		kv.add("pci", fmt.Sprintf("%s [%04x:%04x]", a.PCI.Address, a.PCI.VendorID, a.PCI.DeviceID))
	}
	if a.Note != "" {
		kv.add("note", a.Note)
	}
	return kv.flush()
}

func (c *cli) detach(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("detach", flag.ContinueOnError)
	var qmpPath, id string
	fs.StringVar(&qmpPath, "qmp", "", "QEMU's QMP socket `path`")
	fs.StringVar(&id, "id", "", "QEMU device `id`")
	pos, err := c.parseArgs(fs, args)
	if err != nil {
		return err
	}
	switch {
	case qmpPath == "":
		return fmt.Errorf("%w: detach needs --qmp", errUsage)
	case len(pos) > 1 || (len(pos) == 1) == (id != ""):
		return fmt.Errorf("%w: detach takes --id or one DEVICE_NAME", errUsage)
	case len(pos) == 1:
		id = idPrefix + pos[0]
	}
	if err := hotplug.ValidateID("device id", id); err != nil {
		return fmt.Errorf("%w: detach: %w", errUsage, err)
	}
	qc, err := hotplug.Dial(ctx, qmpPath, hotplug.Options{})
	if err != nil {
		return err
	}
	defer qc.Close()
	d, err := qc.Detach(ctx, id)
	if err != nil {
		return err
	}
	if c.json {
		return c.printJSON(d)
	}
	fmt.Fprintf(c.stdout, "detached %s", d.ID)
	if d.Chardev != "" {
		fmt.Fprintf(c.stdout, " (chardev %s removed)", d.Chardev)
	}
	if d.Note != "" {
		fmt.Fprintf(c.stdout, ": %s", d.Note)
	}
	fmt.Fprintln(c.stdout)
	return nil
}

func (c *cli) qemuArgs(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("qemu-args", flag.ContinueOnError)
	var h hotplugFlags
	h.register(fs)
	mem, layout, runDir := "4G", "", ""
	fs.StringVar(&mem, "mem", mem, "guest RAM `size` (bytes, or with K, M, G or T)")
	fs.StringVar(&layout, "mem-layout", "numa", "guest RAM backend as a NUMA node (numa) or the machine's RAM (machine)")
	fs.StringVar(&runDir, "run-dir", "", "vstellard's run `dir`: the socket is DIR/DEVICE_NAME.sock, without asking vstellard")
	names, err := c.parseArgs(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(names) == 0 && h.socketPath == "":
		return fmt.Errorf("%w: qemu-args takes DEVICE_NAMEs or --socket-path", errUsage)
	case len(names) > 1 && (h.id != "" || h.bus != "" || h.socketPath != ""):
		return fmt.Errorf("%w: --id, --bus and --socket-path go with one device", errUsage)
	case len(names) == 0:
		names = []string{""} // the id comes from the socket's name
	}
	size, err := units.ParseSize(mem)
	if err == nil && size == 0 {
		err = errors.New("guest RAM of 0 bytes")
	}
	if err != nil {
		return fmt.Errorf("%w: qemu-args: --mem: %w", errUsage, err)
	}
	var specs []hotplug.Spec
	for _, name := range names {
		s, err := c.spec(ctx, "qemu-args", h, name, runDir)
		if err != nil {
			return err
		}
		specs = append(specs, s)
	}
	out, err := hotplug.QEMUArgs(hotplug.Memory{Size: int64(size), Layout: hotplug.MemLayout(layout)}, specs...)
	if err != nil {
		return fmt.Errorf("%w: qemu-args: %w", errUsage, err)
	}
	if c.json {
		return c.printJSON(out)
	}
	// One option and its value a line, ready to paste into a script.
	var lines []string
	for i := 0; i+1 < len(out); i += 2 {
		lines = append(lines, out[i]+" "+shellQuote(out[i+1]))
	}
	_, err = fmt.Fprintln(c.stdout, strings.Join(lines, " \\\n"))
	return err
}

// shellQuote quotes s for a POSIX shell if it needs it.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789,._+:@%/=-") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// flagError rewrites the flag package's `invalid value "V" for flag -F:
// CAUSE` as "--F: CAUSE", as the daemon's own errors name a flag.
func flagError(err error) string {
	msg := err.Error()
	rest, ok := strings.CutPrefix(msg, "invalid value ")
	_, rest, ok2 := strings.Cut(rest, " for flag -")
	name, cause, ok3 := strings.Cut(rest, ": ")
	if !ok || !ok2 || !ok3 {
		return msg
	}
	if cause == "parse error" || cause == "value out of range" {
		val, _, _ := strings.Cut(strings.TrimPrefix(msg, "invalid value "), " for flag -")
		cause = val + " is not valid"
	}
	return "--" + name + ": " + cause
}
