package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/vstellar/vstellar/daemon"
	"github.com/vstellar/vstellar/hotplug"
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

// parseArgs parses flags before or after positional arguments, as
// devices does.
func (c *cli) parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	fs.SetOutput(io.Discard)
	fs.BoolVar(&c.json, "json", c.json, "print JSON")
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, fmt.Errorf("%w: %s: %v", errUsage, fs.Name(), err)
		}
		if fs.NArg() == 0 {
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
		if err := daemon.ValidateName(name); err != nil {
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
	size, err := parseSize(mem)
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
	out, err := hotplug.QEMUArgs(hotplug.Memory{Size: size, Layout: hotplug.MemLayout(layout)}, specs...)
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

// parseSize reads a size in bytes: a number with an optional binary
// suffix K, M, G or T (also KiB...), as QEMU's -m does.
func parseSize(s string) (int64, error) {
	num := strings.TrimSuffix(strings.TrimSuffix(s, "B"), "i")
	shift := 0
	if n := len(num); n > 0 {
		switch num[n-1] {
		case 'K', 'k':
			shift = 10
		case 'M', 'm':
			shift = 20
		case 'G', 'g':
			shift = 30
		case 'T', 't':
			shift = 40
		}
		if shift > 0 {
			num = num[:n-1]
		} else if num != s {
			return 0, fmt.Errorf("size %q: a unit needs K, M, G or T", s)
		}
	}
	v, err := strconv.ParseInt(num, 10, 64)
	if err != nil || v <= 0 {
		return 0, fmt.Errorf("size %q is not a positive number with an optional K, M, G or T", s)
	}
	if v > (1<<62)>>shift {
		return 0, errors.New("size " + strconv.Quote(s) + " is too large")
	}
	return v << shift, nil
}
