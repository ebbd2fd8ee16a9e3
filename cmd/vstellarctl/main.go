package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/vstellar/vstellar/daemon"
)

const defaultSocket = daemon.DefaultRunDir + "/" + daemon.APISocketName

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

// errUsage marks command-line mistakes (exit status 2).
var errUsage = errors.New("usage")

const usage = `usage: vstellarctl [--socket PATH] [--json] [--timeout DURATION] COMMAND

commands:
  health                               daemon health
  devices list                         list devices
  devices show NAME                    show one device
  devices create NAME [--limits JSON] [--pin MODE] [--pin-budget BYTES]
                                        create a device
  devices destroy NAME                 destroy a device
`

// cli is one invocation.
type cli struct {
	client  *daemon.Client
	json    bool
	timeout time.Duration
	stdout  io.Writer
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("vstellarctl", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage, "\nflags:\n"); fs.PrintDefaults() }
	socket := fs.String("socket", defaultSocket, "vstellard API socket `path`")
	c := &cli{stdout: stdout}
	fs.BoolVar(&c.json, "json", false, "print the daemon's JSON answer")
	fs.DurationVar(&c.timeout, "timeout", 30*time.Second, "request timeout")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	c.client = daemon.NewClient(*socket)
	defer c.client.Close()
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()

	err := c.dispatch(ctx, fs.Args())
	switch {
	case err == nil:
		return 0
	case errors.Is(err, errUsage):
		fmt.Fprintf(stderr, "vstellarctl: %v\n\n%s", err, usage)
		return 2
	default:
		fmt.Fprintf(stderr, "vstellarctl: %v\n", err)
		return 1
	}
}

func (c *cli) dispatch(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("%w: no command", errUsage)
	}
	switch cmd, rest := args[0], args[1:]; cmd {
	case "health":
		if len(rest) != 0 {
			return fmt.Errorf("%w: health takes no arguments", errUsage)
		}
		return c.health(ctx)
	case "devices", "device", "dev":
		return c.devices(ctx, rest)
	default:
		return fmt.Errorf("%w: unknown command %q", errUsage, cmd)
	}
}

func (c *cli) devices(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("%w: devices: want list, show, create or destroy", errUsage)
	}
	sub, rest := args[0], args[1:]
	switch sub {
	case "list", "ls":
		if len(rest) != 0 {
			return fmt.Errorf("%w: devices list takes no arguments", errUsage)
		}
		return c.list(ctx)
	case "show", "create", "destroy":
	default:
		return fmt.Errorf("%w: devices: unknown subcommand %q", errUsage, sub)
	}
	fs := flag.NewFlagSet("devices "+sub, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	limits, pinMode := "", ""
	var pinBudget uint64
	if sub == "create" {
		fs.StringVar(&limits, "limits", "", "device limits, a JSON object")
		fs.StringVar(&pinMode, "pin", "", "pin mode: on-demand, at-reg-mr or all")
		fs.Uint64Var(&pinBudget, "pin-budget", 0, "bytes the device may pin on demand")
	}
	fs.BoolVar(&c.json, "json", c.json, "print JSON")
	// Accept flags before or after NAME.
	var names []string
	for {
		if err := fs.Parse(rest); err != nil {
			return fmt.Errorf("%w: devices %s: %v", errUsage, sub, err)
		}
		if fs.NArg() == 0 {
			break
		}
		names, rest = append(names, fs.Arg(0)), fs.Args()[1:]
	}
	if len(names) != 1 {
		return fmt.Errorf("%w: devices %s takes one device NAME", errUsage, sub)
	}
	name := names[0]
	switch sub {
	case "show":
		return c.show(ctx, name)
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
		return c.create(ctx, spec)
	default:
		return c.destroy(ctx, name)
	}
}

func (c *cli) health(ctx context.Context) error {
	raw, err := c.client.Do(ctx, http.MethodGet, "/v1/health", nil)
	if err != nil {
		return err
	}
	if c.json {
		return c.raw(raw)
	}
	var h daemon.Health
	if err := json.Unmarshal(raw, &h); err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "status: %s\ndevices: %d\n", h.Status, h.Devices)
	return nil
}

func (c *cli) list(ctx context.Context) error {
	raw, err := c.client.Do(ctx, http.MethodGet, "/v1/devices", nil)
	if err != nil {
		return err
	}
	if c.json {
		return c.raw(raw)
	}
	var l daemon.DeviceList
	if err := json.Unmarshal(raw, &l); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tCONNECTED\tCONNECTIONS\tREFUSED\tCREATED\tSOCKET\tLAST ERROR")
	for _, d := range l.Devices {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\t%s\n", d.Name, yesNo(d.Connected), d.Connections, d.Refused,
			d.Created.Local().Format(time.DateTime), d.Socket, oneLine(d.LastError))
	}
	return tw.Flush()
}

func (c *cli) show(ctx context.Context, name string) error {
	raw, err := c.client.Do(ctx, http.MethodGet, daemon.DevicePath(name), nil)
	if err != nil {
		return err
	}
	return c.printDevice(raw)
}

func (c *cli) create(ctx context.Context, spec daemon.DeviceSpec) error {
	raw, err := c.client.Do(ctx, http.MethodPost, "/v1/devices", spec)
	if err != nil {
		return err
	}
	return c.printDevice(raw)
}

func (c *cli) destroy(ctx context.Context, name string) error {
	if _, err := c.client.Do(ctx, http.MethodDelete, daemon.DevicePath(name), nil); err != nil {
		return err
	}
	if c.json {
		return c.raw(json.RawMessage(fmt.Sprintf(`{"destroyed": %q}`, name)))
	}
	fmt.Fprintf(c.stdout, "destroyed %s\n", name)
	return nil
}

func (c *cli) printDevice(raw json.RawMessage) error {
	if c.json {
		return c.raw(raw)
	}
	var d daemon.DeviceInfo
	if err := json.Unmarshal(raw, &d); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 1, ' ', 0)
	fmt.Fprintf(tw, "name:\t%s\n", d.Name)
	fmt.Fprintf(tw, "socket:\t%s\n", d.Socket)
	fmt.Fprintf(tw, "connected:\t%s\n", yesNo(d.Connected))
	fmt.Fprintf(tw, "created:\t%s\n", d.Created.Local().Format(time.RFC3339))
	fmt.Fprintf(tw, "connections:\t%d\n", d.Connections)
	fmt.Fprintf(tw, "refused:\t%d\n", d.Refused)
	if d.LastError != "" {
		fmt.Fprintf(tw, "last error:\t%s\n", oneLine(d.LastError))
	}
	return tw.Flush()
}

// raw prints a JSON answer as the daemon sent it, newline-terminated.
func (c *cli) raw(b json.RawMessage) error {
	s := strings.TrimRight(string(b), "\n")
	_, err := fmt.Fprintln(c.stdout, s)
	return err
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// oneLine keeps a table row on one line whatever an error message holds.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
